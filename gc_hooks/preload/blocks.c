/* blocks.c - large blocks ("objects") in an fmem pool.
 *
 * An object is the request rounded to 4 KiB plus at most 3/64 (plan()).
 * Objects live in the arena's mirror, a reserved range, at the place of
 * their first (and largest) pool block, scaled:
 *   named pool    at most six pool blocks of 4 KiB << k mapped side by
 *       side; the mirror is twice the pool's size and the object whose
 *       first block starts at pool offset o is at mirror + 2 o. The other
 *       blocks add up to less than the first, so the object fits in that
 *       slot, and it can grow in place up to the slot's end (realloc).
 *   private pool  one pool block, the object's size rounded up to a power
 *       of two, at mirror + o: objects lie as densely as the pool packs
 *       them (2000 objects of 200 KB span 500 MB, not 1 GB: fewer page
 *       tables for fork to copy and exec to free). Its pool space costs
 *       only address space; the object grows in place up to its block's
 *       end. The default private pool is twice FMEM_DEFAULT_SIZE, so the
 *       rounding leaves it as much room for objects as before.
 * "Is this pointer one of ours" is a range check, and the table - one word
 * per 4 KiB chunk (private pool: per smallest block there), indexed by the
 * offset of the first block - with a record per word (struct fp_obj) tells
 * free() the rest.
 *
 * How the blocks become the object's bytes:
 *   private pool (mem:, the default)  the mirror is private anonymous
 *       memory; the pool only places and counts the objects. Memory of the
 *       mirror outside live or kept objects is always zero (released
 *       ranges are dropped), so a fresh object needs no clearing. The
 *       mirror takes the system's huge-page policy, as memory from plain
 *       malloc does (a 2 MiB page per 200 KB block cost 6x the CPU).
 *   named pool (shm:, file:)  each block's range of the pool's data file
 *       is mapped (MAP_SHARED) at its place, so the pool's bytes are the
 *       object's bytes; the rest of the mirror stays reserved (PROT_NONE).
 * The pool is opened on the first large request. A pool's mirror stays
 * reserved for the life of the process, so a pointer from the system
 * allocator never falls into it. */
#include <errno.h>
#include <fcntl.h>
#include <fmem.h>
#include <fmem_admin.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/vfs.h>

#include "../../libfmem/far/lobj.h"
#include "../../libfmem/fork.h"
#include "../../libfmem/core/node.h"
#include "../../libfmem/pool_internal.h"
#include "../../libfmem/transport/transport.h"
#include "preload.h"

_Thread_local int fp_in_pool __attribute__((tls_model("initial-exec")));

struct fp_arena fp_arenas[FP_MAX_ARENAS];
_Atomic int fp_narenas;
struct fp_arena *_Atomic fp_current;

_Static_assert(CHUNK_SHIFT == FP_CHUNK_SHIFT, "a named pool's table has one word per chunk");
#define PAGE ((size_t)1 << FP_CHUNK_SHIFT)
#define MIRROR_ALIGN_MAX ((size_t)1 << 30)
#define HUGE ((size_t)2 << 20)

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
int fp_trylock_all(void) { return pthread_rwlock_trywrlock(&fork_lock); }

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

/* Give back the user ids (and blocks) of processes of this machine that
 * are gone, as `fmem recover` would: a user slot names its process, and
 * one that no longer exists, and whose fork children (snap.c) are gone
 * too, holds nothing any more. Returns how many were
 * freed. Cheap: one word and one kill(pid, 0) per claimed slot. */
static int recover_dead(fmem_pool *p)
{
    if (p->nnodes != 1)
        return 0;
    struct node *n = p->nodes[0];
    int freed = 0;
    for (unsigned uid = 1; uid < n->g.nusers; uid++) {
        uint32_t pid = node_uid_pid(n, uid);
        if (uid == n->uid || !node_user_gone(n, uid, pid))
            continue;
        if (fmem_recover(p, uid, NULL) == 0)
            freed++;
    }
    return freed;
}

/* The same through an administrative handle, for a pool whose user table
 * is full (it needs no user id of its own). */
static int recover_dead_users(const char *uri)
{
    fmem_pool *adm;
    if (!uri || fmem_open_admin(uri, &adm))
        return 0;
    int freed = recover_dead(adm);
    fmem_close(adm);
    return freed;
}

