/* test_paths.c - regions over several memory nodes: the emulated per-node
 * links (bw= in the URI), units striped over the nodes with fetches and
 * write-backs in flight side by side, the per-region tuning policy and its
 * explicit overrides, and the path figures. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fmem.h"
#include "fmem_far.h"
#include "uri.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* ---- the URI key ----------------------------------------------------------- */

Test(paths_uri, bw_values)
{
    struct node_uri u[4];
    cr_assert_eq(uri_parse("mem:?bw=1G&rtt_ns=3000", u, 4), 1);
    cr_assert_eq(u[0].bw, UINT64_C(1) << 30);
    cr_assert_eq(u[0].rtt_ns, 3000);
    cr_assert_eq(uri_parse("mem:?bw=64M;shm:/x-stripe?bw=4096", u, 4), 2);
    cr_assert_eq(u[0].bw, UINT64_C(64) << 20);
    cr_assert_eq(u[1].bw, 4096);
    cr_assert_eq(uri_parse("mem:", u, 4), 1);
    cr_assert_eq(u[0].bw, 0, "no key: no limit");
}

static void bw_refused(const char *uri, const char *want)
{
    fmem_pool *p = NULL;
    cr_assert_eq(fmem_open(uri, &p), FMEM_EURI, "%s accepted", uri);
    cr_assert_null(p);
    cr_assert_not_null(strstr(fmem_uri_error(), want), "%s: error '%s' lacks '%s'", uri,
                       fmem_uri_error(), want);
}

Test(paths_uri, bad_bw_refused_naming_the_key)
{
    bw_refused("mem:?bw=0", "bw='0'");
    bw_refused("mem:?bw=100", "bw='100'"); /* below 4K per second */
    bw_refused("mem:?bw=12Q", "bw='12Q'");
    bw_refused("mem:?bw=1.5G", "bw='1.5G'");
    bw_refused("mem:?bw=-1G", "bw='-1G'");
    bw_refused("mem:?bw=", "bw=''");
    bw_refused("mem:?size=8M&bw=99999999999999999999", "bw=");
    bw_refused("mem:?bw=1G;mem:?bw=x", "bw='x'"); /* a later node's */
    bw_refused("rdma://h:1?bw=1G", "(mem:, shm: and file: only)");
}

/* ---- the link holds its bandwidth ------------------------------------------ */

struct reader {
    fmem_pool *p;
    fmem_handle h;
    size_t bytes;
    double secs;
};

static void *read_all(void *arg)
{
    struct reader *rd = arg;
    char *buf = malloc(64 << 10);
    double t0 = now_s();
    for (size_t off = 0; off < rd->bytes; off += 64 << 10)
        cr_assert_eq(fmem_read(rd->p, &rd->h, off, buf, 64 << 10), 0);
    rd->secs = now_s() - t0;
    free(buf);
    return NULL;
}

/* 4 MiB over a 32 MiB/s link takes 1/8 s; two nodes' links are independent
 * (two readers on two nodes take about as long as one), one node's link is
 * shared (two readers on it take about twice as long). Loose bounds: the
 * limit must never be beaten, and the machine may be busy. */
