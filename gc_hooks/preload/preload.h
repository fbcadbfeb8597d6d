/* preload.h - internals of libfmem-preload.so, the LD_PRELOAD interposer
 * that sends large allocations to an fmem pool and small ones to the
 * system allocator.
 *
 *   real.c       the system allocator's functions (dlsym(RTLD_NEXT)) and
 *                the bootstrap buffer used while they are being looked up
 *   config.c     environment variables, checked once
 *   blocks.c     large blocks: the pool, the range its blocks live in (a
 *                block is a few pool blocks side by side, or one in a
 *                private pool), their table
 *   cache.c      freed blocks kept for reuse, by size
 *   fork.c       fork() handlers
 *   lazy.c       named pool: blocks write-protected at fork or before it
 *                (userfaultfd), remapped by a thread of ours at the first
 *                write after the fork
 *   childmap.c   named pool, fork child: the blocks write-protected in
 *                the parent remapped at their first access
 *   snap.c       named pool: blocks remapped copy-on-write at fork, the
 *                fork-generation locks, blocks whose free waits for the
 *                fork children that read them
 *   early.c      named pool: small blocks write-protected before the fork
 *   stats.c      counters and the report at exit (FMEM_PRELOAD_STATS=1)
 *   interpose.c  malloc, free, ... as the program sees them
 */
#ifndef FMEM_PRELOAD_H
#define FMEM_PRELOAD_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* ---- real.c ------------------------------------------------------------- */

struct real_fns {
    void *(*malloc)(size_t);
    void (*free)(void *);
    void *(*calloc)(size_t, size_t);
    void *(*realloc)(void *, size_t);
    int (*posix_memalign)(void **, size_t, size_t);
    void *(*aligned_alloc)(size_t, size_t);
    void *(*memalign)(size_t, size_t);
    void *(*valloc)(size_t);
    void *(*pvalloc)(size_t);
    size_t (*malloc_usable_size)(void *);
};
extern struct real_fns fp_real;

/* Look the system allocator up (idempotent). 0 when ready; -1 while this
 * thread is inside the lookup (callers then use the bootstrap buffer). */
int fp_real_init(void);
void *fp_boot_alloc(size_t size, size_t align);
int fp_boot_owns(const void *p);
size_t fp_boot_size(const void *p);

/* ---- config.c ----------------------------------------------------------- */

struct fp_config {
    int enabled;      /* 0: everything goes to the system allocator */
    int stats;        /* print counters at exit ... */
    int stats_fd;     /* ... to this copy of stderr, or */
    const char *stats_path; /* ... append them to this file */
    size_t threshold; /* requests of at least this many bytes are large */
    const char *uri;  /* pool URI (NULL: fmem_open's default) */
    int lazy_fork;    /* named pool: write-protect at fork (lazy.c); 0 with
                       * FMEM_PRELOAD_LAZY_FORK=0 */
    int early_protect; /* lazy fork: write-protect long-lived blocks before
                        * the fork (snap.c); 0 with FMEM_PRELOAD_EARLY_PROTECT=0 */
    int child_remap_eager; /* fork child: remap the parent's write-protected
                            * blocks at once, not at their first access
                            * (childmap.c); FMEM_PRELOAD_CHILD_REMAP=eager */
};
extern struct fp_config fp_cfg;
/* Read the environment once; later calls return at once. 0 when the
 * configuration is ready, -1 while another thread is reading it. */
