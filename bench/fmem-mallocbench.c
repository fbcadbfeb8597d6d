/* fmem-mallocbench.c - the object allocator (fmem_heap on pool chunks)
 * against glibc malloc and mimalloc on threadtest-, shbench- and
 * larson-style workloads (fmem-mallocbench-wl.c). Prints throughput, the
 * ratio to glibc, and for fmem the peak remote footprint and what is still
 * held after every object was freed (before and after fmem_heap_collect).
 *
 * mimalloc is loaded with dlopen (local_malloc.c: linked in, it would
 * replace malloc for the "glibc" column too). Without the library the
 * column is skipped with a message.
 *
 *   fmem-mallocbench [--threads N] [--workloads a,b] [--allocators
 *     glibc,mimalloc,fmem] [--scale X] [--repeat N] [--pool URI]
 * fmem-compact and fmem-random (named explicitly, with a shm: --pool) run
 * the fmem column on compactable heaps, with sequential and random
 * placement inside slabs (fmem_heap_new_compactable).
 *     [--rtt-ns N] [--json]                                               */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fmem-mallocbench.h"
#include "local_malloc.h"
#include "fmem.h"
#include "fmem_far.h"

struct opts {
    struct mb_params p;
    const char *workloads, *allocators, *pool;
    unsigned repeat, rtt_ns;
    int json;
};

/* Whether `name` is in the comma-separated `list`; with `by_prefix` also
 * when the list names it up to a '-' ("larson" for "larson-small", "fmem"
 * for "fmem-compact"). Compactable heaps are chosen only when named exactly. */
static int listed_as(const char *list, const char *name, int by_prefix)
{
    size_t n = strlen(name);
    for (const char *s = list; s && *s;) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (len == n && strncmp(s, name, n) == 0)
            return 1;
        if (by_prefix && len && strncmp(s, name, len) == 0 && name[len] == '-')
            return 1;
        s = e ? e + 1 : NULL;
    }
    return 0;
}

/* ---- adapters -------------------------------------------------------------- */

static void *fmem_malloc_ad(void *ctx, size_t n)
{
    return fmem_heap_malloc(ctx, n);
}
static void fmem_free_ad(void *ctx, void *p)
{
    if (fmem_heap_free(ctx, p) != 0)
        abort();
}

/* ---- one measurement --------------------------------------------------------- */

/* mops: by wall time; cpu_mops: per CPU-second of the whole process, which
 * stays meaningful when other programs compete for the cores */
struct result {
    double mops, cpu_mops;
    uint64_t peak, after_free, after_collect, pool_after;
};

static int measure(const struct opts *o, fmem_pool *pool, const char *alloc,
                   const struct mb_workload *w, struct result *best)
{
    memset(best, 0, sizeof *best);
    for (unsigned rep = 0; rep < o->repeat; rep++) {
        struct mb_alloc a = {alloc, glibc_malloc, glibc_free, NULL};
        fmem_heap *heap = NULL;
        if (strcmp(alloc, "mimalloc") == 0) {
            a.malloc = mimalloc_malloc;
            a.free = mimalloc_free;
        } else if (strncmp(alloc, "fmem", 4) == 0) {
            /* fmem-compact / fmem-random: compactable heaps (shm pools),
             * sequential or random placement */
            fmem_compact_policy pol = {.flags = strcmp(alloc, "fmem-random") ? 0
                                                                            : FMEM_COMPACT_RANDOM};
            int rc = strcmp(alloc, "fmem") ? fmem_heap_new_compactable(pool, &pol, &heap)
                                           : fmem_heap_new(pool, &heap);
            if (rc) {
                fprintf(stderr, "%s heap: %s\n", alloc, fmem_strerror(rc));
                return rc;
            }
            a.malloc = fmem_malloc_ad;
            a.free = fmem_free_ad;
            a.ctx = heap;
        }
        double t0 = bench_clock_s(CLOCK_MONOTONIC), c0 = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID);
        uint64_t ops = w->run(&a, w, &o->p);
        double t = bench_clock_s(CLOCK_MONOTONIC) - t0, c = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
        struct result r = {.mops = (double)ops / t / 1e6, .cpu_mops = (double)ops / c / 1e6};
        if (heap) {
            fmem_heap_stats_t hs;
            fmem_stats_t ps;
            fmem_heap_stats(heap, &hs);
            r.peak = hs.remote_peak;
            r.after_free = hs.remote_bytes;
            fmem_heap_collect(heap);
            fmem_heap_stats(heap, &hs);
            r.after_collect = hs.remote_bytes;
            fmem_stats(pool, &ps);
            r.pool_after = ps.allocated_bytes;
            fmem_heap_destroy(heap);
        }
        if (r.mops > best->mops) {
            double cpu = best->cpu_mops > r.cpu_mops ? best->cpu_mops : r.cpu_mops;
            *best = r;
            best->cpu_mops = cpu;
        } else if (r.cpu_mops > best->cpu_mops) {
            best->cpu_mops = r.cpu_mops;
        }
    }
    return 0;
}

