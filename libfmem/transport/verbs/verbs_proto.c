/* verbs_proto.c - reading the private data of RDMA connection setup: the
 * memory node's view of a connect request, a client's view of the accept
 * or reject. No verbs calls here, so the parsers can be fuzzed without a
 * NIC (tests/fuzz/fuzz_verbs_hello.c). The bytes come from the network:
 * they are copied out (no alignment is assumed) and every field that
 * matters is checked. */
#include "verbs/verbs_proto.h"

#include <string.h>

int verbs_hello_parse(const void *pd, size_t len, struct verbs_hello *h)
{
    if (!pd || len < sizeof *h)
        return -1;
    memcpy(h, pd, sizeof *h);
    if (h->magic != VERBS_MAGIC || h->version != VERBS_VERSION)
        return -1;
    if (h->role != VERBS_ROLE_APP && h->role != VERBS_ROLE_SERVICE && h->role != VERBS_ROLE_LOCAL)
        return -1;
    return 0;
}

static bool token_ok(const uint8_t *a, const uint8_t *b)
{
    unsigned diff = 0; /* constant time */
    for (unsigned i = 0; i < VERBS_TOKEN_BYTES; i++)
        diff |= a[i] ^ b[i];
    return diff == 0;
}

enum verbs_admission verbs_hello_admit(const struct verbs_hello *h,
                                       const uint8_t token[VERBS_TOKEN_BYTES], bool ready)
{
    bool keys = h->role != VERBS_ROLE_APP;
    if (keys && !token_ok(h->token, token))
        return VERBS_REFUSE;
    /* until the windows are bound only the regenerator may connect */
    if (h->role != VERBS_ROLE_LOCAL && !ready)
        return VERBS_REFUSE;
    /* a service's queue pairs share a session id (0 is none) */
    if (h->role == VERBS_ROLE_SERVICE && h->session == 0)
        return VERBS_REFUSE;
    return keys ? VERBS_ADMIT_KEYS : VERBS_ADMIT_APP;
}

int verbs_welcome_parse(const void *pd, size_t len, struct verbs_welcome *w)
{
    if (!pd || len < sizeof *w)
        return -1;
    memcpy(w, pd, sizeof *w);
    if (w->magic != VERBS_MAGIC || w->version != VERBS_VERSION || w->size == 0 ||
        w->meta_size > w->size || w->base + w->size < w->base ||
        w->wk_base + w->wk_size < w->wk_base)
        return -1;
    return 0;
}

bool verbs_reject_fenced(const void *pd, size_t len)
{
    struct verbs_reject r;
    if (!pd || len < sizeof r)
        return false;
    memcpy(&r, pd, sizeof r);
    return r.magic == VERBS_MAGIC && r.reason == VERBS_REFUSED_FENCED;
}