void *fp_map_anon(void *at, size_t len, int prot)
{
    return mmap(at, len, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | (at ? MAP_FIXED : 0),
                -1, 0);
}

/* Put a range of a named pool's mirror back into the reservation. */
void fp_unmap_range(char *p, size_t len) { fp_map_anon(p, len, PROT_NONE); }

/* Set up arena a for an open pool: learn where its data is mapped (map one
 * probe block, offset h.addr from the data start), the data file of a
 * named pool, and reserve the table, the records and the mirror. NULL or
 * why not. */
static const char *arena_setup(struct fp_arena *a, fmem_pool *pool)
{
    fmem_stats_t st = {.nodes = pool->nnodes};
    fmem_handle h;
    void *p = NULL;
    int rc;
    /* an embedded pool's capacity is its node's data size: fmem_stats
     * would also count the allocated bytes, a scan of every span header
     * (a tenth of a millisecond for a 2 GiB pool) */
    if (pool->nnodes == 1)
        st.capacity_bytes = pool->nodes[0]->g.data_size;
    else if (fmem_stats(pool, &st) || st.nodes != 1)
        return "needs a pool of exactly one memory node";
    if ((rc = fmem_alloc(pool, FMEM_CHUNK_SIZE, &h)) != 0)
        return fmem_strerror(rc);
    if ((rc = fmem_map(pool, &h, &p)) != 0 || fmem_free(pool, &h) != 0)
        return rc == FMEM_ENOTSUP ? "its transport cannot map memory" : fmem_strerror(rc);
    memset(a, 0, sizeof *a);
    a->gen_fd = -1;
    a->pool_data = (char *)p - h.addr;
    a->shared = pool->shared;
    a->scale = a->shared ? 1 : 0;
    a->rec_shift = CHUNK_SHIFT;
    a->data_fd = -1;
    size_t cap = st.capacity_bytes;
    if (a->shared) {
        struct transport *tp = pool->nodes[0]->tp;
        a->data_fd = shm_transport_data_fd(tp);
        if (a->data_fd < 0 || !tp->base)
            return "its data file cannot be mapped in pieces";
        /* the data file is mapped right after the metadata (libfmem/transport/shm.c) */
        a->file_delta = (int64_t)((char *)p - ((char *)tp->base + tp->meta_size)) - (int64_t)h.addr;
        /* a hugetlbfs file maps only in whole huge pages */
        struct statfs sf;
        if (fstatfs(a->data_fd, &sf) == 0 && sf.f_type == HUGETLBFS_MAGIC && sf.f_bsize > 0 &&
            ((size_t)sf.f_bsize & ((size_t)sf.f_bsize - 1)) == 0)
            a->granule = (size_t)sf.f_bsize;
    }
    if (a->granule < PAGE)
        a->granule = PAGE;
    /* a private pool's object is one block of at least the threshold
     * (rounded up to a power of two), aligned to its length: one record
     * per such length (in a named pool one per 4 KiB: a later piece may be
     * the first of another object) */
    while (!a->shared && (PAGE << (a->rec_shift - CHUNK_SHIFT)) < fp_cfg.threshold &&
           ((size_t)2 << a->rec_shift) <= cap)
        a->rec_shift++;
    size_t nrec = cap >> a->rec_shift, fresh_words = (nrec + 4095) / 4096;
    a->table_bytes = (nrec + fresh_words) * sizeof(uint64_t);
    a->objs_bytes = nrec * sizeof(struct fp_obj);
    void *t = fp_map_anon(NULL, a->table_bytes, PROT_READ | PROT_WRITE);
    void *o = fp_map_anon(NULL, a->objs_bytes, PROT_READ | PROT_WRITE);
    /* the mirror aligned to its own size (up to 1 GiB), so an object is
     * aligned to its first block scaled (twice it in a named pool) */
    size_t span = cap << a->scale, align = HUGE;
    while (align < span && align < MIRROR_ALIGN_MAX)
        align <<= 1;
    /* a named pool's graveyard (snap.c) follows the mirror, 2 MiB-aligned
     * like it, so page tables move whole */
    size_t grave = a->shared ? (2 * cap + HUGE - 1) & ~(HUGE - 1) : 0;
    size_t rlen = span + align + grave;
    char *m = fp_map_anon(NULL, rlen, a->shared ? PROT_NONE : PROT_READ | PROT_WRITE);
    if (t == MAP_FAILED || o == MAP_FAILED || m == MAP_FAILED) {
        if (t != MAP_FAILED)
            munmap(t, a->table_bytes);
        if (o != MAP_FAILED)
            munmap(o, a->objs_bytes);
        if (m != MAP_FAILED)
            munmap(m, rlen);
        return "cannot reserve address space for its blocks";
    }
    a->table = t;
    a->fresh = a->table + nrec;
    a->fresh_words = fresh_words;
    a->objs = o;
    a->reserved = m;
    a->reserved_len = rlen;
    a->grave_off = grave;
    a->mirror = (char *)(((uintptr_t)m + align - 1) & ~(uintptr_t)(align - 1));
    atomic_store(&a->cap, cap);
    a->pool = pool;
    return NULL;
}

