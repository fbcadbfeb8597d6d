/* map_stream.c - the occupancy map as a peer stream (map_stream.h). */
#include "service/map_stream.h"

#include <stdlib.h>
#include <string.h>

#include "service/occupancy.h"

struct map_stream {
    struct peer_stream s; /* first: the peer holds &s */
    const struct geometry *g;
    const void *meta;
    uint32_t seq, node;
    uint64_t first;
    bool sent_any;
    unsigned char part[sizeof(struct msg_map_chunk) + MSG_MAP_MAX];
};

static bool next_part(struct peer *p, struct peer_stream *s)
{
    struct map_stream *m = (struct map_stream *)s;
    uint64_t n = m->g->nspans;
    if (m->first >= n && m->sent_any)
        return false;
    struct msg_map_chunk *mc = (struct msg_map_chunk *)m->part;
    mc->nspans = n;
    mc->first = m->first;
    mc->count = (uint32_t)(n - m->first < MSG_MAP_MAX ? n - m->first : MSG_MAP_MAX);
    mc->node = m->node;
    occ_states(m->g, m->meta, m->first, mc->count, m->part + sizeof *mc);
    if (peer_queue(p, MSG_MAP_CHUNK, m->seq, m->part, sizeof *mc + mc->count) < 0)
        return false;
    m->first += mc->count;
    m->sent_any = true; /* a node without spans still gets one (empty) part */
    return true;
}

static void release(struct peer_stream *s)
{
    free(s);
}

int map_stream_start(struct peer *p, uint32_t seq, unsigned node, const struct geometry *g,
                     const void *meta, uint64_t now)
{
    struct map_stream *m = malloc(sizeof *m);
    if (!m)
        return peer_send_error(p, seq, FMEM_ENOMEM, "out of memory");
    memset(m, 0, offsetof(struct map_stream, part));
    m->s = (struct peer_stream){.next = next_part, .release = release};
    m->g = g;
    m->meta = meta;
    m->seq = seq;
    m->node = node;
    return peer_stream(p, &m->s, now);
}
