/* verbs_mw2.h - the memory node's type-2B windows (mw=type2): binds them to
 * applications' queue pairs when a service asks, and takes back the ones a
 * service's SEND_WITH_INV invalidated (verbs_proto.h has the exchange). */
#ifndef FMEM_VERBS_MW2_H
#define FMEM_VERBS_MW2_H

#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stdint.h>

struct mw2;

/* Bind windows over [lo, hi) of `data` (registered with MW_BIND in pd). */
int mw2_start(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_mr *data, uint64_t lo,
              uint64_t hi, struct mw2 **out);
/* The completion queue every service and application queue pair of the node
 * must use (send and receive) in this mode. */
struct ibv_cq *mw2_cq(struct mw2 *m);
/* Receive work requests a service's queue pair needs room for. */
unsigned mw2_service_recvs(void);
/* A connection's queue pair, once created (before it is accepted); false
 * when there is no room for it. session: a service's session id. */
bool mw2_add(struct mw2 *m, struct ibv_qp *qp, bool service, uint64_t session);
/* A service's session was fenced (its queue pairs are shut): destroy every
 * window bound at its request, and those whose binds are still in flight
 * when they complete, so that no application's key from it outlives the
 * recovery of its blocks. Returns the windows destroyed. */
unsigned mw2_fence(struct mw2 *m, uint64_t session);
/* Before its queue pair is destroyed. */
void mw2_forget(struct mw2 *m, struct ibv_qp *qp);
/* Whether a window is bound, or being bound, to the application queue pair
 * numbered qpn. Such a queue pair must not be destroyed yet: a bound
 * type-2 window holds a reference to its queue pair in the kernel, and
 * rxe (Linux 6.1) frees a destroyed queue pair after 200 ms even when
 * references remain; invalidating or destroying the window later then
 * touches freed kernel memory. */
bool mw2_qp_busy(struct mw2 *m, uint32_t qpn);
struct mw2_stats {
    uint64_t binds, revokes, refused; /* refused: bind requests answered with an error */
    uint64_t bound;                   /* windows bound now */
};
void mw2_get_stats(struct mw2 *m, struct mw2_stats *st);
void mw2_stop(struct mw2 *m);

#endif
