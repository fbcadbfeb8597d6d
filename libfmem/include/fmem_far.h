/* fmem_far.h - far memory on top of an fmem pool: paged regions and an
 * object allocator. Both are built only on the public API of fmem.h
 * (fmem_alloc/fmem_free/fmem_read/fmem_write, and fmem_map for heaps on the
 * shared-memory transport), so they work on every transport.
 *
 * Regions
 * -------
 * A region is a reserved range of virtual addresses whose contents live in
 * pool allocations. Pages are brought into a bounded local cache on demand
 * (userfaultfd), written back when dirty and evicted with CLOCK; sequential
 * faults are prefetched. Remote space is allocated on the first write to a
 * 64 KiB piece of the region and freed again when the program releases it
 * (fmem_region_release() or madvise(MADV_DONTNEED) on the range), so the
 * remote footprint follows what the program really uses.
 *
 * Requirements (Linux): userfaultfd with write-protect on anonymous memory,
 * kernel >= 5.7. The process needs one of: CAP_SYS_PTRACE (root),
 * vm.unprivileged_userfaultfd=1, or read/write access to /dev/userfaultfd
 * (kernel >= 6.1). Without them fmem_region_create() returns FMEM_EACCES;
 * if only user-mode faults are allowed (unprivileged, sysctl 0) regions
 * still work, but system calls that read or write region memory directly
 * (read(2) into a region buffer, ...) fail with EFAULT for pages that are
 * not cached.
 * Rules: do not mprotect() or mremap() parts of a region, and do not unmap
 * it yourself; fmem_region_destroy() does. fork() is fine: the child gets a
 * copy-on-write snapshot and pages on its own (docs/far-memory.md, "fork").
 *
 * Heaps
 * -----
 * An object allocator (malloc/free for any size) whose memory comes from a
 * pool: small objects (<= 16 KiB) in size classes carved out of 64 KiB
 * slabs with per-thread slab ownership, large objects as whole pool
 * allocations. Empty slabs go back to the pool. A heap runs either on
 * directly mapped pool allocations (fmem_heap_new; shared-memory transport
 * only) or inside a region (fmem_heap_new_region; every transport).
 */
#ifndef FMEM_FAR_H
#define FMEM_FAR_H

#include <stddef.h>
#include <stdint.h>

#include <fmem.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- regions ------------------------------------------------------------ */

typedef struct fmem_region fmem_region;

#define FMEM_REGION_MIN_UNIT ((size_t)4096)
#define FMEM_REGION_MAX_UNIT ((size_t)256 * 1024)
#define FMEM_REGION_DEFAULT_UNIT ((size_t)16 * 1024)
#define FMEM_REGION_MIN_CACHE_UNITS 16
#define FMEM_REGION_NO_PREFETCH ((unsigned)-1)

typedef struct fmem_region_config {
    size_t size;        /* bytes of address space (rounded up to fetch_unit) */
    size_t cache_bytes; /* local cache budget; rounded up to fetch units, at
                         * least FMEM_REGION_MIN_CACHE_UNITS units */
    size_t fetch_unit;  /* bytes brought in per fault: a power of two in
                         * [4 KiB, 256 KiB]; 0 = FMEM_REGION_DEFAULT_UNIT
                         * units, and the policy brings in groups of
                         * several where faults land next to each other
                         * (the fetch size, FMEM_REGION_TUNE_FETCH) */
    unsigned prefetch;  /* most units read ahead after sequential faults;
                         * 0 = 4 MiB worth (at most a quarter of the
                         * cache), FMEM_REGION_NO_PREFETCH = off */
    unsigned flags;     /* reserved, 0 */
} fmem_region_config;

