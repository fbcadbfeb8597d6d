/* test_python_threads.c - page sharing between pymalloc pools
 * (fmem_hooks_python_share_pages) while other threads write into small
 * bytearrays without the GIL: one with plain stores, one with readv(2)
 * from a pipe (the kernel writes). No write may be lost across a merge or
 * an owner's hand-over when its pool empties (docs/far-memory.md, "pages
 * shared between pools", Threads). With
 * FMEM_COMPACT_FENCE=0 the merges are unfenced and writes can be lost. */
#define PY_SSIZE_T_CLEAN
#include <fmem_hooks_python.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "hooks_fixture.h"

#define ROUNDS 12
#define STREAM 251 /* the pipe's byte k is k % STREAM */

static char uri[64];
static fmem_pool *pool;
static fmem_hooks *b;

static void setup(void)
{
    snprintf(uri, sizeof uri, "shm:/fmem-test-python-threads-%d", (int)getpid());
    char u[96];
    snprintf(u, sizeof u, "%s?size=1G", uri);
    pool = fixture_pool(u);
    b = fixture_binding(pool);
}

static void teardown(void) { fmem_unlink(uri); }

TestSuite(python_threads, .init = setup, .fini = teardown);

struct buf {
    unsigned char *p;
    size_t len;
};

struct writers {
    struct buf *w, *r; /* the storer's buffers, the reader's */
    size_t nw, nr;
    unsigned char *last; /* the byte the storer last wrote into w[i] */
    int pipe[2];
    atomic_int stop;
    atomic_long lost, lost_read, efault, stores, reads; /* lost: the storer's */
};

static int holds(const struct buf *x, unsigned char v)
{
    for (size_t j = 0; j < x->len; j++)
        if (x->p[j] != v)
            return 0;
    return 1;
}

/* Stores a new byte into every buffer, after checking it still holds the
 * one stored last. */
static void *storer(void *arg)
{
    struct writers *s = arg;
    while (!atomic_load(&s->stop))
        for (size_t i = 0; i < s->nw; i++) {
            if (!holds(&s->w[i], s->last[i]))
                atomic_fetch_add(&s->lost, 1);
            s->last[i]++;
            memset(s->w[i].p, s->last[i], s->w[i].len);
            atomic_fetch_add_explicit(&s->stores, 1, memory_order_relaxed);
        }
    return NULL;
}

static void *feeder(void *arg)
{
    struct writers *s = arg;
    unsigned char chunk[4096 + STREAM];
    for (size_t k = 0; k < sizeof chunk; k++)
        chunk[k] = (unsigned char)(k % STREAM);
    size_t off = 0;
    while (!atomic_load(&s->stop)) {
        ssize_t n = write(s->pipe[1], chunk + off % STREAM, 4096);
        if (n <= 0)
            break;
        off += (size_t)n;
    }
    close(s->pipe[1]);
    return NULL;
}

/* readv into 16 buffers at a time, each checked against the stream. */
static void *reader(void *arg)
{
    struct writers *s = arg;
    size_t off = 0, at = 0;
    for (;;) {
        struct iovec iov[16];
        size_t k;
        for (k = 0; k < 16 && k < s->nr; k++) {
            iov[k].iov_base = s->r[(at + k) % s->nr].p;
            iov[k].iov_len = s->r[(at + k) % s->nr].len;
        }
        ssize_t n = readv(s->pipe[0], iov, (int)k);
        if (n < 0 && errno == EFAULT)
            atomic_fetch_add(&s->efault, 1);
        if (n <= 0)
            break;
        atomic_fetch_add_explicit(&s->reads, 1, memory_order_relaxed);
        for (size_t j = 0, left = (size_t)n; j < k && left; j++) {
            size_t m = iov[j].iov_len < left ? iov[j].iov_len : left;
            for (size_t q = 0; q < m; q++)
                if (((unsigned char *)iov[j].iov_base)[q] != (off + q) % STREAM) {
                    atomic_fetch_add(&s->lost_read, 1);
                    break;
                }
            off += m;
            left -= m;
        }
        at = (at + k) % s->nr;
    }
    return NULL;
}

static void take(PyObject *list, struct buf **v, size_t *n)
{
    Py_ssize_t len = PyList_Size(list);
    *v = calloc((size_t)len, sizeof **v);
    cr_assert_not_null(*v);
    for (Py_ssize_t i = 0; i < len; i++) {
        PyObject *o = PyList_GetItem(list, i);
        (*v)[i].p = (unsigned char *)PyByteArray_AsString(o);
        (*v)[i].len = (size_t)PyByteArray_Size(o);
    }
    *n = (size_t)len;
}