int fp_config_init(void);
/* One line on stderr without allocating ("fmem-preload: ..."). */
void fp_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void fp_say_fd(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- blocks.c ----------------------------------------------------------- */

/* Set while this thread runs pool code: every allocation it makes then goes
 * to the system allocator, so the interposer never re-enters itself. */
extern _Thread_local int fp_in_pool __attribute__((tls_model("initial-exec")));

/* A large block or NULL (pool full, closed, or disabled: the caller then
 * uses the system allocator). align: 0 or a power of two. */
void *fp_block_alloc(size_t size, size_t align, int zero);
/* Nonzero when p lies in an address range of ours (a block or garbage). */
int fp_block_owns(const void *p);
/* Free a block; aborts with a message for a pointer that is no block. */
void fp_block_free(void *p);
/* Usable bytes of a block (its whole length). */
size_t fp_block_size(const void *p);
/* Make block p `size` bytes where it is: 0 when done (p unchanged, its
 * first min(old, size) bytes kept), -1 when the caller must move it. */
int fp_block_resize(void *p, size_t size);

/* ---- fork.c ------------------------------------------------------------- */

/* Install the fork handlers (idempotent): by the library's constructor,
 * before any lock of the interposer is taken. */
void fp_fork_register(void);

/* A large object ("block" to the program) is one to FP_OBJ_BLOCKS pool
 * blocks mapped side by side in the arena's mirror. In a named pool the
 * mirror is a reserved range twice the pool's size: the object whose first
 * (and largest) block starts at pool offset o lives at mirror + 2 o, so
 * its blocks may add up to twice the first one's length and every object
 * has a slot of its own. In a private pool an object is one pool block
 * (its size rounded up to a power of two) and lives at mirror + o: the
 * objects lie as densely as the pool packs them, so a fork copies (and an
 * exec tears down) no more page tables than for the system allocator's
 * memory. fp_arena.scale is that factor's log2 (1 named, 0 private). */
#define FP_OBJ_BLOCKS 16
struct fp_piece {
    uint64_t addr; /* the pool block: handle address (data offset) */
    uint32_t key;
    uint32_t log2; /* its length: 4 KiB << log2 */
};
struct fp_obj {
    uint16_t n;          /* pieces, in address order */
    uint8_t grave;       /* named pool: some piece's shared mapping was moved
                          * to the graveyard at fork (snap.c) */
    uint8_t lazy;        /* named pool, FP_LAZY_*: write protection of the
                          * shared mapping (lazy.c); changed under
                          * fp_lazy_lock() */
    uint32_t pages;      /* the object's length in 4 KiB pages */
    uint32_t since;      /* named pool: mapped MAP_PRIVATE since this fork
                          * generation (snap.c); 0: mapped MAP_SHARED;
                          * FP_SINCE_ANON: a private anonymous copy */
    uint32_t next;       /* deferred list: record index + 1 of the next */
    struct fp_piece b[FP_OBJ_BLOCKS];
};
/* entries of the arena's table, one word per record */
#define FP_E_LIVE (UINT64_C(1) << 0)
#define FP_E_PRIVATE (UINT64_C(1) << 40) /* a copy made in a fork child, no longer in the pool */
#define FP_E_CACHED (UINT64_C(1) << 41)  /* freed, kept for reuse (cache.c) */
#define FP_E_DEFERRED (UINT64_C(1) << 42) /* freed, waiting for fork readers (snap.c);
                                           * always with FP_E_CACHED */
#define FP_E_COPY (UINT64_C(1) << 43)     /* not (wholly) remapped at fork: the child copies it */
#define FP_CHUNK_SHIFT 12
/* fp_obj.lazy */
#define FP_LAZY_NONE 0  /* not write-protected */
#define FP_LAZY_FORK 1  /* write-protected since a fork: remapped MAP_PRIVATE
                         * at the first write after it (in a fork child:
                         * at the first access, childmap.c) */
#define FP_LAZY_SEEN 2  /* looked at by an early pass; protected at the next */
#define FP_LAZY_EARLY 3 /* write-protected before any fork reads it: a write
                         * only lifts the protection; the next fork keeps it */
#define FP_LAZY_HOT 4   /* written after an early protection: protected again
                         * only by a fork */
/* The object whose range holds an address p of a small object: its record
 * is at most a slot's length (twice its first block, under 2 MiB) before
 * p's, and no other object starts in between. */
#define FP_SMALL_SCAN_MAX ((((size_t)2 << 20) >> FP_CHUNK_SHIFT) + 1)
#define FP_SINCE_ANON UINT32_MAX

/* shared between blocks.c, cache.c and fork.c */
/* Arenas of one process: its own and, in a fork child of a named pool's
 * user, one per ancestor that still has blocks the child holds (an arena
 * none of whose blocks is left is retired and its slot reused). */
#define FP_MAX_ARENAS 1024
struct fp_arena {
    char *mirror;              /* where the objects are: cap << scale bytes */
    _Atomic size_t cap;        /* pool data bytes; 0 once closed at exit */
    int shared;                /* other processes map the pool (shm:, ...) */
    unsigned scale;            /* log2 of mirror bytes per pool byte: 1 when
                                * shared, 0 (one block per object) if not */
    unsigned rec_shift;        /* log2 of pool bytes per record: FP_CHUNK_SHIFT
                                * when shared; in a private pool that of the
                                * smallest block an object can have (the
                                * threshold's), so that the records of
                                * neighbouring objects share pages */
    int data_fd;               /* shared: the pool's data file */
    int64_t file_delta;        /* shared: file offset of a block = addr + delta */
    size_t granule;            /* pieces are multiples of this: 4 KiB, or
                                * the page size of a hugetlbfs pool file */
    _Atomic uint64_t live;     /* objects handed out (or cached) */
    _Atomic uint64_t *table;   /* one word per record (1 << rec_shift bytes
                                * of the pool): the entry (FP_E_*) of the
                                * object whose first block starts there;
                                * 0: none */
    struct fp_obj *objs;       /* its pieces, one record per table word */
    size_t table_bytes, objs_bytes;
    char *pool_data;           /* the pool's own mapping of its data */
    int orphan;                /* a parent's pool, seen by a fork child:
                                * live counts its private objects */
    _Atomic int retired;       /* orphan with no object left: slot reusable */
    size_t grave_off;          /* named pool: mirror + grave_off + 2 o is
                                * where the shared mapping of the object at
                                * mirror + 2 o goes at fork (snap.c); 0: none */
    _Atomic uint64_t *fresh;   /* named pool: a bit per 64 records, set when
                                * one of them is handed out, cleared by the
                                * next fork's scan (snap.c); after the table */
    size_t fresh_words;
    char *reserved;            /* the mirror's reservation (and graveyard) ... */
    size_t reserved_len;       /* ... and its length */
    uint32_t fork_gen;         /* named pool: last fork generation (snap.c) */
    int gen_fd;                /* its lock's description during a fork, or -1 */
    uint32_t deferred;         /* record index + 1 of the first deferred object */
    struct fmem_pool *pool;    /* NULL once orphaned */
};
extern struct fp_arena fp_arenas[FP_MAX_ARENAS];
extern _Atomic int fp_narenas;
extern struct fp_arena *_Atomic fp_current; /* where new blocks come from */
void fp_lock_shared(void);
void fp_unlock_shared(void);
void fp_lock_all(void);
int fp_trylock_all(void); /* 0 when taken */
void fp_unlock_all(void);
void fp_lock_reinit(void);
/* Child side of fork: turn the current arena's blocks into private
 * copies at the same addresses and stop using its pool. */
void fp_blocks_orphan_current(void);

static inline char *fp_obj_ptr(const struct fp_arena *a, const struct fp_obj *o)
{
    return a->mirror + ((size_t)(o - a->objs) << (a->rec_shift + a->scale));
}
/* Nonzero when p lies in a's mirror (an object's range or garbage). */
static inline int fp_arena_holds(const struct fp_arena *a, const char *p)
{
    return p >= a->mirror && ((size_t)(p - a->mirror) >> a->scale) <
                                 atomic_load_explicit(&a->cap, memory_order_relaxed);
}
/* The record (table index) whose slot starts at or before p in a's mirror. */
static inline size_t fp_arena_chunk(const struct fp_arena *a, const char *p)
{
    return (size_t)(p - a->mirror) >> (a->rec_shift + a->scale);
}
static inline _Atomic uint64_t *fp_obj_entry(const struct fp_arena *a, const struct fp_obj *o)
{
    return &a->table[o - a->objs];
}
static inline size_t fp_obj_len(const struct fp_obj *o) { return (size_t)o->pages << FP_CHUNK_SHIFT; }
/* The object whose range holds p (an address in a's mirror), its table
 * entry in *e; NULL when p lies between objects. */
static inline struct fp_obj *fp_arena_obj_at(const struct fp_arena *a, const char *p, uint64_t *e)
{
    size_t j = fp_arena_chunk(a, p);
    for (size_t k = j + 1, n = 0; k-- > 0 && n < FP_SMALL_SCAN_MAX; n++) {
        uint64_t v = atomic_load_explicit(&a->table[k], memory_order_acquire);
        if (!v)
            continue;
        struct fp_obj *o = &a->objs[k];
        if (p >= fp_obj_ptr(a, o) + fp_obj_len(o))
            return NULL;
        *e = v;
        return o;
    }
    return NULL;
}
/* Give an object (entry already cleared) back to the pool. */
void fp_obj_release(struct fp_arena *a, struct fp_obj *o);
void fp_unmap_range(char *p, size_t len);
void *fp_map_anon(void *at, size_t len, int prot);

/* ---- snap.c ------------------------------------------------------------- */

/* Parent, in the prepare handler (all locks held): take the lock of a new
 * fork generation and remap the current named arena's shared objects
 * MAP_PRIVATE (lazy: write-protect the small ones instead, lazy.c). Returns 1 if some object could not be remapped (the child
 * must copy it while the parent waits), else 0. */
int fp_snap_prepare(int lazy);
/* Remap a write-protected object MAP_PRIVATE (or copy it into private
 * memory) at its place, keeping `since`: 0, or -1 if it is still shared.
 * how: FP_UNSHARE_*. */
int fp_snap_unshare(struct fp_arena *a, struct fp_obj *o, int how);
#define FP_UNSHARE_MAP 0  /* remap; where that fails copy through its mapping */
#define FP_UNSHARE_READ 1 /* remap; where that fails read the pool file (the
                           * caller serves the faults of its mapping) */
