/* wl_region.c - region scan workload: reads the data in 4 KiB blocks,
 * sequentially and in random order, from a far-memory region whose cache
 * holds 100 %, 50 % or 25 % of it, and reports the throughput as a ratio
 * to the same scan over plain local memory in the same run.
 *
 *   fmem_bench_region(argc, argv) with
 *     --cache-pct 100,50,25   cache sizes, percent of the data
 *     --size BYTES            data size (K/M/G suffix; default 64M)
 *     --seconds S             time per measurement (default 1)
 *     --unit BYTES            region fetch unit (default 16K)
 *     --patterns seq,rand     which scans
 *     --pool URI              pool to use (default: an in-process one)
 *     --json                  one JSON object per line on stdout
 *     --vs-swap               also run each scan under Linux's own paging
 *                             (root only): plain memory in a memory cgroup
 *                             limited to the same cache size, swapping to
 *                             zram (lz4), see wl_swap.c
 * Built standalone as bench/fmem-regionbench (FMEM_REGIONBENCH_MAIN); given
 * --nodes N it runs the striped-paths benchmark instead (wl_paths.c). */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "fmem.h"
#include "fmem_far.h"
#include "size_parse.h"
#include "wl_region.h"

int fmem_bench_region(int argc, char **argv);

#define BLOCK 4096

static double now_s(void)
{
    return bench_clock_s(CLOCK_MONOTONIC);
}

static size_t parse_bytes(const char *s)
{
    uint64_t v; /* the one size parser: size_parse.h */
    return size_parse(s, &v) && v <= SIZE_MAX ? (size_t)v : 0;
}

static int parse_opts(int argc, char **argv, struct rb_opts *o)
{
    *o = (struct rb_opts){.size = 64 << 20, .unit = 16 << 10, .seconds = 1.0,
                          .pcts = {100, 50, 25}, .npcts = 3, .seq = 1, .rand = 1};
    enum { O_PCT = 1, O_SIZE, O_SEC, O_UNIT, O_PAT, O_POOL, O_JSON, O_SWAP, O_HELP };
    static const struct option lo[] = {
        {"cache-pct", required_argument, NULL, O_PCT}, {"size", required_argument, NULL, O_SIZE},
        {"seconds", required_argument, NULL, O_SEC},   {"unit", required_argument, NULL, O_UNIT},
        {"patterns", required_argument, NULL, O_PAT},  {"pool", required_argument, NULL, O_POOL},
        {"json", no_argument, NULL, O_JSON},           {"help", no_argument, NULL, O_HELP},
        {"vs-swap", no_argument, NULL, O_SWAP},
        {NULL, 0, NULL, 0},
    };
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "", lo, NULL)) != -1;) {
        switch (c) {
        case O_PCT: {
            o->npcts = 0;
            for (char *s = optarg, *e; *s && o->npcts < 8; s = *e ? e + 1 : e) {
                long v = strtol(s, &e, 10);
                if (e == s || v < 1 || v > 100)
                    return -1;
                o->pcts[o->npcts++] = (int)v;
            }
            break;
        }
        case O_SIZE: o->size = parse_bytes(optarg); break;
        case O_SEC: o->seconds = strtod(optarg, NULL); break;
        case O_UNIT: o->unit = parse_bytes(optarg); break;
        case O_PAT:
            o->seq = strstr(optarg, "seq") != NULL;
            o->rand = strstr(optarg, "rand") != NULL;
            break;
        case O_POOL: o->pool = optarg; break;
        case O_JSON: o->json = 1; break;
        case O_SWAP: o->vs_swap = 1; break;
        default: return -1;
        }
    }
    if (o->size < 16 * BLOCK || o->seconds <= 0 || !o->npcts || (!o->seq && !o->rand))
        return -1;
    o->size &= ~(size_t)(BLOCK - 1);
    return 0;
}

static volatile uint64_t sink;

static uint64_t sum_block(const uint64_t *b)
{
    uint64_t s = 0;
    for (size_t i = 0; i < BLOCK / 8; i++)
        s += b[i];
    return s;
}

/* Scan blocks of mem in `order` (NULL: sequential) for `seconds`; GB/s. */
double rb_scan(const char *mem, size_t nblocks, const uint32_t *order, double seconds)
{
    uint64_t s = 0, blocks = 0;
    size_t pos = 0;
    double t0 = now_s(), t;
    do {
        for (int k = 0; k < 64; k++) {
            size_t b = order ? order[pos] : pos;
            s += sum_block((const uint64_t *)(mem + b * BLOCK));
            pos = pos + 1 == nblocks ? 0 : pos + 1;
        }
        blocks += 64;
        t = now_s() - t0;
    } while (t < seconds);
    sink = s;
    return (double)blocks * BLOCK / t / 1e9;
}

