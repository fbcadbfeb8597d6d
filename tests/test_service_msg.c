/* test_service_msg.c - the strict decoders of the service's messages and
 * ring requests: every accepted message round-trips, every defect is
 * refused. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "service/proto.h"
#include "service/status_wire.h"

static uint8_t buf[MSG_MAX_BYTES + 16];

Test(msg, hello_round_trip)
{
    struct msg_app_hello h = {0};
    strcpy(h.name, "app");
    size_t n = msg_encode(buf, MSG_APP_HELLO, 42, &h, sizeof h);
    struct msg m;
    cr_assert_eq(msg_decode(buf, n, &m), 0);
    cr_assert_eq(m.type, MSG_APP_HELLO);
    cr_assert_eq(m.seq, 42);
    cr_assert_str_eq(m.u.hello.name, "app");
}

Test(msg, defects_refused)
{
    struct msg_app_hello h = {0};
    struct msg m;
    size_t n = msg_encode(buf, MSG_APP_HELLO, 1, &h, sizeof h);
    cr_assert_eq(msg_decode(NULL, n, &m), FMEM_EINVAL);
    cr_assert_eq(msg_decode(buf, 0, &m), FMEM_EINVAL);
    cr_assert_eq(msg_decode(buf, n - 1, &m), FMEM_EINVAL, "length field disagrees");
    cr_assert_eq(msg_decode(buf, MSG_MAX_BYTES + 1, &m), FMEM_EINVAL, "oversized");
    buf[0] ^= 1;
    cr_assert_eq(msg_decode(buf, n, &m), FMEM_EINVAL, "magic");
    buf[0] ^= 1;
    struct msg_hdr hd;
    memcpy(&hd, buf, sizeof hd);
    hd.version = 9;
    memcpy(buf, &hd, sizeof hd);
    cr_assert_eq(msg_decode(buf, n, &m), FMEM_EINVAL, "version");
    n = msg_encode(buf, MSG_TYPE_END, 1, NULL, 0);
    cr_assert_eq(msg_decode(buf, n, &m), FMEM_ENOTSUP, "unknown type");
    n = msg_encode(buf, 0, 1, NULL, 0);
    cr_assert_eq(msg_decode(buf, n, &m), FMEM_ENOTSUP, "type 0");
    h.flags = 1;
    n = msg_encode(buf, MSG_APP_HELLO, 1, &h, sizeof h);
    cr_assert_eq(msg_decode(buf, n, &m), FMEM_EINVAL, "flags");
    memset(&h, 'a', sizeof h);
    h.flags = 0;
    h.pad = 0;
    n = msg_encode(buf, MSG_APP_HELLO, 1, &h, sizeof h);
    cr_assert_eq(msg_decode(buf, n, &m), FMEM_EINVAL, "unterminated name");
    /* fixed-size types refuse a tail */
    struct msg_heartbeat hb = {0};
    n = msg_encode(buf, MSG_HEARTBEAT, 1, &hb, sizeof hb);
    buf[n] = 0;
    ((struct msg_hdr *)buf)->len = (uint32_t)(n + 1);
    cr_assert_eq(msg_decode(buf, n + 1, &m), FMEM_EINVAL, "tail on a fixed type");
}

Test(msg, welcome_fields)
{
    struct msg_app_welcome w = {.nnodes = 1, .nslots = RING_SLOTS, .ring_bytes = RING_BYTES};
    w.data_bytes[0] = 64 << 20;
    struct msg m;
    size_t n = msg_encode(buf, MSG_APP_WELCOME, 1, &w, sizeof w);
    cr_assert_eq(msg_decode(buf, n, &m), FMEM_EINVAL, "a shm node without a session");
    w.svc_uid[0] = 3;
    w.session[0] = 0x1234;
    n = msg_encode(buf, MSG_APP_WELCOME, 1, &w, sizeof w);
    cr_assert_eq(msg_decode(buf, n, &m), 0);
    cr_assert_eq(m.u.welcome.session[0], 0x1234);
    w.nnodes = SVC_MAX_NODES + 1;
    n = msg_encode(buf, MSG_APP_WELCOME, 1, &w, sizeof w);
    cr_assert_eq(msg_decode(buf, n, &m), FMEM_EINVAL);
    w.nnodes = 1;
    w.data_bytes[0] = 12345;
    n = msg_encode(buf, MSG_APP_WELCOME, 1, &w, sizeof w);
    cr_assert_eq(msg_decode(buf, n, &m), FMEM_EINVAL, "data size not whole sections");
}

Test(msg, map_chunk_bounds)
{
    uint8_t p[sizeof(struct msg_map_chunk) + 16];
    struct msg_map_chunk mc = {.nspans = 100, .first = 90, .count = 10};
    memcpy(p, &mc, sizeof mc);
    memset(p + sizeof mc, 3, 16);
    struct msg m;
    size_t n = msg_encode(buf, MSG_MAP_CHUNK, 1, p, sizeof mc + 10);
    cr_assert_eq(msg_decode(buf, n, &m), 0);
    cr_assert_eq(m.states[9], 3);
    n = msg_encode(buf, MSG_MAP_CHUNK, 1, p, sizeof mc + 11);
    cr_assert_eq(msg_decode(buf, n, &m), FMEM_EINVAL, "count disagrees with the tail");
    mc.first = 95;
    memcpy(p, &mc, sizeof mc);
    n = msg_encode(buf, MSG_MAP_CHUNK, 1, p, sizeof mc + 10);
    cr_assert_eq(msg_decode(buf, n, &m), FMEM_EINVAL, "past the end");
}

