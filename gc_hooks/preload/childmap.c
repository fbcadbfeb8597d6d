/* childmap.c - a fork child's view of the blocks write-protected in its
 * parent (lazy.c), made at its first write to each.
 *
 * Such a block is still the parent's MAP_SHARED mapping in the child. The
 * parent never writes those pool pages again (it remaps the block at its
 * own first write), so the child may read them as they are; it must not
 * write them. Remapping every block MAP_PRIVATE in the fork handler costs
 * one mmap per block (2000 blocks: about as much as the fork itself), and
 * a child that calls exec next never needs any of them. So the child's
 * fork handler only makes them read-only, one mprotect per run of such
 * blocks in the mirror (what lies between them is reserved address space),
 * and a SIGSEGV handler remaps a block MAP_PRIVATE at the first write to
 * it, then lets the write go on. A fault anywhere else goes to the handler
 * the program had (or the default action).
 *
 * The price: a write by the kernel (read() into such a block, in the child,
 * before the child wrote the block itself) is not a fault but EFAULT; the
 * interposed read calls (kwrite.c) remap and retry, other such calls
 * return EFAULT. A program that replaces the SIGSEGV handler in the child
 * loses the remap (its handler sees the fault). FMEM_PRELOAD_CHILD_REMAP=
 * eager remaps every block in the fork handler instead. */
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "preload.h"

/* the arenas of the parent and of earlier ancestors (a child that opened
 * a named pool of its own and forked in turn), orphaned here */
#define ARENAS 8
static struct fp_arena *arenas[ARENAS];
static int narenas;
static struct sigaction prev;   /* the program's SIGSEGV handler */
static atomic_flag busy = ATOMIC_FLAG_INIT;
static char *run_start, *run_end;
static _Atomic int armed;

static void run_flush(void)
{
    if (run_end > run_start)
        mprotect(run_start, (size_t)(run_end - run_start), PROT_READ);
    run_start = run_end = NULL;
}

int fp_childmap_add(struct fp_arena *a, struct fp_obj *o)
{
    if (!narenas || arenas[narenas - 1] != a) {
        if (narenas == ARENAS)
            return -1;
        arenas[narenas++] = a;
    }
    char *p = fp_obj_ptr(a, o);
    if (run_end && p < run_end)
        run_flush(); /* not in address order: never, records are */
    if (!run_start)
        run_start = p;
    run_end = p + fp_obj_len(o);
    /* o->lazy stays FP_LAZY_FORK: no write to its record (a copy of the
     * page: 2000 objects, 2000 pages copied) */
    return 0;
}

void fp_childmap_break(void) { run_flush(); }

/* The object whose range holds p, if it waits for its remap here, and
 * its arena. */
static struct fp_obj *waiting(char *p, struct fp_arena **in)
{
    struct fp_arena *a = NULL;
    for (int i = 0; i < narenas && !a; i++)
        if (p >= arenas[i]->mirror && (size_t)(p - arenas[i]->mirror) / 2 < arenas[i]->cap)
            a = arenas[i];
    if (!a)
        return NULL;
    *in = a;
    size_t j = (size_t)(p - a->mirror) >> (FP_CHUNK_SHIFT + 1);
    for (size_t k = j + 1, n = 0; k-- > 0 && n < FP_SMALL_SCAN_MAX; n++) {
        if (!atomic_load_explicit(&a->table[k], memory_order_acquire))
            continue;
        struct fp_obj *o = &a->objs[k];
        if (p >= fp_obj_ptr(a, o) + fp_obj_len(o))
            return NULL;
        return o->lazy == FP_LAZY_FORK ? o : NULL;
    }
    return NULL;
}

/* 1 if p was in such an object (now this process's own), else 0. */
int fp_childmap_fault(char *p)
{
    if (!atomic_load_explicit(&armed, memory_order_acquire))
        return 0;
    while (atomic_flag_test_and_set_explicit(&busy, memory_order_acquire))
        ; /* another thread remaps: a few microseconds */
    struct fp_arena *a = NULL;
    struct fp_obj *o = waiting(p, &a);
    int done = o && fp_snap_unshare(a, o) == 0; /* o->lazy: NONE */
    atomic_flag_clear_explicit(&busy, memory_order_release);
    return done;
}

int fp_childmap_unshare(const void *p, size_t len)
{
    if (!atomic_load_explicit(&armed, memory_order_acquire) || !len)
        return 0;
    int done = 0;
    const char *q = p, *end = q + len;
    for (q = (const char *)((uintptr_t)q & ~(uintptr_t)4095); q < end; q += 4096)
        done |= fp_childmap_fault((char *)q);
    return done;
}

void fp_childmap_child(void) { atomic_flag_clear(&busy); }

static void on_segv(int sig, siginfo_t *si, void *uc)
{
    if (si->si_code == SEGV_ACCERR && fp_childmap_fault(si->si_addr))
        return; /* the write goes on */
    if (prev.sa_flags & SA_SIGINFO) {
        prev.sa_sigaction(sig, si, uc);
        return;
    }
    if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
        prev.sa_handler(sig);
        return;
    }
    /* the default action: fault again without us */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGSEGV, &dfl, NULL);
}

/* After the fork handler added the objects: the handler, if any waits. */
void fp_childmap_arm(void)
{
    run_flush();
    if (!narenas || atomic_load(&armed))
        return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &prev);
    atomic_store_explicit(&armed, 1, memory_order_release);
}
