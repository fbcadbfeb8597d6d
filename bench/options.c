/* options.c - command line of fmem-bench. Every bad option or value is
 * reported on stderr and makes the program exit with status 2. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "uri.h" /* uri_parse_size: "64K", "1G", ... */

#define MAX_THREADS 4096
#define MAX_POOL ((uint64_t)256 << 30)

static void usage(FILE *f)
{
    fprintf(f,
            "usage: fmem-bench [options]\n"
            "Allocation benchmark: fmem and in-tree baselines on the same transport\n"
            "(shared memory with an injected round-trip delay), in one run.\n\n"
            "  --allocators LIST  comma list (default fmem,free-array,rpc):\n");
    for (unsigned i = 0; bench_allocators[i]; i++)
        fprintf(f, "                       %-10s %s\n", bench_allocators[i]->name,
                bench_allocators[i]->what);
    fprintf(f, "  --workload LIST    comma list (default churn,paper,mixed):\n");
    for (unsigned i = 0; bench_workloads[i]; i++)
        fprintf(f, "                       %-10s %s\n", bench_workloads[i]->name,
                bench_workloads[i]->what);
    fprintf(f,
            "  --threads LIST     client thread counts (default 1,2,4,8,16,32,64,128,256,512)\n"
            "  --rtt-ns N         injected round trip per one-sided batch / RPC (default 2000)\n"
            "  --rtt-mode MODE    how a client waits for it (default nic):\n"
            "                       nic   it sleeps; one emulator thread plays the NIC, runs the\n"
            "                             operations half a round trip after posting and wakes\n"
            "                             the client when the answer is back (URI rtt_mode=nic)\n"
            "                       spin  it spins on the clock, yielding (rtt_mode=spin, the\n"
            "                             library's default)\n"
            "  --rpc-service-ns N rpc: modeled memory-node CPU time per request (default 4000;\n"
            "                     see bench/README.md)\n"
            "  --seconds S        measured time per configuration (default 1)\n"
            "  --pool-size BYTES  pool data size, K/M/G suffixes, rounded up to 2 MiB (default 1G)\n"
            "  --size BYTES       churn block size, rounded up to 4 KiB x 2^k (default 4096)\n"
            "  --occupancy F      paper: fill level of the pool, 0 < F < 1 (default 0.875)\n"
            "  --seed N           random seed (default 1)\n"
            "  --json             one JSON object per line per configuration on stdout\n"
            "                     (the table and comparisons then go to stderr)\n"
            "  --help             this text\n\n"
            "Benchmarks of their own, with their own options (see --workload X --help):\n"
            "  --workload ipc     round trip application -> fmemd -> application, and 4 KiB\n"
            "                     allocation through the service vs embedded (starts daemons);\n"
            "                     --apps N application processes, --load N busy processes\n"
            "  --workload region  far-memory region scans at --cache-pct 100,50,25 vs local\n\n"
            "Figures per (allocator, workload, threads), measured phase only:\n"
            "  ops/s      successful allocations per second (frees not counted; key \"ops\"\n"
            "             = allocations, \"frees\" = frees)\n"
            "  avg/p99 us latency of one allocation call (log-linear histogram, < 1 %% error)\n"
            "  free us    average latency of one free call\n"
            "  CAS/op     CAS per allocation call, redo-log flushes excluded\n"
            "  log/op     redo-log flush CAS per allocation call\n"
            "  max retry  most CAS failures of one allocation\n"
            "  RTT/op     network round trips per allocation call (a batch or an RPC is one)\n"
            "  cpus       process CPU time / wall time: cores kept busy (nic: the\n"
            "             emulator's share included; spin: waits burn the cores)\n"
            "  nic        nic: emulator CPU / wall time\n"
            "  late_us    nic: average lateness of an answer behind its modeled time\n"
            "             (the emulator was preempted or busy waking clients)\n"
            "  fail       allocations that found no room (ENOMEM)\n"
            "JSON only: cas_dist = allocation calls that issued 0, 1, 2, 3, 4+ CAS (log\n"
            "excluded); rtt_per_op, free_*, server_busy (rpc), stats_max_retries (fmem),\n"
            "nic_* (the emulator).\n"
            "Setup (the paper workload's fill) runs with the delay off and is not measured.\n"
            "Exit status: 0 ok, 1 runtime failure, 2 bad usage.\n");
}

