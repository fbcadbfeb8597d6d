/* test_policy_streams.c - the policy's read-ahead per stream
 * (libfmem/far/region_policy.c), driven directly: the test plays the fault
 * handler, reporting faults on units of a region whose memory it never
 * touches (so the real handler stays idle) and reading back the window the
 * policy hands out for each, as readahead_note does. */
#include <criterion/criterion.h>
#include <stdint.h>

#include "fmem.h"
#include "fmem_far.h"
#include "region_internal.h"
#include "region_policy.h"

#define UNIT (16u << 10)
#define CAP 64u           /* cached units: the full depth is CAP / 4 */
#define DEPTH (CAP / 4)

static fmem_pool *pool;
static fmem_region *reg;

static void setup(void)
{
    cr_assert_eq(fmem_open("mem:?size=64M&nodes=2", &pool), 0);
    fmem_region_config c = {.size = 32u << 20, .cache_bytes = CAP * UNIT, .fetch_unit = UNIT};
    cr_assert_eq(fmem_region_create(pool, &c, &reg), 0);
    cr_assert_eq(reg->cap, CAP);
}

static void teardown(void)
{
    fmem_region_destroy(reg);
    fmem_close(pool);
}

/* A demand fault on unit u; returns the units the policy reads ahead after
 * it, and records them as brought in, as the handler does. */
static unsigned fault(uint32_t u)
{
    policy_note_fault(reg, u, 0);
    int w = policy_stream_window(reg);
    cr_assert_geq(w, 0, "the depth is the policy's");
    policy_stream_ahead(reg, u + 1 + (uint32_t)w);
    return (unsigned)w;
}

/* A scan from unit u that faults only where its read-ahead ends: returns
 * the unit it faults on next; *w gets the last window. */
static uint32_t scan_step(uint32_t u, unsigned *w)
{
    *w = fault(u);
    return u + 1 + *w;
}

TestSuite(policy_streams, .init = setup, .fini = teardown, .timeout = 30);

/* One fault that happens to land where a candidate stream would go on (a
 * random fault after the unit before it) reads nothing ahead: a random
 * gather met such a pair a few times per thousand faults and each time
 * had a window mapped while its next fault waited. */
Test(policy_streams, one_continuation_reads_nothing_ahead)
{
    uint64_t s = 12345;
    unsigned ahead = 0;
    for (int i = 0; i < 300; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t u = (uint32_t)(s >> 33) % 500 * 4; /* no pair starts at another's u + 2 */
        ahead += fault(u);
        ahead += fault(u + 1); /* lands on the candidate u started */
    }
    cr_assert_eq(ahead, 0, "%u units read ahead for random faults", ahead);
}

/* A new stream of single-unit faults reads ahead from its second
 * continuation and reaches the full depth within five faults. */
Test(policy_streams, new_stream_reaches_full_depth_within_five_faults)
{
    unsigned w, windows[5];
    uint32_t u = 100;
    for (int i = 0; i < 5; i++) {
        u = scan_step(u, &w);
        windows[i] = w;
    }
    cr_assert_eq(windows[0], 0);
    cr_assert_eq(windows[1], 0, "one continuation is not a stream yet");
    cr_assert_gt(windows[2], 0, "two are");
    cr_assert_eq(windows[4], DEPTH, "windows %u %u %u %u %u", windows[0], windows[1], windows[2],
                 windows[3], windows[4]);
}

/* Read-ahead evicted before the scan reached it (a fault inside the last
 * window) halves the stream's depth and makes it a candidate again; once
 * two faults on the next units confirm it, it goes on at that depth at
 * once, and once the scan uses a whole window at that depth the depth
 * doubles back: the stream is at its full depth again on the window after
 * instead of staying at half of it for the rest of the scan. */
Test(policy_streams, lost_readahead_resumes_and_depth_recovers)
{
    unsigned w;
    uint32_t u = 1000;
    for (int i = 0; i < 8; i++)
        u = scan_step(u, &w);
    cr_assert_eq(w, DEPTH);
    /* the scan finds unit u - DEPTH / 2 of its last window gone */
    uint32_t lost_at = u - DEPTH / 2;
    cr_assert_eq(fault(lost_at), 0, "one fault in a stream's range is no proof of it");
    cr_assert_eq(fault(lost_at + 1), 0, "nor are two");
    u = scan_step(lost_at + 2, &w);
    cr_assert_eq(w, DEPTH / 2, "resumes at half the depth, window %u", w);
    unsigned later[3];
    for (int i = 0; i < 3; i++) {
        u = scan_step(u, &w);
        later[i] = w;
    }
    cr_assert_eq(later[0], DEPTH, "a whole window used at half depth: full depth again "
                 "(windows %u %u %u)", later[0], later[1], later[2]);
    cr_assert_eq(later[2], DEPTH);
}

/* Random faults between a stream's faults (a column scan with lookups in
 * another table) do not cost the stream its depth. */
Test(policy_streams, lookups_between_faults_keep_the_stream)
{
    unsigned w = 0;
    uint32_t u = 0;
    uint64_t s = 99;
    for (int i = 0; i < 3; i++) /* an established stream */
        u = scan_step(u, &w);
    for (int i = 0; i < 40; i++) {
        u = scan_step(u, &w);
        for (int k = 0; k < 20; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            /* units 3 apart: no lookup lands right after another */
            cr_assert_eq(fault(1600 + (uint32_t)(s >> 33) % 140 * 3), 0);
        }
    }
    cr_assert_eq(w, DEPTH);
}