typedef struct fmem_region_stats_t {
    uint64_t faults;         /* fault messages handled (missing + write) */
    uint64_t missing_faults; /* accesses to a page that was not mapped */
    uint64_t wp_faults;      /* first writes to a clean cached unit */
    uint64_t hits;           /* faults served without a remote read: the
                              * unit was cached (write faults, races) */
    uint64_t fetches;        /* units read from the pool on demand */
    uint64_t prefetches;     /* units read ahead */
    uint64_t zero_fills;     /* units/pages filled with zeros (never
                              * written, or released) without a read */
    uint64_t evictions;      /* units dropped from the cache */
    uint64_t writebacks;     /* dirty units written to the pool */
    uint64_t bytes_fetched;  /* bytes read from the pool */
    uint64_t bytes_written;  /* bytes written to the pool */
    uint64_t remote_bytes;   /* bytes of pool allocations held now */
    uint64_t remote_peak;    /* most remote_bytes held at once */
    uint64_t cached_bytes;   /* bytes of units in the local cache now */
    uint64_t cache_bytes;    /* the cache budget (rounded) */
    uint64_t releases;       /* ranges released by the program */
    uint64_t alloc_failures; /* pool allocations that failed (the unit
                              * stays cached until space is found) */
    /* the parameters in force (see fmem_region_tune) and what the
     * placement policy measured over its last window of faults */
    uint32_t paths;          /* memory nodes the region spreads over */
    uint32_t stripe_width;   /* of them, the ones new chunks go to */
    uint32_t io_width;       /* transfers in flight at once */
    uint32_t prefetch_units; /* read-ahead depth, units (0: off) */
    uint64_t fault_rate;     /* missing faults per second */
    uint32_t seq_pct;        /* % of faults a little ahead of the last */
    uint32_t write_pct;      /* % of faults that were writes */
    uint32_t refault_pct;    /* % of faults on a unit that faulted lately */
    uint32_t refault_dist;   /* mean faults between those two faults */
    uint64_t tier_moves;     /* chunks moved between fast and slow nodes
                              * at write-back (FMEM_REGION_TUNE_TIER) */
    uint64_t ahead_unused;   /* read-ahead units evicted before the program
                              * was seen to reach them (no fault on them,
                              * none of their stream's at or past them):
                              * an upper bound on read-ahead wasted */
    uint16_t fetch_units;    /* units a demand read fault brings in (the
                              * fetch size, FMEM_REGION_TUNE_FETCH) */
    uint16_t fetch_max;      /* the largest fetch size allowed, units */
    uint32_t ahead_window;   /* of ahead_unused, units claimed along with
                              * another victim's eviction window (wraps) */
} fmem_region_stats_t;

/* ---- paths and tuning ----------------------------------------------------
 * A region over a pool of several memory nodes interleaves its units over
 * them (consecutive units on different nodes) and keeps several fetches
 * and write-backs in flight at once, so the nodes' bandwidths add up. A
 * per-region policy picks the read-ahead depth, the stripe width, the
 * I/O width and the fetch size from the faults it sees
 * (docs/far-memory.md); a parameter set here or in the configuration
 * (prefetch; an explicit fetch_unit fixes the fetch size at one unit)
 * always wins. */
#define FMEM_REGION_TUNE_PREFETCH (1u << 0)
#define FMEM_REGION_TUNE_STRIPE (1u << 1)
#define FMEM_REGION_TUNE_IO_WIDTH (1u << 2)
#define FMEM_REGION_TUNE_TIER (1u << 3)
#define FMEM_REGION_TUNE_FETCH (1u << 4)
#define FMEM_REGION_TUNE_ALL 31u
/* Which nodes hold a region's chunks in a pool of fast (memory: mem:,
 * shm:, file:) and slow (ssd:, zmem:) nodes (docs/far-memory.md): */
#define FMEM_REGION_TIER_AUTO 0u /* the policy: warm chunks fast, cold slow */
#define FMEM_REGION_TIER_NONE 1u /* no tiers: placement by link bandwidth */
#define FMEM_REGION_TIER_FAST 2u /* all on fast nodes (while they have room) */
#define FMEM_REGION_TIER_SLOW 3u /* all on slow nodes (while they have room) */
#define FMEM_REGION_MAX_IO_WIDTH 16u

typedef struct fmem_region_tuning {
    unsigned set;      /* FMEM_REGION_TUNE_* of the fields that are fixed */
    unsigned prefetch; /* read-ahead depth in units (0: off), at most a
                        * quarter of the cache */
    unsigned stripe;   /* 1..paths: new chunks go to nodes 0..stripe-1 */
    unsigned io_width; /* 1..FMEM_REGION_MAX_IO_WIDTH */
    unsigned paths;    /* (get only) memory nodes the region can use */
    unsigned tier;     /* FMEM_REGION_TIER_* */
    unsigned fetch;    /* fetch size: units a demand read fault brings in
                        * (the aligned group of that many units around the
                        * fault, those not cached); a power of two in
                        * 1..fetch_max */
    unsigned fetch_max; /* (get only) the largest fetch size: at most
                         * 256 KiB, an eighth of the cache and a read-ahead
                         * step */
    unsigned reserved[4]; /* zero; room for later fields without an ABI
                           * change */
} fmem_region_tuning;

/* Fix the fields named in t->set to their values; the others go back to
 * the policy. FMEM_EINVAL for a value out of range. */
FMEM_API int fmem_region_tune(fmem_region *r, const fmem_region_tuning *t);
/* The parameters in force, which of them are fixed (out->set) and the
 * number of paths. */
FMEM_API int fmem_region_tuning_get(fmem_region *r, fmem_region_tuning *out);

