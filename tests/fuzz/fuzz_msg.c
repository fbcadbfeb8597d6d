/* fuzz_msg.c - libFuzzer target for the service's decoders: every datagram
 * a daemon can receive goes through msg_decode(), every ring slot through
 * ring_req_decode(). Neither may crash, read out of bounds or accept
 * something inconsistent. Built and run by tests/fuzz_msg.sh. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "service/proto.h"
#include "service/status_wire.h"

static void check_msg(const uint8_t *data, size_t size)
{
    struct msg m;
    if (msg_decode(data, size, &m))
        return;
    /* what the decoder vouches for must hold */
    if (m.type == 0 || m.type >= MSG_TYPE_END)
        abort();
    if (m.type == MSG_STATUS_REPORT) {
        struct st_report r;
        if (m.report_len > MSG_TEXT_MAX || st_parse(m.report, m.report_len, &r) == FMEM_EINVAL)
            abort();
        st_free(&r);
    }
    if (m.type == MSG_MAP_CHUNK) {
        volatile uint8_t sum = 0;
        for (uint32_t i = 0; i < m.u.map.count; i++)
            sum += m.states[i];
        if (m.u.map.first + m.u.map.count > m.u.map.nspans)
            abort();
    }
    if (m.type == MSG_APP_HELLO && strlen(m.u.hello.name) >= MSG_NAME_MAX)
        abort();
    if (m.type == MSG_APP_WELCOME && (m.u.welcome.nnodes == 0 || m.u.welcome.nnodes > SVC_MAX_NODES))
        abort();
}

static void check_req(const uint8_t *data, size_t size)
{
    struct ring_req r;
    if (size < sizeof r + 9)
        return;
    memcpy(&r, data, sizeof r);
    uint64_t max;
    memcpy(&max, data + sizeof r, 8);
    max &= (UINT64_C(1) << 46) - 1;
    unsigned nnodes = data[sizeof r + 8] % (SVC_MAX_NODES + 1);
    struct svc_req s;
    if (ring_req_decode(&r, max, nnodes, &s))
        return;
    if (s.op == RING_ALLOC && ((FMEM_CHUNK_SIZE << s.log2_chunks) < r.size || r.size > max))
        abort();
    if (s.op == RING_FREE && (s.h.node >= nnodes || (s.h.length & (s.h.length - 1)) ||
                              (s.h.addr & (s.h.length - 1)) || s.h.length > max))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_msg(data, size);
    check_req(data, size);
    return 0;
}