static PyObject *global(const char *name)
{
    PyObject *v = PyDict_GetItemString(PyModule_GetDict(PyImport_AddModule("__main__")), name);
    cr_assert_not_null(v, "no global %s", name);
    return v;
}

Test(python_threads, no_write_lost_across_merges, .timeout = 600)
{
    Py_Initialize();
    cr_assert_eq(fmem_hooks_python_arena(b, NULL), 0);
    cr_assert_eq(PyRun_SimpleString("import random\nw = []; r = []\n"), 0);
    int64_t merged = 0, emptied = 0;
    long lost = 0, lost_read = 0, efault = 0, stores = 0, reads = 0;
    for (int round = 0; round < ROUNDS; round++) {
        /* sparse pools: an eighth of many small bytearrays kept; half of
         * the older ones go, which empties pools whose shared pages other
         * pools' (written) pages map: their owners hand over */
        char code[512];
        snprintf(code, sizeof code,
                 "rnd = random.Random(%d)\n"
                 "w = [x for x in w if rnd.random() < 0.5]\n"
                 "r = [x for x in r if rnd.random() < 0.5]\n"
                 "batch = [bytearray(rnd.randrange(16, 400)) for _ in range(20000)]\n"
                 "w += batch[0::16]; r += batch[8::16]\n"
                 "del batch\n",
                 round);
        cr_assert_eq(PyRun_SimpleString(code), 0);
        struct writers s = {0};
        take(global("w"), &s.w, &s.nw);
        take(global("r"), &s.r, &s.nr);
        s.last = calloc(s.nw, 1);
        for (size_t i = 0; i < s.nw; i++) /* what the last round stored */
            s.last[i] = s.w[i].p[0];
        cr_assert_eq(pipe(s.pipe), 0);
        pthread_t ts, tf, tr;
        cr_assert_eq(pthread_create(&ts, NULL, storer, &s), 0);
        cr_assert_eq(pthread_create(&tf, NULL, feeder, &s), 0);
        cr_assert_eq(pthread_create(&tr, NULL, reader, &s), 0);
        while (atomic_load(&s.stores) < (long)s.nw || atomic_load(&s.reads) < 4)
            sched_yield();
        int64_t handed = fmem_hooks_python_unshare_empty_pools(); /* with the GIL */
        cr_assert_geq(handed, 0);
        emptied += handed;
        int64_t got = fmem_hooks_python_share_pages();
        cr_assert_geq(got, 0, "share_pages: %s", fmem_strerror((int)got));
        merged += got;
        atomic_store(&s.stop, 1);
        pthread_join(ts, NULL);
        pthread_join(tf, NULL);
        pthread_join(tr, NULL);
        close(s.pipe[0]);
        for (size_t i = 0; i < s.nw; i++) /* the storer's last stores stayed */
            if (!holds(&s.w[i], s.last[i]))
                atomic_fetch_add(&s.lost, 1);
        lost += atomic_load(&s.lost);
        lost_read += atomic_load(&s.lost_read);
        efault += atomic_load(&s.efault);
        stores += atomic_load(&s.stores);
        reads += atomic_load(&s.reads);
        cr_log_info("round %d: %lld pools unshared, %lld bytes merged, %ld stores (%ld lost), %ld readv (%ld lost, "
                    "%ld EFAULT)",
                    round, (long long)handed, (long long)got, (long)atomic_load(&s.stores), (long)atomic_load(&s.lost),
                    (long)atomic_load(&s.reads), (long)atomic_load(&s.lost_read),
                    (long)atomic_load(&s.efault));
        cr_assert_eq(atomic_load(&s.lost), 0, "round %d: %ld stores lost", round,
                     (long)atomic_load(&s.lost));
        cr_assert_eq(atomic_load(&s.lost_read), 0, "round %d: %ld readv writes lost", round,
                     (long)atomic_load(&s.lost_read));
        cr_assert_eq(atomic_load(&s.efault), 0, "round %d: readv failed with EFAULT", round);
        free(s.w);
        free(s.r);
        free(s.last);
    }
    cr_assert_gt(merged, 0, "no page was shared");
    cr_assert_gt(emptied, 0, "no pool with shared pages emptied");
    cr_log_info("%lld bytes merged, %lld pools unshared, %ld stores (%ld lost), %ld readv (%ld lost, %ld EFAULT)",
                (long long)merged, (long long)emptied, stores, lost, reads, lost_read, efault);
}
