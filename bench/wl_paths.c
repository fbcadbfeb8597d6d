/* wl_paths.c - regions over several memory nodes, each behind its own
 * emulated link (bw= in the pool URI): fmem-regionbench --nodes N.
 *
 *   --nodes N        memory nodes of the striped pool (default 4, <= 16)
 *   --node-bw SIZE   bytes per second of each node's link (default 16M)
 *   --rtt-ns NS      round trip of each link (default 0)
 *   --size SIZE      data bytes (default 32M)
 *   --cache SIZE     region cache (default size / 8)
 *   --unit SIZE      fetch unit (default 16K)
 *   --mode scan|policy|all (default all)
 *   --json           one JSON object per line on stdout
 *
 * scan: a sequential read of the data, past the cache, over a pool of one
 * node and over a pool of N nodes with the same per-node link; prints both
 * and their ratio (the paths' bandwidths add up when the ratio nears N).
 * Both run with the same fixed I/O width (2N), the rest as the policy picks.
 *
 * policy: on the N-node pool, three workloads each under every fixed
 * setting of (read-ahead off / 1/32 of the cache / 1/4 of the cache) x
 * (I/O width 1 / 2N) and under the per-region policy (region_policy.c):
 *   seq    the sequential scan,
 *   rand   random 4 KiB reads (a gather), a quarter of the data's pages,
 *   mixed  short scans of 256 KiB at random places, each followed by
 *          64 random 4 KiB reads (a workload of scans and lookups taking
 *          turns).
 * Figures are MB/s of data touched, best of three rounds in which the
 * settings take turns; every one is printed with its ratio to the
 * policy's in the same run. The policy is measured on the run after one it
 * learned on. Before each measurement the cache is
 * emptied of the data by reading a separate area of the region. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <getopt.h>

#include "fmem.h"
#include "fmem_far.h"
#include "size_parse.h"
#include "wl_region.h"

int fmem_bench_paths(int argc, char **argv);

#define PAGE 4096

struct po {
    unsigned nodes;
    uint64_t bw, rtt, size, cache, unit;
    int scan, policy, json;
};

static double now(void)
{
    return bench_clock_s(CLOCK_MONOTONIC);
}

struct setup {
    fmem_pool *pool;
    fmem_region *r;
    char *base; /* data at base, the wiping area after it */
};

static int open_setup(const struct po *o, unsigned nodes, struct setup *s)
{
    char uri[160];
    /* each node holds all the data with room to spare */
    snprintf(uri, sizeof uri, "mem:?size=%lluM&nodes=%u&bw=%llu&rtt_ns=%llu",
             (unsigned long long)((o->size + o->cache) * 2 >> 20) + 8, nodes,
             (unsigned long long)o->bw, (unsigned long long)o->rtt);
    int rc = fmem_open(uri, &s->pool);
    if (rc) {
        fprintf(stderr, "pool %s: %s (%s)\n", uri, fmem_strerror(rc), fmem_uri_error());
        return rc;
    }
    fmem_region_config c = {.size = o->size + o->cache * 2, .cache_bytes = o->cache,
                            .fetch_unit = o->unit};
    if ((rc = fmem_region_create(s->pool, &c, &s->r)) != 0) {
        fprintf(stderr, "region: %s\n", fmem_strerror(rc));
        fmem_close(s->pool);
        return rc;
    }
    s->base = fmem_region_base(s->r);
    /* data: every page stamped with its number; written back whole */
    for (uint64_t p = 0; p < (o->size + o->cache * 2) / PAGE; p++)
        *(uint64_t *)(s->base + p * PAGE) = p + 1;
    return fmem_region_flush(s->r);
}

static void close_setup(struct setup *s)
{
    fmem_region_destroy(s->r);
    fmem_close(s->pool);
}

/* Push the data out of the cache: read the area after it twice over. */
static uint64_t wipe(const struct po *o, struct setup *s)
{
    uint64_t sum = 0;
    for (uint64_t off = o->size; off < o->size + o->cache * 2; off += PAGE)
        sum += *(volatile uint64_t *)(s->base + off);
    return sum;
}

static uint64_t page_sum(const char *p)
{
    uint64_t sum = 0;
    for (unsigned i = 0; i < PAGE; i += 64)
        sum += *(const volatile uint64_t *)(p + i);
    return sum;
}

enum wl { WL_SEQ, WL_RAND, WL_MIXED };
static const char *wl_name[] = {"seq", "rand", "mixed"};

/* Run a workload; returns MB/s of data touched, *bad counts pages whose
 * stamp was wrong. */
