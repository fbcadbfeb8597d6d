/* fuzz_verbs_hello.c - libFuzzer target for the private data of RDMA
 * connection setup (verbs/verbs_proto.c): what the memory node reads from
 * anyone's connect request, and what a client reads from the accept or
 * reject. No NIC needed. The data may sit at any alignment; whatever is
 * admitted must have the right magic, version and role, the node's token
 * for the keys, and a session for a service. Built and run by
 * tests/fuzz/fuzz.sh. */
#include <stdlib.h>
#include <string.h>

#include "verbs/verbs_proto.h"

static const uint8_t token[VERBS_TOKEN_BYTES] = "0123456789abcde";

static void check_hello(const void *pd, size_t len)
{
    struct verbs_hello h;
    if (verbs_hello_parse(pd, len, &h))
        return;
    if (len < sizeof h || h.magic != VERBS_MAGIC || h.version != VERBS_VERSION ||
        (h.role != VERBS_ROLE_APP && h.role != VERBS_ROLE_SERVICE && h.role != VERBS_ROLE_LOCAL))
        abort();
    for (int ready = 0; ready < 2; ready++) {
        enum verbs_admission a = verbs_hello_admit(&h, token, ready);
        if (a == VERBS_REFUSE)
            continue;
        if (a != VERBS_ADMIT_APP && a != VERBS_ADMIT_KEYS)
            abort();
        if ((a == VERBS_ADMIT_APP) != (h.role == VERBS_ROLE_APP))
            abort();
        if (a == VERBS_ADMIT_KEYS && memcmp(h.token, token, sizeof token))
            abort(); /* keys without the token */
        if (!ready && h.role != VERBS_ROLE_LOCAL)
            abort();
        if (h.role == VERBS_ROLE_SERVICE && h.session == 0)
            abort();
    }
}

static void check_welcome(const void *pd, size_t len)
{
    struct verbs_welcome w;
    if (verbs_welcome_parse(pd, len, &w) == 0 &&
        (w.magic != VERBS_MAGIC || w.version != VERBS_VERSION || w.meta_size > w.size ||
         w.size == 0))
        abort();
    verbs_reject_fenced(pd, len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* the input as sent, and with its first byte dropped: misaligned */
    check_hello(data, size);
    check_welcome(data, size);
    if (size) {
        check_hello(data + 1, size - 1);
        check_welcome(data + 1, size - 1);
    }
    if (verbs_hello_parse(NULL, size, &(struct verbs_hello){0}) == 0)
        abort();
    return 0;
}