/* Open the pool. Called with open_lock held. */
static struct fp_arena *open_arena(void)
{
    int n = atomic_load(&fp_narenas), slot = n;
    for (int i = 0; i < n; i++)
        if (atomic_load(&fp_arenas[i].retired)) {
            slot = i;
            break;
        }
    if (slot >= FP_MAX_ARENAS) {
        give_up(fp_cfg.uri, "too many fork generations hold blocks");
        return NULL;
    }
    /* the default private pool: twice mem:'s default size, as a private
     * pool's objects are single blocks rounded up to a power of two (its
     * room costs only address space) */
    const char *uri = fp_cfg.uri ? fp_cfg.uri : "mem:?size=2G";
    _Static_assert(FMEM_DEFAULT_SIZE == (uint64_t)1 << 30, "the default private pool's size");
    fmem_pool *pool;
    int rc = fmem_open(uri, &pool);
    if (rc == FMEM_EBUSY && recover_dead_users(fp_cfg.uri) > 0)
        rc = fmem_open(uri, &pool);
    if (rc) {
        give_up(fp_cfg.uri, fmem_strerror(rc));
        return NULL;
    }
    struct fp_arena *a = &fp_arenas[slot];
    const char *why = arena_setup(a, pool); /* clears retired */
    if (why) {
        memset(a, 0, sizeof *a);
        fmem_close(pool);
        give_up(fp_cfg.uri, why);
        return NULL;
    }
    /* processes that exited holding blocks kept their ids: the first to
     * open the pool after them gives the ids and blocks back */
    if (a->shared)
        recover_dead(pool);
    /* fork is ours (fork.c, snap.c): libfmem's own handling of a shared
     * pool would copy every block the process holds in the child while
     * the parent waits */
    if (a->shared) {
        fork_objects_lock();
        fork_watch_remove(&pool->fork);
        pool->fork.prev = pool->fork.next = NULL; /* fmem_close removes it again */
        fork_objects_unlock();
    }
    if (slot == n)
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
    for (int i = 0; i < n; i++)
        if (fp_arena_holds(&fp_arenas[i], p))
            return &fp_arenas[i];
    return NULL;
}

int fp_block_owns(const void *p) { return arena_of(p) != NULL; }

static size_t piece_len(const struct fp_piece *b) { return PAGE << b->log2; }

/* Map pieces [from, to) of o at their places. 0 or -1 (nothing left mapped). */
static int map_pieces(struct fp_arena *a, struct fp_obj *o, unsigned from, unsigned to, size_t off)
{
    if (!a->shared)
        return 0; /* the mirror is the memory */
    char *base = fp_obj_ptr(a, o);
    size_t start = off;
    for (unsigned i = from; i < to; i++) {
        size_t len = piece_len(&o->b[i]);
        if (mmap(base + off, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, a->data_fd,
                 (off_t)((int64_t)o->b[i].addr + a->file_delta)) == MAP_FAILED) {
            if (off > start)
                fp_unmap_range(base + start, off - start);
            return -1;
        }
        off += len;
    }
    /* a named pool on tmpfs takes 2 MiB pages where the system allows them
     * for shared memory (shmem_enabled "advise"); hugetlbfs always does */
    if (off - start >= HUGE)
        madvise(base + start, off - start, MADV_HUGEPAGE);
    return 0;
}

