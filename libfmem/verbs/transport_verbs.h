/* transport_verbs.h - RDMA verbs transport (client) and the memory-node
 * side that serves a pool over RDMA. Built when configure finds rdma-core. */
#ifndef FMEM_TRANSPORT_VERBS_H
#define FMEM_TRANSPORT_VERBS_H

#include <stdatomic.h>

#include "transport.h"

/* Connect to the memory node at host:port (librdmacm); src: local address
 * to connect from (selects the device), or NULL. */
int verbs_transport_connect(const char *host, const char *port, const char *src,
                            struct transport **out);

struct verbs_server;
/* Register the pool mapped by `pool` (a shm transport: metadata and data
 * back to back) as one memory region and listen on addr:port. */
int verbs_server_start(struct transport *pool, const char *addr, const char *port,
                       struct verbs_server **out);
/* Serve connection events until *stop becomes nonzero. */
int verbs_server_run(struct verbs_server *s, atomic_int *stop);
void verbs_server_stop(struct verbs_server *s);

#endif
