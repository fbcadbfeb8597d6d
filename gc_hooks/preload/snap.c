/* snap.c - fork() with a named pool (shm:, file:) without copying blocks.
 *
 * A named pool's objects are MAP_SHARED mappings of the pool's data file.
 * At fork the parent remaps each of them MAP_PRIVATE at the same address
 * (the bytes stay: they are the file's pages), so parent and child each
 * see a copy-on-write snapshot and neither sees the other's later writes.
 * The kernel then copies a page only when one side writes it, as for plain
 * memory. An object stays mapped private for the rest of its life; later
 * forks need no remap.
 *
 * The price: the pool pages behind such an object are read by every child
 * forked since the remap (through the pages nobody wrote), so they must
 * stay allocated and unwritten while any of those children lives, even
 * after the parent frees the object or dies. Fork generation g of user u
 * is an open-file-description lock on byte NODE_FORK_LOCK_OFF(u, g) of the
 * data file (libfmem/core/node.h): the parent opens a new description in
 * the prepare handler and locks it, the child inherits it (O_CLOEXEC: exec
 * drops it), the parent closes its copy after fork. So the lock is held
 * exactly while that child or a descendant of it (without exec) lives. An
 * object remapped at generation g ("since") is read by the children of
 * generations >= g: while any of their locks is held a free defers it (a
 * list, not the pool), and recovery (node_user_gone) treats its user as
 * alive. Deferred objects go back to the pool when the locks are gone,
 * checked on later large allocations (at most once per few milliseconds),
 * when the pool has no room, and at exit. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "../../libfmem/core/node.h"
#include "../../libfmem/pool_internal.h"
#include "preload.h"

#define REAP_EVERY_NS ((uint64_t)2000000)

static pthread_mutex_t defer_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic uint64_t last_reap;

static unsigned uid_of(const struct fp_arena *a) { return a->pool->nodes[0]->uid; }

#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4 /* Linux 5.7; shared mappings since 5.13 */
#endif
/* Pieces of at least this length move their page tables to the graveyard
 * before the remap; smaller ones are cheaper to zap than to move (a
 * mremap is one more mapping to make). */
#define MOVE_MIN ((size_t)2 << 20)

/* Remap o's pieces MAP_PRIVATE: 0, or -1 if one could not be (the pieces
 * before it are private, the rest still shared).
 *
 * mmap(MAP_FIXED) over the shared mapping would first tear down its page
 * table entries one 4 KiB page at a time (a 400 MiB block: 100k entries,
 * about 30 ms while the parent waits in fork). A large piece instead moves
 * its shared mapping, page tables and all, to the graveyard with
 * mremap(MREMAP_DONTUNMAP), which moves whole page tables (one entry per
 * 2 MiB) and leaves the piece's range mapped (no hole another thread's
 * mmap could take); the MAP_PRIVATE mapping then replaces a mapping
 * without pages. The graveyard's entries are torn down when the object is
 * unmapped (fp_snap_unmap), outside fork. Where the kernel cannot move
 * them, the remap zaps them as before. */
static int remap_private(struct fp_arena *a, struct fp_obj *o)
{
    char *p = fp_obj_ptr(a, o);
    size_t off = 0;
    for (unsigned i = 0; i < o->n;) {
        size_t len = (size_t)1 << (FP_CHUNK_SHIFT + o->b[i].log2);
        int64_t at = (int64_t)o->b[i].addr + a->file_delta;
        unsigned next = i + 1;
        if (len >= MOVE_MIN) {
            if (a->grave_off &&
                mremap(p + off, len, len, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP,
                       p + off + a->grave_off) != MAP_FAILED)
                o->grave = 1;
        } else {
            /* small pieces that follow each other in the file as they do
             * in the object (the pool hands out neighbours) are one
             * mapping: one call, one VMA */
            while (next < o->n && ((size_t)1 << (FP_CHUNK_SHIFT + o->b[next].log2)) < MOVE_MIN &&
                   (int64_t)o->b[next].addr + a->file_delta == at + (int64_t)len) {
                len += (size_t)1 << (FP_CHUNK_SHIFT + o->b[next].log2);
                next++;
            }
        }
        if (mmap(p + off, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, a->data_fd,
                 (off_t)at) == MAP_FAILED)
            return -1;
        off += len;
        i = next;
    }
    return 0;
}

