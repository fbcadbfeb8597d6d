/* fmem-fragbench.c - fragmentation: allocate N small objects of mixed
 * sizes, free a random 80-90 % of them, then reclaim; how much memory is
 * still held, against the live bytes.
 *
 * Columns, each run in a child process of its own on the same workload
 * (same seed):
 *   fmem        compactable heap on a shm pool, sequential placement:
 *               pool bytes after the allocations, after the frees (and
 *               fmem_heap_collect), after fmem_heap_compact
 *   fmem-random the same with FMEM_COMPACT_RANDOM placement
 *   fmem-nofence as fmem, merges not fenced against concurrent writes
 *               (FMEM_COMPACT_FENCE=0): what the fence costs
 *   fmem-slabs  as fmem, whole slabs merged only, not page by page
 *               (FMEM_COMPACT_PAGES=0): what page merging gains
 *   fmem-chunks as fmem, every slab stays one 64 KiB chunk: no pages
 *               given back (FMEM_COMPACT_PAGEBACK=0): what that gains
 *   glibc       malloc/free in local memory: resident bytes after the
 *               allocations, after the frees, after malloc_trim(0)
 *   mimalloc    mi_malloc/mi_free (dlopen'ed), after mi_collect(true);
 *               skipped with a message without libmimalloc.so.2
 * Footprint ratio = bytes held / live bytes (requested sizes of the live
 * objects). Reclaim time = the compaction / trim / collect call alone.
 *
 * usage: fmem-fragbench [-n N] [--free-min PCT] [--free-max PCT]
 *        [--sizes a,b,c] [--seed S] [--pool-mb M] [--strided] [--json]
 *        [--analyze]
 * --strided keeps every k-th object allocated (k = 100 / (100 - free %))
 * instead of a random subset: the live objects of every slab then sit at
 * the same offsets under sequential placement, which random placement
 * breaks up. --analyze prints, for the fmem columns, the pair-compatibility
 * statistics of the heap left by the frees and what merging at 64 KiB and
 * at 4 KiB granularity could reach (fragbench_analyze.c). */
#include <getopt.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <fmem.h>
#include <fmem_far.h>

#include "clock_rng.h"

#include "fragbench_analyze.h"
#include "local_malloc.h"

struct opts {
    size_t n;
    unsigned free_min, free_max;
    size_t sizes[32];
    unsigned nsizes;
    uint64_t seed;
    unsigned pool_mb;
    int strided; /* keep every k-th object instead of a random subset */
    int json;    /* one JSON line per allocator instead of the table */
    int analyze; /* fmem columns: pair-compatibility statistics */
    const char *analyzing; /* the column being run */
};

struct result {
    int ok;
    char why[96];
    uint64_t live, after_alloc, after_free, after_reclaim, reclaim_ns, merges, alloc_ns;
};

/* ---- the allocators ----------------------------------------------------- */

struct alloc {
    void *(*malloc)(void *ctx, size_t n);
    void (*free)(void *ctx, void *p);
    uint64_t (*held)(void *ctx); /* bytes held now */
    void (*reclaim)(void *ctx, struct result *r);
    void *ctx;
};

static uint64_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, res = 0;
    if (f) {
        if (fscanf(f, "%lu %lu", &size, &res) != 2)
            res = 0;
        fclose(f);
    }
    return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
}

static uint64_t rss_base;
static uint64_t local_held(void *ctx)
{
    (void)ctx;
    uint64_t r = rss_bytes();
    return r > rss_base ? r - rss_base : 0;
}

static void glibc_reclaim(void *ctx, struct result *r)
{
    (void)ctx;
    (void)r;
    malloc_trim(0);
}

static void mi_reclaim(void *ctx, struct result *r)
{
    (void)ctx;
    (void)r;
    mimalloc_collect(1);
}

