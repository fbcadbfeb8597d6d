/* region_io.c - the I/O width of a region: a few worker threads that run
 * independent pool transfers (unit fetches of a read-ahead step, write-backs
 * of an eviction batch) side by side, so that a region striped over several
 * memory nodes keeps all its paths busy at once.
 *
 * A caller hands over a task: n jobs and a function; the workers and the
 * caller itself claim jobs by index until none is left, then the caller
 * waits for the ones still running. At most `width` jobs of one task run at
 * a time. Jobs are claimed in index order, so jobs laid out unit by unit
 * over a striped region go to different nodes first.
 *
 * The workers take no locks of the region and never wait for its threads;
 * they are exempt from the fork gate like the handler and the writer (a
 * fork waits for those to park, and they park only between tasks, when the
 * workers are idle). A fork child has no workers: they are started again
 * on its first task. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fork.h"
#include "region_internal.h"

struct io_task {
    void (*fn)(void *arg, unsigned i);
    void *arg;
    unsigned n, helpers_max, helpers;
    _Atomic unsigned next, done;
    struct io_task *link;
};

struct worker_arg {
    struct region_io *io;
    unsigned k;
};

static void *worker_main(void *arg)
{
    struct region_io *io = ((struct worker_arg *)arg)->io;
    atomic_store(&io->tid[((struct worker_arg *)arg)->k], (pid_t)syscall(SYS_gettid));
    free(arg);
    fork_gate_exempt();
    pthread_mutex_lock(&io->mu);
    while (!io->stop) {
        struct io_task *t = io->tasks;
        while (t && (atomic_load(&t->next) >= t->n || t->helpers >= t->helpers_max))
            t = t->link;
        if (!t) {
            pthread_cond_wait(&io->work_cv, &io->mu);
            continue;
        }
        t->helpers++;
        pthread_mutex_unlock(&io->mu);
        for (unsigned i; (i = atomic_fetch_add(&t->next, 1)) < t->n;) {
            t->fn(t->arg, i);
            atomic_fetch_add(&t->done, 1);
        }
        pthread_mutex_lock(&io->mu);
        if (--t->helpers == 0)
            pthread_cond_broadcast(&io->done_cv);
    }
    pthread_mutex_unlock(&io->mu);
    return NULL;
}

int region_io_init(struct region_io *io)
{
    memset(io, 0, sizeof *io);
    if (pthread_mutex_init(&io->mu, NULL) || pthread_cond_init(&io->work_cv, NULL) ||
        pthread_cond_init(&io->done_cv, NULL))
        return FMEM_ENOMEM;
    io->pid = getpid();
    return 0;
}

/* Start workers up to `want` (io->mu held). Workers block every signal. */
static void grow(struct region_io *io, unsigned want)
{
    if (want > REGION_IO_MAX)
        want = REGION_IO_MAX;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    while (io->nthreads < want) {
        struct worker_arg *a = malloc(sizeof *a);
        if (!a)
            break;
        *a = (struct worker_arg){io, io->nthreads};
        if (pthread_create(&io->th[io->nthreads], NULL, worker_main, a) != 0) {
            free(a);
            break;
        }
        io->nthreads++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* In a fork child the workers are gone and the lock may be in any state
 * the parent left it in; the handler and the writer are the only users
 * (so it is re-made once, by whichever comes first). */
static void after_fork(struct region_io *io)
{
    pid_t me = getpid(), was = io->pid;
    if (was == me)
        return;
    static pthread_mutex_t once = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&once);
    if (io->pid != me) {
        pthread_mutex_init(&io->mu, NULL);
        pthread_cond_init(&io->work_cv, NULL);
        pthread_cond_init(&io->done_cv, NULL);
        io->nthreads = 0;
        for (unsigned i = 0; i < REGION_IO_MAX; i++)
            atomic_store(&io->tid[i], 0);
        io->tasks = NULL;
        io->stop = 0;
        io->pid = me;
    }
    pthread_mutex_unlock(&once);
}

void region_io_run(struct region_io *io, unsigned width, unsigned n, void (*fn)(void *, unsigned),
                   void *arg)
{
    if (n == 0)
        return;
    if (width <= 1 || n == 1) {
        for (unsigned i = 0; i < n; i++)
            fn(arg, i);
        return;
    }
    after_fork(io);
    struct io_task t = {.fn = fn, .arg = arg, .n = n};
    t.helpers_max = (width < n ? width : n) - 1;
    pthread_mutex_lock(&io->mu);
    unsigned busy = 0; /* workers on the other task (handler or writer) */
    for (struct io_task *o = io->tasks; o; o = o->link)
        busy += o->helpers_max;
    if (io->nthreads < busy + t.helpers_max)
        grow(io, busy + t.helpers_max);
    t.link = io->tasks;
    io->tasks = &t;
    pthread_cond_broadcast(&io->work_cv);
    pthread_mutex_unlock(&io->mu);
    for (unsigned i; (i = atomic_fetch_add(&t.next, 1)) < n;) {
        fn(arg, i);
        atomic_fetch_add(&t.done, 1);
    }
    pthread_mutex_lock(&io->mu);
    while (t.helpers > 0 || atomic_load(&t.done) < n)
        pthread_cond_wait(&io->done_cv, &io->mu);
    struct io_task **pp = &io->tasks;
    while (*pp != &t)
        pp = &(*pp)->link;
    *pp = t.link;
    pthread_mutex_unlock(&io->mu);
}

int region_io_is_worker(struct region_io *io, uint32_t tid)
{
    if (tid == 0)
        return 0;
    for (unsigned i = 0; i < REGION_IO_MAX; i++)
        if ((uint32_t)atomic_load_explicit(&io->tid[i], memory_order_relaxed) == tid)
            return 1;
    return 0;
}

void region_io_stop(struct region_io *io)
{
    if (io->pid != getpid()) /* a fork child: no workers of ours */
        return;
    pthread_mutex_lock(&io->mu);
    io->stop = 1;
    pthread_cond_broadcast(&io->work_cv);
    pthread_mutex_unlock(&io->mu);
    for (unsigned i = 0; i < io->nthreads; i++)
        pthread_join(io->th[i], NULL);
    io->nthreads = 0;
    for (unsigned i = 0; i < REGION_IO_MAX; i++)
        atomic_store(&io->tid[i], 0);
    pthread_mutex_destroy(&io->mu);
    pthread_cond_destroy(&io->work_cv);
    pthread_cond_destroy(&io->done_cv);
}