void fp_snap_unmap(struct fp_arena *a, struct fp_obj *o)
{
    if (o->lazy) {
        /* write-protected still: not while the fault thread remaps it */
        fp_lazy_lock();
        o->lazy = 0;
        fp_unmap_range(fp_obj_ptr(a, o), fp_obj_len(o));
        fp_lazy_unlock();
        return;
    }
    fp_unmap_range(fp_obj_ptr(a, o), fp_obj_len(o));
    if (o->grave) {
        fp_unmap_range(fp_obj_ptr(a, o) + a->grave_off, fp_obj_len(o));
        o->grave = 0;
    }
}

/* o's bytes read from the pool file into `copy`: 0 or -1. */
static int read_pieces(struct fp_arena *a, struct fp_obj *o, char *copy)
{
    size_t off = 0;
    for (unsigned i = 0; i < o->n; i++) {
        size_t len = (size_t)1 << (FP_CHUNK_SHIFT + o->b[i].log2);
        for (size_t done = 0; done < len;) {
            ssize_t r = pread(a->data_fd, copy + off + done, len - done,
                              (off_t)((int64_t)o->b[i].addr + a->file_delta) + (off_t)done);
            if (r <= 0)
                return -1;
            done += (size_t)r;
        }
        off += len;
    }
    return 0;
}

/* o's bytes into private anonymous memory at its place, its `since`
 * kept (children may read its pool pages): 0 or -1. from_file: read from
 * the pool file, not through o's mapping (whose faults the caller
 * serves). */
static int copy_in_place(struct fp_arena *a, struct fp_obj *o, int from_file)
{
    char *p = fp_obj_ptr(a, o);
    size_t len = fp_obj_len(o);
    void *copy = fp_map_anon(NULL, len, PROT_READ | PROT_WRITE);
    if (copy == MAP_FAILED)
        return -1;
    if (!from_file)
        memcpy(copy, p, len);
    else if (read_pieces(a, o, copy) != 0) {
        munmap(copy, len);
        return -1;
    }
    if (mremap(copy, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, p) == MAP_FAILED) {
        munmap(copy, len);
        return -1;
    }
    return 0;
}

/* The fallback when the lock or a remap fails: the parent's own view of
 * o becomes a private anonymous copy at the same address (no pool page
 * is read by anyone after this, so nothing is pinned), and fork gives the
 * child the kernel's copy-on-write snapshot of it. 0 or -1. */
static int copy_private(struct fp_arena *a, struct fp_obj *o)
{
    if (copy_in_place(a, o, 0) != 0)
        return -1;
    o->since = FP_SINCE_ANON;
    o->lazy = FP_LAZY_NONE; /* a new mapping: no protection */
    atomic_fetch_add_explicit(&fp_stats.copied_at_fork, fp_obj_len(o), memory_order_relaxed);
    return 0;
}

/* Before the remap: drop the page table entries of the small objects the
 * remap replaces, many objects per call. mmap(MAP_FIXED) over a mapping
 * with pages tears them down itself, but then each call also flushes the
 * TLB (an interrupt to every other CPU the process's threads ran on), one
 * flush per object; here one call flushes for a whole run. Dropping the
 * entries of a shared mapping loses nothing (the bytes are the file's);
 * a run therefore never spans an object mapped private (since a fork, or
 * partly: its pages are its own), nor an object the remap moves aside
 * (pieces of MOVE_MIN or more: moving their page tables is cheaper than
 * dropping them), nor records no scan looks at (not marked fresh). What
 * lies between the objects of a run is reserved address space, a kept
 * (shared) object or an unmapped deferred one. Objects' ranges never
 * overlap (an object's slot in the mirror is twice its first block, whose
 * records no other object starts in). */
struct zap_run {
    char *start, *end;
};

static void zap_flush(struct zap_run *r)
{
    if (r->end > r->start)
        madvise(r->start, (size_t)(r->end - r->start), MADV_DONTNEED);
    r->start = r->end = NULL;
}

static void zap_record(struct fp_arena *a, size_t i, struct zap_run *r)
{
    uint64_t e = atomic_load_explicit(&a->table[i], memory_order_relaxed);
    if (!(e & FP_E_LIVE) || (e & FP_E_CACHED))
        return; /* nothing, a kept object or a deferred one: may be in a run */
    struct fp_obj *o = &a->objs[i];
    int small = 1;
    for (unsigned k = 0; k < o->n; k++)
        if (((size_t)1 << (FP_CHUNK_SHIFT + o->b[k].log2)) >= MOVE_MIN)
            small = 0;
    if ((e & (FP_E_PRIVATE | FP_E_COPY)) || o->since || !small) {
        zap_flush(r);
        return;
    }
    char *p = fp_obj_ptr(a, o);
    if (!r->start)
        r->start = p;
    r->end = p + fp_obj_len(o);
}