struct fm {
    fmem_pool *pool;
    fmem_heap *heap;
    uint64_t base;
};
static void *fm_malloc(void *ctx, size_t n)
{
    return fmem_heap_malloc(((struct fm *)ctx)->heap, n);
}
static void fm_free(void *ctx, void *p)
{
    fmem_heap_free(((struct fm *)ctx)->heap, p);
}
static uint64_t fm_held(void *ctx)
{
    struct fm *f = ctx;
    fmem_stats_t st;
    fmem_stats(f->pool, &st);
    return st.allocated_bytes - f->base;
}
static void fm_reclaim(void *ctx, struct result *r)
{
    struct fm *f = ctx;
    fmem_heap_compact(f->heap, 0);
    fmem_heap_stats_t hs;
    fmem_heap_stats(f->heap, &hs);
    r->merges = hs.merges;
}

/* ---- the workload ------------------------------------------------------- */

static void workload(const struct opts *o, struct alloc *a, struct result *r)
{
    void **obj = mmap(NULL, o->n * sizeof *obj, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    size_t *len = mmap(NULL, o->n * sizeof *len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (obj == MAP_FAILED || len == MAP_FAILED) {
        snprintf(r->why, sizeof r->why, "no memory for the object table");
        return;
    }
    rss_base = rss_bytes();
    uint64_t s = o->seed | 1;
    uint64_t t0 = bench_now_ns();
    for (size_t i = 0; i < o->n; i++) {
        len[i] = o->sizes[xorshift64(&s) % o->nsizes];
        if (!(obj[i] = a->malloc(a->ctx, len[i]))) {
            snprintf(r->why, sizeof r->why, "allocation %zu failed", i);
            return;
        }
    }
    r->alloc_ns = bench_now_ns() - t0;
    for (size_t i = 0; i < o->n; i++)
        memset(obj[i], (int)(i & 0xff), len[i]);
    r->after_alloc = a->held(a->ctx);
    unsigned pct = o->free_min + (unsigned)(xorshift64(&s) % (o->free_max - o->free_min + 1));
    size_t stride = pct < 100 ? 100 / (100 - pct) : o->n + 1;
    for (size_t i = 0; i < o->n; i++)
        if (o->strided ? i % stride != 0 : xorshift64(&s) % 100 < pct) {
            a->free(a->ctx, obj[i]);
            obj[i] = NULL;
        } else {
            r->live += len[i];
        }
    r->after_free = a->held(a->ctx);
    if (o->analyze && a->malloc == fm_malloc) {
        printf("%s after the frees (%llu live bytes):\n", o->analyzing,
               (unsigned long long)r->live);
        frag_analyze(obj, len, o->n, r->live, stdout);
        fflush(stdout);
    }
    t0 = bench_now_ns();
    a->reclaim(a->ctx, r);
    r->reclaim_ns = bench_now_ns() - t0;
    r->after_reclaim = a->held(a->ctx);
    for (size_t i = 0; i < o->n; i++) /* every live object intact */
        if (obj[i] && ((unsigned char *)obj[i])[len[i] - 1] != (unsigned char)(i & 0xff)) {
            snprintf(r->why, sizeof r->why, "object %zu damaged", i);
            return;
        }
    r->ok = 1;
}

static void run_fmem(const struct opts *o, unsigned flags, struct result *r)
{
    char uri[128];
    snprintf(uri, sizeof uri, "shm:/fmem-fragbench-compact-%d?size=%uM", getpid(), o->pool_mb);
    struct fm f = {0};
    int rc = fmem_open(uri, &f.pool);
    if (rc) {
        snprintf(r->why, sizeof r->why, "fmem_open: %s", fmem_strerror(rc));
        return;
    }
    fmem_unlink(uri); /* gone when the process ends */
    fmem_compact_policy pol = {.flags = flags};
    if ((rc = fmem_heap_new_compactable(f.pool, &pol, &f.heap)) != 0) {
        snprintf(r->why, sizeof r->why, "fmem_heap_new_compactable: %s", fmem_strerror(rc));
        return;
    }
    fmem_stats_t st;
    fmem_stats(f.pool, &st);
    f.base = st.allocated_bytes;
    struct alloc a = {fm_malloc, fm_free, fm_held, fm_reclaim, &f};
    /* the frees' empty slabs go back before the "after free" figure */
    workload(o, &a, r);
}

static void run_one(const struct opts *o, const char *name, struct result *r)
{
    memset(r, 0, sizeof *r);
    if (strcmp(name, "fmem-nofence") == 0) {
        setenv("FMEM_COMPACT_FENCE", "0", 1); /* this child only */
        run_fmem(o, 0, r);
    } else if (strcmp(name, "fmem-slabs") == 0) {
        setenv("FMEM_COMPACT_PAGES", "0", 1);
        run_fmem(o, 0, r);
    } else if (strcmp(name, "fmem-chunks") == 0) {
        setenv("FMEM_COMPACT_PAGEBACK", "0", 1);
        run_fmem(o, 0, r);
    } else if (strcmp(name, "fmem") == 0 || strcmp(name, "fmem-random") == 0) {
        run_fmem(o, strcmp(name, "fmem") ? FMEM_COMPACT_RANDOM : 0, r);
    } else if (strcmp(name, "glibc") == 0) {
        struct alloc a = {glibc_malloc, glibc_free, local_held, glibc_reclaim, NULL};
        workload(o, &a, r);
    } else if (mimalloc_load(r->why, sizeof r->why) == 0) {
        struct alloc a = {mimalloc_malloc, mimalloc_free, local_held, mi_reclaim, NULL};
        workload(o, &a, r);
    }
}

/* Each column in a child of its own: clean heaps, clean RSS. */
static void run_child(const struct opts *o, const char *name, struct result *r)
{
    struct result *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                             -1, 0);
    memset(r, 0, sizeof *r);
    if (sh == MAP_FAILED) {
        snprintf(r->why, sizeof r->why, "mmap failed");
        return;
    }
    memset(sh, 0, sizeof *sh);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        run_one(o, name, sh);
        _exit(0);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        snprintf(sh->why, sizeof sh->why, "the run died (status %#x)", status);
    *r = *sh;
    munmap(sh, sizeof *sh);
}

static int parse_sizes(const char *s, struct opts *o)
{
    o->nsizes = 0;
    for (const char *p = s; *p && o->nsizes < 32;) {
        char *end;
        unsigned long v = strtoul(p, &end, 10);
        if (end == p || v == 0 || v > 16384)
            return -1;
        o->sizes[o->nsizes++] = v;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            return -1;
    }
    return o->nsizes ? 0 : -1;
}

int main(int argc, char **argv)
{
    struct opts o = {.n = 200000, .free_min = 80, .free_max = 90, .seed = 42, .pool_mb = 1024};
    parse_sizes("16,32,48,64,96,128,192,256,384,512", &o);
    static const struct option lo[] = {{"free-min", 1, 0, 'a'}, {"free-max", 1, 0, 'b'},
                                       {"sizes", 1, 0, 's'},    {"seed", 1, 0, 'r'},
                                       {"pool-mb", 1, 0, 'p'},  {"help", 0, 0, 'h'},
                                       {"strided", 0, 0, 'k'},  {"json", 0, 0, 'j'},
                                       {"analyze", 0, 0, 'z'},
                                       {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "n:h", lo, NULL)) != -1) {
        switch (c) {
        case 'n': o.n = strtoull(optarg, NULL, 10); break;
        case 'a': o.free_min = (unsigned)atoi(optarg); break;
        case 'b': o.free_max = (unsigned)atoi(optarg); break;
        case 's':
            if (parse_sizes(optarg, &o)) {
                fprintf(stderr, "bad --sizes '%s' (1..16384, comma separated)\n", optarg);
                return 2;
            }
            break;
        case 'r': o.seed = strtoull(optarg, NULL, 10); break;
        case 'p': o.pool_mb = (unsigned)atoi(optarg); break;
        case 'k': o.strided = 1; break;
        case 'j': o.json = 1; break;
        case 'z': o.analyze = 1; break;
        default:
            printf("usage: %s [-n N] [--free-min PCT] [--free-max PCT] [--sizes a,b,c] "
                   "[--seed S] [--pool-mb M] [--strided] [--json] [--analyze]\n",
                   argv[0]);
            return c == 'h' ? 0 : 2;
        }
    }
    if (o.n == 0 || o.free_min > o.free_max || o.free_max > 100) {
        fprintf(stderr, "need -n > 0 and 0 <= --free-min <= --free-max <= 100\n");
        return 2;
    }
    if (!o.json) {
        printf("fragbench: %zu objects, sizes", o.n);
        for (unsigned i = 0; i < o.nsizes; i++)
            printf("%s%zu", i ? "," : " ", o.sizes[i]);
        printf(", free %u-%u %% (%s), seed %llu\n", o.free_min, o.free_max,
               o.strided ? "strided" : "random", (unsigned long long)o.seed);
        printf("%-12s %9s %11s %11s %11s %8s %8s %10s %7s %9s\n", "allocator", "live KiB",
               "alloc KiB", "freed KiB", "reclaim KiB", "x before", "x after", "reclaim ms",
               "merges", "malloc ns");
    }
    const char *names[] = {"fmem", "fmem-random", "glibc", "mimalloc", "fmem-nofence",
                           "fmem-slabs", "fmem-chunks"};
    int fail = 0;
    for (unsigned i = 0; i < sizeof names / sizeof *names; i++) {
        struct result r;
        o.analyzing = names[i];
        run_child(&o, names[i], &r);
        if (o.json) {
            printf("{\"bench\":\"fragbench\",\"allocator\":\"%s\",\"ok\":%s,\"objects\":%zu,"
                   "\"strided\":%s,\"seed\":%llu,\"live_bytes\":%llu,\"alloc_bytes\":%llu,"
                   "\"freed_bytes\":%llu,\"reclaimed_bytes\":%llu,\"reclaim_ns\":%llu,"
                   "\"merges\":%llu,\"alloc_ns_per_object\":%.1f}\n",
                   names[i], r.ok ? "true" : "false", o.n, o.strided ? "true" : "false",
                   (unsigned long long)o.seed, (unsigned long long)r.live,
                   (unsigned long long)r.after_alloc, (unsigned long long)r.after_free,
                   (unsigned long long)r.after_reclaim, (unsigned long long)r.reclaim_ns,
                   (unsigned long long)r.merges, (double)r.alloc_ns / (double)o.n);
            fail |= !r.ok && (i < 2 || i >= 4);
            continue;
        }
        if (!r.ok) {
            printf("%-12s skipped: %s\n", names[i], r.why);
            fail |= i < 2 || i >= 4; /* fmem must run */
            continue;
        }
        printf("%-12s %9llu %11llu %11llu %11llu %8.2f %8.2f %10.3f %7llu %9.1f\n", names[i],
               (unsigned long long)(r.live >> 10), (unsigned long long)(r.after_alloc >> 10),
               (unsigned long long)(r.after_free >> 10),
               (unsigned long long)(r.after_reclaim >> 10), (double)r.after_free / (double)r.live,
               (double)r.after_reclaim / (double)r.live, (double)r.reclaim_ns / 1e6,
               (unsigned long long)r.merges, (double)r.alloc_ns / (double)o.n);
    }
    if (!o.json)
        printf("(fmem: pool bytes; glibc, mimalloc: resident bytes of the process; malloc ns: "
           "mean time of one allocation in the allocation phase)\n");
    return fail;
}
