/* blocks.c - large blocks in an fmem pool.
 *
 * The pool's data area is one contiguous mapping (shared-memory transport,
 * single node), so "is this pointer one of ours" is a range check, and the
 * block table - one 64-bit word per 4 KiB chunk, indexed by the offset of
 * the block's first chunk - tells free() the rest:
 *   bits  0..31  the allocation's key (never 0 for a live block)
 *   bits 32..37  log2 of its length in chunks
 *   bit  40      private: a copy made in a fork child, no longer in the pool
 *   bit  41      cached: freed, kept for reuse (cache.c)
 * A zero word means "no block starts here". The pool is opened on the first
 * large request. A pool's address range stays reserved for the life of the
 * process, so a pointer from the system allocator never falls into it. */
#include <errno.h>
#include <fmem.h>
#include <fmem_admin.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "../../libfmem/pool_internal.h"
#include "preload.h"

_Thread_local int fp_in_pool __attribute__((tls_model("initial-exec")));

struct fp_arena fp_arenas[FP_MAX_ARENAS];
_Atomic int fp_narenas;
struct fp_arena *_Atomic fp_current;

#define E_KEY FP_E_KEY
#define E_LOG2 FP_E_LOG2
#define E_PRIVATE FP_E_PRIVATE
_Static_assert(CHUNK_SHIFT == FP_CHUNK_SHIFT, "the block table has one word per chunk");

/* Statically initialised: malloc may run before any constructor. Writers
 * (fork) go first, so a stream of allocations cannot keep a fork waiting. */
#define FORK_LOCK_INIT PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP
static pthread_rwlock_t fork_lock = FORK_LOCK_INIT;
static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int open_failed; /* the pool could not be used: say so once */
static _Atomic int closed; /* the pool was closed at exit: no more blocks */

void fp_lock_shared(void) { pthread_rwlock_rdlock(&fork_lock); }
void fp_unlock_shared(void) { pthread_rwlock_unlock(&fork_lock); }
void fp_lock_all(void) { pthread_rwlock_wrlock(&fork_lock); }
void fp_unlock_all(void) { pthread_rwlock_unlock(&fork_lock); }

/* Child of fork(): the locks may be held in the parent's name. */
void fp_lock_reinit(void)
{
    static const pthread_rwlock_t fresh_rw = FORK_LOCK_INIT;
    static const pthread_mutex_t fresh_mutex = PTHREAD_MUTEX_INITIALIZER;
    memcpy(&fork_lock, &fresh_rw, sizeof fork_lock);
    memcpy(&open_lock, &fresh_mutex, sizeof open_lock);
    fp_cache_lock_reinit();
}

static void give_up(const char *uri, const char *why)
{
    if (!atomic_exchange(&open_failed, 1))
        fp_say("pool %s: %s; large blocks go to the system allocator", uri ? uri : "(default)",
               why);
}

/* A named pool whose user table is full: give back the user ids (and
 * blocks) of processes of this machine that are gone, as `fmem recover`
 * would, so that a new process can join. Returns how many were freed. */
static int recover_dead_users(const char *uri)
{
    fmem_pool *adm;
    if (!uri || fmem_open_admin(uri, &adm))
        return 0;
    int freed = 0;
    for (unsigned uid = 1; uid < 16384; uid++) {
        fmem_user_info_t u;
        if (fmem_user_info(adm, 0, uid, &u) || !u.in_table)
            break;
        if (u.pid && !u.remote && u.alive == 0 && fmem_recover(adm, uid, NULL) == 0)
            freed++;
    }
    fmem_close(adm);
    return freed;
}

/* Open the pool and learn where its data is mapped: map one probe block
 * (offset h.addr from the data start). Called with open_lock held. */
