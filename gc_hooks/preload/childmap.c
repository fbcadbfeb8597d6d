/* childmap.c - a fork child's view of the blocks write-protected in its
 * parent (lazy.c), made at its first access to each.
 *
 * Such a block is still the parent's MAP_SHARED mapping in the child. The
 * parent never writes those pool pages again (it remaps the block at its
 * own first write), so the child could read them as they are; it must not
 * write them. Remapping every block MAP_PRIVATE in the fork handler costs
 * one mmap per block (2000 blocks: about as much as the fork itself), and
 * a child that calls exec next never needs any of them. So the fork
 * handler registers each block with a userfaultfd of the child's own, in
 * minor mode (a fault at any access to a page of the file that this
 * process has not mapped: after fork the child has no page table entry of
 * a shared mapping) and missing mode (a page the file does not have yet),
 * and a thread started with it remaps a block MAP_PRIVATE at the first
 * access to it, then wakes the threads waiting there. Accesses by the
 * kernel (read() into the block, recvmsg, stat buffers) wait the same
 * way, and no signal handler is involved. A child that calls exec
 * pays the registrations (one ioctl per block, no mapping made) and the
 * thread's start.
 *
 * The descriptor lives only in the thread's table of descriptors: the
 * fork handler gives the program's threads a table of their own without
 * it (unshare(CLONE_FILES)), and the thread then closes every descriptor
 * of its table but the userfaultfd and the pools' data files (which the
 * remap maps). A program that closes all its descriptors after the fork
 * (a daemon) neither drops the registrations (the blocks would be the
 * pool's to write again) nor makes the remap map another file that took a
 * pool file's number. The thread ends once no block waits.
 *
 * Where the child cannot have a userfaultfd with minor faults (no
 * descriptor left, a kernel without them) or FMEM_PRELOAD_CHILD_REMAP=
 * eager, the fork handler remaps the blocks itself (blocks.c). */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "preload.h"

/* the arenas of the parent and of earlier ancestors (a child that opened
 * a named pool of its own and forked in turn), orphaned here */
#define ARENAS 8
static struct fp_arena *arenas[ARENAS];
static dev_t arena_dev[ARENAS]; /* their pool files, as the first child saw them */
static ino_t arena_ino[ARENAS];
static int narenas;
static int cfd = -1;      /* the userfaultfd, in the fork handler */
static int tried;         /* opening it failed: remap at once */
static uint64_t waiting_n; /* objects registered, not remapped; under fp_lazy_lock() */
static _Atomic uint32_t handed; /* 0: the thread waits for the program's table of its own;
                                 * 1: it has one; 2: it shares the thread's */

static int add_arena(struct fp_arena *a)
{
    for (int i = 0; i < narenas; i++)
        if (arenas[i] == a)
            return 0;
    struct stat sb;
    if (narenas == ARENAS || fstat(a->data_fd, &sb) != 0)
        return -1;
    arena_dev[narenas] = sb.st_dev;
    arena_ino[narenas] = sb.st_ino;
    arenas[narenas++] = a;
    return 0;
}

/* arenas[i]'s data_fd is still its pool file in this process's table (a
 * program may close it, and the number be reused, before it forks). */
static int file_is_ours(int i)
{
    struct stat sb;
    return fstat(arenas[i]->data_fd, &sb) == 0 && sb.st_dev == arena_dev[i] &&
           sb.st_ino == arena_ino[i];
}

int fp_childmap_add(struct fp_arena *a, struct fp_obj *o)
{
    if (cfd < 0 && !tried) {
        tried = 1;
        cfd = fp_uffd_open(UFFD_FEATURE_MINOR_SHMEM, O_NONBLOCK);
    }
    if (cfd < 0 || add_arena(a) != 0)
        return -1;
    struct uffdio_register rg = {
        .range = {.start = (uint64_t)(uintptr_t)fp_obj_ptr(a, o), .len = fp_obj_len(o)},
        .mode = UFFDIO_REGISTER_MODE_MINOR | UFFDIO_REGISTER_MODE_MISSING};
    if (ioctl(cfd, UFFDIO_REGISTER, &rg) != 0)
        return -1;
    /* o->lazy stays FP_LAZY_FORK: no write to its record here (a copy of
     * the page: 2000 objects, 2000 pages copied) */
    waiting_n++;
    return 0;
}

/* An object of table entry e waits here for its remap: the parent's
 * (private to this process), not freed, registered at the fork. */
