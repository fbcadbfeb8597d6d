/* pool_fork.c - a shared pool across fork().
 *
 * A private pool (mem:) needs nothing here: the kernel gives the child a
 * copy-on-write snapshot of all of it. A shared pool - a file on /dev/shm
 * or hugetlbfs, or an allocation service - is shared memory: without help
 * the child would see and change the parent's blocks, and allocate in the
 * parent's name. So in the child:
 *   - every block the process held at the fork becomes a private copy,
 *     holding the bytes as of the fork: at the block's own address where
 *     the process had it mapped (private anonymous memory replaces the
 *     shared pages), else in a local buffer. From then on the pool answers
 *     for that block's handle from the copy: fmem_map returns it,
 *     fmem_read/fmem_write copy to and from it, fmem_free drops it. The
 *     parent's block stays the parent's.
 *   - the child takes an identity of its own for what it allocates later
 *     (a new user id on each memory node, or a new connection to the
 *     service), and maps the pool anew for it; what remains of the old
 *     mapping outside the copies is made inaccessible, so a stale pointer
 *     faults instead of reaching the parent's blocks.
 * The parent waits in its fork handler until the child has made its
 * copies, so they are a snapshot: a fork costs one copy of what the
 * process held in the pool, and the child's inherited objects live in its
 * local memory (docs/far-memory.md, "fork"). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "fork.h"
#include "pool_internal.h"

struct fork_copy {
    uint64_t key;  /* node << 48 | first chunk, + 1; 0: empty slot */
    uint64_t length;
    uint32_t rkey; /* with key: a block allocated again later is another */
    bool mapped;   /* at is the block's address in the process, else a buffer */
    char *at;
};

struct fork_view {
    char *start;
    size_t len;
};

/* Old mappings: one per memory node per fork generation that kept them */
#define FORK_MAX_VIEWS 256

/* A freed copy another thread may still be copying from or to. */
struct fork_zombie {
    char *at;
    uint64_t length;
    bool mapped;
};
#define FORK_MAX_ZOMBIES 64

struct fork_copies {
    pthread_rwlock_t lock;
    /* fmem_read/fmem_write copies in progress: they run outside the lock,
     * because a region's writer copies from region pages, and a fault on
     * one needs the region's handler, which may be freeing a block */
    _Atomic unsigned long inflight;
    struct fork_zombie zombies[FORK_MAX_ZOMBIES];
    size_t nzombies;
    struct fork_copy *v; /* open addressing, linear probing; cap a power of 2 */
    size_t cap, used;
    struct fork_view views[FORK_MAX_VIEWS];
    size_t nviews;
};

static uint64_t copy_key(const fmem_handle *h)
{
    return ((uint64_t)h->node << 48 | h->addr >> 12) + 1;
}

static size_t slot_of(uint64_t key, size_t cap)
{
    return (size_t)(key * 0x9E3779B97F4A7C15u >> 20) & (cap - 1);
}

/* The copy of block (key, rkey): the parent's block, named by its key. */
static struct fork_copy *find(struct fork_copies *t, uint64_t key, uint32_t rkey)
{
    if (!t->cap)
        return NULL;
    for (size_t i = slot_of(key, t->cap);; i = (i + 1) & (t->cap - 1)) {
        if (t->v[i].key == key && t->v[i].rkey == rkey)
            return &t->v[i];
        if (t->v[i].key == 0)
            return NULL;
    }
}

/* The table and the views live in mmap'ed memory, as do buffers for copies
 * that were not mapped: this runs in a fork child's handlers, where a
 * malloc interposer (ours) would put large requests in a pool. */
