/* test_stress.c - many threads allocating and freeing mixed sizes on one
 * pool, checked against a shadow ownership map (a chunk handed out twice is
 * caught when the second owner claims it) and per-block data stamps. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <pthread.h>
#include <stdlib.h>

#include "fmem.h"
#include "shadow.h"
#include "stress.h"

/* Runs last their time, or longer on a loaded machine until they made
 * this many allocations. */
#define MIN_ALLOCS 2000

struct stress_cfg {
    const char *uri;
    unsigned nodes;
    uint64_t node_bytes;
    int threads;
    int max_live; /* per thread */
    double seconds;
    bool small_only;
};

static void run_stress(const struct stress_cfg *c)
{
    static struct stress_shared s; /* large: keep it off the stack */
    memset(&s, 0, sizeof s);
    s.max_live = c->max_live;
    s.small_only = c->small_only;
    fmem_pool *p;
    int rc = fmem_open(c->uri, &p);
    cr_assert_eq(rc, 0, "fmem_open(%s): %s", c->uri, fmem_strerror(rc));
    cr_assert(shadow_init(&s.sh, c->nodes, c->node_bytes));

    enum { MAX_THREADS = 32 };
    pthread_t t[MAX_THREADS];
    struct stress_worker w[MAX_THREADS];
    cr_assert_leq(c->threads, MAX_THREADS);
    s.deadline = now_seconds() + c->seconds;
    s.hard_deadline = s.deadline + 20;
    s.min_allocs = MIN_ALLOCS;
    for (int i = 0; i < c->threads; i++) {
        w[i] = (struct stress_worker){.s = &s, .p = p, .owner = (uint32_t)i + 1};
        cr_assert_eq(pthread_create(&t[i], NULL, stress_worker_run, &w[i]), 0);
    }
    for (int i = 0; i < c->threads; i++)
        pthread_join(t[i], NULL);

    fmem_stats_t st;
    cr_assert_eq(fmem_stats(p, &st), 0);
    cr_log_info("%s: %d threads, %llu ops, %llu allocs, %llu ENOMEM, %llu CAS (%llu lost), "
                "max retries %llu",
                c->uri, c->threads, (unsigned long long)s.ops, (unsigned long long)s.allocs,
                (unsigned long long)s.enomem, (unsigned long long)st.cas_ops,
                (unsigned long long)st.cas_failures, (unsigned long long)st.max_retries);
    cr_assert_eq(atomic_load(&s.fail.count), 0, "%d failures, first: %s", atomic_load(&s.fail.count),
                 s.fail.msg);
    cr_assert_eq(s.allocs, s.frees);
    cr_assert_eq(st.allocs, s.allocs);
    cr_assert_eq(st.frees, s.frees);
    cr_assert_geq(s.allocs, MIN_ALLOCS, "too little work to mean anything: %llu allocations",
                  (unsigned long long)s.allocs);
    cr_assert_gt(s.io_checks, 0);
    cr_assert_eq(shadow_owned_chunks(&s.sh), 0);
    cr_assert_eq(st.allocated_bytes, 0, "%llu bytes still allocated after every free",
                 (unsigned long long)st.allocated_bytes);
    /* the pool is whole again: every node in one block */
    fmem_handle all[64];
    for (unsigned i = 0; i < c->nodes; i++) {
        rc = fmem_alloc(p, c->node_bytes, &all[i]);
        cr_assert_eq(rc, 0, "full-node allocation %u: %s", i, fmem_strerror(rc));
    }
    for (unsigned i = 0; i < c->nodes; i++)
        cr_assert_eq(fmem_free(p, &all[i]), 0);
    shadow_destroy(&s.sh);
    fmem_close(p);
}

Test(stress, threads_rtt0, .timeout = 60)
{
    run_stress(&(struct stress_cfg){.uri = "mem:?size=64M", .nodes = 1, .node_bytes = 64u << 20,
                                    .threads = 8, .max_live = 24, .seconds = 1.5});
}

Test(stress, threads_rtt2000, .timeout = 60)
{
    /* an injected 2 us round trip widens every race window */
    run_stress(&(struct stress_cfg){.uri = "mem:?size=64M&rtt_ns=2000", .nodes = 1,
                                    .node_bytes = 64u << 20, .threads = 16, .max_live = 12,
                                    .seconds = 1.5});
}

Test(stress, small_pool_near_exhaustion, .timeout = 60)
{
    /* 8 MiB for 8 threads: ENOMEM, span release and reclaim all the time */
    run_stress(&(struct stress_cfg){.uri = "mem:?size=8M", .nodes = 1, .node_bytes = 8u << 20,
                                    .threads = 8, .max_live = 16, .seconds = 1.0});
}

Test(stress, one_section_small_blocks, .timeout = 60)
{
    /* every thread in the same 16 spans: headers change hands constantly */
    run_stress(&(struct stress_cfg){.uri = "mem:?size=2M&rtt_ns=500", .nodes = 1,
                                    .node_bytes = 2u << 20, .threads = 8, .max_live = 8,
                                    .seconds = 1.0, .small_only = true});
}

Test(stress, four_nodes, .timeout = 60)
{
    run_stress(&(struct stress_cfg){.uri = "mem:?size=16M&nodes=4", .nodes = 4,
                                    .node_bytes = 16u << 20, .threads = 8, .max_live = 16,
                                    .seconds = 1.0});
}