static double run_wl(const struct po *o, struct setup *s, enum wl w, uint64_t *bad)
{
    uint64_t npages = o->size / PAGE, touched = 0;
    struct rng seed;
    rng_seed(&seed, 1);
    double t0 = now();
    if (w == WL_SEQ) {
        for (uint64_t p = 0; p < npages; p++, touched++) {
            *bad += *(volatile uint64_t *)(s->base + p * PAGE) != p + 1;
            (void)page_sum(s->base + p * PAGE);
        }
    } else if (w == WL_RAND) {
        for (uint64_t i = 0; i < npages / 4; i++, touched++) {
            uint64_t p = rng_below(&seed, npages);
            *bad += *(volatile uint64_t *)(s->base + p * PAGE) != p + 1;
        }
    } else {
        const uint64_t run = (256 << 10) / PAGE;
        while (touched < npages / 2) {
            uint64_t start = rng_below(&seed, npages - run);
            for (uint64_t p = start; p < start + run; p++, touched++) {
                *bad += *(volatile uint64_t *)(s->base + p * PAGE) != p + 1;
                (void)page_sum(s->base + p * PAGE);
            }
            for (int i = 0; i < 64; i++, touched++) {
                uint64_t p = rng_below(&seed, npages);
                *bad += *(volatile uint64_t *)(s->base + p * PAGE) != p + 1;
            }
        }
    }
    double dt = now() - t0;
    return (double)touched * PAGE / dt / 1e6;
}

static void stats_line(const struct po *o, const fmem_region_stats_t *st, int w,
                       const char *what, double mbs, double ratio, const char *vs)
{
    if (o->json)
        printf("{\"workload\":\"region_paths\",\"pattern\":\"%s\",\"what\":\"%s\","
               "\"mbytes_per_s\":%.4g,\"ratio\":%.4g,\"vs\":\"%s\",\"paths\":%u,\"stripe\":%u,"
               "\"io_width\":%u,\"prefetch_units\":%u,\"seq_pct\":%u,\"node_bw\":%llu}\n",
               wl_name[w], what, mbs, ratio, vs, st->paths, st->stripe_width, st->io_width,
               st->prefetch_units, st->seq_pct, (unsigned long long)o->bw);
    fprintf(o->json ? stderr : stdout,
            "  %-28s %9.1f MB/s  %6.3f x %s  (paths %u, stripe %u, io width %u, read-ahead %u)\n",
            what, mbs, ratio, vs, st->paths, st->stripe_width, st->io_width, st->prefetch_units);
}

static int mode_scan(const struct po *o)
{
    double mbs[2];
    unsigned nodes[2] = {1, o->nodes};
    FILE *out = o->json ? stderr : stdout;
    fprintf(out, "sequential scan of %llu MiB past a %llu MiB cache, each node's link %llu MB/s"
                 ", rtt %llu ns\n",
            (unsigned long long)(o->size >> 20), (unsigned long long)(o->cache >> 20),
            (unsigned long long)(o->bw / 1000000), (unsigned long long)o->rtt);
    for (int i = 0; i < 2; i++) {
        struct setup s;
        if (open_setup(o, nodes[i], &s))
            return 1;
        uint64_t bad = 0;
        /* the same I/O width on both: the one node gets as many transfers
         * queued on its link as the N nodes get on theirs together */
        fmem_region_tuning t = {.set = FMEM_REGION_TUNE_IO_WIDTH,
                                .io_width = 2 * o->nodes > 16 ? 16 : 2 * o->nodes};
        fmem_region_tune(s.r, &t);
        (void)wipe(o, &s);
        mbs[i] = run_wl(o, &s, WL_SEQ, &bad);
        char what[64];
        snprintf(what, sizeof what, "scan, %u node%s", nodes[i], nodes[i] > 1 ? "s" : "");
        fmem_region_stats_t st;
        fmem_region_stats(s.r, &st);
        stats_line(o, &st, WL_SEQ, what, mbs[i], mbs[i] / mbs[0], "1 node");
        fmem_region_path_t p[16];
        int np = fmem_region_paths(s.r, p, 16);
        for (int k = 0; k < np && k < 16; k++)
            fprintf(out, "    node %u: fetched %llu MiB, written %llu MiB, %.1f MB/s per "
                         "transfer, %llu chunks\n",
                    p[k].node, (unsigned long long)(p[k].bytes_fetched >> 20),
                    (unsigned long long)(p[k].bytes_written >> 20), p[k].bandwidth / 1e6,
                    (unsigned long long)p[k].chunks);
        close_setup(&s);
        if (bad) {
            fprintf(stderr, "%llu pages read wrong data\n", (unsigned long long)bad);
            return 1;
        }
    }
    return 0;
}