static int bad(const char *opt, const char *val, const char *why)
{
    fprintf(stderr, "fmem-bench: invalid value '%s' for %s: %s\n", val, opt, why);
    fprintf(stderr, "Try 'fmem-bench --help'.\n");
    return 2;
}

static bool parse_u64(const char *s, uint64_t *out)
{
    if (!s || !*s || *s == '-' || *s == '+')
        return false;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return false;
    *out = v;
    return true;
}

/* Split a comma list into tokens (in place); false on an empty token. */
static bool next_token(char **cur, char **tok)
{
    if (!*cur)
        return false;
    *tok = *cur;
    char *comma = strchr(*cur, ',');
    if (comma) {
        *comma = 0;
        *cur = comma + 1;
    } else {
        *cur = NULL;
    }
    return true;
}

static int parse_allocators(const char *val, struct bench_opts *o)
{
    char buf[256], *cur = buf, *tok;
    if (strlen(val) >= sizeof buf)
        return bad("--allocators", val, "list too long");
    strcpy(buf, val);
    o->nallocs = 0;
    while (next_token(&cur, &tok)) {
        const struct allocator *a = allocator_by_name(tok);
        if (!a)
            return bad("--allocators", tok, "unknown allocator (see --help)");
        for (unsigned i = 0; i < o->nallocs; i++)
            if (o->allocs[i] == a)
                return bad("--allocators", tok, "listed twice");
        o->allocs[o->nallocs++] = a;
    }
    return 0;
}

static int parse_workloads(const char *val, struct bench_opts *o)
{
    char buf[256], *cur = buf, *tok;
    if (strlen(val) >= sizeof buf)
        return bad("--workload", val, "list too long");
    strcpy(buf, val);
    o->nworkloads = 0;
    while (next_token(&cur, &tok)) {
        const struct workload *w = workload_by_name(tok);
        if (!w)
            return bad("--workload", tok, "unknown workload (churn, paper, mixed)");
        for (unsigned i = 0; i < o->nworkloads; i++)
            if (o->workloads[i] == w)
                return bad("--workload", tok, "listed twice");
        o->workloads[o->nworkloads++] = w;
    }
    return 0;
}

static int parse_threads(const char *val, struct bench_opts *o)
{
    char buf[512], *cur = buf, *tok;
    if (strlen(val) >= sizeof buf)
        return bad("--threads", val, "list too long");
    strcpy(buf, val);
    o->nthreads = 0;
    while (next_token(&cur, &tok)) {
        uint64_t n;
        if (!parse_u64(tok, &n) || n < 1 || n > MAX_THREADS)
            return bad("--threads", tok, "want thread counts from 1 to 4096");
        if (o->nthreads == sizeof o->threads / sizeof o->threads[0])
            return bad("--threads", val, "at most 64 thread counts");
        o->threads[o->nthreads++] = (unsigned)n;
    }
    return 0;
}