Test(paths_link, bandwidth_limit_holds_per_node, .timeout = 60)
{
    fmem_pool *p;
    cr_assert_eq(fmem_open("mem:?size=16M&nodes=2&bw=32M", &p), 0);
    struct reader rd[3] = {{.p = p, .bytes = 4 << 20}, {.p = p, .bytes = 4 << 20},
                           {.p = p, .bytes = 4 << 20}};
    /* allocations go round robin over the nodes */
    fmem_handle h[3];
    for (int i = 0; i < 3; i++)
        cr_assert_eq(fmem_alloc(p, 4 << 20, &h[i]), 0);
    cr_assert_neq(h[0].node, h[1].node);
    cr_assert_eq(h[0].node, h[2].node);
    const double expect = 4.0 / 32;

    rd[0].h = h[0];
    read_all(&rd[0]);
    double one = rd[0].secs;
    cr_assert_geq(one, 0.9 * expect, "4 MiB in %.3f s: faster than the link", one);
    cr_assert_leq(one, 6 * expect, "4 MiB in %.3f s", one);

    /* best of three: a loaded machine wakes a waiting reader late, and its
     * link idles meanwhile (that only ever makes a run slower) */
    double two_nodes = 1e9, one_node = 1e9;
    for (int attempt = 0; attempt < 3; attempt++) {
        pthread_t t[2];
        rd[0].h = h[0];
        rd[1].h = h[1]; /* the other node */
        double t0 = now_s();
        for (int i = 0; i < 2; i++)
            pthread_create(&t[i], NULL, read_all, &rd[i]);
        for (int i = 0; i < 2; i++)
            pthread_join(t[i], NULL);
        double two = now_s() - t0;
        rd[1].h = h[2]; /* the same node as h[0] */
        t0 = now_s();
        for (int i = 0; i < 2; i++)
            pthread_create(&t[i], NULL, read_all, &rd[i]);
        for (int i = 0; i < 2; i++)
            pthread_join(t[i], NULL);
        double one = now_s() - t0;
        cr_assert_geq(one, 1.8 * expect, "8 MiB over one link in %.3f s", one);
        cr_assert_geq(two, 0.9 * expect, "4 MiB over each of two links in %.3f s", two);
        two_nodes = two < two_nodes ? two : two_nodes;
        one_node = one < one_node ? one : one_node;
    }
    cr_assert_lt(two_nodes, 0.75 * one_node,
                 "two links %.3f s, one link %.3f s: the paths are not independent", two_nodes,
                 one_node);
    fmem_close(p);
}

/* ---- regions striped over several nodes ------------------------------------ */

static fmem_region *make_on(fmem_pool *p, size_t size, size_t cache, size_t unit)
{
    fmem_region_config c = {.size = size, .cache_bytes = cache, .fetch_unit = unit};
    fmem_region *r;
    int rc = fmem_region_create(p, &c, &r);
    if (rc == FMEM_EACCES || rc == FMEM_ENOTSUP)
        cr_skip_test("userfaultfd is not available here: %s", fmem_strerror(rc));
    cr_assert_eq(rc, 0, "create: %s", fmem_strerror(rc));
    return r;
}

static void check_all(const char *base, const char *shadow, size_t size)
{
    for (size_t off = 0; off < size; off += 4096)
        if (memcmp(base + off, shadow + off, 4096))
            cr_assert_fail("data differs from the shadow at %zu", off);
}

/* Random writes, reads, releases and flushes through a cache far smaller
 * than the data, checked against a shadow copy; every node holds some of
 * the region's chunks and the path figures add up to the region's. */