static int mode_policy(const struct po *o)
{
    FILE *out = o->json ? stderr : stdout;
    struct setup s;
    if (open_setup(o, o->nodes, &s))
        return 1;
    unsigned cap = (unsigned)(o->cache / o->unit);
    unsigned depths[3] = {0, cap / 32 ? cap / 32 : 1, cap / 4};
    unsigned widths[2] = {1, 2 * o->nodes > 16 ? 16 : 2 * o->nodes};
    fprintf(out, "%u nodes, each link %llu MB/s; fixed settings against the policy\n", o->nodes,
            (unsigned long long)(o->bw / 1000000));
    int rc = 0;
    enum { NCFG = 7, ROUNDS = 3 };
    for (int w = WL_SEQ; w <= WL_MIXED && rc == 0; w++) {
        uint64_t bad = 0;
        double best_of[NCFG] = {0};
        fmem_region_stats_t st_of[NCFG];
        /* best of ROUNDS, the settings taking turns within each round so
         * that a change in the machine's load hits them all alike */
        for (int round = 0; round < ROUNDS && rc == 0; round++)
            for (int c = 0; c < NCFG && rc == 0; c++) {
                fmem_region_tuning t = {0}; /* c == 0: the policy decides */
                if (c > 0)
                    t = (fmem_region_tuning){.set = FMEM_REGION_TUNE_PREFETCH |
                                                    FMEM_REGION_TUNE_IO_WIDTH,
                                             .prefetch = depths[(c - 1) / 2],
                                             .io_width = widths[(c - 1) % 2]};
                if ((rc = fmem_region_tune(s.r, &t)) != 0)
                    break;
                if (c == 0) { /* it learns on one run, is measured on the next */
                    (void)wipe(o, &s);
                    (void)run_wl(o, &s, (enum wl)w, &bad);
                }
                (void)wipe(o, &s);
                double f = run_wl(o, &s, (enum wl)w, &bad);
                if (f > best_of[c]) {
                    best_of[c] = f;
                    fmem_region_stats(s.r, &st_of[c]);
                }
            }
        if (rc)
            break;
        fprintf(out, "%s (best of %d):\n", wl_name[w], ROUNDS);
        double pol = best_of[0], best = 0;
        for (int c = 0; c < NCFG; c++) {
            char what[64];
            if (c == 0)
                snprintf(what, sizeof what, "policy");
            else
                snprintf(what, sizeof what, "fixed ra %u, io %u", depths[(c - 1) / 2],
                         widths[(c - 1) % 2]);
            if (c > 0 && best_of[c] > best)
                best = best_of[c];
            stats_line(o, &st_of[c], w, what, best_of[c], best_of[c] / pol, "policy");
        }
        fprintf(out, "  policy / best fixed: %.3f\n", pol / best);
        if (o->json)
            printf("{\"workload\":\"region_paths\",\"what\":\"%s policy vs best fixed\","
                   "\"ratio\":%.4g}\n", wl_name[w], pol / best);
        if (bad) {
            fprintf(stderr, "%llu pages read wrong data\n", (unsigned long long)bad);
            rc = 1;
        }
    }
    close_setup(&s);
    return rc;
}

int fmem_bench_paths(int argc, char **argv)
{
    struct po o = {.nodes = 4, .bw = 16 << 20, .size = 32 << 20, .unit = 16 << 10,
                   .scan = 1, .policy = 1};
    enum { O_NODES = 1, O_BW, O_RTT, O_SIZE, O_CACHE, O_UNIT, O_MODE, O_JSON };
    static const struct option lo[] = {
        {"nodes", required_argument, NULL, O_NODES}, {"node-bw", required_argument, NULL, O_BW},
        {"rtt-ns", required_argument, NULL, O_RTT},  {"size", required_argument, NULL, O_SIZE},
        {"cache", required_argument, NULL, O_CACHE}, {"unit", required_argument, NULL, O_UNIT},
        {"mode", required_argument, NULL, O_MODE},   {"json", no_argument, NULL, O_JSON},
        {NULL, 0, NULL, 0},
    };
    int bad = 0;
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "", lo, NULL)) != -1;) {
        uint64_t v = 0;
        switch (c) {
        case O_NODES:
            o.nodes = (unsigned)strtoul(optarg, NULL, 10);
            bad |= o.nodes < 1 || o.nodes > 16;
            break;
        case O_BW: bad |= !size_parse(optarg, &o.bw) || o.bw < 4096; break;
        case O_RTT: bad |= !size_parse(optarg, &o.rtt); break;
        case O_SIZE: bad |= !size_parse(optarg, &o.size); break;
        case O_CACHE: bad |= !size_parse(optarg, &o.cache); break;
        case O_UNIT: bad |= !size_parse(optarg, &o.unit); break;
        case O_MODE:
            o.scan = !strcmp(optarg, "scan") || !strcmp(optarg, "all");
            o.policy = !strcmp(optarg, "policy") || !strcmp(optarg, "all");
            bad |= !o.scan && !o.policy;
            break;
        case O_JSON: o.json = 1; break;
        default: bad = 1;
        }
        (void)v;
    }
    if (!o.cache)
        o.cache = o.size / 8;
    if (bad || o.size < (1 << 20) || o.cache < 16 * o.unit || o.size % o.unit) {
        fprintf(stderr, "usage: %s --nodes N [--node-bw BYTES/S] [--rtt-ns NS] [--size BYTES] "
                        "[--cache BYTES] [--unit BYTES] [--mode scan|policy|all] [--json]\n",
                argv[0]);
        return 2;
    }
    int rc = o.scan ? mode_scan(&o) : 0;
    if (rc == 0 && o.policy)
        rc = mode_policy(&o);
    return rc;
}
