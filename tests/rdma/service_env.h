/* service_env.h - what the verbs service tests get from tests/rdma/vm-check.sh:
 * the fmemd socket (FMEM_TEST_SVC=unix:SOCKET), the memory node
 * (FMEM_TEST_RDMA="HOST PORT TOKEN_FILE") and fmemd's path
 * (FMEM_TEST_FMEMD). Include after criterion and fmem.h. */
#ifndef FMEM_TESTS_RDMA_SERVICE_ENV_H
#define FMEM_TESTS_RDMA_SERVICE_ENV_H

#include <stdio.h>
#include <stdlib.h>

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

/* The memory node and its URI, filled by memory_node(). */
static char host[64], port[8], token[256], node[400];

static inline void memory_node(void)
{
    const char *e = getenv("FMEM_TEST_RDMA");
    cr_assert(e && sscanf(e, "%63s %7s %255s", host, port, token) == 3,
              "FMEM_TEST_RDMA=\"HOST PORT TOKEN_FILE\" is needed");
    snprintf(node, sizeof node, "rdma://%s:%s?token=%s", host, port, token);
}

static inline const char *fmemd_path(void)
{
    const char *f = getenv("FMEM_TEST_FMEMD");
    cr_assert(f && *f, "FMEM_TEST_FMEMD=path of fmemd is needed");
    return f;
}

#endif