/* Drop the bytes of [off, off + len) of o (they read as zeros after) and,
 * in a named pool, unmap them. */
static void drop_range(struct fp_arena *a, struct fp_obj *o, size_t off, size_t len)
{
    char *p = fp_obj_ptr(a, o) + off;
    if (a->shared) {
        madvise(p, len, MADV_REMOVE); /* punched out of the pool file */
        fp_unmap_range(p, len);
    } else {
        madvise(p, len, MADV_DONTNEED);
    }
}

static void free_pieces(struct fp_arena *a, const struct fp_piece *b, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        fmem_handle h = {.addr = b[i].addr, .length = PAGE << b[i].log2, .rkey = b[i].key};
        fmem_free(a->pool, &h);
    }
}

void fp_obj_release(struct fp_arena *a, struct fp_obj *o)
{
    if (o->since) {
        /* mapped private since a fork (snap.c): its pool pages are dropped
         * from the file itself */
        for (unsigned i = 0; i < o->n; i++)
            fallocate(a->data_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                      (off_t)((int64_t)o->b[i].addr + a->file_delta), (off_t)piece_len(&o->b[i]));
        fp_snap_unmap(a, o);
        o->since = 0;
    } else if (o->lazy != FP_LAZY_NONE) {
        /* protected early, perhaps: not while the fault thread lifts it */
        fp_lazy_lock();
        o->lazy = FP_LAZY_NONE;
        drop_range(a, o, 0, fp_obj_len(o));
        fp_lazy_unlock();
    } else {
        drop_range(a, o, 0, fp_obj_len(o));
    }
    free_pieces(a, o->b, o->n);
    atomic_fetch_sub_explicit(&a->live, 1, memory_order_relaxed);
}

static unsigned log2_pages(size_t len)
{
    unsigned k = 0;
    while ((PAGE << k) < len)
        k++;
    return k;
}

/* Blocks of the given sizes into b[0..k): 0, or the pool's error with
 * nothing held. */
static int alloc_pieces(struct fp_arena *a, const size_t *sizes, unsigned k, struct fp_piece *b)
{
    for (unsigned i = 0; i < k; i++) {
        fmem_handle h;
        int rc = fmem_alloc(a->pool, sizes[i], &h);
        if (rc == 0 && h.length != sizes[i]) { /* a pool that rounds differently */
            fmem_free(a->pool, &h);
            rc = FMEM_ESIZE;
        }
        if (rc) {
            free_pieces(a, b, i);
            return rc;
        }
        b[i] = (struct fp_piece){.addr = h.addr, .key = h.rkey, .log2 = log2_pages(h.length)};
    }
    return 0;
}

static int no_room(int rc) { return rc == FMEM_ENOMEM || rc == FMEM_ESIZE; }

/* A new object of `pages` pages from blocks of the given sizes (largest
 * first; a private pool's one block may be longer); NULL when the pool
 * cannot give them. */
static struct fp_obj *make_obj(struct fp_arena *a, const size_t *sizes, unsigned k, uint32_t pages,
                               size_t align)
{
    struct fp_piece b[LOBJ_PLAN_MAX];
    static _Atomic int recovered; /* once per process: it scans the pool */
    int rc = alloc_pieces(a, sizes, k, b);
    /* no room: what the cache keeps goes back first; in a named pool, then
     * what processes that are gone still hold */
    if (no_room(rc) && fp_cache_flush(1))
        rc = alloc_pieces(a, sizes, k, b);
    if (no_room(rc) && __atomic_load_n(&a->deferred, __ATOMIC_RELAXED)) {
        fp_snap_reap(1);
        rc = alloc_pieces(a, sizes, k, b);
    }
    if (no_room(rc) && a->shared && !atomic_exchange(&recovered, 1) &&
        recover_dead_users(fp_cfg.uri))
        rc = alloc_pieces(a, sizes, k, b);
    if (rc) {
        if (no_room(rc))
            atomic_fetch_add_explicit(&fp_stats.no_room, 1, memory_order_relaxed);
        return NULL;
    }
    /* a pool places a block at a multiple of its length: the record is the
     * object's own (checked before it is written) */
    if (b[0].addr & (((uint64_t)1 << a->rec_shift) - 1)) {
        free_pieces(a, b, k);
        return NULL;
    }
    struct fp_obj *o = &a->objs[b[0].addr >> a->rec_shift];
    o->n = (uint16_t)k;
    o->grave = 0;
    o->lazy = FP_LAZY_NONE;
    o->pages = pages;
    o->since = 0;
    o->next = 0;
    memcpy(o->b, b, k * sizeof *b);
    if (((uintptr_t)fp_obj_ptr(a, o) & (align - 1)) || map_pieces(a, o, 0, k, 0)) {
        free_pieces(a, b, k);
        return NULL;
    }
    atomic_fetch_add_explicit(&a->live, 1, memory_order_relaxed);
    return o;
}

