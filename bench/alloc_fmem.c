/* alloc_fmem.c - the allocator under test: an embedded fmem pool on the
 * shared-memory transport with the injected round trip. "fmem-nolog" is the
 * same pool with the redo log switched off (an internal, benchmark-only
 * switch: it measures what logging costs). */
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"
#include "node.h"
#include "pool_internal.h" /* to switch the injected delay off for setup */

static int open_pool(const struct alloc_params *p, bool log, void **self)
{
    char uri[160];
    snprintf(uri, sizeof uri, "mem:?size=%llu&rtt_ns=%llu&rtt_mode=%s",
             (unsigned long long)p->pool_bytes, (unsigned long long)p->rtt_ns,
             p->rtt_mode == TP_RTT_NIC ? "nic" : "spin");
    fmem_pool *pool;
    int rc = fmem_open(uri, &pool);
    if (rc)
        return rc;
    if (!log)
        pool_disable_logging(pool);
    *self = pool;
    return 0;
}

static int open_log(const struct alloc_params *p, void **self) { return open_pool(p, true, self); }
static int open_nolog(const struct alloc_params *p, void **self) { return open_pool(p, false, self); }

static void close_pool(void *self) { fmem_close(self); }

static int alloc_block(void *self, size_t size, fmem_handle *out, struct op_cost *c)
{
    struct trace_mark m;
    trace_mark(&m);
    int rc = fmem_alloc(self, size, out);
    trace_cost(&m, c);
    /* retries as the protocol counts them: failed commit/claim CAS, not
     * failed log flushes */
    c->retries = node_last_retries;
    return rc;
}

static int free_block(void *self, const fmem_handle *h, struct op_cost *c)
{
    struct trace_mark m;
    trace_mark(&m);
    int rc = fmem_free(self, h);
    trace_cost(&m, c);
    return rc;
}

static void set_rtt(void *self, uint64_t rtt_ns)
{
    fmem_pool *p = self;
    for (unsigned i = 0; i < p->nnodes; i++)
        p->nodes[i]->tp->rtt_ns = rtt_ns;
}

static void totals(void *self, struct alloc_totals *t)
{
    fmem_stats_t st;
    if (fmem_stats(self, &st) == 0) {
        t->have_max_retries = true;
        t->max_retries = st.max_retries;
    }
}

const struct allocator alloc_fmem = {
    .name = "fmem",
    .what = "fmem embedded pool (mem:?size=..&rtt_ns=..&rtt_mode=..), redo log on",
    .open = open_log,
    .close = close_pool,
    .alloc = alloc_block,
    .free = free_block,
    .set_rtt = set_rtt,
    .totals = totals,
};

const struct allocator alloc_fmem_nolog = {
    .name = "fmem-nolog",
    .what = "fmem without the redo log (benchmark-only switch)",
    .open = open_nolog,
    .close = close_pool,
    .alloc = alloc_block,
    .free = free_block,
    .set_rtt = set_rtt,
    .totals = totals,
};
