/* test_tiers.c - warm and cold chunks of a region over a pool of fast
 * (mem:) and slow (zmem:, ssd:) nodes: data checked against a shadow copy
 * through evictions, releases, flushes and moves between the tiers; warm
 * units on the fast node and cold ones on the slow one; an explicit tier
 * setting wins; a slow node that fails loses nothing; no chunk leaks. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fmem.h>
#include <fmem_far.h>

static char ssd_path[128];

static void make_path(void)
{
    snprintf(ssd_path, sizeof ssd_path, "/var/tmp/fmem-coldwarm-tiers-%d.ssd", (int)getpid());
}

static void drop_path(void)
{
    unlink(ssd_path);
}

TestSuite(tiers, .init = make_path, .fini = drop_path, .timeout = 180);

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static fmem_pool *open_ok(const char *uri)
{
    fmem_pool *p;
    int rc = fmem_open(uri, &p);
    cr_assert_eq(rc, 0, "%s: %s: %s", uri, fmem_strerror(rc), fmem_uri_error());
    return p;
}

#define UNIT (64u << 10) /* one unit per chunk: every chunk can move */
#define HOT 32u          /* units of the hot set (twice the cache) */
#define COLD 512u        /* units of the cold set */
#define SIZE ((size_t)(HOT + COLD) * UNIT)

static fmem_region *make_region(fmem_pool *p)
{
    fmem_region_config c = {.size = SIZE, .cache_bytes = 16 * UNIT, .fetch_unit = UNIT,
                            .prefetch = FMEM_REGION_NO_PREFETCH};
    fmem_region *r;
    int rc = fmem_region_create(p, &c, &r);
    if (rc == FMEM_EACCES || rc == FMEM_ENOTSUP)
        cr_skip_test("userfaultfd is not available here: %s", fmem_strerror(rc));
    cr_assert_eq(rc, 0, "%s", fmem_strerror(rc));
    return r;
}

static void tier(fmem_region *r, unsigned t)
{
    fmem_region_tuning tu = {.set = FMEM_REGION_TUNE_TIER, .tier = t};
    cr_assert_eq(fmem_region_tune(r, &tu), 0);
}

/* A word written into region memory and the shadow at once. */
static void put(char *base, char *shadow, size_t off, uint64_t v)
{
    memcpy(base + off, &v, sizeof v);
    memcpy(shadow + off, &v, sizeof v);
}

/* The workload: the cold set written once, then rounds in which every hot
 * unit is read, checked and written again while one cold unit per four
 * hot ones is read (and checked), with releases and flushes mixed in. Units of the hot set
 * are 0..HOT-1. */
static void run(fmem_region *r, char *shadow, int rounds, int releases)
{
    char *base = fmem_region_base(r);
    uint64_t s = 12345;
    for (unsigned u = HOT; u < HOT + COLD; u++)
        for (size_t o = 0; o < UNIT; o += 512)
            put(base, shadow, (size_t)u * UNIT + o, rnd(&s));
    for (int round = 0; round < rounds; round++) {
        for (unsigned u = 0; u < HOT; u++) {
            size_t off = (size_t)u * UNIT + (rnd(&s) % (UNIT / 8)) * 8;
            cr_assert(!memcmp(base + off, shadow + off, 8), "hot unit %u differs", u);
            put(base, shadow, off, rnd(&s));
            if (u % 4)
                continue;
            unsigned c = HOT + (unsigned)(rnd(&s) % COLD);
            off = (size_t)c * UNIT + (rnd(&s) % (UNIT / 8)) * 8;
            cr_assert(!memcmp(base + off, shadow + off, 8), "cold unit %u differs", c);
        }
        if (releases && round % 7 == 3) { /* part of a cold unit goes */
            size_t at = (size_t)(HOT + rnd(&s) % COLD) * UNIT + 4096 * (rnd(&s) % 8);
            cr_assert_eq(fmem_region_release(r, at, 3 * 4096), 0);
            memset(shadow + at, 0, 3 * 4096);
        }
        if (round % 10 == 9)
            cr_assert_eq(fmem_region_flush(r), 0);
    }
    cr_assert_eq(fmem_region_flush(r), 0);
    cr_assert(!memcmp(base, shadow, SIZE), "the region differs from its shadow");
}

/* Chunks of the region on node i. */
static uint64_t chunks_on(fmem_region *r, unsigned i)
{
    fmem_region_path_t paths[4];
    int n = fmem_region_paths(r, paths, 4);
    cr_assert(n > (int)i);
    return paths[i].chunks;
}

