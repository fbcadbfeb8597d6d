/* shadow.h - helpers shared by the allocator tests: a shadow ownership map
 * (one atomic owner slot per chunk, so a chunk handed out twice is caught
 * the moment the second owner claims it), block stamps for data integrity,
 * random block sizes, and a first-failure record that worker threads and
 * child processes fill in for the test's main thread to assert on.
 *
 * Everything lives in MAP_SHARED | MAP_ANONYMOUS memory so that it works the
 * same across threads and across fork(). */
#ifndef FMEM_TESTS_SHADOW_H
#define FMEM_TESTS_SHADOW_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "fmem.h"

/* ---- shared memory ------------------------------------------------------ */

static inline void *shared_alloc(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static inline void shared_free(void *p, size_t bytes)
{
    if (p)
        munmap(p, bytes);
}

/* ---- random numbers ----------------------------------------------------- */

struct test_rng {
    uint64_t s;
};

static inline void rng_seed(struct test_rng *r, uint64_t seed)
{
    r->s = seed * 0x9E3779B97F4A7C15u + 0x632BE59BD9B4E019u;
    if (!r->s)
        r->s = 1;
}

static inline uint64_t rng_next(struct test_rng *r)
{
    uint64_t x = r->s; /* xorshift64* */
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->s = x;
    return x * 0x2545F4914F6CDD1Du;
}

static inline uint64_t rng_below(struct test_rng *r, uint64_t n)
{
    return rng_next(r) % n;
}

/* Block sizes of a churning workload: mostly 4-64 KiB, some 128 KiB-2 MiB,
 * rarely 4 MiB. Sizes are sometimes not powers of two, to exercise rounding. */
static inline size_t random_block_size(struct test_rng *r)
{
    uint64_t dice = rng_below(r, 1000);
    size_t size;
    if (dice < 940)
        size = FMEM_CHUNK_SIZE << rng_below(r, 5);          /* 4..64 KiB */
    else if (dice < 997)
        size = FMEM_SPAN_SIZE << rng_below(r, 5);           /* 128 KiB..2 MiB */
    else
        size = (size_t)4 << 20;                             /* 4 MiB */
    if (rng_below(r, 4) == 0 && size > FMEM_CHUNK_SIZE)
        size = size / 2 + 1 + rng_below(r, size / 2);       /* rounds up to `size` */
    return size;
}

/* ---- first-failure record ----------------------------------------------- */

struct failure {
    atomic_int count;
    char msg[512];
};

static inline void failure_record(struct failure *f, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline void failure_record(struct failure *f, const char *fmt, ...)
{
    if (atomic_fetch_add(&f->count, 1) != 0)
        return; /* keep the first message only */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->msg, sizeof f->msg, fmt, ap);
    va_end(ap);
}

/* ---- shadow ownership map ----------------------------------------------- */

struct shadow {
    _Atomic uint32_t *slot; /* owner of each chunk, 0: free */
    uint64_t chunks_per_node;
    unsigned nodes;
    size_t bytes;
};

static inline bool shadow_init(struct shadow *sh, unsigned nodes, uint64_t node_bytes)
{
    sh->nodes = nodes;
    sh->chunks_per_node = node_bytes / FMEM_CHUNK_SIZE;
    sh->bytes = (size_t)nodes * sh->chunks_per_node * sizeof(uint32_t);
    sh->slot = shared_alloc(sh->bytes); /* zero-filled: every chunk free */
    return sh->slot != NULL;
}

static inline void shadow_destroy(struct shadow *sh)
{
    shared_free((void *)sh->slot, sh->bytes);
    sh->slot = NULL;
}

/* Index range of the block's chunks; false if the handle points outside the
 * pool (which is itself a failure of the allocator). */
static inline bool shadow_range(const struct shadow *sh, const fmem_handle *h, uint64_t *first,
                                uint64_t *n)
{
    uint64_t c = h->addr / FMEM_CHUNK_SIZE, len = h->length / FMEM_CHUNK_SIZE;
    if (h->node >= sh->nodes || c >= sh->chunks_per_node || len > sh->chunks_per_node - c)
        return false;
    *first = (uint64_t)h->node * sh->chunks_per_node + c;
    *n = len;
    return true;
}

/* Claim every chunk of h for `owner` (nonzero). On a chunk that is already
 * owned, undo the partial claim, record the failure and return false. */
static inline bool shadow_claim(struct shadow *sh, const fmem_handle *h, uint32_t owner,
                                struct failure *f)
{
    uint64_t first, n;
    if (!shadow_range(sh, h, &first, &n)) {
        failure_record(f, "block node %u addr %#llx len %#llx lies outside the pool", h->node,
                       (unsigned long long)h->addr, (unsigned long long)h->length);
        return false;
    }
    for (uint64_t i = 0; i < n; i++) {
        uint32_t expect = 0;
        if (!atomic_compare_exchange_strong(&sh->slot[first + i], &expect, owner)) {
            failure_record(f,
                           "chunk %llu of node %u handed out twice: owner %#x still holds it, "
                           "new block addr %#llx len %#llx for %#x",
                           (unsigned long long)(first + i - (uint64_t)h->node * sh->chunks_per_node),
                           h->node, expect, (unsigned long long)h->addr,
                           (unsigned long long)h->length, owner);
            while (i-- > 0)
                atomic_store(&sh->slot[first + i], 0);
            return false;
        }
    }
    return true;
}

/* Release the chunks of h before it is freed; each must still be owner's. */
static inline bool shadow_release(struct shadow *sh, const fmem_handle *h, uint32_t owner,
                                  struct failure *f)
{
    uint64_t first, n;
    if (!shadow_range(sh, h, &first, &n))
        return false;
    bool ok = true;
    for (uint64_t i = 0; i < n; i++) {
        uint32_t expect = owner;
        if (!atomic_compare_exchange_strong(&sh->slot[first + i], &expect, 0) && ok) {
            failure_record(f, "chunk %llu of block addr %#llx owned by %#x, not by %#x",
                           (unsigned long long)(first + i), (unsigned long long)h->addr, expect,
                           owner);
            ok = false;
        }
    }
    return ok;
}

static inline uint64_t shadow_owned_chunks(const struct shadow *sh)
{
    uint64_t n = 0, total = (uint64_t)sh->nodes * sh->chunks_per_node;
    for (uint64_t i = 0; i < total; i++)
        n += atomic_load_explicit(&sh->slot[i], memory_order_relaxed) != 0;
    return n;
}

/* ---- block stamps --------------------------------------------------------
 * The stamp of a block is written at both ends of every chunk, so a chunk
 * shared with another block is overwritten whatever part the other uses. */

static inline uint64_t stamp_word(uint64_t pattern, uint64_t chunk_index)
{
    return pattern ^ (chunk_index * 0x9E3779B97F4A7C15u);
}

static inline void block_stamp(void *block, uint64_t len, uint64_t pattern)
{
    char *b = block;
    for (uint64_t c = 0; c < len / FMEM_CHUNK_SIZE; c++) {
        uint64_t w = stamp_word(pattern, c);
        memcpy(b + c * FMEM_CHUNK_SIZE, &w, 8);
        memcpy(b + (c + 1) * FMEM_CHUNK_SIZE - 8, &w, 8);
    }
}

/* Offset of the first word that does not hold the stamp, or -1. */
static inline int64_t block_check(const void *block, uint64_t len, uint64_t pattern)
{
    const char *b = block;
    for (uint64_t c = 0; c < len / FMEM_CHUNK_SIZE; c++) {
        uint64_t w = stamp_word(pattern, c), a, z;
        memcpy(&a, b + c * FMEM_CHUNK_SIZE, 8);
        memcpy(&z, b + (c + 1) * FMEM_CHUNK_SIZE - 8, 8);
        if (a != w)
            return (int64_t)(c * FMEM_CHUNK_SIZE);
        if (z != w)
            return (int64_t)((c + 1) * FMEM_CHUNK_SIZE - 8);
    }
    return -1;
}

/* ---- named pools --------------------------------------------------------
 * A named pool is its file, and (where the transport keeps data apart from
 * metadata) "<file>.data": remove both. */

static inline void pool_unlink(const char *path)
{
    char data[512];
    unlink(path);
    snprintf(data, sizeof data, "%s.data", path);
    unlink(data);
}

/* ---- time --------------------------------------------------------------- */

static inline double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