static void striped_integrity(const char *uri, size_t unit, int all_nodes)
{
    fmem_pool *p;
    cr_assert_eq(fmem_open(uri, &p), 0, "%s: %s", uri, fmem_uri_error());
    const size_t size = 8 << 20;
    fmem_region *r = make_on(p, size, 512 << 10, unit);
    char *base = fmem_region_base(r), *shadow = calloc(1, size);
    uint64_t s = 0x1234567 + unit;
    for (int step = 0; step < 3000; step++) {
        uint64_t op = rnd(&s) % 100;
        size_t off = rnd(&s) % size;
        if (op < 55) { /* write a run of bytes */
            size_t len = 1 + rnd(&s) % (3 * unit);
            if (len > size - off)
                len = size - off;
            uint8_t v = (uint8_t)rnd(&s);
            memset(base + off, v, len);
            memset(shadow + off, v, len);
        } else if (op < 90) { /* read some back */
            size_t len = 1 + rnd(&s) % (2 * unit);
            if (len > size - off)
                len = size - off;
            if (memcmp(base + off, shadow + off, len))
                cr_assert_fail("step %d: read at %zu differs", step, off);
        } else if (op < 97) { /* release whole pages */
            off &= ~(size_t)4095;
            size_t len = (1 + rnd(&s) % 8) * 4096;
            if (len > size - off)
                len = size - off;
            cr_assert_eq(fmem_region_release(r, off, len), 0);
            memset(shadow + off, 0, len);
        } else {
            cr_assert_eq(fmem_region_flush(r), 0);
        }
    }
    /* a sequential pass (read-ahead, parallel fetches) and a full check */
    check_all(base, shadow, size);
    cr_assert_eq(fmem_region_flush(r), 0);
    check_all(base, shadow, size);

    fmem_region_stats_t st;
    cr_assert_eq(fmem_region_stats(r, &st), 0);
    fmem_stats_t ps;
    cr_assert_eq(fmem_stats(p, &ps), 0);
    cr_assert_eq(st.paths, ps.nodes);
    cr_assert_gt(st.evictions, 0, "the cache never filled");
    fmem_region_path_t path[16];
    int n = fmem_region_paths(r, path, 16);
    cr_assert_eq(n, (int)ps.nodes);
    uint64_t fetched = 0, written = 0, chunks = 0;
    for (int i = 0; i < n; i++) {
        if (all_nodes)
            cr_assert_gt(path[i].chunks, 0, "node %d holds none of the region", i);
        fetched += path[i].bytes_fetched;
        written += path[i].bytes_written;
        chunks += path[i].chunks;
    }
    cr_assert_eq(written, st.bytes_written);
    cr_assert_leq(fetched, st.bytes_fetched); /* in-place reads bypass the paths */
    cr_assert_eq(chunks * (unit > 65536 ? unit : 65536), st.remote_bytes);
    cr_assert_eq(fmem_region_destroy(r), 0);
    cr_assert_eq(fmem_stats(p, &ps), 0);
    cr_assert_eq(ps.allocated_bytes, 0, "the region left pool space behind");
    free(shadow);
    fmem_close(p);
}

Test(paths_region, striped_over_four_linked_nodes, .timeout = 240)
{
    striped_integrity("mem:?size=32M&nodes=4&bw=4G", 16 << 10, 1);
}

Test(paths_region, striped_4k_units_with_latency, .timeout = 240)
{
    striped_integrity("mem:?size=32M&nodes=3&rtt_ns=2000", 4 << 10, 1);
}

Test(paths_region, striped_64k_units_over_mixed_links, .timeout = 240)
{
    striped_integrity("mem:?size=32M&bw=4G;mem:?size=32M&bw=1G;mem:?size=32M", 64 << 10, 0);
}

Test(paths_region, one_node_in_place, .timeout = 240)
{
    striped_integrity("mem:?size=32M", 16 << 10, 1);
}

/* ---- tuning and the policy ------------------------------------------------- */

