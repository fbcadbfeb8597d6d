/* daemon_mw2.c - applications' type-2B windows on a memory node that runs
 * mw=type2 (docs/verbs-notes.md). fmemd allocates as usual (the block's
 * type-1 key stays fmemd's own), then asks the memory node to bind a
 * type-2B window over the block to the application's queue pair and hands
 * the application that key only: from any other queue pair the NIC refuses
 * it. Before the block is freed, fmemd invalidates the window with a
 * SEND_WITH_INV, so the application's key is dead before the free commits. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "service/daemon_internal.h"
#ifdef HAVE_RDMA
#include "verbs/transport_verbs.h"
#endif

int app_bind2(struct fmemd *d, struct app *a, unsigned node, uint64_t chunk, unsigned k,
              uint32_t *key)
{
#ifdef HAVE_RDMA
    struct dnode *dn = &d->nodes[node];
    uint32_t qp = a->app_qp[node];
    if (!qp)
        return FMEM_ENOTSUP; /* the application never said which queue pair */
    return verbs_transport_bind2(dn->tp, dn->tp->meta_size + (chunk << CHUNK_SHIFT),
                                 FMEM_CHUNK_SIZE << k, qp, key);
#else
    (void)d, (void)a, (void)node, (void)chunk, (void)k, (void)key;
    return FMEM_ENOTSUP;
#endif
}

int app_revoke2(struct fmemd *d, unsigned node, struct own_entry *e)
{
#ifdef HAVE_RDMA
    struct transport *tp = d->nodes[node].tp;
    /* a queue pair that failed is replaced on the next use: one more try */
    int rc = verbs_transport_revoke2(tp, e->app_rkey);
    if (rc == FMEM_EIO && !verbs_transport_fenced(tp))
        rc = verbs_transport_revoke2(tp, e->app_rkey);
    if (rc == 0)
        e->bound2 = false;
    return rc;
#else
    (void)d, (void)node, (void)e;
    return FMEM_ENOTSUP;
#endif
}

static const char *crash_at;
static pthread_once_t crash_once = PTHREAD_ONCE_INIT;

static void crash_read(void)
{
    crash_at = getenv("FMEM_FMEMD_CRASH");
}

void mw2_crash_point(const char *name)
{
    pthread_once(&crash_once, crash_read);
    if (crash_at && !strcmp(crash_at, name))
        _exit(86);
}
