/* occupancy.h - what a pool's metadata says about its space, read straight
 * from the metadata: used and free bytes, the largest block that could still
 * be allocated, fragmentation, live blocks per size, and one state byte per
 * span for the occupancy map. Read-only: it works on a mapping of the
 * metadata file (fmem status) as well as on a live node. */
#ifndef FMEM_SVC_OCCUPANCY_H
#define FMEM_SVC_OCCUPANCY_H

#include <stdint.h>

#include "fmem.h"
#include "layout.h"
#include "node.h" /* SPAN_LOG_CLAIM */

/* Span state bytes. */
#define OCC_FREE 0           /* section layer, free */
#define OCC_CHUNK_BASE 1     /* chunk layer: OCC_CHUNK_BASE + chunks in use (0..32) */
#define OCC_CONTENDED 0x40   /* flag on a chunk-layer state: marked contended */
#define OCC_SPAN_BLOCK 0x80  /* part of a span- or section-level block */
#define OCC_MOVING 0x81      /* being moved between the layers */

static inline unsigned occ_used_chunks(uint8_t s)
{
    return (s & OCC_SPAN_BLOCK) ? 32 : s == OCC_FREE ? 0 : (unsigned)((s & 0x3f) - OCC_CHUNK_BASE);
}

struct occ_report {
    uint64_t nsections, nspans, nchunks, nusers, users_active;
    uint64_t capacity_bytes, used_bytes, free_bytes, metadata_bytes;
    uint64_t largest_free_bytes; /* largest block an allocation could get */
    double fragmentation;        /* 1 - largest free block / free bytes */
    uint64_t spans_free, spans_chunk, spans_contended, spans_block, spans_moving;
    uint64_t blocks[FMEM_SIZE_CLASSES]; /* live blocks of 4 KiB << k */
};

/* Scan metadata `meta` (the start of the pool file) of geometry g. `states`
 * (g->nspans bytes) may be NULL. */
void occ_scan(const struct geometry *g, const void *meta, struct occ_report *r, uint8_t *states);

/* The state bytes of spans first .. first + count - 1 (within g->nspans):
 * the occupancy map one part at a time. */
void occ_states(const struct geometry *g, const void *meta, uint64_t first, uint64_t count,
                uint8_t *states);

/* Map a pool's metadata file read-only and read its geometry. 0 or FMEM_E*. */
int occ_map_file(const char *path, struct geometry *g, const void **meta, size_t *len);

#endif
