/* fmem.h - public C API of libfmem, the fine-grained remote-memory allocator.
 *
 * A pool is a set of one or more memory nodes. Allocations are 4 KiB x 2^k,
 * aligned to their size, and are named by a handle: (node, address, length,
 * rkey). On the shared-memory transport an allocation can be mapped and used
 * directly; on every transport it can be read and written with fmem_read()
 * and fmem_write().
 *
 * Every function returns 0 or a negative FMEM_E* code; fmem_strerror() turns
 * a code into a message. All functions are thread-safe for a given pool.
 */
#ifndef FMEM_H
#define FMEM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define FMEM_API __attribute__((visibility("default")))
#else
#define FMEM_API
#endif

#define FMEM_VERSION_MAJOR 0
#define FMEM_VERSION_MINOR 1

/* Geometry of every pool. */
#define FMEM_CHUNK_SIZE   ((size_t)4096)           /* smallest allocation */
#define FMEM_SPAN_SIZE    ((size_t)128 * 1024)     /* 32 chunks */
#define FMEM_SECTION_SIZE ((size_t)2 * 1024 * 1024) /* 16 spans */

/* Error codes (negative return values). */
enum fmem_error {
    FMEM_OK = 0,
    FMEM_EINVAL = -1,      /* invalid argument (NULL pointer, bad flag) */
    FMEM_ESIZE = -2,       /* size is zero or larger than the pool allows */
    FMEM_ENOMEM = -3,      /* the pool has no free block of that size */
    FMEM_EDOUBLEFREE = -4, /* the block is already free */
    FMEM_EBADHANDLE = -5,  /* the handle does not name an allocation */
    FMEM_ECORRUPT = -6,    /* the pool file is corrupt or not an fmem pool */
    FMEM_EIO = -7,         /* a system call failed (see errno) */
    FMEM_EACCES = -8,      /* the handle's key does not grant access, or the
                            * service refused this user (SO_PEERCRED) */
    FMEM_EURI = -9,        /* the pool URI cannot be parsed */
    FMEM_ENOTSUP = -10,    /* the transport cannot do this */
    FMEM_ERANGE = -11,     /* offset or length outside the allocation */
    FMEM_EBUSY = -12,      /* no free user id, or the resource is in use */
    FMEM_EQUOTA = -13,     /* the application's quota (bytes or allocations)
                            * set by its allocation service is reached */
    FMEM_ESTALE = -14,     /* the allocation service that issued the handle
                            * is gone (it died, was fenced by its memory
                            * node, or shut down): its blocks are reclaimed
                            * and may be another application's; reopen */
};

/* An opened pool: an embedded pool, or (later) a connection to a service. */
typedef struct fmem_pool fmem_pool;

/* Names one allocation. Plain data: it may be copied and sent elsewhere. */
typedef struct fmem_handle {
    uint64_t addr;   /* byte offset of the block in its node's data area */
    uint64_t length; /* size of the block in bytes, 4 KiB x 2^k */
    uint32_t rkey;   /* capability key granting access to the block */
    uint16_t node;   /* memory node index within the pool */
    uint16_t flags;  /* reserved, 0 */
} fmem_handle;

/* Statistics. Counters are this process's operations on the pool; byte
 * figures describe the pool as a whole (all users). */
#define FMEM_SIZE_CLASSES 32 /* class k counts allocations of 4 KiB << k */
typedef struct fmem_stats_t {
    uint64_t capacity_bytes;  /* data bytes of all nodes */
    uint64_t allocated_bytes; /* bytes currently allocated (all users) */
    uint64_t metadata_bytes;  /* bytes of headers, keys and logs */
    uint32_t nodes;           /* memory nodes in the pool */
    uint32_t user_id;         /* this client's user id */
    uint64_t allocs;          /* successful allocations by this process */
    uint64_t frees;           /* successful frees by this process */
    uint64_t failed_allocs;   /* allocations that returned an error */
    uint64_t cas_ops;         /* compare-and-swap operations issued */
    uint64_t cas_failures;    /* of those, the ones that lost a race */
    uint64_t reads;           /* one-sided reads issued */
    uint64_t writes;          /* one-sided writes issued */
    uint64_t round_trips;     /* network round trips (a batch counts once) */
    uint64_t log_flushes;     /* redo-log entries written */
    uint64_t max_retries;     /* most CAS failures seen by one allocation */
    uint64_t size_class_allocs[FMEM_SIZE_CLASSES]; /* allocations by size */
    uint64_t reserved[16];
} fmem_stats_t;