/* What went over one path (memory node) of a region. */
typedef struct fmem_region_path_t {
    uint32_t node;          /* node index in the pool */
    uint32_t placing;       /* 1: new chunks are placed on it */
    uint64_t bytes_fetched; /* unit bytes read over it */
    uint64_t bytes_written; /* bytes written back over it */
    uint64_t ops;           /* transfers */
    uint64_t busy_ns;       /* summed time of those transfers */
    uint64_t bandwidth;     /* bytes per second while transferring */
    uint64_t chunks;        /* pool allocations of the region held on it */
} fmem_region_path_t;

/* Fill out[0..max) with the region's paths; returns how many it has (may
 * exceed max), or FMEM_EINVAL. */
FMEM_API int fmem_region_paths(fmem_region *r, fmem_region_path_t *out, unsigned max);

/* Create a region on `pool` (which must outlive it). */
FMEM_API int fmem_region_create(fmem_pool *pool, const fmem_region_config *cfg,
                                fmem_region **out);
/* Stop the region, free every pool allocation, unmap (the data is gone).
 * No thread may touch the region's memory any more. */
FMEM_API int fmem_region_destroy(fmem_region *r);
FMEM_API void *fmem_region_base(const fmem_region *r);
FMEM_API size_t fmem_region_size(const fmem_region *r);
FMEM_API size_t fmem_region_unit(const fmem_region *r);
/* Write every dirty cached unit back to the pool. Releases made before the
 * call (also madvise(MADV_DONTNEED)) are reflected in the statistics when
 * it returns. FMEM_ENOMEM if some unit found no pool space. */
FMEM_API int fmem_region_flush(fmem_region *r);
/* The program no longer needs [offset, offset+len): the bytes read as zero
 * afterwards and pool space that only they used is freed. offset and len
 * must be multiples of 4 KiB (FMEM_EINVAL), inside the region
 * (FMEM_ERANGE). Same effect as madvise(MADV_DONTNEED) on the range, but
 * returns only once the pool space is freed. */
FMEM_API int fmem_region_release(fmem_region *r, size_t offset, size_t len);
FMEM_API int fmem_region_stats(fmem_region *r, fmem_region_stats_t *out);

/* How the fault handler waits and installs (docs/far-memory.md, "The cost
 * of one fault"). Fields are only ever appended: fmem_region_fault_stats
 * fills the first `size` bytes (pass sizeof *out), so a program built
 * against an older header keeps working. */
typedef struct fmem_region_fault_stats_t {
    uint64_t spin_wakes;     /* times the handler found fault or removal
                              * messages while it spun after earlier
                              * work, without sleeping */
    uint64_t handler_sleeps; /* times the handler slept waiting for work */
    uint64_t spin_preempted; /* spins cut short because the handler lost
                              * its CPU (a busy machine): it then sleeps
                              * without spinning for a while */
    uint64_t hot_first;      /* read faults off any scan answered with
                              * their page before the rest of the unit */
} fmem_region_fault_stats_t;
/* FMEM_EINVAL: r or out NULL, or size 0 */
FMEM_API int fmem_region_fault_stats(fmem_region *r, fmem_region_fault_stats_t *out, size_t size);

/* ---- heaps (object allocator) ------------------------------------------ */

typedef struct fmem_heap fmem_heap;

#define FMEM_HEAP_SMALL_MAX ((size_t)16 * 1024) /* larger: whole allocations */
#define FMEM_HEAP_SLAB_SIZE ((size_t)64 * 1024)

typedef struct fmem_heap_stats_t {
    uint64_t mallocs;        /* objects handed out (all threads) */
    uint64_t frees;          /* objects freed */
    uint64_t slabs;          /* slabs held now */
    uint64_t large;          /* large objects live now */
    uint64_t remote_bytes;   /* pool (or region) bytes held now */
    uint64_t remote_peak;    /* most remote_bytes held at once */
    uint64_t slab_allocs;    /* slabs taken from the pool */
    uint64_t slab_frees;     /* slabs given back */
    uint64_t double_frees;   /* frees refused as double frees */
    uint64_t bad_frees;      /* frees refused: pointer not from this heap */
    uint64_t merges;         /* slabs merged into another by compaction */
    uint64_t compact_bytes;  /* pool bytes compaction gave back (total) */
    uint64_t reserved[6];
} fmem_heap_stats_t;

/* A heap on directly mapped pool allocations (FMEM_ENOTSUP when the
 * transport cannot map). The pool must outlive the heap. */
FMEM_API int fmem_heap_new(fmem_pool *pool, fmem_heap **out);
/* A heap inside a region: slabs are 64 KiB ranges of the region, giving a
 * slab back releases its range. The heap owns the region's address space
 * from then on; the region must outlive the heap. */
FMEM_API int fmem_heap_new_region(fmem_region *r, fmem_heap **out);
/* Free everything the heap holds. No thread may use it any more. */
FMEM_API void fmem_heap_destroy(fmem_heap *h);

