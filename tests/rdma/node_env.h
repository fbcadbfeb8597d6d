/* node_env.h - the memory node a soft-RoCE test runs against, as
 * tests/rdma/vm-check.sh names it in an environment variable
 * ("HOST PORT TOKEN_FILE"), and the pool URI of it. Include after criterion. */
#ifndef FMEM_TESTS_RDMA_NODE_ENV_H
#define FMEM_TESTS_RDMA_NODE_ENV_H

#include <stdio.h>
#include <stdlib.h>

/* The memory node and its URI, filled by node_from_env(). */
static char host[64], port[8], token[256], node[400];

/* Fill host, port, token and node from the variable `var`; the test fails
 * when it is not set. */
static inline void node_from_env(const char *var)
{
    const char *e = getenv(var);
    cr_assert(e && sscanf(e, "%63s %7s %255s", host, port, token) == 3,
              "%s=\"HOST PORT TOKEN_FILE\" is needed", var);
    snprintf(node, sizeof node, "rdma://%s:%s?token=%s", host, port, token);
}

#endif