#define FP_UNSHARE_COPY 2 /* copy through its mapping (the descriptor of the
                           * pool file is not ours any more) */
/* Parent after fork (or a failed fork): close its copy of the lock. */
void fp_snap_parent(void);
/* The fault thread (lazy.c, fp_lazy_lock() held): a write stopped at
 * address p. Remap the object holding p MAP_PRIVATE if it is protected
 * since a fork, else (protected early) lift its protection; its range in
 * *start, *len (0 if p is in none or the protection could not be lifted:
 * the caller then lifts the page's). */
void fp_snap_fault(char *p, char **start, size_t *len);
/* A freed object mapped private since a fork: 1 if it was deferred (its
 * entry marked), 0 if no reader is left (the caller gives it back). */
int fp_snap_defer(struct fp_arena *a, struct fp_obj *o);
/* Unmap object o's range (keeping it reserved), and its graveyard range
 * if it has one. */
void fp_snap_unmap(struct fp_arena *a, struct fp_obj *o);
/* Give back deferred objects no fork reader can see any more; `force`
 * ignores the throttle. Block lock held (shared or exclusive). */
void fp_snap_reap(int force);

/* 1 if every piece of o is under 2 MiB (write-protected at fork, not
 * remapped). */
int fp_snap_small(const struct fp_obj *o);

