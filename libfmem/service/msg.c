/* msg.c - encoder and strict decoder of the service's messages (proto.h).
 * The decoder is the only code that looks at bytes another process sent:
 * it checks magic, version, the exact length of every type, that every
 * string field is terminated inside its field, and every numeric field's
 * range; nothing else in the service parses raw input. */
#include <string.h>

#include "layout.h"
#include "service/proto.h"
#include "service/status_wire.h"

static const struct {
    const char *name;
    size_t size;   /* fixed payload */
    size_t tail;   /* largest variable tail (0: none) */
} types[MSG_TYPE_END] = {
    [MSG_ERROR] = {"error", sizeof(struct msg_error), 0},
    [MSG_APP_HELLO] = {"app-hello", sizeof(struct msg_app_hello), 0},
    [MSG_APP_WELCOME] = {"app-welcome", sizeof(struct msg_app_welcome), 0},
    [MSG_STATUS_REQ] = {"status-req", sizeof(struct msg_status_req), 0},
    [MSG_STATUS_REPORT] = {"status-report", 0, MSG_TEXT_MAX},
    [MSG_MAP_REQ] = {"map-req", sizeof(struct msg_status_req), 0},
    [MSG_MAP_CHUNK] = {"map-chunk", sizeof(struct msg_map_chunk), MSG_MAP_MAX},
    [MSG_STATS_REQ] = {"stats-req", 0, 0},
    [MSG_STATS] = {"stats", sizeof(struct msg_stats), 0},
    [MSG_SVC_REGISTER] = {"svc-register", sizeof(struct msg_svc_register), 0},
    [MSG_SVC_WELCOME] = {"svc-welcome", sizeof(struct msg_svc_welcome), 0},
    [MSG_HEARTBEAT] = {"heartbeat", sizeof(struct msg_heartbeat), 0},
    [MSG_SVC_BYE] = {"svc-bye", 0, 0},
    [MSG_SHUTDOWN] = {"shutdown", 0, 0},
};

const char *msg_type_name(uint16_t type)
{
    return type > 0 && type < MSG_TYPE_END ? types[type].name : "unknown";
}

size_t msg_payload_size(uint16_t type)
{
    return type > 0 && type < MSG_TYPE_END ? types[type].size : 0;
}

size_t msg_encode(void *buf, uint16_t type, uint32_t seq, const void *p, size_t plen)
{
    struct msg_hdr h = {.magic = MSG_MAGIC, .type = type, .version = MSG_VERSION,
                        .len = (uint32_t)(sizeof h + plen), .seq = seq};
    memcpy(buf, &h, sizeof h);
    if (plen)
        memcpy((char *)buf + sizeof h, p, plen);
    return sizeof h + plen;
}

static int terminated(const char *s, size_t cap)
{
    return memchr(s, 0, cap) != NULL;
}

/* Field checks per type, on the aligned copy in `out`. */
static int check_fields(struct msg *m)
{
    switch (m->type) {
    case MSG_ERROR:
        if (m->u.error.code >= 0 || m->u.error.code < -1000 ||
            !terminated(m->u.error.text, sizeof m->u.error.text))
            return FMEM_EINVAL;
        return 0;
    case MSG_APP_HELLO:
        if (m->u.hello.flags || !terminated(m->u.hello.name, sizeof m->u.hello.name))
            return FMEM_EINVAL;
        return 0;
    case MSG_APP_WELCOME:
        if (m->u.welcome.nnodes == 0 || m->u.welcome.nnodes > SVC_MAX_NODES ||
            m->u.welcome.nslots == 0 || m->u.welcome.nslots > RING_SLOTS ||
            m->u.welcome.ring_bytes != RING_BYTES)
            return FMEM_EINVAL;
        for (unsigned i = 0; i < SVC_MAX_NODES; i++)
            if (!terminated(m->u.welcome.rdma_addr[i], MSG_RDMA_ADDR_MAX))
                return FMEM_EINVAL;
        for (unsigned i = 0; i < m->u.welcome.nnodes; i++)
            if (m->u.welcome.data_bytes[i] == 0 ||
                (m->u.welcome.data_bytes[i] & (FMEM_SECTION_SIZE - 1)) ||
                m->u.welcome.data_bytes[i] > (UINT64_C(1) << 46))
                return FMEM_EINVAL;
        for (unsigned i = 0; i < m->u.welcome.nnodes; i++) /* shm nodes: a live session */
            if (!m->u.welcome.rdma_addr[i][0] &&
                (m->u.welcome.svc_uid[i] == 0 || m->u.welcome.svc_uid[i] > 16383 ||
                 m->u.welcome.session[i] == 0))
                return FMEM_EINVAL;
        return 0;
    case MSG_STATUS_REQ:
    case MSG_MAP_REQ:
        if (m->u.status_req.what != 0 || m->u.status_req.node >= SVC_MAX_NODES)
            return FMEM_EINVAL;
        return 0;
    case MSG_MAP_CHUNK:
        if (m->u.map.first > m->u.map.nspans || m->u.map.count > m->u.map.nspans - m->u.map.first ||
            m->u.map.node >= SVC_MAX_NODES)
            return FMEM_EINVAL;
        return 0;
    case MSG_SVC_REGISTER:
        if (m->u.reg.resume_uid > 16383 || !terminated(m->u.reg.name, sizeof m->u.reg.name))
            return FMEM_EINVAL;
        return 0;
    case MSG_SVC_WELCOME:
        if (m->u.svc_welcome.uid == 0 || m->u.svc_welcome.uid > 16383 ||
            m->u.svc_welcome.heartbeat_ms == 0 || m->u.svc_welcome.heartbeat_ms > 600000 ||
            m->u.svc_welcome.miss_limit == 0 || m->u.svc_welcome.miss_limit > 1000 ||
            m->u.svc_welcome.session == 0 ||
            !terminated(m->u.svc_welcome.pool, sizeof m->u.svc_welcome.pool))
            return FMEM_EINVAL;
        return 0;
    case MSG_HEARTBEAT:
        if (m->u.heartbeat.pad)
            return FMEM_EINVAL;
        return 0;
    default:
        return 0;
    }
}

