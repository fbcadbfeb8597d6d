/* mnode_regen.c - the memory node's key regenerator. A free revokes the
 * main key by promoting the backup and leaves the backup empty; this pass
 * refills empty backups with a CAS that expects the entry unchanged, so it
 * never resurrects a key a concurrent free just revoked. */
#include <stdlib.h>

#include "node.h"
#include "service/mnode.h"
#include "service/ring.h" /* ring_now_ns */

#define REGEN_BATCH 65536 /* entries per READ */

uint64_t regen_pass(struct node *n, struct regen_stats *st)
{
    uint64_t *buf = malloc(8 * REGEN_BATCH), issued = 0, t0 = ring_now_ns();
    if (!buf)
        return 0;
    for (uint64_t base = 0; base < n->g.nchunks; base += REGEN_BATCH) {
        uint64_t cnt = n->g.nchunks - base < REGEN_BATCH ? n->g.nchunks - base : REGEN_BATCH;
        if (tp_read(n->tp, cap_off(n, base), buf, 8 * cnt) < 0)
            break;
        for (uint64_t i = 0; i < cnt; i++) {
            uint64_t cap = buf[i];
            if (cap_backup(cap) != 0 || cap_main(cap) == 0)
                continue;
            uint64_t next = cap_make(cap_main(cap), node_new_key(n));
            if (tp_cas(n->tp, cap_off(n, base + i), cap, next, NULL) == 1)
                issued++;
        }
    }
    free(buf);
    if (st) {
        atomic_fetch_add(&st->scans, 1);
        atomic_store(&st->last_keys, issued);
        if (issued) {
            atomic_fetch_add(&st->keys, issued);
            atomic_fetch_add(&st->work_ns, ring_now_ns() - t0);
        }
    }
    return issued;
}
