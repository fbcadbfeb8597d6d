/* client.h - the service backend of fmem_pool (client.c). */
#ifndef FMEM_SVC_CLIENT_H
#define FMEM_SVC_CLIENT_H

#include "fmem.h"

struct ring_hdr;

/* Connect to the fmemd named by `uri` ("unix:/PATH", "fmem://[localhost]/PATH",
 * "fmem://" for the default socket). */
int service_open(const char *uri, fmem_pool **out);
/* A no-op request through the ring (round-trip measurements). */
int service_ping(fmem_pool *p);
/* Give every block of the client's cache back to the pool (tests that
 * compare the pool's usage with what the application holds). 0 or FMEM_E*;
 * FMEM_ENOTSUP if not a service pool. */
int service_cache_drain(fmem_pool *p);
/* The client's ring (tests that play a misbehaving application). */
struct ring_hdr *service_ring(fmem_pool *p);
/* The client's socket to fmemd (tests), -1 if not a service pool. */
int service_socket(fmem_pool *p);

static inline int service_uri(const char *uri)
{
    return uri && ((uri[0] == 'u' && uri[1] == 'n' && uri[2] == 'i' && uri[3] == 'x' && uri[4] == ':') ||
                   (uri[0] == 'f' && uri[1] == 'm' && uri[2] == 'e' && uri[3] == 'm' && uri[4] == ':'));
}

#endif