/* The blocks of an object of `size` bytes, largest first (how many), and
 * in *limit the most pages an object serving it may have: its size
 * rounded to 4 KiB plus 3/64. lobj_plan rounds the pages to six leading
 * bits (< 1/32 more); within the limit they are rounded further where that
 * takes fewer blocks (each is a pool call and, in a named pool, a mmap). */
static unsigned plan(size_t size, size_t sizes[LOBJ_PLAN_MAX], uint64_t *limit)
{
    unsigned k = lobj_plan(size, sizes);
    if (k == 0)
        return 0;
    uint64_t r = (size + PAGE - 1) >> CHUNK_SHIFT, p = 0;
    for (unsigned i = 0; i < k; i++)
        p += sizes[i] >> CHUNK_SHIFT;
    uint64_t max = r + r * 3 / 64, best = p;
    if (max < p)
        max = p;
    for (uint64_t g = 2, q; (q = (p + g - 1) & ~(g - 1)) <= max; g <<= 1)
        if (__builtin_popcountll(q) < __builtin_popcountll(best))
            best = q;
    if (best != p) {
        k = 0;
        for (int b = 63; b >= 0; b--)
            if (best >> b & 1)
                sizes[k++] = PAGE << b;
    }
    *limit = max;
    return k;
}

static size_t round_granule(const struct fp_arena *a, size_t n)
{
    return n + a->granule - 1 < n ? 0 : (n + a->granule - 1) & ~(a->granule - 1);
}