void rb_fill(char *mem, size_t size)
{
    for (size_t i = 0; i < size; i += 8)
        *(uint64_t *)(mem + i) = i * 0x9e3779b97f4a7c15ull;
}

/* The region scans at pct % cache. Each is preceded by the same scan over
 * local memory, so that the ratio compares two runs under the same load;
 * local[p] gets that figure, out[p] the region's. */
static int run_cache(fmem_pool *pool, const struct rb_opts *o, int pct, const uint32_t *order,
                     const char *local_mem, double local[2], double out[2])
{
    fmem_region_config c = {.size = o->size, .cache_bytes = o->size / 100 * (size_t)pct,
                            .fetch_unit = o->unit};
    fmem_region *r;
    int rc = fmem_region_create(pool, &c, &r);
    if (rc) {
        fprintf(stderr, "region: %s\n", fmem_strerror(rc));
        return rc;
    }
    char *mem = fmem_region_base(r);
    rb_fill(mem, o->size);
    fmem_region_flush(r);
    for (int p = 0; p < 2; p++) {
        if (!(p ? o->rand : o->seq))
            continue;
        const uint32_t *ord = p ? order : NULL;
        double lc = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID);
        local[p] = rb_scan(local_mem, o->size / BLOCK, ord, o->seconds);
        lc = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID) - lc;
        fmem_region_stats_t a, b;
        fmem_region_fault_stats_t fa, fb;
        fmem_region_stats(r, &a);
        fmem_region_fault_stats(r, &fa, sizeof fa);
        /* CPU time of the whole process (scan, fault handler, writer): what
         * the paging costs regardless of how busy the machine is */
        double c0 = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID), t0 = bench_clock_s(CLOCK_THREAD_CPUTIME_ID);
        double g = rb_scan(mem, o->size / BLOCK, ord, o->seconds);
        double cpu = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
        /* the scanning thread's own share (its faults included) and the
         * region threads' (handler, prefetcher, writer, I/O workers) */
        double app = bench_clock_s(CLOCK_THREAD_CPUTIME_ID) - t0, other = cpu - app;
        fmem_region_stats(r, &b);
        fmem_region_fault_stats(r, &fb, sizeof fb);
        uint64_t faults = b.faults - a.faults;
        uint64_t moved = b.fetches - a.fetches + b.prefetches - a.prefetches;
        double us_unit_app = moved ? app * 1e6 / (double)moved : 0;
        double us_unit_other = moved ? other * 1e6 / (double)moved : 0;
        /* beyond the scan itself: the local scan's CPU time per byte */
        double cpu_us_fault = faults ? (cpu - lc * g / local[p]) * 1e6 / (double)faults : 0;
        /* the scan's wall time per fault beyond the local scan's, and the
         * share of faults the handler picked up while spinning (without
         * a wake-up of its own, region_handler_wait.c) */
        double wall_us_fault = faults ? o->seconds * (1 - g / local[p]) * 1e6 / (double)faults : 0;
        uint64_t spun = fb.spin_wakes - fa.spin_wakes;
        double spin_pct = faults ? 100.0 * (double)spun / (double)faults : 0;
        const char *name = p ? "rand" : "seq";
        double ratio = g / local[p];
        out[p] = g;
        if (o->json)
            printf("{\"workload\":\"region\",\"pattern\":\"%s\",\"cache_pct\":%d,"
                   "\"gbytes_per_s\":%.4g,\"ratio_vs_local\":%.4g,\"local_gbytes_per_s\":%.4g,"
                   "\"size\":%zu,\"fetch_unit\":%zu,\"faults\":%llu,\"fetches\":%llu,"
                   "\"prefetches\":%llu,\"evictions\":%llu,\"writebacks\":%llu,"
                   "\"cpu_s\":%.4g,\"cpu_us_per_fault\":%.4g,\"app_cpu_us_per_unit\":%.4g,"
                   "\"region_cpu_us_per_unit\":%.4g,\"ahead_unused\":%llu,\"ahead_window\":%llu,"
                   "\"wall_us_per_fault\":%.4g,\"spin_wake_pct\":%.3g}\n",
                   name, pct, g, ratio, local[p], o->size, o->unit,
                   (unsigned long long)(b.faults - a.faults),
                   (unsigned long long)(b.fetches - a.fetches),
                   (unsigned long long)(b.prefetches - a.prefetches),
                   (unsigned long long)(b.evictions - a.evictions),
                   (unsigned long long)(b.writebacks - a.writebacks), cpu, cpu_us_fault, us_unit_app,
                   us_unit_other, (unsigned long long)(b.ahead_unused - a.ahead_unused),
                   (unsigned long long)(b.ahead_window - a.ahead_window), wall_us_fault,
                   spin_pct);
        fprintf(o->json ? stderr : stdout,
                "%-5s cache %3d%%  %8.3f GB/s  %7.4f x local (%.3f GB/s)  (faults %llu, "
                "fetched %llu, read ahead %llu (unused %llu, by windows %llu), evicted %llu, "
                "%.1f us CPU/fault, %.1f us wall/fault, %.0f%% picked up spinning; per unit in: %.2f us "
                "scan thread, %.2f us region threads)\n",
                name, pct, g, ratio, local[p], (unsigned long long)(b.faults - a.faults),
                (unsigned long long)(b.fetches - a.fetches),
                (unsigned long long)(b.prefetches - a.prefetches),
                (unsigned long long)(b.ahead_unused - a.ahead_unused),
                (unsigned long long)(b.ahead_window - a.ahead_window),
                (unsigned long long)(b.evictions - a.evictions), cpu_us_fault, wall_us_fault,
                spin_pct, us_unit_app, us_unit_other);
    }
    return fmem_region_destroy(r);
}