/* ---- early.c ------------------------------------------------------------ */

/* The fault thread, between faults: write-protect the current named
 * arena's small shared objects that were seen by the previous pass (and
 * mark the others seen), so that a fork finds them protected already. Skips
 * the pass if the block lock is taken. 1 if some object is left to protect
 * at a later pass. */
int fp_early_pass(void);
/* take(), block lock held: o was handed out (a candidate for an early
 * protection once it is a little older). */
void fp_early_handed_out(struct fp_arena *a, struct fp_obj *o);
/* After a large allocation, outside the block lock: write-protect a few
 * objects handed out long enough ago (if the block lock is free). */
void fp_early_step(void);
/* Child of fork: forget the parent's recent objects; unlock. */
void fp_early_child(void);
/* The fault thread (fp_lazy_lock() held): a write lifted the early
 * protection of the object at record k. */
void fp_early_written(size_t k);
/* The fault thread, after waking the writer: in a streak of such writes,
 * lift the early protection of the objects after it. */
void fp_early_after_fault(void);

/* ---- lazy.c ------------------------------------------------------------- */

/* Prepare handler, before the block lock: start the fault thread once per
 * process. 1 when blocks can be write-protected, else 0. */
int fp_lazy_start(void);
/* Prepare handler: fp_lazy_start(), and the userfaultfd is still ours (a
 * program may close every descriptor): 1 when blocks protected early are
 * still protected and more can be, else 0 (the fork remaps them all). */
