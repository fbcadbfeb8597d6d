/* map_stream.h - a node's occupancy map (one state byte per span) sent to
 * a peer as MAP_CHUNK messages, each part read from the metadata when the
 * peer's socket has room for it: a map of any pool costs one part of
 * memory per peer, and a peer that does not read costs nothing more. */
#ifndef FMEM_SVC_MAP_STREAM_H
#define FMEM_SVC_MAP_STREAM_H

#include "layout.h"
#include "service/peer.h"

/* Answer MAP_REQ `seq` for node index `node` (geometry g, metadata at
 * meta, both alive as long as the peer). 0, or -1: drop the peer. */
int map_stream_start(struct peer *p, uint32_t seq, unsigned node, const struct geometry *g,
                     const void *meta, uint64_t now);

#endif