static void zap_shared(struct fp_arena *a, size_t nchunks)
{
    struct zap_run r = {NULL, NULL};
    size_t expect = 0; /* first record after the last group looked at */
    for (size_t w = 0; w < a->fresh_words; w++) {
        uint64_t bits = atomic_load_explicit(&a->fresh[w], memory_order_relaxed);
        for (uint64_t left = bits; left; left &= left - 1) {
            size_t first = (w * 64 + (size_t)__builtin_ctzll(left)) * 64;
            if (first != expect)
                zap_flush(&r); /* a group not looked at lies between */
            for (size_t i = first; i < first + 64 && i < nchunks; i++)
                zap_record(a, i, &r);
            expect = first + 64;
        }
    }
    zap_flush(&r);
}

int fp_snap_small(const struct fp_obj *o)
{
    for (unsigned k = 0; k < o->n; k++)
        if (((size_t)1 << (FP_CHUNK_SHIFT + o->b[k].log2)) >= MOVE_MIN)
            return 0;
    return 1;
}

/* Record i at a fork: write-protect its object (lazy: small objects, when
 * userfaultfd serves), remap it (or, without a lock, copy it into private
 * memory) if it is live and still shared. 1 if the object stays (partly)
 * shared and the child must copy it, else 0. Objects with a piece of 2 MiB
 * or more are remapped at once: moving their page tables aside costs less
 * than write-protecting their entries one by one. */
static int snap_one(struct fp_arena *a, size_t i, int fd, uint32_t gen, int lazy)
{
    uint64_t e = atomic_load_explicit(&a->table[i], memory_order_relaxed);
    struct fp_obj *o = &a->objs[i];
    if (!(e & FP_E_LIVE) || (e & (FP_E_CACHED | FP_E_PRIVATE)))
        return 0;
    if (e & FP_E_COPY)
        return 1; /* partly shared still: every child copies it */
    if (o->since)
        return 0;
    if (fd < 0) { /* no lock: a copy of the parent's own */
        if (copy_private(a, o) == 0)
            return 0;
        atomic_store(&a->table[i], e | FP_E_COPY); /* the child copies */
        return 1;
    }
    /* an object protected early (and not written since) needs no call */
    if (lazy && fp_snap_small(o) &&
        (o->lazy == FP_LAZY_EARLY || fp_lazy_protect(fp_obj_ptr(a, o), fp_obj_len(o)) == 0)) {
        o->lazy = FP_LAZY_FORK;
        o->since = gen;
        atomic_fetch_add_explicit(&fp_stats.protected_at_fork, fp_obj_len(o), memory_order_relaxed);
        return 0;
    }
    int rc = 0;
    o->lazy = FP_LAZY_NONE; /* the remap drops an early protection */
    if (remap_private(a, o)) {
        /* partly private: pinned like the others, and copied by the child */
        atomic_store(&a->table[i], e | FP_E_COPY);
        rc = 1;
    }
    o->since = gen;
    atomic_fetch_add_explicit(&fp_stats.remapped_at_fork, fp_obj_len(o), memory_order_relaxed);
    return rc;
}

int fp_snap_prepare(int lazy)
{
    struct fp_arena *a = atomic_load(&fp_current);
    if (!a || !a->shared || !a->pool)
        return 0;
    a->gen_fd = -1;
    if (atomic_load(&a->live) == 0)
        return 0;
    uint32_t gen = a->fork_gen + 1;
    char path[48];
    snprintf(path, sizeof path, "/proc/self/fd/%d", a->data_fd);
    /* a description of its own: a lock of the pool's descriptor would be
     * one lock for every generation */
    int fd = gen >= FP_SINCE_ANON ? -1 : open(path, O_RDONLY | O_CLOEXEC);
    struct flock fl = {.l_type = F_RDLCK, .l_whence = SEEK_SET,
                       .l_start = NODE_FORK_LOCK_OFF(uid_of(a), gen), .l_len = 1};
    if (fd >= 0 && fcntl(fd, F_OFD_SETLK, &fl) != 0) {
        close(fd);
        fd = -1;
    }
    /* only the records handed out since the last fork's scan (a bit per
     * 64 of them; reading the whole table would fault in its untouched
     * pages, a 1 GiB pool's 2 MiB, in every process's first fork) */
    int copy = 0;
    size_t nchunks = atomic_load(&a->cap) >> FP_CHUNK_SHIFT;
    if (fd >= 0 && !lazy) /* lazy: the small objects are write-protected */
        zap_shared(a, nchunks);
    for (size_t w = 0; w < a->fresh_words; w++) {
        uint64_t bits = atomic_load_explicit(&a->fresh[w], memory_order_relaxed), keep = 0;
        if (!bits)
            continue;
        for (uint64_t left = bits; left; left &= left - 1) {
            size_t first = (w * 64 + (size_t)__builtin_ctzll(left)) * 64;
            for (size_t i = first; i < first + 64 && i < nchunks; i++)
                if (snap_one(a, i, fd, gen, lazy)) {
                    copy = 1;
                    keep |= left & -left; /* shared still: look again next time */
                }
        }
        atomic_store_explicit(&a->fresh[w], keep, memory_order_relaxed);
    }
    if (fd >= 0) {
        a->fork_gen = gen;
        a->gen_fd = fd;
    }
    return copy;
}