/* What most tests set up: a pool, a region on it (skipping the test where
 * userfaultfd is unavailable) and a zeroed shadow of the region; done()
 * destroys the region and checks that the pool got all its chunks back. */
struct fix {
    fmem_pool *p;
    fmem_region *r;
    char *shadow;
    fmem_stats_t before;
};

static void setup(struct fix *f, const char *uri)
{
    f->p = open_ok(uri);
    cr_assert_eq(fmem_stats(f->p, &f->before), 0);
    f->r = make_region(f->p);
    f->shadow = calloc(1, SIZE);
    cr_assert(f->shadow);
}

static void done(struct fix *f)
{
    cr_assert_eq(fmem_region_destroy(f->r), 0);
    fmem_stats_t after;
    cr_assert_eq(fmem_stats(f->p, &after), 0);
    cr_assert_eq(after.allocated_bytes, f->before.allocated_bytes, "no chunk leaked");
    cr_assert_eq(after.allocs - f->before.allocs, after.frees - f->before.frees);
    free(f->shadow);
    fmem_close(f->p);
}

/* mem: (node 0) and a slow node (node 1): after the run, the hot set is on
 * the fast node and nearly all of the cold set on the slow one, some
 * chunks having moved; after destroy the pool holds nothing. */
static void warm_fast_cold_slow(const char *uri)
{
    struct fix f;
    setup(&f, uri);
    fmem_region *r = f.r;
    run(r, f.shadow, 60, 1);
    fmem_region_stats_t rs;
    cr_assert_eq(fmem_region_stats(r, &rs), 0);
    cr_assert(rs.evictions > 0 && rs.fetches > 0, "the cache was too small to hold it all");
    cr_assert(rs.tier_moves > 0, "chunks moved between the tiers");
    uint64_t fast = chunks_on(r, 0), slow = chunks_on(r, 1);
    cr_assert_eq(fast + slow, HOT + COLD, "every unit has its chunk (%llu + %llu)",
                 (unsigned long long)fast, (unsigned long long)slow);
    cr_assert(fast >= HOT * 3 / 4 && slow >= COLD * 3 / 4,
              "the warm units are on the fast node and the cold ones on the slow node (%llu, %llu chunks)",
              (unsigned long long)fast, (unsigned long long)slow);
    fmem_node_stats_t ns;
    cr_assert_eq(fmem_node_stats(f.p, 1, &ns), 0);
    cr_assert(ns.held_bytes > 0 && ns.errors == 0, "the slow node holds the cold set");
    done(&f);
}

Test(tiers, warm_fast_cold_slow_zmem)
{
    warm_fast_cold_slow("mem:?size=64M;zmem:?size=64M");
}

Test(tiers, warm_fast_cold_slow_ssd)
{
    char uri[256];
    snprintf(uri, sizeof uri, "mem:?size=64M;ssd:%s?size=64M", ssd_path);
    warm_fast_cold_slow(uri);
}

/* An explicit tier wins: FAST keeps everything on mem:, SLOW on zmem:,
 * NONE places by the links as without tiers; none of them moves a chunk. */
static void explicit_tier(unsigned t, int want_fast, int want_slow)
{
    struct fix f;
    setup(&f, "mem:?size=64M;zmem:?size=64M");
    fmem_region *r = f.r;
    tier(r, t);
    fmem_region_tuning got;
    cr_assert_eq(fmem_region_tuning_get(r, &got), 0);
    cr_assert_eq(got.tier, t);
    cr_assert(got.set & FMEM_REGION_TUNE_TIER);
    run(r, f.shadow, 20, 0);
    fmem_region_stats_t rs;
    cr_assert_eq(fmem_region_stats(r, &rs), 0);
    cr_assert_eq(rs.tier_moves, 0, "an explicit tier moves nothing");
    uint64_t fast = chunks_on(r, 0), slow = chunks_on(r, 1);
    cr_assert_eq(fast + slow, HOT + COLD);
    if (want_fast >= 0)
        cr_assert_eq(fast > 0, want_fast, "fast node: %llu chunks", (unsigned long long)fast);
    if (want_slow >= 0)
        cr_assert_eq(slow > 0, want_slow, "slow node: %llu chunks", (unsigned long long)slow);
    done(&f);
}

Test(tiers, explicit_fast_wins)
{
    explicit_tier(FMEM_REGION_TIER_FAST, 1, 0);
}

Test(tiers, explicit_slow_wins)
{
    explicit_tier(FMEM_REGION_TIER_SLOW, 0, 1);
}