int msg_decode(const void *buf, size_t n, struct msg *out)
{
    struct msg_hdr h;
    memset(out, 0, sizeof *out);
    if (!buf || n < sizeof h || n > MSG_MAX_BYTES)
        return FMEM_EINVAL;
    memcpy(&h, buf, sizeof h);
    if (h.magic != MSG_MAGIC || h.version != MSG_VERSION || h.len != n)
        return FMEM_EINVAL;
    if (h.type == 0 || h.type >= MSG_TYPE_END)
        return FMEM_ENOTSUP;
    size_t fixed = types[h.type].size, tail_max = types[h.type].tail;
    size_t plen = n - sizeof h;
    if (plen < fixed || plen - fixed > tail_max)
        return FMEM_EINVAL;
    out->type = h.type;
    out->seq = h.seq;
    const char *p = (const char *)buf + sizeof h;
    if (fixed)
        memcpy(&out->u, p, fixed);
    size_t tail = plen - fixed;
    if (h.type == MSG_STATUS_REPORT) {
        if (st_check(p, tail))
            return FMEM_EINVAL;
        out->report = p;
        out->report_len = tail;
    } else if (h.type == MSG_MAP_CHUNK) {
        if (tail != out->u.map.count)
            return FMEM_EINVAL;
        out->states = (const uint8_t *)p + fixed;
    }
    return check_fields(out);
}

int ring_req_decode(const struct ring_req *req, uint64_t max_bytes, unsigned nnodes,
                    struct svc_req *out)
{
    memset(out, 0, sizeof *out);
    out->cookie = req->cookie;
    if (req->flags)
        return FMEM_EINVAL;
    switch (req->op) {
    case RING_PING:
        out->op = RING_PING;
        return 0;
    case RING_ALLOC: {
        out->op = RING_ALLOC;
        if (req->size == 0 || req->size > max_bytes)
            return FMEM_ESIZE;
        out->log2_chunks = chunks_log2(req->size);
        return 0;
    }
    case RING_FREE:
    case RING_FREE_CHECK: {
        out->op = req->op;
        const fmem_handle *h = &req->h;
        if (h->node >= nnodes || h->flags || h->length < FMEM_CHUNK_SIZE ||
            h->length > max_bytes || (h->length & (h->length - 1)) ||
            (h->addr & (h->length - 1)) || h->addr > (UINT64_C(1) << 46))
            return FMEM_EBADHANDLE;
        out->h = *h;
        return 0;
    }
    case RING_SET_QP:
        out->op = RING_SET_QP;
        if (req->h.node >= nnodes || req->count == 0 || req->count >= (1u << 24))
            return FMEM_EINVAL; /* queue pair numbers are 24 bits */
        out->h.node = req->h.node;
        out->count = req->count;
        return 0;
    case RING_REFILL:
    case RING_TRIM: {
        out->op = (enum ring_op)req->op;
        uint64_t max = FMEM_CHUNK_SIZE << (RING_CACHE_CLASSES - 1);
        if (req->size < FMEM_CHUNK_SIZE || req->size > max || req->size > max_bytes ||
            (req->size & (req->size - 1)))
            return FMEM_ESIZE;
        if (req->count > RING_CACHE_ENTRIES)
            return FMEM_EINVAL;
        out->log2_chunks = chunks_log2(req->size);
        out->count = req->count;
        return 0;
    }
    default:
        return FMEM_EINVAL;
    }
}