static void *map_zeroed(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* Fresh pages for a copy, allocated in one call: faulting them in one by
 * one while copying costs 1.3-2.2x as much on this kind of VM, where each
 * fault is a costly kernel entry. */
static void *map_for_copy(size_t bytes)
{
    void *p = map_zeroed(bytes);
    if (p)
        madvise(p, bytes, MADV_POPULATE_WRITE); /* best effort: faults do it otherwise */
    return p;
}

static bool grow(struct fork_copies *t)
{
    size_t cap = t->cap ? t->cap * 2 : 256;
    struct fork_copy *v = map_zeroed(cap * sizeof *v);
    if (!v)
        return false;
    for (size_t i = 0; i < t->cap; i++) {
        if (!t->v[i].key)
            continue;
        size_t j = slot_of(t->v[i].key, cap);
        while (v[j].key)
            j = (j + 1) & (cap - 1);
        v[j] = t->v[i];
    }
    if (t->v)
        munmap(t->v, t->cap * sizeof *t->v);
    t->v = v;
    t->cap = cap;
    return true;
}

/* Remove e, moving later entries of its probe run back (no tombstones). */
static void erase(struct fork_copies *t, struct fork_copy *e)
{
    size_t i = (size_t)(e - t->v);
    t->v[i].key = 0;
    t->used--;
    for (size_t j = (i + 1) & (t->cap - 1); t->v[j].key; j = (j + 1) & (t->cap - 1)) {
        struct fork_copy c = t->v[j];
        t->v[j].key = 0;
        size_t k = slot_of(c.key, t->cap);
        while (t->v[k].key)
            k = (k + 1) & (t->cap - 1);
        t->v[k] = c;
    }
}

static struct fork_copies *copies_of(fmem_pool *p)
{
    if (!p->copies) {
        struct fork_copies *t = map_zeroed(sizeof *t);
        if (!t)
            return NULL;
        pthread_rwlock_init(&t->lock, NULL);
        p->copies = t;
    }
    return p->copies;
}

int pool_fork_keep(fmem_pool *p, const fmem_handle *h, char *at, const void *src)
{
    struct fork_copies *t = copies_of(p);
    if (!t || ((t->used + 1) * 4 > t->cap * 3 && !grow(t)))
        return FMEM_ENOMEM;
    size_t len = (size_t)h->length;
    char *copy;
    if (at) {
        /* private pages with the bytes, moved over the shared ones */
        /* 4 KiB pages: on this kind of machine a fresh 2 MiB page costs
         * more per byte than 512 small ones (docs/far-memory.md) */
        copy = map_for_copy(len);
        if (!copy)
            return FMEM_ENOMEM;
        /* the child has no page tables for shared mappings yet: fill them
         * in one call rather than fault page by page */
        madvise((void *)src, len, MADV_POPULATE_READ);
        memcpy(copy, src, len);
        if (mremap(copy, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, at) == MAP_FAILED) {
            munmap(copy, len);
            return FMEM_EIO;
        }
        copy = at;
    } else {
        copy = map_for_copy(len);
        if (!copy)
            return FMEM_ENOMEM;
        memcpy(copy, src, len);
    }
    uint64_t key = copy_key(h);
    struct fork_copy *e = find(t, key, h->rkey);
    if (e) { /* the same block twice (a copy of a copy): keep the newer */
        if (!e->mapped)
            munmap(e->at, e->length);
    } else {
        e = &t->v[slot_of(key, t->cap)];
        while (e->key)
            e = e + 1 == t->v + t->cap ? t->v : e + 1;
        t->used++;
    }
    *e = (struct fork_copy){.key = key, .length = h->length, .rkey = h->rkey, .mapped = at != NULL,
                            .at = copy};
    return 0;
}

int pool_fork_view(fmem_pool *p, void *start, size_t len)
{
    struct fork_copies *t = copies_of(p);
    if (!t)
        return FMEM_ENOMEM;
    if (t->nviews == FORK_MAX_VIEWS)
        return FMEM_ENOMEM;
    t->views[t->nviews++] = (struct fork_view){start, len};
    return 0;
}

static int by_address(const void *a, const void *b)
{
    const struct fork_copy *x = *(const struct fork_copy *const *)a,
                           *y = *(const struct fork_copy *const *)b;
    return x->at < y->at ? -1 : x->at > y->at;
}

/* Everything in the old mappings that is not a copy: inaccessible. */
static void seal_views(struct fork_copies *t)
{
    size_t bytes = (t->used + 1) * sizeof(struct fork_copy *);
    struct fork_copy **mapped = map_zeroed(bytes);
    size_t n = 0;
    for (size_t i = 0; mapped && i < t->cap; i++)
        if (t->v[i].key && t->v[i].mapped)
            mapped[n++] = &t->v[i];
    if (mapped)
        qsort(mapped, n, sizeof *mapped, by_address);
    for (size_t k = 0; k < t->nviews; k++) {
        char *cur = t->views[k].start, *end = cur + t->views[k].len;
        for (size_t i = 0; mapped && i <= n && cur < end; i++) {
            char *next = i < n ? mapped[i]->at : end;
            if (next < cur || next > end)
                continue; /* a copy in another view */
            if (next > cur)
                mmap(cur, (size_t)(next - cur), PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
            if (i < n)
                cur = next + mapped[i]->length;
        }
        if (!mapped) /* no memory for the list: seal nothing rather than a copy */
            break;
    }
    if (mapped)
        munmap(mapped, bytes);
}

/* ---- the handles of copies ------------------------------------------------ */

/* The copy standing for h: 0 and *out, or 1 (not a copy: the pool's own
 * block - also one the child got at the same place after the parent freed
 * it, which has another key, see pool_fork_collides). */
static int lookup(fmem_pool *p, const fmem_handle *h, struct fork_copy **out)
{
    struct fork_copy *e = find(p->copies, copy_key(h), h->rkey);
    if (!e || e->length != h->length || h->flags)
        return 1;
    *out = e;
    return 0;
}

bool pool_fork_collides(fmem_pool *p, const fmem_handle *h)
{
    pthread_rwlock_rdlock(&p->copies->lock);
    bool hit = find(p->copies, copy_key(h), h->rkey) != NULL;
    pthread_rwlock_unlock(&p->copies->lock);
    return hit;
}

static void drop_copy(char *at, uint64_t length, bool mapped)
{
    if (mapped)
        mmap(at, length, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    else
        munmap(at, length);
}

/* With the write lock: drop the freed copies no copy is using any more. */
static void drop_zombies(struct fork_copies *t)
{
    if (atomic_load(&t->inflight) != 0)
        return;
    for (size_t i = 0; i < t->nzombies; i++)
        drop_copy(t->zombies[i].at, t->zombies[i].length, t->zombies[i].mapped);
    t->nzombies = 0;
}

int pool_fork_call(fmem_pool *p, enum pool_fork_op op, const fmem_handle *h, uint64_t off,
                   void *buf, size_t len)
{
    struct fork_copies *t = p->copies;
    pthread_rwlock_rdlock(&t->lock);
    struct fork_copy *e = NULL;
    char *at = NULL;
    int rc = lookup(p, h, &e);
    if (rc == 0 && op != POOL_FORK_FREE) {
        if (op == POOL_FORK_MAP) {
            if (e->mapped)
                *(void **)buf = e->at;
            else
                rc = FMEM_ENOTSUP; /* it was never mapped: fmem_read/write */
        } else if (off > e->length || len > e->length - off) {
            rc = FMEM_ERANGE;
        } else if (op == POOL_FORK_READ || op == POOL_FORK_WRITE) {
            at = e->at + off;
            atomic_fetch_add(&t->inflight, 1); /* a free now keeps the copy */
        } else {
            rc = FMEM_ENOTSUP; /* fmem_remote: the copy is not remote */
        }
    }
    pthread_rwlock_unlock(&t->lock);
    if (at) {
        if (op == POOL_FORK_READ)
            memcpy(buf, at, len);
        else
            memcpy(at, buf, len);
        atomic_fetch_sub(&t->inflight, 1);
    }
    if (rc != 0 || op != POOL_FORK_FREE)
        return rc;
    pthread_rwlock_wrlock(&t->lock);
    rc = lookup(p, h, &e); /* again: another thread may have freed it */
    if (rc == 0) {
        struct fork_zombie z = {e->at, e->length, e->mapped};
        erase(t, e);
        drop_zombies(t);
        if (atomic_load(&t->inflight) == 0 || t->nzombies == FORK_MAX_ZOMBIES)
            drop_copy(z.at, z.length, z.mapped); /* (the latter: a copy racing its free) */
        else
            t->zombies[t->nzombies++] = z;
    }
    pthread_rwlock_unlock(&t->lock);
    return rc == 1 ? FMEM_EDOUBLEFREE : rc;
}

void pool_fork_release(fmem_pool *p)
{
    struct fork_copies *t = p->copies;
    if (!t)
        return;
    for (size_t i = 0; i < t->cap; i++)
        if (t->v[i].key && !t->v[i].mapped)
            munmap(t->v[i].at, t->v[i].length);
    for (size_t i = 0; i < t->nzombies; i++) /* the pool is closing: no copy runs */
        if (!t->zombies[i].mapped)
            munmap(t->zombies[i].at, t->zombies[i].length);
    for (size_t k = 0; k < t->nviews; k++) /* the mapped copies are in these */
        munmap(t->views[k].start, t->views[k].len);
    if (t->v)
        munmap(t->v, t->cap * sizeof *t->v);
    pthread_rwlock_destroy(&t->lock);
    munmap(t, sizeof *t);
    p->copies = NULL;
}

int pool_fork_identity(fmem_pool *p)
{
    pthread_mutex_lock(&p->fork_mu);
    int rc = 0;
    if (atomic_load(&p->fork_identity)) {
        rc = p->ops->fork_identity ? p->ops->fork_identity(p) : 0;
        if (rc == 0)
            atomic_store(&p->fork_identity, false);
    }
    pthread_mutex_unlock(&p->fork_mu);
    return rc;
}

/* ---- the fork handlers ---------------------------------------------------- */

#define POOL_OF(w) ((fmem_pool *)((char *)(w) - offsetof(struct fmem_pool, fork)))

static void fork_prepare(struct fork_watch *w)
{
    fmem_pool *p = POOL_OF(w);
    if (p->shared && p->ops->fork_child)
        fork_sync_child(); /* the parent waits for the copies */
}

static void fork_child(struct fork_watch *w)
{
    fmem_pool *p = POOL_OF(w);
    if (!p->shared || !p->ops->fork_child)
        return;
    if (p->copies) /* the parent's copies are ours now: nothing to undo */
        pthread_rwlock_init(&p->copies->lock, NULL);
    pthread_mutex_init(&p->fork_mu, NULL);
    /* an identity of our own: only if the child allocates (fork+exec, or
     * a child that opens pools of its own, never does) */
    atomic_store(&p->fork_identity, p->ops->fork_identity != NULL);
    int rc = p->ops->fork_child(p);
    if (p->copies)
        seal_views(p->copies);
    if (rc)
        fprintf(stderr, "fmem: in the child of fork(): %s; blocks held at the fork are private "
                        "copies, new allocations may fail\n", fmem_strerror(rc));
}

void pool_fork_watch(fmem_pool *p)
{
    pthread_mutex_init(&p->fork_mu, NULL);
    p->fork = (struct fork_watch){.level = FORK_POOL, .prepare = fork_prepare, .child = fork_child};
    fork_watch_add(&p->fork);
}

void pool_fork_unwatch(fmem_pool *p)
{
    fork_watch_remove(&p->fork);
    pool_fork_release(p);
    pthread_mutex_destroy(&p->fork_mu);
}