Test(paths_tune, bad_values_refused)
{
    fmem_pool *p;
    cr_assert_eq(fmem_open("mem:?size=16M&nodes=2", &p), 0);
    fmem_region *r = make_on(p, 4 << 20, 1 << 20, 16 << 10); /* 64 units cached */
    fmem_region_tuning t = {.set = FMEM_REGION_TUNE_STRIPE, .stripe = 0};
    cr_assert_eq(fmem_region_tune(r, &t), FMEM_EINVAL);
    t.stripe = 3; /* only 2 paths */
    cr_assert_eq(fmem_region_tune(r, &t), FMEM_EINVAL);
    t = (fmem_region_tuning){.set = FMEM_REGION_TUNE_IO_WIDTH, .io_width = 0};
    cr_assert_eq(fmem_region_tune(r, &t), FMEM_EINVAL);
    t.io_width = FMEM_REGION_MAX_IO_WIDTH + 1;
    cr_assert_eq(fmem_region_tune(r, &t), FMEM_EINVAL);
    t = (fmem_region_tuning){.set = FMEM_REGION_TUNE_PREFETCH, .prefetch = 17};
    cr_assert_eq(fmem_region_tune(r, &t), FMEM_EINVAL, "more than a quarter of the cache");
    t = (fmem_region_tuning){.set = FMEM_REGION_TUNE_ALL + 1}; /* no such field */
    cr_assert_eq(fmem_region_tune(r, &t), FMEM_EINVAL);
    cr_assert_eq(fmem_region_tune(NULL, &t), FMEM_EINVAL);
    cr_assert_eq(fmem_region_tune(r, NULL), FMEM_EINVAL);
    t = (fmem_region_tuning){.set = FMEM_REGION_TUNE_ALL, .prefetch = 16, .stripe = 2, .io_width = 3,
                             .fetch = 1};
    cr_assert_eq(fmem_region_tune(r, &t), 0);
    fmem_region_tuning g;
    cr_assert_eq(fmem_region_tuning_get(r, &g), 0);
    cr_assert_eq(g.set, FMEM_REGION_TUNE_ALL);
    cr_assert_eq(g.prefetch, 16);
    cr_assert_eq(g.stripe, 2);
    cr_assert_eq(g.io_width, 3);
    cr_assert_eq(g.paths, 2);
    fmem_region_destroy(r);
    fmem_close(p);
}

static void scan(const char *base, size_t size)
{
    for (size_t off = 0; off < size; off += 4096)
        (void)*(volatile const char *)(base + off);
}

static void gather(const char *base, size_t size, unsigned n, uint64_t *s)
{
    for (unsigned i = 0; i < n; i++)
        (void)*(volatile const char *)(base + rnd(s) % (size / 4096) * 4096);
}

/* A scan makes the policy read ahead, a random gather turns read-ahead
 * off; an explicit setting is kept whatever the faults look like. */