static struct fp_arena *open_arena(void)
{
    int n = atomic_load(&fp_narenas);
    if (n >= FP_MAX_ARENAS) {
        give_up(fp_cfg.uri, "too many fork generations");
        return NULL;
    }
    fmem_pool *pool;
    int rc = fmem_open(fp_cfg.uri, &pool);
    if (rc == FMEM_EBUSY && recover_dead_users(fp_cfg.uri) > 0)
        rc = fmem_open(fp_cfg.uri, &pool);
    if (rc) {
        give_up(fp_cfg.uri, fmem_strerror(rc));
        return NULL;
    }
    fmem_stats_t st;
    fmem_handle h;
    void *p = NULL;
    const char *why = NULL;
    if (fmem_stats(pool, &st) || st.nodes != 1)
        why = "needs a pool of exactly one memory node";
    else if ((rc = fmem_alloc(pool, FMEM_CHUNK_SIZE, &h)) != 0)
        why = fmem_strerror(rc);
    else if ((rc = fmem_map(pool, &h, &p)) != 0 || fmem_free(pool, &h) != 0)
        why = rc == FMEM_ENOTSUP ? "its transport cannot map memory" : fmem_strerror(rc);
    struct fp_arena *a = &fp_arenas[n];
    if (!why) {
        a->base = (char *)p - h.addr;
        atomic_store(&a->cap, st.capacity_bytes);
        a->shared = pool->shared;
        atomic_store(&a->live, 0);
        a->table_bytes = (a->cap >> CHUNK_SHIFT) * sizeof(uint64_t);
        void *t = mmap(NULL, a->table_bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (t == MAP_FAILED)
            why = "cannot map the block table";
        else
            a->table = t;
    }
    if (why) {
        fmem_close(pool);
        give_up(fp_cfg.uri, why);
        return NULL;
    }
    a->pool = pool;
    a->orphan = 0;
    /* a shm: pool on tmpfs takes 2 MiB pages where the system allows them
     * for shared memory (shmem_enabled "advise"); hugetlbfs always does */
    if (a->shared)
        madvise(a->base, a->cap, MADV_HUGEPAGE);
    atomic_store(&fp_narenas, n + 1);
    return a;
}

static struct fp_arena *current_arena(void)
{
    struct fp_arena *a = atomic_load_explicit(&fp_current, memory_order_acquire);
    if (a || atomic_load(&open_failed) || atomic_load(&closed))
        return a;
    pthread_mutex_lock(&open_lock);
    a = atomic_load(&fp_current);
    if (!a && !atomic_load(&open_failed) && !atomic_load(&closed)) {
        a = open_arena();
        atomic_store_explicit(&fp_current, a, memory_order_release);
    }
    pthread_mutex_unlock(&open_lock);
    return a;
}

static struct fp_arena *arena_of(const void *p)
{
    int n = atomic_load_explicit(&fp_narenas, memory_order_acquire);
    for (int i = 0; i < n; i++) {
        struct fp_arena *a = &fp_arenas[i];
        if ((const char *)p >= a->base &&
            (size_t)((const char *)p - a->base) < atomic_load_explicit(&a->cap, memory_order_relaxed))
            return a;
    }
    return NULL;
}

int fp_block_owns(const void *p) { return arena_of(p) != NULL; }

static unsigned log2_chunks(uint64_t len)
{
    unsigned k = 0;
    while ((FMEM_CHUNK_SIZE << k) < len)
        k++;
    return k;
}

/* A shared pool: punch the pages out of the pool file, so the memory goes
 * back to the system (as munmap would). A private pool (mem:) is private
 * anonymous memory: drop the pages. Either way the range reads as zeros. */
int fp_discard(struct fp_arena *a, void *p, size_t len)
{
    return madvise(p, len, a->shared ? MADV_REMOVE : MADV_DONTNEED);
}

void fp_block_release(struct fp_arena *a, void *p, uint64_t e)
{
    size_t len = FMEM_CHUNK_SIZE << E_LOG2(e);
    fp_discard(a, p, len);
    fmem_handle h = {.addr = (uint64_t)((char *)p - a->base), .length = len, .rkey = E_KEY(e)};
    fmem_free(a->pool, &h);
    atomic_fetch_sub_explicit(&a->live, 1, memory_order_relaxed);
}

static void *take(struct fp_arena *a, size_t size, size_t align, int *reused)
{
    size_t want = size < align ? align : size;
    void *c = fp_cache_take(a, log2_chunks(want), align);
    if (c) {
        *reused = 1;
        atomic_fetch_add_explicit(&fp_stats.reused, 1, memory_order_relaxed);
        fp_stats_add(FMEM_CHUNK_SIZE << log2_chunks(want));
        return c;
    }
    fmem_handle h;
    static _Atomic int recovered; /* once per process: it scans the pool */
    /* no room: what the cache keeps goes back first; in a named pool, then
     * what processes that are gone still hold */
    if (fmem_alloc(a->pool, want, &h) && (!fp_cache_flush(1) || fmem_alloc(a->pool, want, &h)) &&
        (!a->shared || atomic_exchange(&recovered, 1) || !recover_dead_users(fp_cfg.uri) ||
         fmem_alloc(a->pool, want, &h)))
        return NULL;
    void *p;
    if (fmem_map(a->pool, &h, &p) || (align && ((uintptr_t)p & (align - 1)))) {
        fmem_free(a->pool, &h);
        return NULL;
    }
    uint64_t e = (uint64_t)h.rkey | (uint64_t)log2_chunks(h.length) << 32;
    atomic_store_explicit(&a->table[h.addr >> CHUNK_SHIFT], e, memory_order_release);
    atomic_fetch_add_explicit(&a->live, 1, memory_order_relaxed);
    fp_stats_add(h.length);
    return p;
}

void *fp_block_alloc(size_t size, size_t align, int zero)
{
    if (fp_in_pool)
        return NULL;
    fp_in_pool = 1;
    int saved = errno;
    void *p = NULL;
    /* normally done by the constructor; a large request made by another
     * library's constructor may come first */
    fp_fork_register();
    fp_lock_shared();
    struct fp_arena *a = current_arena();
    int reused = 0;
    if (a)
        p = take(a, size, align, &reused);
    /* a kept block holds the bytes of its last use */
    if (p && zero && (reused || fp_discard(a, p, fp_block_size(p))))
        memset(p, 0, size);
    fp_unlock_shared();
    if (!p)
        atomic_fetch_add_explicit(&fp_stats.fallbacks, 1, memory_order_relaxed);
    errno = saved;
    fp_in_pool = 0;
    return p;
}

static _Noreturn void bad_pointer(const char *what, const void *p)
{
    fp_say("%s(): %p is not a live block (double free or a pointer into a block)", what, p);
    abort();
}

static _Atomic uint64_t *slot_of(struct fp_arena *a, const void *p, const char *what)
{
    size_t off = (size_t)((const char *)p - a->base);
    if (off & (FMEM_CHUNK_SIZE - 1))
        bad_pointer(what, p);
    return &a->table[off >> CHUNK_SHIFT];
}

size_t fp_block_size(const void *p)
{
    struct fp_arena *a = arena_of(p);
    if (!a)
        return 0;
    uint64_t e = atomic_load_explicit(slot_of(a, p, "malloc_usable_size"), memory_order_acquire);
    if (!e || (e & FP_E_CACHED))
        bad_pointer("malloc_usable_size", p);
    return FMEM_CHUNK_SIZE << E_LOG2(e);
}

void fp_block_free(void *p)
{
    struct fp_arena *a = arena_of(p);
    int saved = errno;
    /* inside pool code this thread holds the lock already: taking a reader
     * lock twice could deadlock against a waiting fork */
    int outer = fp_in_pool;
    fp_in_pool = 1;
    if (!outer)
        fp_lock_shared();
    _Atomic uint64_t *slot = slot_of(a, p, "free");
    uint64_t e = atomic_load_explicit(slot, memory_order_acquire);
    /* the check and the cache entry below are one step: a double free
     * racing with itself is caught by the exchange */
    if (!e || (e & FP_E_CACHED) || !atomic_compare_exchange_strong(slot, &e, e | FP_E_CACHED))
        bad_pointer("free", p);
    size_t len = FMEM_CHUNK_SIZE << E_LOG2(e);
    fp_stats_sub(len);
    if (e & E_PRIVATE) {
        atomic_store(slot, 0);
        /* keep the range reserved (see the top of this file) */
        mmap(p, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    } else if (!fp_cache_put(a, p, e)) {
        atomic_store(slot, 0);
        fp_block_release(a, p, e);
    }
    if (!outer)
        fp_unlock_shared();
    fp_in_pool = outer;
    errno = saved;
}

/* Fork child of a process using a shared pool, one thread, all locks held:
 * the pool's pages are shared with the parent, which goes on writing them.
 * Give each live block a private copy at the same address, turn the rest
 * of the range into a reservation, and open a pool of our own on the next
 * large request. The parent waits until this is done (fork.c), so the
 * copies show memory as of the fork. (A private pool needs none of this.) */
void fp_blocks_orphan_current(void)
{
    struct fp_arena *a = atomic_load(&fp_current);
    if (!a || !a->shared)
        return;
    fp_cache_forget(); /* kept blocks: the parent's, not copied */
    size_t nchunks = a->cap >> CHUNK_SHIFT, gap = 0;
    for (size_t i = 0; i <= nchunks;) {
        uint64_t e = i < nchunks ? atomic_load(&a->table[i]) : 1;
        if (!e) {
            i++;
            continue;
        }
        if (gap < i)
            mmap(a->base + (gap << CHUNK_SHIFT), (i - gap) << CHUNK_SHIFT, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
        if (i == nchunks)
            break;
        size_t n = (size_t)1 << E_LOG2(e), len = n << CHUNK_SHIFT;
        char *p = a->base + (i << CHUNK_SHIFT);
        void *copy = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (copy == MAP_FAILED || (memcpy(copy, p, len),
                                   mremap(copy, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, p)) == MAP_FAILED) {
            fp_say("fork child: cannot copy a %zu-byte block", len);
            abort();
        }
        atomic_store(&a->table[i], e | E_PRIVATE);
        atomic_fetch_add_explicit(&fp_stats.copied_at_fork, len, memory_order_relaxed);
        i += n;
        gap = i;
    }
    a->orphan = 1;
    a->pool = NULL; /* the parent's: never closed or used here */
    atomic_store(&fp_current, NULL);
}

/* At exit, a process using a named pool gives its user id back when it can
 * do so safely: the kept blocks go back to the pool, and if no block of
 * the pool is in use any more the pool is closed (which frees the user id)
 * and large requests made later (by exit-time code) go to the system
 * allocator. A process that still holds blocks keeps its id; the next
 * process that finds the user table full recovers the ids of processes
 * that are gone (recover_dead_users), as `fmem recover` does. */
__attribute__((destructor)) static void release_at_exit(void)
{
    struct fp_arena *a = atomic_load(&fp_current);
    if (!a || !a->shared || fp_in_pool)
        return;
    fp_in_pool = 1;
    fp_lock_all();
    fp_cache_flush(1);
    if (atomic_load(&a->live) == 0) {
        atomic_store(&closed, 1);
        atomic_store(&fp_current, NULL);
        atomic_store(&a->cap, 0); /* no pointer is ours any more */
        fmem_close(a->pool);
        a->pool = NULL;
    }
    fp_unlock_all();
    fp_in_pool = 0;
}
