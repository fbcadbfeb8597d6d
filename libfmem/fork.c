/* fork.c - the atfork handlers, the gate and the watch list (fork.h). */
#include "fork.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

__thread struct fork_gate_rec *fork_gate_self __attribute__((tls_model("initial-exec")));
_Atomic int fork_gate_closed;
bool fork_gate_fence;

static pthread_mutex_t watch_mu = PTHREAD_MUTEX_INITIALIZER;
static struct fork_watch *watches[FORK_NLEVELS];

/* Gate records are never freed: a thread that exits leaves its record for
 * the next new thread, so the forker can walk the list without a lock
 * against exiting threads' memory. */
static pthread_mutex_t recs_mu = PTHREAD_MUTEX_INITIALIZER;
static struct fork_gate_rec *recs;
static pthread_key_t exit_key;
static bool exit_key_ok, membarrier_ok;

static long membarrier(int cmd)
{
    return syscall(__NR_membarrier, cmd, 0u, 0);
}

static void futex_wait(_Atomic int *w, int val)
{
    syscall(SYS_futex, (int *)w, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake_all(_Atomic int *w)
{
    syscall(SYS_futex, (int *)w, FUTEX_WAKE_PRIVATE, 0x7fffffff, NULL, NULL, 0);
}

/* Expedited private barriers need the process to register once (again in
 * a child). Without them every gate entry fences. */
static void membarrier_register(void)
{
    membarrier_ok = membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
    fork_gate_fence = !membarrier_ok;
}

static void thread_gone(void *rec)
{
    struct fork_gate_rec *g = rec;
    pthread_mutex_lock(&recs_mu);
    atomic_store(&g->depth, 0);
    g->exempt = false;
    g->in_use = false;
    pthread_mutex_unlock(&recs_mu);
    if (fork_gate_self == g)
        fork_gate_self = NULL;
}

static struct fork_gate_rec *gate_register(void)
{
    pthread_mutex_lock(&recs_mu);
    struct fork_gate_rec *g = recs;
    while (g && g->in_use)
        g = g->next;
    if (!g && (g = calloc(1, sizeof *g)) != NULL) {
        g->next = recs;
        recs = g;
    }
    if (g)
        g->in_use = true;
    pthread_mutex_unlock(&recs_mu);
    if (!g) { /* no memory for 24 bytes: fence on every entry instead */
        static struct fork_gate_rec shared_fallback = {.in_use = true};
        return &shared_fallback;
    }
    if (exit_key_ok)
        pthread_setspecific(exit_key, g);
    fork_gate_self = g;
    return g;
}

void fork_gate_wait(struct fork_gate_rec *g)
{
    for (;;) {
        if (g->exempt)
            return;
        atomic_store_explicit(&g->depth, 0, memory_order_release);
        while (atomic_load(&fork_gate_closed))
            futex_wait(&fork_gate_closed, 1);
        atomic_store_explicit(&g->depth, 1, memory_order_relaxed);
        atomic_thread_fence(memory_order_seq_cst);
        if (!atomic_load_explicit(&fork_gate_closed, memory_order_relaxed))
            return;
    }
}

void fork_gate_slow(void)
{
    struct fork_gate_rec *g = fork_gate_self;
    if (!g)
        g = gate_register();
    unsigned d = atomic_load_explicit(&g->depth, memory_order_relaxed);
    atomic_store_explicit(&g->depth, d + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
    if (d == 0 && atomic_load_explicit(&fork_gate_closed, memory_order_relaxed))
        fork_gate_wait(g);
}

void fork_gate_exempt(void)
{
    struct fork_gate_rec *g = fork_gate_self ? fork_gate_self : gate_register();
    g->exempt = true;
}

/* ---- watches --------------------------------------------------------------- */

void fork_objects_lock(void) { pthread_mutex_lock(&watch_mu); }
void fork_objects_unlock(void) { pthread_mutex_unlock(&watch_mu); }

void fork_watch_add(struct fork_watch *w)
{
    struct fork_watch **head = &watches[w->level];
    w->prev = NULL;
    w->next = *head;
    if (*head)
        (*head)->prev = w;
    *head = w;
}

void fork_watch_remove(struct fork_watch *w)
{
    if (w->prev)
        w->prev->next = w->next;
    else if (watches[w->level] == w)
        watches[w->level] = w->next;
    else
        return; /* not on the list */
    if (w->next)
        w->next->prev = w->prev;
    w->prev = w->next = NULL;
}

/* ---- the handlers ---------------------------------------------------------- */

/* Wait until no program thread but this one is inside the gate; returns
 * with recs_mu held, so no thread registers until the fork is over. */
static void drain_gate(void)
{
    struct fork_gate_rec *self = fork_gate_self;
    for (unsigned spins = 0;; spins++) {
        pthread_mutex_lock(&recs_mu);
        bool busy = false;
        for (struct fork_gate_rec *g = recs; g && !busy; g = g->next)
            busy = g->in_use && !g->exempt && g != self &&
                   atomic_load_explicit(&g->depth, memory_order_acquire) != 0;
        if (!busy)
            return;
        pthread_mutex_unlock(&recs_mu);
        if (spins < 64) {
            sched_yield();
        } else {
            struct timespec ts = {0, 100000};
            nanosleep(&ts, NULL);
        }
    }
}

/* fork_sync_child: the child writes a byte when its handlers are done;
 * the parent reads it, or end of file if the child died first. */
static int sync_pipe[2] = {-1, -1};
static bool sync_wanted;

void fork_sync_child(void)
{
    sync_wanted = true;
}

static void sync_close(void)
{
    for (int i = 0; i < 2; i++)
        if (sync_pipe[i] >= 0)
            close(sync_pipe[i]);
    sync_pipe[0] = sync_pipe[1] = -1;
    sync_wanted = false;
}

static void prepare(void)
{
    pthread_mutex_lock(&watch_mu);
    atomic_store(&fork_gate_closed, 1);
    if (!membarrier_ok || membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0)
        atomic_thread_fence(memory_order_seq_cst); /* entries fence themselves */
    drain_gate();
    for (int l = FORK_NLEVELS - 1; l >= 0; l--)
        for (struct fork_watch *w = watches[l]; w; w = w->next)
            if (w->prepare)
                w->prepare(w);
    if (sync_wanted && pipe2(sync_pipe, O_CLOEXEC) < 0)
        sync_pipe[0] = sync_pipe[1] = -1; /* no descriptors: no wait */
}

static void parent(void)
{
    if (sync_pipe[0] >= 0) {
        close(sync_pipe[1]);
        sync_pipe[1] = -1;
        char c;
        while (read(sync_pipe[0], &c, 1) < 0 && errno == EINTR)
            ;
    }
    sync_close();
    for (int l = 0; l < FORK_NLEVELS; l++)
        for (struct fork_watch *w = watches[l]; w; w = w->next)
            if (w->parent)
                w->parent(w);
    pthread_mutex_unlock(&recs_mu);
    atomic_store(&fork_gate_closed, 0);
    futex_wake_all(&fork_gate_closed);
    pthread_mutex_unlock(&watch_mu);
}

static void child(void)
{
    /* the other threads are gone: their records are free again */
    for (struct fork_gate_rec *g = recs; g; g = g->next)
        if (g != fork_gate_self) {
            atomic_store(&g->depth, 0);
            g->exempt = false;
            g->in_use = false;
        }
    pthread_mutex_unlock(&recs_mu);
    membarrier_register();
    atomic_store(&fork_gate_closed, 0);
    pthread_mutex_unlock(&watch_mu); /* a handler may make objects (a watch
                                        added now goes behind the walk) */
    for (int l = 0; l < FORK_NLEVELS; l++)
        for (struct fork_watch *w = watches[l]; w; w = w->next)
            if (w->child)
                w->child(w);
    if (sync_pipe[1] >= 0)
        (void)!write(sync_pipe[1], "", 1);
    sync_close();
}

static void register_once(void)
{
    exit_key_ok = pthread_key_create(&exit_key, thread_gone) == 0;
    membarrier_register();
    pthread_atfork(prepare, parent, child);
}

/* glibc runs prepare handlers last-registered first and child handlers
 * first-registered first. A layer built on libfmem that holds its own lock
 * across fork (the malloc interposer) registers after us, so it drains its
 * callers (who may be inside libfmem) before our gate closes; in the child
 * ours run while its locks are still held, so nothing here may call malloc
 * for a large block or open a pool (buffers are mmap'ed). Such a layer
 * calls this before its own pthread_atfork: constructors of one shared
 * object run in link order, which is not an order to rely on. */
void fork_register(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, register_once);
}

__attribute__((constructor)) static void register_at_load(void) { fork_register(); }