Test(tiers, explicit_none_places_by_links)
{
    explicit_tier(FMEM_REGION_TIER_NONE, 1, 1); /* equal links: both nodes */
}

/* An explicit stripe width without an explicit tier places alone. */
Test(tiers, explicit_stripe_turns_tiers_off)
{
    struct fix f;
    setup(&f, "mem:?size=64M;zmem:?size=64M");
    fmem_region *r = f.r;
    fmem_region_tuning tu = {.set = FMEM_REGION_TUNE_STRIPE, .stripe = 1};
    cr_assert_eq(fmem_region_tune(r, &tu), 0);
    run(r, f.shadow, 20, 0);
    fmem_region_stats_t rs;
    cr_assert_eq(fmem_region_stats(r, &rs), 0);
    cr_assert_eq(rs.tier_moves, 0);
    cr_assert_eq(chunks_on(r, 1), 0, "a stripe of one keeps all on node 0");
    done(&f);
}

Test(tiers, bad_tier_refused)
{
    fmem_pool *p = open_ok("mem:?size=16M;zmem:?size=16M");
    fmem_region *r = make_region(p);
    fmem_region_tuning tu = {.set = FMEM_REGION_TUNE_TIER, .tier = 4};
    cr_assert_eq(fmem_region_tune(r, &tu), FMEM_EINVAL);
    cr_assert_eq(fmem_region_destroy(r), 0);
    fmem_close(p);
}

/* The ssd: file may not grow past 1 MiB: moves of cold chunks to it fail
 * with a clear error in its node stats, the units stay where they were,
 * and the region loses nothing; what went to the file before the limit is
 * read back intact. */
Test(tiers, full_ssd_loses_nothing)
{
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {.rlim_cur = 1 << 20, .rlim_max = RLIM_INFINITY};
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
    char uri[256];
    snprintf(uri, sizeof uri, "mem:?size=64M;ssd:%s?size=64M", ssd_path);
    struct fix f;
    setup(&f, uri);
    run(f.r, f.shadow, 30, 1);
    fmem_node_stats_t ns;
    cr_assert_eq(fmem_node_stats(f.p, 1, &ns), 0);
    cr_assert(ns.errors > 0 && strstr(ns.last_error, "File too large"), "error: '%s'",
              ns.last_error);
    cr_assert(chunks_on(f.r, 0) > HOT, "the cold units that could not move stayed on mem:");
    done(&f);
}

/* Stress: two threads, each on its own half of the units with its own
 * shadow, fault, write and read while chunks move between the tiers. */
struct worker {
    char *base, *shadow;
    unsigned first, n; /* units */
    uint64_t seed;
    int bad;
};

static void *work(void *arg)
{
    struct worker *w = arg;
    uint64_t s = w->seed;
    unsigned hot = w->n / 8;
    for (int i = 0; i < 20000 && !w->bad; i++) {
        unsigned u = w->first + (unsigned)(i % 3 ? rnd(&s) % hot : rnd(&s) % w->n);
        size_t off = (size_t)u * UNIT + (rnd(&s) % (UNIT / 8)) * 8;
        if (memcmp(w->base + off, w->shadow + off, 8))
            w->bad = 1;
        if (i % 3 || i % 2)
            put(w->base, w->shadow, off, rnd(&s));
    }
    return NULL;
}

Test(tiers, two_threads_while_chunks_move)
{
    struct fix f;
    setup(&f, "mem:?size=64M;zmem:?size=64M");
    fmem_region *r = f.r;
    char *base = fmem_region_base(r), *shadow = f.shadow;
    struct worker w[2];
    pthread_t t[2];
    for (int i = 0; i < 2; i++) {
        w[i] = (struct worker){.base = base, .shadow = shadow, .n = (HOT + COLD) / 2,
                               .seed = 77 + (uint64_t)i};
        w[i].first = (unsigned)i * w[i].n;
        cr_assert_eq(pthread_create(&t[i], NULL, work, &w[i]), 0);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
        cr_assert_eq(w[i].bad, 0, "thread %d read what it did not write", i);
    }
    cr_assert_eq(fmem_region_flush(r), 0);
    cr_assert(!memcmp(base, shadow, SIZE), "the region differs from its shadow");
    fmem_region_stats_t rs;
    cr_assert_eq(fmem_region_stats(r, &rs), 0);
    cr_assert(rs.tier_moves > 0, "chunks moved meanwhile");
    done(&f);
}