int fp_lazy_usable(void);
/* Write-protect [p, p + len), a shared mapping of the pool: 0 or -1. */
int fp_lazy_protect(char *p, size_t len);
/* Lift the protection of [p, p + len) and wake the writers waiting on it:
 * 0 or -1. */
int fp_lazy_unprotect(char *p, size_t len);
/* A large block was handed out in a named pool: start the fault thread
 * (outside the block lock) so that it protects long-lived blocks before
 * the first fork. */
void fp_lazy_note_alloc(void);
void fp_lazy_lock(void);
void fp_lazy_unlock(void);
/* Child of fork: no fault thread here, no registration; unlock. */
void fp_lazy_child(void);

/* userfaultfd (lazy.c): a new one with these features (and O_CLOEXEC |
 * flags) from the system call or /dev/userfaultfd, or -1; wake the
 * threads waiting on [start, start + len). */
int fp_uffd_open(uint64_t features, int flags);
void fp_uffd_wake(int fd, uint64_t start, uint64_t len);
/* A detached thread of ours (no signal delivered to it, a 64 KiB stack):
 * pthread_create's result. */
int fp_thread_start(void *(*fn)(void *), void *arg);

/* ---- childmap.c ---------------------------------------------------------- */
/* Fork child: o (write-protected in the parent, still its shared mapping
 * here) waits for its first access, which a thread of ours turns into a
 * remap; 0, or -1 if it cannot (the caller remaps it now). */
int fp_childmap_add(struct fp_arena *a, struct fp_obj *o);
/* After the fork handler added the objects: start the thread, if any
 * waits. */
void fp_childmap_arm(void);
/* Fork child, first: the objects an earlier generation's child left
 * waiting wait here too (their registration is not inherited). */
void fp_childmap_child(void);
/* The program frees o (private here): unmap it, not while it is being
 * remapped. */
void fp_childmap_free(struct fp_arena *a, struct fp_obj *o);

/* ---- cache.c ------------------------------------------------------------ */

/* All with the block lock held shared (or exclusively, by fork). */
/* A kept object of `pages` to `limit` pages with the given alignment;
 * NULL if none is kept. */
struct fp_obj *fp_cache_take(struct fp_arena *a, uint32_t pages, uint32_t limit, size_t align);
/* Keep a freed object (its entry marked cached) for reuse: 1 if kept, 0
 * if the caller must give it back to the pool. */
int fp_cache_put(struct fp_arena *a, struct fp_obj *o);
/* Give back kept objects: all of them, or those kept longer than the
 * delay. Returns the bytes given back. */
size_t fp_cache_flush(int all);
/* Child of fork with a shared pool: the kept objects are the parent's;
 * calls drop(o) for each (the caller unmaps it), without giving back. */
void fp_cache_forget(void (*drop)(struct fp_arena *, struct fp_obj *));
void fp_cache_lock_reinit(void);

/* ---- stats.c ------------------------------------------------------------ */

struct fp_stats {
    _Atomic uint64_t allocs;    /* large blocks handed out */
    _Atomic uint64_t frees;     /* large blocks freed */
    _Atomic uint64_t fallbacks; /* large requests served by the system */
    _Atomic uint64_t live_bytes;
    _Atomic uint64_t peak_bytes;
    _Atomic uint64_t copied_at_fork; /* bytes copied in fork children */
    _Atomic uint64_t remapped_at_fork; /* bytes remapped copy-on-write at fork (snap.c) */
    _Atomic uint64_t protected_at_fork; /* bytes write-protected at fork (lazy.c) */
    _Atomic uint64_t remapped_on_write; /* of those, remapped at a write after the fork */
    _Atomic uint64_t protected_early; /* bytes write-protected ahead of a fork (lazy.c) */
    _Atomic uint64_t written_early;   /* of those, bytes written again before a fork */
    _Atomic uint64_t reused;    /* large blocks served from the cache */
    _Atomic uint64_t no_room;   /* large requests the pool had no room for
                                 * (counted in fallbacks too) */
    _Atomic uint64_t grown;     /* realloc grew a block where it was */
};
extern struct fp_stats fp_stats;
void fp_stats_add(uint64_t bytes);
void fp_stats_sub(uint64_t bytes);
void fp_stats_resize(uint64_t old_bytes, uint64_t new_bytes);

#endif
