/* key_probe.h - raw reads posted with a key of the test's choosing on an
 * application's queue pair, no library check in the way, and the check
 * that the NIC itself refused one. Include after criterion, fmem.h,
 * transport.h and verbs/transport_verbs.h. */
#ifndef FMEM_TESTS_RDMA_KEY_PROBE_H
#define FMEM_TESTS_RDMA_KEY_PROBE_H

#include <stdint.h>

/* Read 8 bytes at pool offset `off` with `rkey` through t. */
static inline int peek(struct transport *t, uint64_t off, uint32_t rkey, uint64_t *out)
{
    struct tp_op op = {.kind = TP_READ, .off = off, .buf = out, .len = 8, .rkey = rkey};
    return tp_batch(t, &op, 1);
}

/* The attempt must be refused by the NIC (and counted as such). */
static inline void refused(struct transport *t, uint64_t off, uint32_t rkey, const char *what)
{
    uint64_t v = 0, before = verbs_transport_refused(t);
    int rc = peek(t, off, rkey, &v);
    cr_assert_eq(rc, FMEM_EACCES, "%s: expected a remote access error, got %s", what,
                 rc ? fmem_strerror(rc) : "success");
    cr_assert_eq(verbs_transport_refused(t), before + 1, "%s: not refused by the NIC", what);
}

#endif