/* Open a pool.
 *   uri == NULL or "": the URI in $FMEM_URI, else an in-process pool of
 *   FMEM_DEFAULT_SIZE (mem:).
 *   "mem:?size=256M"          anonymous in-process pool (private memory:
 *                             a fork() child gets a copy-on-write snapshot)
 *   "shm:/NAME?size=1G"       named pool in /dev/shm, shared by processes;
 *                             created when absent (size needed), else opened
 *   "file:/PATH?size=1G"      named pool in any file (e.g. on hugetlbfs)
 *   "ssd:/PATH?size=16G"      data area in a file or block device, read and
 *                             written with io_uring (io=uring|sync,
 *                             direct=auto|0|1); private to the process
 *   "zmem:?size=4G&codec=lz4" data area compressed (codec=lz4|zstd,
 *                             level=N, block=4K..1M, limit=BYTES) in this
 *                             process's memory (docs/backends.md)
 * Query parameters: size= (K/M/G/T, optionally with B or iB: powers of 1024;
 * rounded up to 2 MiB sections),
 * nodes=N (that many memory nodes, for mem:), rtt_ns=N (injected round-trip
 * delay per operation), rtt_mode=spin|nic (how that delay is waited for:
 * spin, the default: the calling thread spins on the clock, yielding; nic:
 * the caller sleeps while one emulator thread per process plays the NIC,
 * runs the operations half a round trip after posting and wakes the caller
 * a full round trip after; it uses no client CPU while waiting and is the
 * default of fmem-bench), bw=SIZE (mem:/shm: only: emulate a link of SIZE
 * bytes per second to each node, e.g. bw=1G; a node's operations queue on
 * its own link, so several nodes are independent paths), user=N (log as user id N: its slot in the pool's
 * user table is claimed like any other, FMEM_EBUSY if it is held; default:
 * any free slot),
 * create=0|1 (shm/file: fail if absent / create if absent, default 1).
 * Several URIs separated by ';' open several memory nodes as one pool. */
#define FMEM_DEFAULT_SIZE ((uint64_t)1 << 30)
FMEM_API int fmem_open(const char *uri, fmem_pool **out);
/* Close a pool. Every block allocated through this pool object that is
 * still allocated is freed (on pools other processes can map: shm:, file:,
 * rdma://; a mem: pool goes away whole), and its user slot is released:
 * a user id never leaves blocks behind that nobody could free. Handles of
 * those blocks given to other processes stop working. Over a service
 * (unix:, fmem://), fmemd frees them when the connection closes. */
FMEM_API void fmem_close(fmem_pool *pool);
/* Remove the files of the named pool(s) in `uri` (shm:, file:). Processes
 * that have it open keep using it until they close it. */
FMEM_API int fmem_unlink(const char *uri);

/* Allocate at least `size` bytes (rounded up to 4 KiB x 2^k). */
FMEM_API int fmem_alloc(fmem_pool *pool, size_t size, fmem_handle *out);
/* Free an allocation. The handle's key stops working at once. */
FMEM_API int fmem_free(fmem_pool *pool, const fmem_handle *h);

/* Direct pointer to the allocation's bytes (shared-memory transport only;
 * FMEM_ENOTSUP elsewhere). Valid until the block is freed. */
FMEM_API int fmem_map(fmem_pool *pool, const fmem_handle *h, void **ptr);
/* Where the allocation is for a program's own RDMA requests: its remote
 * virtual address on the memory node (with h->rkey and h->length, the
 * triple an RDMA READ/WRITE/atomic needs). Pools served over RDMA only
 * (FMEM_ENOTSUP elsewhere); the handle must be one this client holds. */
FMEM_API int fmem_remote(fmem_pool *pool, const fmem_handle *h, uint64_t *remote_addr);

/* Copy between the allocation (at byte `offset`) and local memory. */
FMEM_API int fmem_read(fmem_pool *pool, const fmem_handle *h, uint64_t offset,
                       void *dst, size_t len);
FMEM_API int fmem_write(fmem_pool *pool, const fmem_handle *h, uint64_t offset,
                        const void *src, size_t len);

/* Fill *out with the pool's space (all users) and this process's counters
 * (fmem_stats_t above). */
FMEM_API int fmem_stats(fmem_pool *pool, fmem_stats_t *out);

/* One memory node's backend: what it holds and how its data moved. The
 * I/O figures are this process's, counted by the ssd: and zmem: backends
 * (other nodes report kind and capacity only). */
typedef struct fmem_node_stats_t {
    char kind[8];             /* "mem", "shm", "file", "rdma", "ssd", "zmem" */
    char detail[56];          /* e.g. "io_uring, O_DIRECT" or "lz4, 4096-byte blocks" */
    uint64_t capacity_bytes;  /* data bytes the node offers */
    uint64_t held_bytes;      /* bytes the backend holds for them now (zmem:
                               * compressed; ssd: the file's allocated blocks) */
    uint64_t stored_bytes;    /* zmem: uncompressed bytes of the blocks held */
    double compression_ratio; /* zmem: stored_bytes / held_bytes (0: none held) */
    uint64_t reads, writes;   /* data operations served */
    uint64_t bytes_read, bytes_written;
    uint64_t read_ns, write_ns; /* time spent in them */
    double read_mb_s, write_mb_s; /* bytes / time spent (MB = 10^6 bytes) */
    double read_lat_us, write_lat_us; /* mean time per operation */
    uint64_t errors;          /* operations that failed */
    char last_error[160];     /* the last failure, "" if none */
    uint64_t reserved[8];
} fmem_node_stats_t;
/* Node `node` (0 .. fmem_stats().nodes - 1) of an embedded pool. */
FMEM_API int fmem_node_stats(fmem_pool *pool, unsigned node, fmem_node_stats_t *out);
/* A short English text for an FMEM_E* code (or 0); never NULL. */
FMEM_API const char *fmem_strerror(int err);
/* After a call of this thread returned FMEM_EURI (fmem_open, fmem_unlink,
 * fmem_open_admin): what in the URI was wrong, naming the bad key or value
 * ("unknown parameter 'siz'", "bad value size='12Q'"); "" when the last URI
 * this thread parsed was valid. Never NULL. */
FMEM_API const char *fmem_uri_error(void);

/* Round a request up to the size fmem_alloc() would hand out; 0 if none. */
FMEM_API size_t fmem_size_round(size_t size);

#ifdef __cplusplus
}
#endif
#endif /* FMEM_H */
