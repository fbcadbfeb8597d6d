/* test_failslow.c - a thread that stalls between its commit point and its
 * log flush must not overwrite newer log state when it wakes up; and the
 * 7-bit timestamps order operations correctly across wrap-around. */
#include <criterion/criterion.h>
#include <fmem.h>
#include <pthread.h>
#include <semaphore.h>

#include "crashpoint.h"
#include "pool_internal.h"
#include "protocol.h"

static sem_t paused, resume;
static _Thread_local int pause_here;
static enum crash_point pause_point;

static void pause_hook(enum crash_point cp)
{
    if (pause_here && cp == pause_point) {
        pause_here = 0;
        sem_post(&paused);
        sem_wait(&resume);
    }
}

struct staller {
    fmem_pool *p;
    size_t size;
    fmem_handle h;
    int rc;
};

static void *stall_alloc(void *arg)
{
    struct staller *s = arg;
    pause_here = 1;
    s->rc = fmem_alloc(s->p, s->size, &s->h);
    return NULL;
}

static uint64_t entry(struct node *n, uint64_t chunk)
{
    uint64_t e;
    cr_assert_eq(tp_read(n->tp, log_off(n, chunk), &e, 8), 0);
    return e;
}

/* Find the block the stalled thread committed: the temporary log of the
 * header it wrote still names it. */
static uint64_t stalled_chunk_span(struct node *n)
{
    for (uint64_t s = 0; s < n->g.nspans; s++) {
        uint64_t h;
        tp_read(n->tp, span_hdr_off(n, s), &h, 8);
        if (!h_detached(h) && h_lo(h))
            return s * CHUNKS_PER_SPAN + h_off(h);
    }
    cr_assert_fail("no committed chunk found");
    return 0;
}

static uint64_t stalled_chunk_section(struct node *n)
{
    for (uint64_t x = 0; x < n->g.nsections; x++) {
        uint64_t h;
        tp_read(n->tp, sec_hdr_off(n, x), &h, 8);
        if (h_lo(h))
            return (x * SPANS_PER_SECTION + h_off(h)) * CHUNKS_PER_SPAN;
    }
    cr_assert_fail("no committed span block found");
    return 0;
}

static void stall_and_overtake(enum crash_point cp, size_t size, unsigned log2c, unsigned layer)
{
    fmem_pool *p;
    cr_assert_eq(fmem_open("mem:?size=8M", &p), 0);
    struct node *n = p->nodes[0];
    sem_init(&paused, 0, 0);
    sem_init(&resume, 0, 0);
    pause_point = cp;
    fmem_crash_hook = pause_hook;

    struct staller s = {.p = p, .size = size};
    pthread_t t;
    pthread_create(&t, NULL, stall_alloc, &s);
    sem_wait(&paused); /* committed, log not flushed */
    uint64_t c = layer == LAYER_CHUNK ? stalled_chunk_span(n) : stalled_chunk_section(n);
    cr_assert_eq(entry(n, c), 0, "the stalled allocation's log must still be pending");

    /* others reuse the header: free the stalled block (helping flush its
     * log first), then allocate it again */
    cr_assert_eq(node_free_as(n, c, log2c, n->uid), 0);
    uint64_t chunk2, others[4096];
    uint32_t key2;
    int nothers = 0;
    for (;;) { /* allocate until the same block comes back */
        cr_assert_eq(node_alloc(n, log2c, &chunk2, &key2), 0, "block never came back");
        if (chunk2 == c)
            break;
        cr_assert_lt(nothers, 4096);
        others[nothers++] = chunk2;
    }
    uint64_t newer = entry(n, c);
    cr_assert(log_valid(newer) && log_alloc(newer));
    cr_assert_eq(log_layer(newer), layer);

    sem_post(&resume); /* the stalled thread flushes its old log now */
    pthread_join(t, NULL);
    fmem_crash_hook = NULL;
    cr_assert_eq(s.rc, 0);
    for (int i = 0; i < nothers; i++)
        cr_assert_eq(node_free_as(n, others[i], log2c, n->uid), 0);
    cr_expect_eq(entry(n, c), newer, "stale flush overwrote the newer log entry (%#llx -> %#llx)",
                 (unsigned long long)newer, (unsigned long long)entry(n, c));
    /* the stale entry would have had an older timestamp */
    cr_expect(ts_newer(log_ts(newer), (log_ts(newer) + TS_MASK - 1) & TS_MASK));
    fmem_close(p);
}

Test(failslow, chunk_flush_after_reuse)
{
    stall_and_overtake(CP_CHUNK_COMMIT, 4096, 0, LAYER_CHUNK);
}

Test(failslow, span_flush_after_reuse)
{
    stall_and_overtake(CP_SPAN_COMMIT, 256 << 10, 6, LAYER_SPAN);
}

/* Drive one chunk's timestamp around the 7-bit circle: every alloc/free
 * flip advances it, the entry always holds the latest op, and a flush of a
 * log up to 63 steps older is discarded even after wrap-around. */
Test(failslow, timestamp_wraparound)
{
    fmem_pool *p;
    cr_assert_eq(fmem_open("mem:?size=4M", &p), 0);
    struct node *n = p->nodes[0];
    unsigned last_ts = 0;
    uint64_t c = 0, s = 0;
    for (int i = 0; i < 300; i++) {
        uint32_t key;
        cr_assert_eq(node_alloc(n, 0, &c, &key), 0);
        s = c / CHUNKS_PER_SPAN;
        uint64_t e = entry(n, c);
        cr_assert(log_alloc(e));
        if (i > 0)
            cr_assert_eq(log_ts(e), (last_ts + 1) & TS_MASK, "round %d", i);
        cr_assert_eq(node_free_as(n, c, 0, n->uid), 0);
        e = entry(n, c);
        cr_assert(!log_alloc(e));
        last_ts = log_ts(e);
    }
    /* forge stale header values (older alloc logs) and flush them */
    uint64_t cur = entry(n, c), hdr;
    tp_read(n->tp, span_hdr_off(n, s), &hdr, 8);
    for (unsigned back = 1; back < 64; back++) {
        unsigned ts = (log_ts(cur) - back) & TS_MASK;
        uint64_t stale = h_with_log(h_with_lo(hdr, 1u << (c % CHUNKS_PER_SPAN)) & ~H_DETACHED,
                                    (unsigned)(c % CHUNKS_PER_SPAN), 0, ts, n->uid);
        log_flush_span(n, s, stale);
        cr_assert_eq(entry(n, c), cur, "flush of a log %u steps older overwrote the entry", back);
    }
    fmem_close(p);
}