int bench_parse_options(int argc, char **argv, struct bench_opts *o)
{
    static const unsigned def_threads[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
    *o = (struct bench_opts){.rtt_ns = 2000, .rtt_mode = TP_RTT_NIC, .rpc_service_ns = 4000,
                             .seconds = 1, .pool_bytes = (uint64_t)1 << 30,
                             .size = 4096, .occupancy = 0.875, .seed = 1};
    o->allocs[o->nallocs++] = &alloc_fmem;
    o->allocs[o->nallocs++] = &alloc_freearray;
    o->allocs[o->nallocs++] = &alloc_rpc;
    for (unsigned i = 0; bench_workloads[i]; i++)
        o->workloads[o->nworkloads++] = bench_workloads[i];
    for (unsigned i = 0; i < sizeof def_threads / sizeof def_threads[0]; i++)
        o->threads[o->nthreads++] = def_threads[i];

    enum { O_ALLOC = 256, O_WL, O_THREADS, O_RTT, O_RTT_MODE, O_SERVICE, O_SECONDS, O_POOL,
           O_SIZE, O_OCC, O_SEED, O_JSON, O_HELP };
    static const struct option longopts[] = {
        {"allocators", required_argument, NULL, O_ALLOC},
        {"workload", required_argument, NULL, O_WL},
        {"workloads", required_argument, NULL, O_WL},
        {"threads", required_argument, NULL, O_THREADS},
        {"rtt-ns", required_argument, NULL, O_RTT},
        {"rtt-mode", required_argument, NULL, O_RTT_MODE},
        {"rpc-service-ns", required_argument, NULL, O_SERVICE},
        {"seconds", required_argument, NULL, O_SECONDS},
        {"pool-size", required_argument, NULL, O_POOL},
        {"size", required_argument, NULL, O_SIZE},
        {"occupancy", required_argument, NULL, O_OCC},
        {"seed", required_argument, NULL, O_SEED},
        {"json", no_argument, NULL, O_JSON},
        {"help", no_argument, NULL, O_HELP},
        {NULL, 0, NULL, 0},
    };
    opterr = 0;
    int c, rc;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        const char *v = optarg;
        uint64_t u;
        char *end;
        switch (c) {
        case O_ALLOC:
            if ((rc = parse_allocators(v, o)))
                return rc;
            break;
        case O_WL:
            if ((rc = parse_workloads(v, o)))
                return rc;
            break;
        case O_THREADS:
            if ((rc = parse_threads(v, o)))
                return rc;
            break;
        case O_RTT:
            if (!parse_u64(v, &u) || u > 1000000000u)
                return bad("--rtt-ns", v, "want nanoseconds from 0 to 1000000000");
            o->rtt_ns = u;
            break;
        case O_RTT_MODE:
            if (!strcmp(v, "nic"))
                o->rtt_mode = TP_RTT_NIC;
            else if (!strcmp(v, "spin"))
                o->rtt_mode = TP_RTT_SPIN;
            else
                return bad("--rtt-mode", v, "want nic or spin");
            break;
        case O_SERVICE:
            if (!parse_u64(v, &u) || u > 1000000000u)
                return bad("--rpc-service-ns", v, "want nanoseconds from 0 to 1000000000");
            o->rpc_service_ns = u;
            break;
        case O_SECONDS:
            errno = 0;
            o->seconds = strtod(v, &end);
            if (errno || end == v || *end || !isfinite(o->seconds) || o->seconds <= 0 ||
                o->seconds > 3600)
                return bad("--seconds", v, "want a number of seconds, 0 < S <= 3600");
            break;
        case O_POOL:
            if (!uri_parse_size(v, &u) || u < FMEM_SECTION_SIZE || u > MAX_POOL)
                return bad("--pool-size", v, "want 2M .. 256G (K/M/G suffixes)");
            o->pool_bytes = (u + FMEM_SECTION_SIZE - 1) / FMEM_SECTION_SIZE * FMEM_SECTION_SIZE;
            break;
        case O_SIZE:
            if (!uri_parse_size(v, &u) || u == 0 || u > MAX_POOL)
                return bad("--size", v, "want a block size in bytes (K/M/G suffixes)");
            o->size = fmem_size_round(u);
            break;
        case O_OCC:
            errno = 0;
            o->occupancy = strtod(v, &end);
            if (errno || end == v || *end || !(o->occupancy > 0 && o->occupancy < 1))
                return bad("--occupancy", v, "want a fraction, 0 < F < 1");
            break;
        case O_SEED:
            if (!parse_u64(v, &u))
                return bad("--seed", v, "want a non-negative integer");
            o->seed = u;
            break;
        case O_JSON:
            o->json = true;
            break;
        case 'h':
        case O_HELP:
            usage(stdout);
            return 1;
        case ':':
            fprintf(stderr, "fmem-bench: option %s needs a value\n", argv[optind - 1]);
            fprintf(stderr, "Try 'fmem-bench --help'.\n");
            return 2;
        default:
            fprintf(stderr, "fmem-bench: unknown option '%s'\n", argv[optind - 1]);
            fprintf(stderr, "Try 'fmem-bench --help'.\n");
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "fmem-bench: unexpected argument '%s'\n", argv[optind]);
        fprintf(stderr, "Try 'fmem-bench --help'.\n");
        return 2;
    }
    if (o->size > o->pool_bytes) {
        fprintf(stderr, "fmem-bench: --size %llu is larger than the pool (%llu bytes)\n",
                (unsigned long long)o->size, (unsigned long long)o->pool_bytes);
        return 2;
    }
    return 0;
}
