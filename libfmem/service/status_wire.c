/* status_wire.c - building, checking and decoding status records. */
#include "service/status_wire.h"

#include <stdlib.h>
#include <string.h>

static const size_t kind_size[ST_KIND_END] = {
    [ST_SERVICE] = sizeof(struct st_service), [ST_MNODE] = sizeof(struct st_mnode),
    [ST_NODE] = sizeof(struct st_node),       [ST_APP] = sizeof(struct st_app),
    [ST_WORKER] = sizeof(struct st_worker),   [ST_PEER] = sizeof(struct st_peer),
    [ST_RECOVERY] = sizeof(struct st_recovery),
};

bool st_add(struct st_builder *b, enum st_kind kind, const void *rec)
{
    struct st_hdr h = {.kind = (uint16_t)kind, .len = (uint16_t)kind_size[kind]};
    if (b->len + sizeof h + h.len > sizeof b->buf)
        return false;
    memcpy(b->buf + b->len, &h, sizeof h);
    memcpy(b->buf + b->len + sizeof h, rec, h.len);
    b->len += sizeof h + h.len;
    return true;
}

static bool terminated(const char *s, size_t cap)
{
    return memchr(s, 0, cap) != NULL;
}

/* The string fields of one record (aligned copy in `rec`). */
static bool strings_ok(unsigned kind, const void *rec)
{
    switch (kind) {
    case ST_SERVICE:
        return terminated(((const struct st_service *)rec)->socket, ST_PATH_MAX);
    case ST_MNODE:
        return terminated(((const struct st_mnode *)rec)->pool, ST_PATH_MAX);
    case ST_NODE: {
        const struct st_node *x = rec;
        return terminated(x->pool, sizeof x->pool) && terminated(x->path, sizeof x->path);
    }
    case ST_APP:
        return terminated(((const struct st_app *)rec)->name, MSG_NAME_MAX);
    case ST_PEER:
        return terminated(((const struct st_peer *)rec)->name, MSG_NAME_MAX);
    case ST_RECOVERY: {
        const struct st_recovery *x = rec;
        return terminated(x->name, sizeof x->name) && terminated(x->why, sizeof x->why);
    }
    default:
        return true;
    }
}

/* Walk the stream; with r, keep the records. */
static int walk(const uint8_t *p, size_t n, struct st_report *r)
{
    union {
        struct st_service s;
        struct st_mnode m;
        struct st_node nd;
        struct st_app a;
        struct st_worker w;
        struct st_peer pe;
        struct st_recovery rc;
    } rec;
    size_t off = 0;
    while (off < n) {
        struct st_hdr h;
        if (n - off < sizeof h)
            return FMEM_EINVAL;
        memcpy(&h, p + off, sizeof h);
        off += sizeof h;
        if (h.kind == 0 || h.kind >= ST_KIND_END || h.len != kind_size[h.kind] || n - off < h.len)
            return FMEM_EINVAL;
        memcpy(&rec, p + off, h.len);
        off += h.len;
        if (!strings_ok(h.kind, &rec))
            return FMEM_EINVAL;
        if (!r)
            continue;
#define KEEP(arr, cnt, field)                                                                  \
    do {                                                                                       \
        void *grown = realloc(r->arr, (r->cnt + 1) * sizeof *r->arr);                          \
        if (!grown)                                                                            \
            return FMEM_ENOMEM;                                                                \
        r->arr = grown;                                                                        \
        r->arr[r->cnt++] = rec.field;                                                          \
    } while (0)
        switch (h.kind) {
        case ST_SERVICE:
            r->service = rec.s;
            r->has_service = true;
            break;
        case ST_MNODE:
            r->mnode = rec.m;
            r->has_mnode = true;
            break;
        case ST_NODE: KEEP(nodes, nnodes, nd); break;
        case ST_APP: KEEP(apps, napps, a); break;
        case ST_WORKER: KEEP(workers, nworkers, w); break;
        case ST_PEER: KEEP(peers, npeers, pe); break;
        case ST_RECOVERY: KEEP(recoveries, nrecoveries, rc); break;
        }
#undef KEEP
    }
    return 0;
}

int st_check(const void *p, size_t n)
{
    return walk(p, n, NULL);
}

int st_parse(const void *p, size_t n, struct st_report *r)
{
    memset(r, 0, sizeof *r);
    return walk(p, n, r);
}

void st_free(struct st_report *r)
{
    free(r->nodes);
    free(r->apps);
    free(r->workers);
    free(r->peers);
    free(r->recoveries);
    memset(r, 0, sizeof *r);
}