void fp_snap_parent(void)
{
    struct fp_arena *a = atomic_load(&fp_current);
    if (a && a->shared && a->gen_fd >= 0) {
        close(a->gen_fd); /* the child's copy holds the lock */
        a->gen_fd = -1;
    }
}


int fp_snap_unshare(struct fp_arena *a, struct fp_obj *o, int how)
{
    if (how == FP_UNSHARE_COPY ? copy_in_place(a, o, 0)
                               : remap_private(a, o) && copy_in_place(a, o, how == FP_UNSHARE_READ))
        return -1;
    o->lazy = FP_LAZY_NONE;
    return 0;
}

void fp_snap_fault(char *p, char **start, size_t *len)
{
    *len = 0;
    struct fp_arena *a = atomic_load(&fp_current);
    if (!a || !a->shared || !fp_arena_holds(a, p))
        return;
    uint64_t e;
    struct fp_obj *o = fp_arena_obj_at(a, p, &e);
    if (!o)
        return;
    char *q = fp_obj_ptr(a, o);
    if (o->lazy != FP_LAZY_FORK) {
        /* protected early (or grown since): no fork child reads its
         * pool pages, the write may go on; the next fork protects the
         * object again (even if only the page is unprotected here) */
        if (o->lazy == FP_LAZY_EARLY)
            atomic_fetch_add_explicit(&fp_stats.written_early, fp_obj_len(o),
                                      memory_order_relaxed);
        o->lazy = FP_LAZY_HOT;
        if (fp_lazy_unprotect(q, fp_obj_len(o)) != 0)
            return; /* the caller unprotects the page */
        fp_early_written((size_t)(o - a->objs));
        *start = q;
        *len = fp_obj_len(o);
        return;
    }
    if (fp_snap_unshare(a, o, FP_UNSHARE_MAP)) {
        /* the write would reach the pool pages the children read */
        fp_say("fork: cannot remap a %zu-byte block before writing it", fp_obj_len(o));
        abort();
    }
    atomic_fetch_add_explicit(&fp_stats.remapped_on_write, fp_obj_len(o), memory_order_relaxed);
    *start = q;
    *len = fp_obj_len(o);
}

int fp_snap_defer(struct fp_arena *a, struct fp_obj *o)
{
    if (!a->pool || o->since == FP_SINCE_ANON || !node_fork_readers(a->pool->nodes[0], uid_of(a), o->since))
        return 0;
    fp_snap_unmap(a, o); /* our private pages */
    atomic_store(fp_obj_entry(a, o), FP_E_CACHED | FP_E_DEFERRED);
    pthread_mutex_lock(&defer_mu);
    o->next = a->deferred;
    __atomic_store_n(&a->deferred, (uint32_t)(o - a->objs) + 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&defer_mu);
    return 1;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void fp_snap_reap(int force)
{
    struct fp_arena *a = atomic_load(&fp_current);
    if (!a || !a->shared || !a->pool || !__atomic_load_n(&a->deferred, __ATOMIC_RELAXED))
        return;
    uint64_t now = now_ns(), last = atomic_load(&last_reap);
    if (!force && now - last < REAP_EVERY_NS)
        return;
    atomic_store(&last_reap, now);
    struct node *n = a->pool->nodes[0];
    uint32_t free_from = UINT32_MAX; /* no reader of generations >= this */
    pthread_mutex_lock(&defer_mu);
    for (uint32_t *link = &a->deferred; *link;) {
        struct fp_obj *o = &a->objs[*link - 1];
        int gone = o->since >= free_from;
        if (!gone && !node_fork_readers(n, uid_of(a), o->since)) {
            gone = 1;
            free_from = o->since;
        }
        if (!gone) {
            link = &o->next;
            continue;
        }
        __atomic_store_n(link, o->next, __ATOMIC_RELAXED);
        o->next = 0;
        atomic_store(fp_obj_entry(a, o), 0);
        fp_obj_release(a, o);
    }
    pthread_mutex_unlock(&defer_mu);
}