/* malloc(3)-like. Size 0 returns a unique minimal object (free it as any
 * other). Sizes the heap cannot hold: NULL with errno = ENOMEM. */
FMEM_API void *fmem_heap_malloc(fmem_heap *h, size_t size);
FMEM_API void *fmem_heap_calloc(fmem_heap *h, size_t n, size_t size);
/* realloc(3)-like: NULL ptr = malloc; size 0 frees ptr and returns a
 * minimal object. On failure ptr is left alone, NULL, errno = ENOMEM; a
 * pointer this heap does not own: NULL, errno = EINVAL. */
FMEM_API void *fmem_heap_realloc(fmem_heap *h, void *ptr, size_t size);
/* alignment: a power of two (else NULL, errno = EINVAL). */
FMEM_API void *fmem_heap_memalign(fmem_heap *h, size_t alignment, size_t size);
/* 0, or FMEM_EINVAL (not an object of this heap: foreign or interior
 * pointer), or FMEM_EDOUBLEFREE (the object is already free). A refused
 * free changes nothing. NULL is accepted (0). Double frees are detected by
 * a per-heap random key written into freed objects (like glibc's tcache),
 * so they are caught unless the program overwrote the freed object. */
FMEM_API int fmem_heap_free(fmem_heap *h, void *ptr);
/* Usable bytes of a live object; 0 for NULL or a pointer not owned. */
FMEM_API size_t fmem_heap_usable_size(fmem_heap *h, const void *ptr);
/* Give back empty slabs kept by the calling thread and by exited threads,
 * and collect frees other threads made into them. Region heaps also
 * release the freed pages they keep mapped for reuse (at most 1/8 of the
 * region's cache, 256 MiB; the oldest go back beyond that on their own). */
FMEM_API void fmem_heap_collect(fmem_heap *h);
FMEM_API int fmem_heap_stats(fmem_heap *h, fmem_heap_stats_t *out);

/* ---- compaction (docs/far-memory.md, "compaction") ----------------------
 * A compactable heap places each slab at an address of its own, mapped onto
 * the slab's pool chunk. Compaction merges two sparsely used slabs of one
 * size class whose live objects sit at different offsets: the objects of
 * one are copied to the same offsets in the other's chunk, its address
 * range is mapped onto that chunk too, and its own chunk goes back to the
 * pool. Pointers stay valid: both addresses show the same objects, and
 * frees through either land in the merged slab. */
#define FMEM_COMPACT_AUTO 1u   /* compact automatically (see interval) */
#define FMEM_COMPACT_RANDOM 2u /* place objects at random inside a slab */
typedef struct fmem_compact_policy {
    uint32_t flags;    /* FMEM_COMPACT_* */
    uint32_t interval; /* AUTO: a thread compacts its slabs after taking
                        * this many new slabs (0: 64) */
    uint64_t budget;   /* AUTO: bytes one automatic compaction may copy
                        * (0: no limit) */
    uint64_t reserved[2];
} fmem_compact_policy;
/* A compactable heap on directly mapped pool allocations: the pool must
 * be shared memory (shm:, file:), whose chunks can be mapped at a second
 * address; FMEM_ENOTSUP on a private (mem:) pool or a transport that
 * cannot map. policy NULL: no automatic compaction, sequential placement. */
FMEM_API int fmem_heap_new_compactable(fmem_pool *pool, const fmem_compact_policy *policy,
                                       fmem_heap **out);
/* Change the automatic compaction policy (FMEM_COMPACT_AUTO off turns it
 * off). FMEM_COMPACT_RANDOM applies to slabs created from then on.
 * FMEM_EINVAL: NULL argument or unknown flag; FMEM_ENOTSUP: the heap is
 * not compactable. */
FMEM_API int fmem_heap_set_compact_policy(fmem_heap *h, const fmem_compact_policy *policy);
/* Merge compatible slabs of the calling thread and of exited threads,
 * copying at most `budget` bytes of objects (0: no limit). Returns the pool
 * bytes given back (>= 0), or FMEM_EINVAL (h NULL), FMEM_ENOTSUP (the heap
 * is not compactable: fmem_heap_new or a region heap). Other threads may
 * allocate and free meanwhile (frees into the slabs being merged wait for
 * the merge). Writes by other threads into objects of a slab being merged
 * wait in a page fault until the merge has remapped it, where userfaultfd
 * write-protection is available (docs/far-memory.md, "compaction"); where
 * it is not, or with FMEM_COMPACT_FENCE=0 in the environment, such a write
 * may be lost, so runtimes compact where they are stopped (a GC pause).
 * Slabs of other live threads are left alone: each thread compacts its
 * own. */
FMEM_API int64_t fmem_heap_compact(fmem_heap *h, size_t budget);

#ifdef __cplusplus
}
#endif
#endif /* FMEM_FAR_H */
