/* layout.c - where each metadata region of a pool lives, and the pool
 * header that records it. */
#include "layout.h"

#include <string.h>

#include "fmem.h"

static uint64_t round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/* One user slot per 64 chunks (at least 64, at most the 14-bit id space):
 * enough users for the pool while keeping the table inside the 0.4 % budget. */
static uint64_t users_for(uint64_t nchunks)
{
    uint64_t n = nchunks / 64;
    if (n < 64)
        n = 64;
    if (n > MAX_UID + 1)
        n = MAX_UID + 1;
    return n;
}

void layout_geometry(uint64_t nsections, uint64_t align, struct geometry *g)
{
    memset(g, 0, sizeof *g);
    g->nsections = nsections;
    g->nspans = nsections * SPANS_PER_SECTION;
    g->nchunks = nsections * CHUNKS_PER_SECTION;
    g->nusers = users_for(g->nchunks);
    g->users_off = POOL_HDR_SIZE;
    g->sect_off = round_up(g->users_off + 4 * g->nusers, 8);
    g->span_off = g->sect_off + 8 * g->nsections;
    g->cap_off = g->span_off + 8 * g->nspans;
    g->log_off = g->cap_off + 8 * g->nchunks;
    g->data_off = round_up(g->log_off + 8 * g->nchunks, align ? align : 4096);
    g->data_size = nsections << SECTION_SHIFT;
    g->total_size = g->data_off + g->data_size;
    g->metadata_bytes = g->data_off;
}

static uint64_t hdr_checksum(const struct pool_hdr *h)
{
    /* FNV-1a over every field before the checksum */
    const unsigned char *p = (const unsigned char *)h;
    uint64_t x = 1469598103934665603u;
    for (size_t i = 0; i < offsetof(struct pool_hdr, checksum); i++)
        x = (x ^ p[i]) * 1099511628211u;
    return x;
}

void layout_write_hdr(struct pool_hdr *h, const struct geometry *g)
{
    memset(h, 0, sizeof *h);
    memcpy(h->magic, POOL_MAGIC, 8);
    h->version = POOL_VERSION;
    h->hdr_size = POOL_HDR_SIZE;
    h->nsections = g->nsections;
    h->nusers = g->nusers;
    h->users_off = g->users_off;
    h->sect_off = g->sect_off;
    h->span_off = g->span_off;
    h->cap_off = g->cap_off;
    h->log_off = g->log_off;
    h->data_off = g->data_off;
    h->total_size = g->total_size;
    h->checksum = hdr_checksum(h);
}

int layout_check_hdr(const struct pool_hdr *h, uint64_t file_size, struct geometry *g)
{
    if (memcmp(h->magic, POOL_MAGIC, 8) != 0 || h->version != POOL_VERSION ||
        h->hdr_size != POOL_HDR_SIZE || h->checksum != hdr_checksum(h))
        return FMEM_ECORRUPT;
    if (h->nsections == 0 || h->nsections > LAYOUT_MAX_SECTIONS)
        return FMEM_ECORRUPT;
    /* recompute the geometry; the header must agree with it exactly */
    uint64_t align = h->data_off % (2u << 20) == 0 ? (2u << 20) : 4096;
    layout_geometry(h->nsections, align, g);
    if (g->data_off != h->data_off) { /* created with the other alignment */
        layout_geometry(h->nsections, align == 4096 ? (2u << 20) : 4096, g);
    }
    if (g->nusers != h->nusers || g->users_off != h->users_off ||
        g->sect_off != h->sect_off || g->span_off != h->span_off ||
        g->cap_off != h->cap_off || g->log_off != h->log_off ||
        g->data_off != h->data_off || g->total_size != h->total_size ||
        h->total_size > file_size)
        return FMEM_ECORRUPT;
    return 0;
}