Test(paths_policy, follows_the_faults_unless_fixed, .timeout = 120)
{
    fmem_pool *p;
    cr_assert_eq(fmem_open("mem:?size=64M&nodes=2&bw=8G", &p), 0);
    const size_t size = 16 << 20, unit = 4 << 10;
    fmem_region *r = make_on(p, size, 1 << 20, unit); /* 256 units cached */
    char *base = fmem_region_base(r);
    for (size_t off = 0; off < size; off += 4096)
        base[off] = 1;
    fmem_region_stats_t st;
    uint64_t s = 99;
    fmem_region_stats_t st0;
    cr_assert_eq(fmem_region_stats(r, &st0), 0);
    gather(base, size, 2000, &s);
    cr_assert_eq(fmem_region_stats(r, &st), 0);
    /* the depth stays full, but random faults continue no stream: next to
     * nothing is read ahead for them */
    cr_assert_eq(st.prefetch_units, 64);
    cr_assert_lt(st.prefetches - st0.prefetches, 100, "random gather: %llu units read ahead",
                 (unsigned long long)(st.prefetches - st0.prefetches));
    cr_assert_lt(st.seq_pct, 12);
    cr_assert_eq(st.io_width, 2, "no stream: one transfer per path");
    st0 = st;
    /* with read-ahead a scan faults once per window: three scans make
     * sure the policy's last window of 128 faults is all scan */
    for (int i = 0; i < 3; i++)
        scan(base, size);
    cr_assert_eq(fmem_region_stats(r, &st), 0);
    cr_assert_eq(st.prefetch_units, 64, "scan: read-ahead %u (seq %u %%)", st.prefetch_units,
                 st.seq_pct);
    cr_assert_gt(st.prefetches - st0.prefetches, 3 * 3000, "scan: %llu units read ahead",
                 (unsigned long long)(st.prefetches - st0.prefetches));
    cr_assert_geq(st.seq_pct, 50, "scan: %u %% of faults continued a stream", st.seq_pct);
    cr_assert_eq(st.io_width, 4);
    cr_assert_eq(st.paths, 2);
    cr_assert_eq(st.stripe_width, 2, "equal links: stripe over both");
    cr_assert_gt(st.fault_rate, 0);

    /* fixed: the gather leaves it */
    fmem_region_tuning t = {.set = FMEM_REGION_TUNE_PREFETCH | FMEM_REGION_TUNE_STRIPE,
                            .prefetch = 32, .stripe = 1};
    cr_assert_eq(fmem_region_tune(r, &t), 0);
    gather(base, size, 2000, &s);
    cr_assert_eq(fmem_region_stats(r, &st), 0);
    cr_assert_eq(st.prefetch_units, 32);
    cr_assert_eq(st.stripe_width, 1);
    cr_assert_eq(st.io_width, 4, "the width is still the policy's: read-ahead is on");
    /* back to the policy */
    t = (fmem_region_tuning){0};
    cr_assert_eq(fmem_region_tune(r, &t), 0);
    gather(base, size, 2000, &s);
    cr_assert_eq(fmem_region_stats(r, &st), 0);
    cr_assert_eq(st.prefetch_units, 64);
    cr_assert_eq(st.io_width, 2);
    cr_assert_eq(st.stripe_width, 2);
    fmem_region_destroy(r);

    /* a depth in the configuration is explicit too */
    fmem_region_config c = {.size = size, .cache_bytes = 1 << 20, .fetch_unit = unit,
                            .prefetch = 8};
    cr_assert_eq(fmem_region_create(p, &c, &r), 0);
    base = fmem_region_base(r);
    for (size_t off = 0; off < size; off += 4096)
        base[off] = 1;
    gather(base, size, 2000, &s);
    cr_assert_eq(fmem_region_stats(r, &st), 0);
    cr_assert_eq(st.prefetch_units, 8);
    fmem_region_tuning g;
    cr_assert_eq(fmem_region_tuning_get(r, &g), 0);
    /* (an explicit unit fixes the fetch size at one unit) */
    cr_assert_eq(g.set, FMEM_REGION_TUNE_PREFETCH | FMEM_REGION_TUNE_FETCH);
    fmem_region_destroy(r);
    fmem_close(p);
}

/* Settings change (and go back to the policy) while threads write, read
 * and release their own parts of a striped region; every byte is checked
 * against a shadow copy. */
struct loader {
    char *base, *shadow;
    size_t off, len;
    fmem_region *r;
    uint64_t seed;
    atomic_int *stop;
    int bad;
};

static void *load(void *arg)
{
    struct loader *l = arg;
    while (!atomic_load(l->stop)) {
        size_t at = l->off + rnd(&l->seed) % l->len, n = 1 + rnd(&l->seed) % 20000;
        if (at + n > l->off + l->len)
            n = l->off + l->len - at;
        uint64_t op = rnd(&l->seed) % 10;
        if (op < 5) {
            uint8_t v = (uint8_t)rnd(&l->seed);
            memset(l->base + at, v, n);
            memset(l->shadow + at, v, n);
        } else if (op < 9) {
            l->bad += memcmp(l->base + at, l->shadow + at, n) != 0;
        } else {
            at &= ~(size_t)4095;
            n = 4096 * (1 + rnd(&l->seed) % 4);
            if (at + n > l->off + l->len)
                n = l->off + l->len - at;
            if (fmem_region_release(l->r, at, n) == 0)
                memset(l->shadow + at, 0, n);
            else
                l->bad++;
        }
    }
    return NULL;
}