Test(msg, status_report)
{
    struct msg m;
    static struct st_builder b;
    struct st_worker w = {.index = 1, .served = 7};
    struct st_app a = {.id = 3, .allocs = 5};
    snprintf(a.name, sizeof a.name, "app");
    b.len = 0;
    cr_assert(st_add(&b, ST_WORKER, &w));
    cr_assert(st_add(&b, ST_APP, &a));
    size_t n = msg_encode(buf, MSG_STATUS_REPORT, 1, b.buf, b.len);
    cr_assert_eq(msg_decode(buf, n, &m), 0);
    struct st_report r;
    cr_assert_eq(st_parse(m.report, m.report_len, &r), 0);
    cr_assert_eq(r.nworkers, 1);
    cr_assert_eq(r.workers[0].served, 7);
    cr_assert_eq(r.napps, 1);
    cr_assert_str_eq(r.apps[0].name, "app");
    st_free(&r);
    /* a cut record, a wrong length, an unknown kind, an unterminated name */
    n = msg_encode(buf, MSG_STATUS_REPORT, 1, b.buf, b.len - 1);
    cr_assert_eq(msg_decode(buf, n, &m), FMEM_EINVAL, "cut record");
    struct st_hdr h = {.kind = ST_WORKER, .len = sizeof w - 8};
    memcpy(b.buf, &h, sizeof h);
    n = msg_encode(buf, MSG_STATUS_REPORT, 1, b.buf, b.len);
    cr_assert_eq(msg_decode(buf, n, &m), FMEM_EINVAL, "wrong length");
    h = (struct st_hdr){.kind = ST_KIND_END, .len = sizeof w};
    memcpy(b.buf, &h, sizeof h);
    n = msg_encode(buf, MSG_STATUS_REPORT, 1, b.buf, b.len);
    cr_assert_eq(msg_decode(buf, n, &m), FMEM_EINVAL, "unknown kind");
    b.len = 0;
    memset(a.name, 'x', sizeof a.name);
    cr_assert(st_add(&b, ST_APP, &a));
    n = msg_encode(buf, MSG_STATUS_REPORT, 1, b.buf, b.len);
    cr_assert_eq(msg_decode(buf, n, &m), FMEM_EINVAL, "unterminated name");
}

Test(ring, request_decoder)
{
    struct svc_req r;
    struct ring_req q = {.op = RING_ALLOC, .size = 5000, .cookie = 9};
    cr_assert_eq(ring_req_decode(&q, 64 << 20, 1, &r), 0);
    cr_assert_eq(r.log2_chunks, 1);
    cr_assert_eq(r.cookie, 9);
    q.size = (64 << 20) + 1;
    cr_assert_eq(ring_req_decode(&q, 64 << 20, 1, &r), FMEM_ESIZE);
    q.size = 0;
    cr_assert_eq(ring_req_decode(&q, 64 << 20, 1, &r), FMEM_ESIZE);
    q = (struct ring_req){.op = RING_FREE, .h = {.addr = 8192, .length = 8192, .rkey = 1}};
    cr_assert_eq(ring_req_decode(&q, 64 << 20, 1, &r), 0);
    q.h.addr = 4096;
    cr_assert_eq(ring_req_decode(&q, 64 << 20, 1, &r), FMEM_EBADHANDLE, "misaligned");
    q.h.addr = 8192;
    q.h.node = 1;
    cr_assert_eq(ring_req_decode(&q, 64 << 20, 1, &r), FMEM_EBADHANDLE, "node");
    q.h.node = 0;
    q.h.length = 0;
    cr_assert_eq(ring_req_decode(&q, 64 << 20, 1, &r), FMEM_EBADHANDLE, "length 0");
    q = (struct ring_req){.op = 0};
    cr_assert_eq(ring_req_decode(&q, 64 << 20, 1, &r), FMEM_EINVAL);
    q = (struct ring_req){.op = RING_OP_END};
    cr_assert_eq(ring_req_decode(&q, 64 << 20, 1, &r), FMEM_EINVAL);
    /* the application's queue pair for type-2B windows: 24-bit number,
     * a node that exists */
    q = (struct ring_req){.op = RING_SET_QP, .count = 0x11, .h = {.node = 1}};
    cr_assert_eq(ring_req_decode(&q, 64 << 20, 2, &r), 0);
    cr_assert_eq(r.count, 0x11);
    cr_assert_eq(r.h.node, 1);
    cr_assert_eq(ring_req_decode(&q, 64 << 20, 1, &r), FMEM_EINVAL, "node");
    q.h.node = 0;
    q.count = 0;
    cr_assert_eq(ring_req_decode(&q, 64 << 20, 1, &r), FMEM_EINVAL, "no queue pair");
    q.count = 1u << 24;
    cr_assert_eq(ring_req_decode(&q, 64 << 20, 1, &r), FMEM_EINVAL, "25 bits");
}