static int is_waiting(uint64_t e, const struct fp_obj *o)
{
    return (e & FP_E_PRIVATE) && !(e & FP_E_CACHED) && o->lazy == FP_LAZY_FORK;
}

/* The object whose range holds p, if it waits for its remap here, and
 * its arena. */
static struct fp_obj *waiting(char *p, struct fp_arena **in)
{
    struct fp_arena *a = NULL;
    for (int i = 0; i < narenas && !a; i++)
        if (fp_arena_holds(arenas[i], p))
            a = arenas[i];
    if (!a)
        return NULL;
    *in = a;
    uint64_t e;
    struct fp_obj *o = fp_arena_obj_at(a, p, &e);
    return o && is_waiting(e, o) ? o : NULL;
}

static void futex(_Atomic uint32_t *w, int op, uint32_t v)
{
    syscall(SYS_futex, (uint32_t *)w, op | FUTEX_PRIVATE_FLAG, v, NULL, NULL, 0);
}

static int cmp_int(const void *x, const void *y) { return *(const int *)x - *(const int *)y; }

/* Close every descriptor of this thread's table but the userfaultfd and
 * the pools' data files. */
static void close_others(int fd)
{
    int keep[ARENAS + 2], n = 0;
    keep[n++] = fd;
    for (int i = 0; i < narenas; i++)
        if (arenas[i]->data_fd >= 0)
            keep[n++] = arenas[i]->data_fd;
    qsort(keep, (size_t)n, sizeof *keep, cmp_int);
    unsigned from = 0;
    for (int i = 0; i < n; i++) {
        if ((unsigned)keep[i] > from)
            syscall(SYS_close_range, from, (unsigned)keep[i] - 1, 0);
        from = (unsigned)keep[i] + 1;
    }
    syscall(SYS_close_range, from, ~0u, 0);
}

/* o, MAP_PRIVATE (the pool pages it reads are the parent's as of the
 * fork), how: FP_UNSHARE_*. The thread reads the file where the remap
 * fails: a copy through o's mapping would wait for the thread itself. */
static void must_unshare(struct fp_arena *a, struct fp_obj *o, int how)
{
    if (fp_snap_unshare(a, o, how) != 0) { /* o->lazy: NONE */
        fp_say("fork child: cannot remap a %zu-byte block before using it", fp_obj_len(o));
        abort();
    }
}

/* Remap o for a fault at p (fp_lazy_lock() held); its range in *start,
 * *len (p's page if o is no longer waiting). */
static void remap_one(struct fp_arena *a, struct fp_obj *o, char *p, char **start, size_t *len)
{
    *start = p;
    *len = 4096;
    if (!o)
        return; /* remapped already, for another thread's fault */
    *start = fp_obj_ptr(a, o);
    *len = fp_obj_len(o);
    must_unshare(a, o, FP_UNSHARE_READ);
    waiting_n--;
}

/* A child that uses many of the blocks one after the other (it saves or
 * sends them all, say) would stop at each, a round trip to this thread
 * per block: once STREAK_MIN faults came within STREAK_MS, the thread
 * remaps every block still waiting, one at a time in address order, and
 * serves faults between them. A child that calls exec, or uses a few
 * blocks, never gets there. */
#define STREAK_MIN 8
#define STREAK_MS 100
static int sweep_arena;
static size_t sweep_rec;

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The first object waiting here at or after record *k of arenas[*ai]
 * (both moved there), or NULL. */
static struct fp_obj *next_waiting(int *ai, size_t *k, struct fp_arena **in)
{
    for (; *ai < narenas; ++*ai, *k = 0) {
        struct fp_arena *a = arenas[*ai];
        size_t nchunks = a->cap >> FP_CHUNK_SHIFT;
        for (; *k < nchunks; ++*k) {
            uint64_t e = atomic_load(&a->table[*k]);
            struct fp_obj *o = &a->objs[*k];
            if (is_waiting(e, o)) {
                *in = a;
                return o;
            }
        }
    }
    return NULL;
}

/* The next waiting object of the sweep, remapped (fp_lazy_lock() held). */
static void sweep_step(void)
{
    struct fp_arena *a;
    struct fp_obj *o = next_waiting(&sweep_arena, &sweep_rec, &a);
    if (!o) {
        waiting_n = 0; /* none left (freed ones were counted out) */
        return;
    }
    must_unshare(a, o, FP_UNSHARE_READ);
    waiting_n--;
}