static struct fp_obj *take(struct fp_arena *a, size_t size, size_t align, int *reused)
{
    size_t sizes[LOBJ_PLAN_MAX];
    uint64_t limit;
    /* page counts are 32-bit: nothing near 16 TiB (no pool is that large) */
    if (size > ((size_t)1 << 42) || align > ((size_t)1 << 42))
        return NULL;
    unsigned k = plan(round_granule(a, size), sizes, &limit);
    if (k == 0)
        return NULL;
    if (align <= PAGE)
        align = PAGE;
    else if (a->shared && align > 2 * sizes[0]) { /* an object is aligned to twice its first block */
        k = 1;
        sizes[0] = PAGE << log2_pages(round_granule(a, size > align / 2 ? size : align / 2));
        limit = sizes[0] >> CHUNK_SHIFT;
    }
    uint32_t pages = 0;
    for (unsigned i = 0; i < k; i++)
        pages += (uint32_t)(sizes[i] >> CHUNK_SHIFT);
    if (!a->shared) {
        /* one block, aligned to its length: at least the request's, and
         * longer than the object, whose next neighbour then never starts
         * where it ends (the space after it is address space only). numpy
         * takes touching arrays for overlapping ones and runs scalar
         * loops on them: np.sqrt and np.log10 of 1 MiB arrays ran 5.6
         * times slower. In a named pool objects lie at twice their first
         * block's offset, with room after each. */
        size_t len = (size_t)pages << CHUNK_SHIFT;
        k = 1;
        sizes[0] = PAGE << log2_pages(len >= align ? len + 1 : align);
    }
    struct fp_obj *o = fp_cache_take(a, pages, (uint32_t)limit, align);
    if (o) {
        *reused = 1;
        if (o->lazy == FP_LAZY_SEEN) /* not protected: young again */
            o->lazy = FP_LAZY_NONE;
        atomic_fetch_add_explicit(&fp_stats.reused, 1, memory_order_relaxed);
    } else if ((o = make_obj(a, sizes, k, pages, align)) == NULL) {
        return NULL;
    }
    atomic_store_explicit(fp_obj_entry(a, o), FP_E_LIVE, memory_order_release);
    if (a->shared) { /* the next fork remaps it */
        size_t i = (size_t)(o - a->objs);
        atomic_fetch_or_explicit(&a->fresh[i >> 12], UINT64_C(1) << (i >> 6 & 63),
                                 memory_order_relaxed);
        if (fp_cfg.lazy_fork && fp_cfg.early_protect)
            fp_early_handed_out(a, o);
    }
    fp_stats_add(fp_obj_len(o));
    return o;
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
    if (a && __atomic_load_n(&a->deferred, __ATOMIC_RELAXED))
        fp_snap_reap(0);
    struct fp_obj *o = a ? take(a, size, align, &reused) : NULL;
    if (o) {
        p = fp_obj_ptr(a, o);
        /* a kept object holds the bytes of its last use; a fresh one in a
         * named pool those of whoever had its blocks last */
        if (zero && (reused || (a->shared && madvise(p, fp_obj_len(o), MADV_REMOVE))))
            memset(p, 0, size);
    }
    int shared = o && a->shared;
    fp_unlock_shared();
    if (shared && fp_cfg.lazy_fork && fp_cfg.early_protect) {
        fp_lazy_note_alloc();
        if (fp_lazy_start())
            fp_early_step();
    }
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

/* An orphan arena none of whose objects is left: give its memory back
 * and let a later pool open take the slot. */
static void retire(struct fp_arena *a)
{
    /* a fork child's remap thread walks the tables under this lock */
    fp_lazy_lock();
    size_t cap = atomic_exchange(&a->cap, 0); /* no pointer is in it any more */
    munmap(a->pool_data, cap);
    munmap(a->table, a->table_bytes);
    munmap(a->objs, a->objs_bytes);
    munmap(a->reserved, a->reserved_len);
    atomic_store(&a->retired, 1);
    fp_lazy_unlock();
}

static struct fp_obj *obj_of(struct fp_arena *a, const void *p, const char *what)
{
    size_t off = (size_t)((const char *)p - a->mirror);
    if (off & (((size_t)1 << (a->rec_shift + a->scale)) - 1))
        bad_pointer(what, p);
    return &a->objs[fp_arena_chunk(a, p)];
}

size_t fp_block_size(const void *p)
{
    struct fp_arena *a = arena_of(p);
    if (!a)
        return 0;
    struct fp_obj *o = obj_of(a, p, "malloc_usable_size");
    uint64_t e = atomic_load_explicit(fp_obj_entry(a, o), memory_order_acquire);
    if (!e || (e & FP_E_CACHED))
        bad_pointer("malloc_usable_size", p);
    return fp_obj_len(o);
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
    struct fp_obj *o = obj_of(a, p, "free");
    _Atomic uint64_t *slot = fp_obj_entry(a, o);
    uint64_t e = atomic_load_explicit(slot, memory_order_acquire);
    /* the check and the cache entry below are one step: a double free
     * racing with itself is caught by the exchange */
    if (!e || (e & FP_E_CACHED) || !atomic_compare_exchange_strong(slot, &e, e | FP_E_CACHED))
        bad_pointer("free", p);
    fp_stats_sub(fp_obj_len(o));
    if (e & FP_E_PRIVATE) {
        if (o->lazy == FP_LAZY_FORK)
            fp_childmap_free(a, o); /* not while it is remapped */
        else
            fp_unmap_range(p, fp_obj_len(o)); /* keep the range reserved */
        atomic_store(slot, 0);
        if (atomic_fetch_sub(&a->live, 1) == 1)
            retire(a);
    } else if (o->since && fp_snap_defer(a, o)) {
        /* fork children may still read its pool pages */
    } else if (o->since || !fp_cache_put(a, o)) {
        atomic_store(slot, 0);
        fp_obj_release(a, o);
    }
    if (!outer)
        fp_unlock_shared();
    fp_in_pool = outer;
    errno = saved;
}

/* Grow o to `pages` pages within its slot: 0 or -1. */
static int grow(struct fp_arena *a, struct fp_obj *o, uint32_t pages)
{
    /* short of its slot's end (its first block scaled), as take() leaves
     * it: no object ends where the next begins */
    uint32_t slot = 1u << (o->b[0].log2 + a->scale);
    if (pages >= slot)
        return -1;
    if (!a->shared) { /* within its one block, whose pages past it are zero */
        o->pages = pages;
        return 0;
    }
    size_t sizes[LOBJ_PLAN_MAX];
    uint64_t limit;
    unsigned k = plan(round_granule(a, (size_t)(pages - o->pages) << CHUNK_SHIFT), sizes, &limit);
    uint32_t more = 0;
    for (unsigned i = 0; i < k; i++)
        more += (uint32_t)(sizes[i] >> CHUNK_SHIFT);
    if (k == 0 || o->n + k > FP_OBJ_BLOCKS || o->pages + more >= slot)
        return -1;
    struct fp_piece b[LOBJ_PLAN_MAX];
    if (alloc_pieces(a, sizes, k, b))
        return -1;
    memcpy(&o->b[o->n], b, k * sizeof *b);
    if (map_pieces(a, o, o->n, o->n + k, fp_obj_len(o))) {
        free_pieces(a, b, k);
        return -1;
    }
    o->n += k;
    o->pages += more;
    if (o->lazy != FP_LAZY_NONE) {
        /* the new pieces are not protected: the next fork protects the
         * whole object (a write to an old piece only lifts its protection) */
        fp_lazy_lock();
        o->lazy = FP_LAZY_HOT;
        fp_lazy_unlock();
    }
    return 0;
}

/* Shrink o to at least `pages` pages: whole trailing pieces go back (in a
 * private pool the pages past the new end, so that they read as zeros). */
static void shrink(struct fp_arena *a, struct fp_obj *o, uint32_t pages)
{
    if (!a->shared) {
        if (pages < o->pages)
            drop_range(a, o, (size_t)pages << CHUNK_SHIFT,
                       (size_t)(o->pages - pages) << CHUNK_SHIFT);
        o->pages = pages;
        return;
    }
    while (o->n > 1 && o->pages - (1u << o->b[o->n - 1].log2) >= pages) {
        struct fp_piece *b = &o->b[o->n - 1];
        size_t len = piece_len(b);
        drop_range(a, o, fp_obj_len(o) - len, len);
        free_pieces(a, b, 1);
        o->pages -= 1u << b->log2;
        o->n--;
    }
}

int fp_block_resize(void *p, size_t size)
{
    struct fp_arena *a = arena_of(p);
    if (fp_in_pool || size == 0 || size > ((size_t)UINT32_MAX << CHUNK_SHIFT) / 2)
        return -1;
    fp_in_pool = 1;
    int saved = errno;
    fp_lock_shared();
    struct fp_obj *o = obj_of(a, p, "realloc");
    uint64_t e = atomic_load_explicit(fp_obj_entry(a, o), memory_order_acquire);
    if (!e || (e & FP_E_CACHED))
        bad_pointer("realloc", p);
    uint32_t pages = (uint32_t)((size + PAGE - 1) >> CHUNK_SHIFT), old = o->pages;
    int rc = 0;
    if (pages <= old) {
        /* stay unless the object would be mostly empty */
        if (pages < (1u << o->b[0].log2) / 4)
            rc = -1;
        else if (!(e & FP_E_PRIVATE) && !o->since)
            shrink(a, o, pages);
    } else {
        rc = (e & FP_E_PRIVATE) || o->since || a->pool == NULL ? -1 : grow(a, o, pages);
        if (rc == 0)
            atomic_fetch_add_explicit(&fp_stats.grown, 1, memory_order_relaxed);
    }
    if (rc == 0)
        fp_stats_resize((size_t)old << CHUNK_SHIFT, fp_obj_len(o));
    fp_unlock_shared();
    errno = saved;
    fp_in_pool = 0;
    return rc;
}

/* A kept object of a parent's named pool, in its fork child: unmapped. */
static void forget_kept(struct fp_arena *a, struct fp_obj *o)
{
    fp_unmap_range(fp_obj_ptr(a, o), fp_obj_len(o));
}

/* Fork child of a process using a shared pool, one thread, all locks held.
 * The parent remapped its live objects MAP_PRIVATE before the fork
 * (snap.c), so they are already this process's copy-on-write snapshot:
 * mark them private (the parent's; this process only unmaps them). An
 * object the parent could not remap is still shared with it: copy it to
 * private memory at the same address (the parent waits for that, fork.c,
 * so the copy shows memory as of the fork). Then unmap the parent's pool
 * and open a pool of our own on the next large request. The lock of the
 * fork generation stays open here until exit or exec. (A private pool
 * needs none of this.) */
void fp_blocks_orphan_current(void)
{
    struct fp_arena *a = atomic_load(&fp_current);
    if (!a || !a->shared)
        return;
    fp_cache_forget(forget_kept); /* kept objects: the parent's, not copied */
    size_t nchunks = a->cap >> CHUNK_SHIFT;
    uint64_t nprivate = 0;
    for (size_t i = 0; i < nchunks; i++) {
        uint64_t e = atomic_load(&a->table[i]);
        if (!(e & FP_E_LIVE) || (e & FP_E_CACHED))
            continue;
        nprivate++;
        struct fp_obj *o = &a->objs[i];
        /* write-protected in the parent (lazy.c): still the shared mapping
         * here, which the parent no longer writes; made this process's
         * copy-on-write view before anything here uses it: at its first
         * access (childmap.c) or, eagerly, now */
        if (!(e & FP_E_PRIVATE) && o->since && !(e & FP_E_COPY) && o->lazy == FP_LAZY_FORK &&
            !fp_cfg.child_remap_eager && fp_childmap_add(a, o) == 0) {
            atomic_store(&a->table[i], e | FP_E_PRIVATE);
            continue;
        }
        if (e & FP_E_PRIVATE)
            continue;
        if (o->since && !(e & FP_E_COPY) &&
            (o->lazy != FP_LAZY_FORK || fp_snap_unshare(a, o, FP_UNSHARE_MAP) == 0)) {
            atomic_store(&a->table[i], e | FP_E_PRIVATE);
            continue;
        }
        char *p = fp_obj_ptr(a, o);
        size_t len = fp_obj_len(o);
        void *copy = fp_map_anon(NULL, len, PROT_READ | PROT_WRITE);
        if (copy == MAP_FAILED || (memcpy(copy, p, len),
                                   mremap(copy, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, p)) == MAP_FAILED) {
            fp_say("fork child: cannot copy a %zu-byte block", len);
            abort();
        }
        o->lazy = FP_LAZY_NONE;
        atomic_store(&a->table[i], e | FP_E_PRIVATE);
        atomic_fetch_add_explicit(&fp_stats.copied_at_fork, len, memory_order_relaxed);
    }
    fp_unmap_range(a->pool_data, a->cap); /* the parent's pool: never used here */
    /* the parent's graveyard: mappings without pages here (fork copies no
     * page table of a shared mapping), never needed */
    if (a->grave_off)
        fp_unmap_range(a->mirror + a->grave_off, 2 * a->cap);
    a->grave_off = 0;
    a->gen_fd = -1; /* the fork generation's lock: kept open */
    a->orphan = 1;
    atomic_store(&a->live, nprivate);
    a->pool = NULL; /* the parent's: never closed or used here */
    atomic_store(&fp_current, NULL);
    if (nprivate == 0)
        retire(a);
}

/* At exit, a process using a named pool gives its user id back when it can
 * do so safely: the kept objects go back to the pool, and if no block of
 * the pool is in use any more the pool is closed (which frees the user id)
 * and large requests made later (by exit-time code) go to the system
 * allocator. A process that still holds blocks keeps its id (other
 * threads and later destructors may still use them); the next process
 * that opens the pool recovers the ids of processes that are gone
 * (recover_dead), as `fmem recover` does. */
__attribute__((destructor)) static void release_at_exit(void)
{
    struct fp_arena *a = atomic_load(&fp_current);
    if (!a || !a->shared || fp_in_pool)
        return;
    fp_in_pool = 1;
    fp_lock_all();
    fp_cache_flush(1);
    fp_snap_reap(1);
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
