/* daemon_reaper.c - teardown of departed applications. When an
 * application's socket closes (it exited or died), the control thread takes
 * it off its worker and hands it here; the reaper frees every block the
 * application still held, off the control thread so that heartbeats and
 * other applications' handshakes are never held up by a large teardown. */
#include <stdlib.h>
#include <unistd.h>

#include "service/daemon_internal.h"

uint64_t app_release_all(struct fmemd *d, struct app *a)
{
    uint64_t freed = 0;
    for (size_t i = 0; i < a->own.cap; i++) {
        struct own_entry *e = &a->own.e[i];
        if (e->key <= 1)
            continue;
        unsigned node = own_node(e->key);
        uint64_t chunk = own_chunk(e->key);
        if (node < d->nnodes && d->nodes[node].n) {
            /* its queue pair is gone, but the window goes back for reuse
             * and the key dies for certain before the block is freed */
            bool bound = e->bound2;
            int rc = bound ? app_revoke2(d, node, e) : 0;
            if (rc == 0 && bound)
                mw2_crash_point("reap"); /* the key is dead, the block not freed yet */
            if (rc == 0)
                rc = node_free(d->nodes[node].n, chunk, e->log2_chunks, e->rkey);
            if (rc == 0)
                freed++;
            else
                dsay(d, "app %u: free of node %u chunk %llu: %s", a->id, node,
                     (unsigned long long)chunk, fmem_strerror(rc));
        }
        a->bytes -= FMEM_CHUNK_SIZE << e->log2_chunks;
        a->blocks--;
        own_del(&a->own, e);
    }
    return freed;
}

void destroy_app(struct app *a)
{
    ring_unmap(a->ring);
    peer_close(&a->peer);
    own_free(&a->own);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

static void *reaper_main(void *arg)
{
    struct fmemd *d = arg;
    pthread_mutex_lock(&d->rmu);
    for (;;) {
        while (!d->dead_head && !atomic_load(&d->quit))
            pthread_cond_wait(&d->rcv, &d->rmu);
        struct app *a = d->dead_head;
        if (!a)
            break;
        d->dead_head = a->next_dead;
        if (!d->dead_head)
            d->dead_tail = NULL;
        d->ndead--;
        d->reaping++;
        pthread_mutex_unlock(&d->rmu);
        pthread_mutex_lock(&a->mu);
        uint64_t held = a->blocks, n = app_release_all(d, a);
        pthread_mutex_unlock(&a->mu);
        if (d->cfg->verbose || held)
            dsay(d, "app %u (%s, pid %d) gone: freed %llu of %llu blocks", a->id, a->name,
                 (int)a->peer.pid, (unsigned long long)n, (unsigned long long)held);
        atomic_fetch_add(&d->blocks_reaped, n);
        atomic_fetch_add(&d->apps_reaped, 1);
        destroy_app(a);
        pthread_mutex_lock(&d->rmu);
        d->reaping--;
        pthread_cond_broadcast(&d->rcv);
    }
    pthread_mutex_unlock(&d->rmu);
    return NULL;
}

int reaper_start(struct fmemd *d)
{
    pthread_mutex_init(&d->rmu, NULL);
    pthread_cond_init(&d->rcv, NULL);
    if (pthread_create(&d->reaper, NULL, reaper_main, d))
        return FMEM_ENOMEM;
    return 0;
}

/* Applications leave at the rate they can connect, whatever the reaper is
 * doing (one teardown of millions of blocks takes seconds): the queue is a
 * list through the applications themselves, so it never fills. */
void reaper_queue(struct fmemd *d, struct app *a)
{
    a->next_dead = NULL;
    pthread_mutex_lock(&d->rmu);
    if (d->dead_tail)
        d->dead_tail->next_dead = a;
    else
        d->dead_head = a;
    d->dead_tail = a;
    d->ndead++;
    pthread_cond_broadcast(&d->rcv);
    pthread_mutex_unlock(&d->rmu);
}

void reaper_stop(struct fmemd *d)
{
    pthread_mutex_lock(&d->rmu);
    atomic_store(&d->quit, 1);
    pthread_cond_broadcast(&d->rcv);
    pthread_mutex_unlock(&d->rmu);
    pthread_join(d->reaper, NULL); /* drains the queue first */
    pthread_mutex_destroy(&d->rmu);
    pthread_cond_destroy(&d->rcv);
}