static void *remap_thread(void *arg)
{
    int fd = (int)(intptr_t)arg;
    fp_in_pool = 1; /* never the pool's allocations from here */
    uint32_t h;
    while ((h = atomic_load(&handed)) == 0)
        futex(&handed, FUTEX_WAIT, 0);
    if (h == 1)
        close_others(fd);
    uint64_t streak_start = 0;
    int streak_n = 0, sweep = 0;
    for (;;) {
        if (!sweep) {
            struct pollfd pf = {.fd = fd, .events = POLLIN};
            if (poll(&pf, 1, -1) < 0 && errno != EINTR)
                break;
        }
        struct uffd_msg m;
        ssize_t n = read(fd, &m, sizeof m);
        char *start = NULL;
        size_t len = 0;
        if (n == (ssize_t)sizeof m && m.event == UFFD_EVENT_PAGEFAULT) {
            char *p = (char *)(uintptr_t)(m.arg.pagefault.address & ~(uint64_t)4095);
            uint64_t now = now_ms();
            if (now - streak_start > STREAK_MS) {
                streak_start = now;
                streak_n = 0;
            }
            sweep |= ++streak_n >= STREAK_MIN;
            fp_lazy_lock();
            struct fp_arena *a = NULL;
            struct fp_obj *o = waiting(p, &a);
            remap_one(a, o, p, &start, &len);
        } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
            break;
        } else if (n < 0 && errno == EAGAIN && sweep) {
            fp_lazy_lock();
            sweep_step();
        } else {
            continue;
        }
        int done = waiting_n == 0;
        fp_lazy_unlock();
        if (len)
            fp_uffd_wake(fd, (uint64_t)(uintptr_t)start, len);
        if (done)
            break;
    }
    close(fd); /* wakes whoever still waits: the blocks are private now */
    return NULL;
}

/* Remap every waiting object now (no thread to do it at their first
 * access). */
static void remap_all(void)
{
    int ai = 0;
    size_t k = 0;
    struct fp_arena *a;
    for (struct fp_obj *o; (o = next_waiting(&ai, &k, &a)) != NULL; k++)
        must_unshare(a, o, FP_UNSHARE_MAP);
    waiting_n = 0;
}

void fp_childmap_arm(void)
{
    if (cfd < 0)
        return;
    int fd = cfd;
    cfd = -1;
    if (!waiting_n) {
        close(fd);
        return;
    }
    atomic_store(&handed, 0);
    sweep_arena = 0;
    sweep_rec = 0;
    if (fp_thread_start(remap_thread, (void *)(intptr_t)fd) != 0) {
        close(fd); /* drops the registrations */
        remap_all();
        return;
    }
    /* the program's threads get a table of their own, without the
     * userfaultfd; the thread keeps the table it shared with us */
    int own = unshare(CLONE_FILES) == 0;
    if (own)
        close(fd);
    atomic_store(&handed, own ? 1 : 2);
    futex(&handed, FUTEX_WAKE, 1);
}

void fp_childmap_child(void)
{
    /* the parent's thread and descriptor are not here: the objects still
     * waiting there (their remap was not under way: the fork held the
     * lock) wait here, registered anew */
    cfd = -1;
    tried = 0;
    if (!waiting_n)
        return;
    waiting_n = 0;
    int ai = 0;
    size_t k = 0;
    struct fp_arena *a;
    int checked = -1, ours = 0;
    for (struct fp_obj *o; (o = next_waiting(&ai, &k, &a)) != NULL; k++) {
        if (ai != checked) {
            checked = ai;
            ours = file_is_ours(ai);
        }
        if (!ours) /* no way to remap it: a copy, now */
            must_unshare(a, o, FP_UNSHARE_COPY);
        else if (fp_cfg.child_remap_eager || fp_childmap_add(a, o) != 0)
            must_unshare(a, o, FP_UNSHARE_MAP);
    }
}

void fp_childmap_free(struct fp_arena *a, struct fp_obj *o)
{
    fp_lazy_lock();
    if (o->lazy == FP_LAZY_FORK) {
        o->lazy = FP_LAZY_NONE;
        waiting_n--;
    }
    fp_unmap_range(fp_obj_ptr(a, o), fp_obj_len(o)); /* keep the range reserved */
    fp_lazy_unlock();
}