Test(paths_policy, settings_change_under_load, .timeout = 240)
{
    fmem_pool *p;
    cr_assert_eq(fmem_open("mem:?size=32M&nodes=4&bw=4G", &p), 0);
    const size_t size = 8 << 20;
    fmem_region *r = make_on(p, size, 512 << 10, 16 << 10); /* 32 units cached */
    char *base = fmem_region_base(r), *shadow = calloc(1, size);
    atomic_int stop = 0;
    struct loader l[3];
    pthread_t t[3];
    for (int i = 0; i < 3; i++) {
        l[i] = (struct loader){.base = base, .shadow = shadow, .off = i * (size / 3) & ~(size_t)4095,
                               .len = size / 3 & ~(size_t)4095, .r = r, .seed = 77 + i,
                               .stop = &stop};
        pthread_create(&t[i], NULL, load, &l[i]);
    }
    uint64_t s = 5;
    for (int k = 0; k < 300; k++) {
        fmem_region_tuning tu = {.set = (unsigned)(rnd(&s) % 8), .prefetch = rnd(&s) % 9,
                                 .stripe = 1 + rnd(&s) % 4, .io_width = 1 + rnd(&s) % 16};
        cr_assert_eq(fmem_region_tune(r, &tu), 0);
        if (k % 50 == 0)
            cr_assert_eq(fmem_region_flush(r), 0);
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 3; i++) {
        pthread_join(t[i], NULL);
        cr_assert_eq(l[i].bad, 0, "thread %d saw %d wrong reads or failed releases", i, l[i].bad);
    }
    check_all(base, shadow, size);
    fmem_region_stats_t st;
    cr_assert_eq(fmem_region_stats(r, &st), 0);
    cr_assert_gt(st.evictions, 0);
    cr_assert_eq(fmem_region_destroy(r), 0);
    free(shadow);
    fmem_close(p);
}

/* A scan with random lookups between its faults (a column scan joined
 * with a lookup table): the policy keeps following the scan's stream and
 * reads ahead for it; the handler's single-stream detector (read-ahead
 * depth fixed) loses the stream at lookup misses and reads ahead far
 * less. The data read is checked throughout. */
Test(paths_policy, stream_followed_through_random_lookups, .timeout = 120)
{
    fmem_pool *p;
    cr_assert_eq(fmem_open("mem:?size=64M&nodes=2&bw=8G", &p), 0);
    const size_t size = 8 << 20, fact = 6 << 20, unit = 16 << 10;
    uint64_t ahead[2];
    for (int fixed_depth = 0; fixed_depth < 2; fixed_depth++) {
        fmem_region *r = make_on(p, size, 1 << 20, unit); /* 64 units cached */
        char *base = fmem_region_base(r);
        for (size_t off = 0; off < size; off += 4096)
            *(uint64_t *)(base + off) = off / 4096 + 1;
        cr_assert_eq(fmem_region_flush(r), 0);
        if (fixed_depth) {
            fmem_region_tuning t = {.set = FMEM_REGION_TUNE_PREFETCH, .prefetch = 16};
            cr_assert_eq(fmem_region_tune(r, &t), 0);
        }
        /* push the data out of the cache */
        for (int k = 0; k < 2; k++)
            for (size_t off = fact; off < size; off += 4096)
                (void)*(volatile uint64_t *)(base + off);
        fmem_region_stats_t st0, st;
        cr_assert_eq(fmem_region_stats(r, &st0), 0);
        uint64_t s = 7;
        for (size_t off = 0; off < fact; off += 4096) {
            cr_assert_eq(*(volatile uint64_t *)(base + off), off / 4096 + 1);
            if ((off / 4096) % 4 == 0) {
                size_t k = fact + rnd(&s) % ((size - fact) / 4096) * 4096;
                cr_assert_eq(*(volatile uint64_t *)(base + k), k / 4096 + 1);
            }
        }
        cr_assert_eq(fmem_region_stats(r, &st), 0);
        ahead[fixed_depth] = st.prefetches - st0.prefetches;
        fmem_region_destroy(r);
    }
    /* the scan covers 384 units */
    cr_assert_gt(ahead[0], 192, "policy: %llu units read ahead for the scan",
                 (unsigned long long)ahead[0]);
    fprintf(stderr, "read ahead for the scan: policy %llu units, fixed depth %llu\n",
            (unsigned long long)ahead[0], (unsigned long long)ahead[1]);
    cr_assert_gt(ahead[0], ahead[1] * 5 / 4, "policy %llu, fixed depth %llu units read ahead",
                 (unsigned long long)ahead[0], (unsigned long long)ahead[1]);
    fmem_close(p);
}