/* The load average's first three fields. */
static void loadavg(char *out, size_t cap)
{
    FILE *f = fopen("/proc/loadavg", "r");
    double a = 0, b = 0, c = 0;
    if (!f || fscanf(f, "%lf %lf %lf", &a, &b, &c) != 3)
        a = b = c = -1;
    if (f)
        fclose(f);
    snprintf(out, cap, "%.2f %.2f %.2f", a, b, c);
}

int fmem_bench_region(int argc, char **argv)
{
    char load0[64], load1[64];
    loadavg(load0, sizeof load0);
    struct rb_opts o;
    if (parse_opts(argc, argv, &o)) {
        fprintf(stderr, "usage: %s [--cache-pct 100,50,25] [--size BYTES] [--seconds S] "
                        "[--unit BYTES] [--patterns seq,rand] [--pool URI] [--json] [--vs-swap]\n",
                argv[0]);
        return 2;
    }
    char uri[64];
    snprintf(uri, sizeof uri, "mem:?size=%zuM", (o.size >> 20) + 64);
    fmem_pool *pool;
    int rc = fmem_open(o.pool ? o.pool : uri, &pool);
    if (rc) {
        fprintf(stderr, "pool: %s\n", fmem_strerror(rc));
        return 1;
    }
    size_t nblocks = o.size / BLOCK;
    uint32_t *order = malloc(nblocks * sizeof *order);
    char *local = aligned_alloc(BLOCK, o.size);
    if (!order || !local) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    struct rng seed;
    rng_seed(&seed, 0x2545f4914f6cdd1dull);
    for (size_t i = 0; i < nblocks; i++)
        order[i] = (uint32_t)i;
    rng_shuffle(&seed, order, nblocks);
    rb_fill(local, o.size);
    fprintf(o.json ? stderr : stdout, "%zu MiB scanned in 4 KiB blocks, unit %zu KiB; each "
            "figure against local memory scanned just before it\n", o.size >> 20, o.unit >> 10);
    for (int i = 0; i < o.npcts && rc == 0; i++) {
        double g[2] = {0, 0}, base[2] = {0, 0};
        rc = run_cache(pool, &o, o.pcts[i], order, local, base, g);
        if (rc == 0 && o.vs_swap)
            rc = rb_swap_run(&o, o.pcts[i], order, base, g);
    }
    if (o.vs_swap)
        rb_swap_done();
    loadavg(load1, sizeof load1);
    struct utsname u;
    if (o.json && uname(&u) == 0) /* where and under what load this ran */
        printf("{\"workload\":\"machine\",\"cores\":%ld,\"kernel\":\"%s\","
               "\"load_before\":\"%s\",\"load_after\":\"%s\"}\n",
               sysconf(_SC_NPROCESSORS_ONLN), u.release, load0, load1);
    free(local);
    free(order);
    fmem_close(pool);
    return rc ? 1 : 0;
}

#ifdef FMEM_REGIONBENCH_MAIN
int fmem_bench_paths(int argc, char **argv); /* wl_paths.c: --nodes N */
int fmem_bench_policy(int argc, char **argv); /* wl_policy.c: --workloads */

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--workloads"))
            return fmem_bench_policy(argc, argv);
    for (int i = 1; i < argc; i++)
        if (!strncmp(argv[i], "--nodes", 7) || !strncmp(argv[i], "--node-bw", 9))
            return fmem_bench_paths(argc, argv);
    return fmem_bench_region(argc, argv);
}
#endif
