/* service_env.h - what the verbs service tests get from tests/rdma/vm-check.sh:
 * the fmemd socket (FMEM_TEST_SVC=unix:SOCKET), the memory node
 * (FMEM_TEST_RDMA="HOST PORT TOKEN_FILE") and fmemd's path
 * (FMEM_TEST_FMEMD), and what the tests do with them. Include after
 * criterion, fmem.h, fmem_admin.h, pool_internal.h, wkeys.h and
 * verbs/transport_verbs.h. */
#ifndef FMEM_TESTS_RDMA_SERVICE_ENV_H
#define FMEM_TESTS_RDMA_SERVICE_ENV_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "node_env.h"

static inline const char *svc(void)
{
    const char *s = getenv("FMEM_TEST_SVC");
    cr_assert(s && *s, "FMEM_TEST_SVC=unix:SOCKET is needed");
    return s;
}

/* An application of the fmemd under test. */
static inline fmem_pool *app(void)
{
    fmem_pool *p;
    int rc = fmem_open(svc(), &p);
    cr_assert_eq(rc, 0, "connect %s: %s", svc(), fmem_strerror(rc));
    return p;
}

/* The memory node (host, port, token) and its URI (node). */
static inline void memory_node(void)
{
    node_from_env("FMEM_TEST_RDMA");
}

static inline const char *fmemd_path(void)
{
    const char *f = getenv("FMEM_TEST_FMEMD");
    cr_assert(f && *f, "FMEM_TEST_FMEMD=path of fmemd is needed");
    return f;
}

/* The bytes the pool holds, seen by an observer pool of the memory node. */
static inline uint64_t pool_bytes(fmem_pool *observer)
{
    fmem_stats_t st;
    cr_assert_eq(fmem_stats(observer, &st), 0);
    return st.allocated_bytes;
}

/* Poll the pool up to `polls` times, `poll_us` apart, until it holds `want`
 * bytes (fmemd or the memory node reaping takes a while); returns what it
 * holds at the end. */
static inline uint64_t wait_pool_bytes(fmem_pool *observer, uint64_t want, int polls,
                                       unsigned poll_us)
{
    uint64_t now = 0;
    for (int i = 0; i < polls && (now = pool_bytes(observer)) != want; i++)
        usleep(poll_us);
    return now;
}

/* The start of a test that plays a service: the memory node, an observer
 * of its pool and what the pool holds (*before), and the played service's
 * own pool over RDMA (*svc); returns the service's session. */
static inline uint64_t play_service_open(fmem_pool **observer, uint64_t *before, fmem_pool **svc)
{
    memory_node();
    cr_assert_eq(fmem_open(node, observer), 0);
    *before = pool_bytes(*observer);
    cr_assert_eq(fmem_open(node, svc), 0);
    uint64_t session = verbs_transport_session((*svc)->nodes[0]->tp);
    cr_assert_neq(session, 0);
    return session;
}

/* The test playing a service (a pool `svc` of its own over RDMA, session
 * `session`): write fmemd's heartbeat and session words `beats` times,
 * 300 ms apart, as fmemd does; when the test stops, the service falls
 * silent and the memory node fences and recovers it. */
static inline void play_service_heartbeats(fmem_pool *svc, uint64_t session, uint32_t beats)
{
    struct node *n = svc->nodes[0];
    uint32_t mine = (uint32_t)getpid() | NODE_PID_REMOTE;
    uint64_t where = n->tp->wkeys_off + wk_hb_pair(n->g.nchunks, (unsigned)fmem_user_id(svc, 0));
    for (uint32_t beat = 1; beat <= beats; beat++) {
        uint64_t w[2] = {(uint64_t)mine << 32 | beat, session};
        cr_assert_eq(tp_write(n->tp, where, w, sizeof w), 0);
        usleep(300000);
    }
}

#endif
