/* ring.h - the per-application request ring (layout in proto.h): creation
 * and mapping, the client's call, the worker's side, futex wake-ups. */
#ifndef FMEM_SVC_RING_H
#define FMEM_SVC_RING_H

#include <stdbool.h>
#include <stdint.h>

#include "cpu_relax.h"
#include "service/proto.h"

/* fmemd: make a sealed ring file (it cannot be resized by the application
 * it is given to) and map it. 0 or FMEM_EIO. */
int ring_create(int *fd, struct ring_hdr **ring);
/* application: map a ring received from fmemd, after checking its size
 * and header. 0 or FMEM_EIO / FMEM_ECORRUPT. */
int ring_map(int fd, struct ring_hdr **ring);
void ring_unmap(struct ring_hdr *ring);

/* Client: run one request; `alive(ctx)` is asked while waiting long (false:
 * the service is gone, FMEM_EIO). Spins at most `spin_ns` before sleeping
 * (less while recent replies needed the sleep). */
int ring_call(struct ring_hdr *r, const struct ring_req *req, struct ring_rsp *rsp,
              bool (*alive)(void *), void *ctx, uint64_t spin_ns);

/* Worker: take the posted bits of a ring (0: nothing). */
uint64_t ring_take(struct ring_hdr *r);
/* Worker: claim slot i if it is really posted, copying its request out.
 * false: not posted (a stray bit). */
bool ring_begin(struct ring_hdr *r, unsigned i, struct ring_req *req);
/* Worker: publish the reply of slot i and wake its client. */
void ring_finish(struct ring_hdr *r, unsigned i, const struct ring_rsp *rsp);
/* Worker: put back bits it took but did not serve (fairness cap). */
void ring_repost(struct ring_hdr *r, uint64_t bits);

/* Sleep until one of the rings' bells rings (or timeout_ns passes). The
 * caller has set `sleeping` on each and found nothing posted. */
void ring_sleep(struct ring_hdr **rings, const uint32_t *bells, unsigned n, uint64_t timeout_ns);

/* futex on a word in shared memory */
int futex_wait_shared(_Atomic uint32_t *w, uint32_t val, uint64_t timeout_ns);
void futex_wake_shared(_Atomic uint32_t *w, int n);

uint64_t ring_now_ns(void);

/* A client's first spin for a reply, and the least it grows back from
 * after a reply it caught while spinning (ring_call adapts it). */
#define RING_PURE_SPIN_NS 4000
#define RING_SPIN_MIN_NS 250

#endif