/* New chunks go to the paths in proportion to their links' bandwidth,
 * bounded for a slower link so that a random fetch is on average at most
 * 5 % slower than on the fastest links, that 5 % split between the
 * slower links: beside a 64M link that gets none, a 3G one takes 7.5 %
 * (6:6:1 with two 4G links). With an
 * explicit stripe width the chunks are spread evenly over nodes
 * 0..stripe-1 (the interleave group is a multiple of every width). */
Test(paths_policy, chunks_placed_by_link_bandwidth, .timeout = 60)
{
    fmem_pool *p;
    cr_assert_eq(fmem_open("mem:?size=32M&bw=4G;mem:?size=32M&bw=4G;mem:?size=32M&bw=3G;"
                           "mem:?size=32M&bw=64M", &p), 0);
    fmem_region *r = make_on(p, 8 << 20, 1 << 20, 16 << 10);
    char *base = fmem_region_base(r);
    for (size_t off = 0; off < (8 << 20); off += 4096)
        base[off] = 1;
    cr_assert_eq(fmem_region_flush(r), 0);
    fmem_region_stats_t st;
    cr_assert_eq(fmem_region_stats(r, &st), 0);
    cr_assert_eq(st.paths, 4);
    cr_assert_eq(st.stripe_width, 3, "three nodes take chunks");
    fmem_region_path_t path[4];
    cr_assert_eq(fmem_region_paths(r, path, 4), 4);
    double total = (double)(path[0].chunks + path[1].chunks + path[2].chunks + path[3].chunks);
    cr_assert_gt(total, 0);
    for (int i = 0; i < 2; i++)
        cr_assert(path[i].chunks / total > 0.42 && path[i].chunks / total < 0.50,
                  "fast node %d holds %.2f of the chunks", i, path[i].chunks / total);
    cr_assert(path[2].chunks / total > 0.05 && path[2].chunks / total < 0.11,
              "the 3G node holds %.2f of the chunks", path[2].chunks / total);
    cr_assert_eq(path[3].chunks, 0, "the slow node got %llu chunks",
                 (unsigned long long)path[3].chunks);
    cr_assert_eq(path[2].placing, 1);
    cr_assert_eq(path[3].placing, 0);
    fmem_region_destroy(r);

    /* an explicit stripe of 3 spreads evenly, the 64M node included at 4 */
    for (unsigned stripe = 3; stripe <= 4; stripe++) {
        r = make_on(p, 6 << 20, 1 << 20, 16 << 10);
        fmem_region_tuning t = {.set = FMEM_REGION_TUNE_STRIPE, .stripe = stripe};
        cr_assert_eq(fmem_region_tune(r, &t), 0);
        base = fmem_region_base(r);
        for (size_t off = 0; off < (6 << 20); off += 4096)
            base[off] = 1;
        cr_assert_eq(fmem_region_flush(r), 0);
        cr_assert_eq(fmem_region_paths(r, path, 4), 4);
        for (unsigned i = 0; i < 4; i++) {
            cr_assert_eq(path[i].placing, i < stripe);
            if (i >= stripe)
                cr_assert_eq(path[i].chunks, 0);
            else
                cr_assert_eq(path[i].chunks, path[0].chunks, "stripe %u: node %u holds %llu, "
                             "node 0 %llu", stripe, i, (unsigned long long)path[i].chunks,
                             (unsigned long long)path[0].chunks);
        }
        fmem_region_destroy(r);
    }
    fmem_close(p);
}
