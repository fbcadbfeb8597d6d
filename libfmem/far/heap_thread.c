/* heap_thread.c - which theap the calling thread uses for a heap.
 *
 * A one-entry thread-local cache (heap id -> theap) serves the fast path;
 * behind it each thread keeps a list of its bindings. Heap ids are never
 * reused, so a binding to a destroyed heap can never match again. When a
 * thread exits, a key destructor gives its theaps up for adoption; live
 * heaps are tracked in a global list so that the destructor never touches
 * a destroyed one (the global lock orders exits against destruction).
 *
 * The TLS variables use the initial-exec model: the fast path is one
 * %fs-relative load instead of a __tls_get_addr call. They take 24 bytes
 * of static TLS, which the C library's surplus covers even when libfmem is
 * loaded with dlopen. */
#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>

#include "fork.h"
#include "heap_compact.h"
#include "heap_internal.h"

__thread struct heap_tls heap_tls __attribute__((tls_model("initial-exec")));

struct binding {
    uint64_t id;
    struct theap *th;
    struct binding *next;
};
static __thread struct binding *bindings __attribute__((tls_model("initial-exec")));

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fmem_heap *g_live;
static pthread_key_t g_key;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_key_ok;

static struct fmem_heap *live_heap(uint64_t id)
{
    for (struct fmem_heap *h = g_live; h; h = h->next_live)
        if (h->id == id)
            return h;
    return NULL;
}

static void theap_abandon(struct fmem_heap *h, struct theap *th)
{
    pthread_mutex_lock(&th->lock);
    atomic_store(&th->owned, 0);
    theap_collect(th, 0);
    pthread_mutex_unlock(&th->lock);
    pthread_mutex_lock(&h->lock);
    th->next_free = h->free_theaps;
    h->free_theaps = th;
    pthread_mutex_unlock(&h->lock);
}

static void thread_exit(void *unused)
{
    (void)unused;
    fork_gate_enter();
    pthread_mutex_lock(&g_lock);
    for (struct binding *b = bindings, *next; b; b = next) {
        next = b->next;
        struct fmem_heap *h = live_heap(b->id);
        if (h)
            theap_abandon(h, b->th);
        free(b);
    }
    bindings = NULL;
    pthread_mutex_unlock(&g_lock);
    heap_tls = (struct heap_tls){0, NULL};
    fork_gate_leave();
}

/* In a fork child only the forking thread is left: the theaps of the
 * others wait for adoption, as if those threads had exited. Nothing else
 * needs repair: the gate kept every thread out of the heaps during the
 * fork, so no list or lock is half updated, and the memory under them is
 * the child's own (a private pool or a region), except large objects
 * mapped from a shared pool's file, which become private copies here
 * (the parent waits for that: pool_fork.c). */
static bool bound_here(const struct theap *th)
{
    for (const struct binding *b = bindings; b; b = b->next)
        if (b->th == th)
            return true;
    return false;
}

static void heaps_fork_child(struct fork_watch *w)
{
    (void)w;
    for (struct fmem_heap *h = g_live; h; h = h->next_live)
        large_fork_child(h);
    for (struct fmem_heap *h = g_live; h; h = h->next_live)
        compact_fork_child(h);
    for (struct fmem_heap *h = g_live; h; h = h->next_live)
        for (struct theap *th = h->theaps; th; th = th->next) {
            /* a thread that bounced off the closed gate may have left its
             * flag up in the snapshot */
            atomic_store(&th->busy, 0);
            if (!atomic_load(&th->owned) || bound_here(th))
                continue;
            atomic_store(&th->owned, 0);
            th->next_free = h->free_theaps;
            h->free_theaps = th;
        }
}

/* Before a fork: the gate is drained; wait out the fast paths too. */
static void heaps_fork_prepare(struct fork_watch *w)
{
    (void)w;
    for (struct fmem_heap *h = g_live; h; h = h->next_live)
        for (struct theap *th = h->theaps; th; th = th->next)
            while (atomic_load_explicit(&th->busy, memory_order_acquire))
                sched_yield();
}

static struct fork_watch heaps_watch = {.level = FORK_HEAP, .prepare = heaps_fork_prepare,
                                        .child = heaps_fork_child};

static void make_key(void)
{
    g_key_ok = pthread_key_create(&g_key, thread_exit) == 0;
}

int heap_register(struct fmem_heap *h)
{
    pthread_once(&g_once, make_key);
    if (!g_key_ok)
        return FMEM_ENOMEM;
    static bool watching; /* the caller holds the watch lock */
    if (!watching) {
        fork_watch_add(&heaps_watch);
        watching = true;
    }
    pthread_mutex_lock(&g_lock);
    h->next_live = g_live;
    g_live = h;
    pthread_mutex_unlock(&g_lock);
    return 0;
}

void heap_unregister(struct fmem_heap *h)
{
    pthread_mutex_lock(&g_lock);
    for (struct fmem_heap **p = &g_live; *p; p = &(*p)->next_live)
        if (*p == h) {
            *p = h->next_live;
            break;
        }
    pthread_mutex_unlock(&g_lock);
    if (heap_tls.id == h->id)
        heap_tls = (struct heap_tls){0, NULL};
}

/* A theap given up by an exited thread, or a new one. */
static struct theap *theap_adopt(struct fmem_heap *h)
{
    pthread_mutex_lock(&h->lock);
    struct theap *th = h->free_theaps;
    if (th)
        h->free_theaps = th->next_free;
    pthread_mutex_unlock(&h->lock);
    if (!th) {
        th = calloc(1, sizeof *th);
        if (!th || pthread_mutex_init(&th->lock, NULL)) {
            free(th);
            return NULL;
        }
        th->heap = h;
        pthread_mutex_lock(&h->lock);
        th->next = h->theaps;
        h->theaps = th;
        pthread_mutex_unlock(&h->lock);
    }
    pthread_mutex_lock(&th->lock);
    atomic_store(&th->owned, 1);
    pthread_mutex_unlock(&th->lock);
    return th;
}

/* Forget bindings to destroyed heaps. */
static void prune_bindings(void)
{
    pthread_mutex_lock(&g_lock);
    for (struct binding **p = &bindings; *p;) {
        if (live_heap((*p)->id)) {
            p = &(*p)->next;
            continue;
        }
        struct binding *dead = *p;
        *p = dead->next;
        free(dead);
    }
    pthread_mutex_unlock(&g_lock);
}

struct theap *theap_get_slow(struct fmem_heap *h, int create)
{
    for (struct binding *b = bindings; b; b = b->next)
        if (b->id == h->id) {
            heap_tls = (struct heap_tls){h->id, b->th};
            return b->th;
        }
    if (!create)
        return NULL;
    prune_bindings();
    struct binding *b = malloc(sizeof *b);
    struct theap *th = b ? theap_adopt(h) : NULL;
    if (!th) {
        free(b);
        return NULL;
    }
    *b = (struct binding){h->id, th, bindings};
    bindings = b;
    pthread_setspecific(g_key, (void *)1); /* run thread_exit */
    heap_tls = (struct heap_tls){h->id, th};
    return th;
}