static void report(const struct opts *o, const char *alloc, const struct mb_workload *w,
                   const struct result *r, const struct result *glibc)
{
    double ratio = glibc->mops > 0 ? r->mops / glibc->mops : 0;
    double cpu_ratio = glibc->cpu_mops > 0 ? r->cpu_mops / glibc->cpu_mops : 0;
    FILE *f = o->json ? stderr : stdout;
    fprintf(f, "%-16s %-8s %7.2f Mops/s %6.3f x glibc | %7.2f Mops/cpu-s %6.3f x glibc", w->name,
            alloc, r->mops, ratio, r->cpu_mops, cpu_ratio);
    if (strcmp(alloc, "fmem") == 0)
        fprintf(f, " | peak %.2f MiB, after frees %.0f KiB, after collect %.0f KiB",
                (double)r->peak / 1048576, (double)r->after_free / 1024,
                (double)r->after_collect / 1024);
    fputc('\n', f);
    if (!o->json)
        return;
    printf("{\"workload\":\"%s\",\"allocator\":\"%s\",\"threads\":%u,\"mops_per_s\":%.4g,"
           "\"ratio_vs_glibc\":%.4g,\"mops_per_cpu_s\":%.4g,\"cpu_ratio_vs_glibc\":%.4g",
           w->name, alloc, o->p.threads, r->mops, ratio, r->cpu_mops, cpu_ratio);
    if (strcmp(alloc, "fmem") == 0)
        printf(",\"peak_remote_bytes\":%llu,\"remote_bytes_after_free\":%llu,"
               "\"remote_bytes_after_collect\":%llu,\"pool_allocated_after\":%llu",
               (unsigned long long)r->peak, (unsigned long long)r->after_free,
               (unsigned long long)r->after_collect, (unsigned long long)r->pool_after);
    printf("}\n");
}

static int parse(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){.p = {.threads = 2, .scale = 1.0},
                       .allocators = "glibc,mimalloc,fmem",
                       .repeat = 3};
    enum { O_T = 1, O_W, O_A, O_S, O_R, O_P, O_RTT, O_J };
    static const struct option lo[] = {
        {"threads", required_argument, NULL, O_T}, {"workloads", required_argument, NULL, O_W},
        {"allocators", required_argument, NULL, O_A}, {"scale", required_argument, NULL, O_S},
        {"repeat", required_argument, NULL, O_R},  {"pool", required_argument, NULL, O_P},
        {"rtt-ns", required_argument, NULL, O_RTT}, {"json", no_argument, NULL, O_J},
        {NULL, 0, NULL, 0},
    };
    for (int c; (c = getopt_long(argc, argv, "", lo, NULL)) != -1;) {
        switch (c) {
        case O_T: o->p.threads = (unsigned)atoi(optarg); break;
        case O_W: o->workloads = optarg; break;
        case O_A: o->allocators = optarg; break;
        case O_S: o->p.scale = strtod(optarg, NULL); break;
        case O_R: o->repeat = (unsigned)atoi(optarg); break;
        case O_P: o->pool = optarg; break;
        case O_RTT: o->rtt_ns = (unsigned)atoi(optarg); break;
        case O_J: o->json = 1; break;
        default: return -1;
        }
    }
    return o->p.threads && o->p.threads <= 256 && o->repeat && o->p.scale > 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    struct opts o;
    if (parse(argc, argv, &o)) {
        fprintf(stderr, "usage: %s [--threads N] [--workloads threadtest,shbench,larson] "
                        "[--allocators glibc,mimalloc,fmem,fmem-compact,fmem-random] [--scale X] [--repeat N] "
                        "[--pool URI] [--rtt-ns N] [--json]\n",
                argv[0]);
        return 2;
    }
    char why[96];
    int have_mi = listed_as(o.allocators, "mimalloc", 1);
    if (have_mi && mimalloc_load(why, sizeof why)) {
        fprintf(stderr, "mimalloc: %s; column skipped\n", why);
        have_mi = 0;
    }
    char uri[64];
    snprintf(uri, sizeof uri, "mem:?size=1G&rtt_ns=%u", o.rtt_ns);
    fmem_pool *pool = NULL;
    if (listed_as(o.allocators, "fmem", 1) || listed_as(o.allocators, "fmem-compact", 0) ||
        listed_as(o.allocators, "fmem-random", 0)) {
        int rc = fmem_open(o.pool ? o.pool : uri, &pool);
        if (rc) {
            fprintf(stderr, "pool: %s\n", fmem_strerror(rc));
            return 1;
        }
    }
    const char *allocs[] = {"glibc", "mimalloc", "fmem", "fmem-compact", "fmem-random"};
    for (unsigned i = 0; i < mb_nworkloads; i++) {
        const struct mb_workload *w = &mb_workloads[i];
        if (o.workloads && !listed_as(o.workloads, w->name, 1))
            continue;
        struct result glibc = {0};
        for (unsigned k = 0; k < 5; k++) {
            if (!listed_as(o.allocators, allocs[k], k < 3))
                continue;
            if ((k == 1 && !have_mi) || (k >= 2 && !pool))
                continue;
            struct result r;
            if (measure(&o, pool, allocs[k], w, &r))
                return 1;
            if (k == 0)
                glibc = r;
            report(&o, allocs[k], w, &r, &glibc);
        }
    }
    fmem_close(pool);
    return 0;
}
