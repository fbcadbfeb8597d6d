/* fmem-tierbench - a region over a small fast node (mem:) and a large
 * compressed one (zmem:): the tier policy against all chunks on the fast
 * node (as long as it has room) and all on zmem:, in the same run.
 *
 *   fmem-tierbench [--hot BYTES] [--cold BYTES] [--cache BYTES]
 *                  [--fast BYTES] [--rounds N] [--reps N]
 *
 * Each setting gets a fresh pool "mem:?size=FAST;zmem:?size=..." and a
 * region of 64 KiB units without read-ahead. The cold set is written
 * first, then the hot set; the timed part is --rounds rounds, each a
 * read-modify-write of one word in every hot unit (in a random order) and
 * a read of one word of a random cold unit per four hot ones. With
 * --fast smaller than hot + cold, "all fast" fills the mem: node with
 * what was written first (the cold set) and the rest goes to zmem:. The
 * data is half compressible. Figures: accesses per second of the timed
 * part (best of --reps), the ratio to "all zmem:", and where the chunks
 * ended up. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock_rng.h"
#include "fmem.h"
#include "fmem_far.h"
#include "size_parse.h"

#define UNIT (64u << 10)

struct setting {
    const char *label;
    unsigned tier;
};

struct result {
    double ops_s;
    uint64_t fast_chunks, slow_chunks, moves, zmem_held;
};

static int run(const struct setting *st, size_t hot, size_t cold, size_t cache, size_t fast,
               int rounds, struct result *res)
{
    char uri[256];
    snprintf(uri, sizeof uri, "mem:?size=%zu;zmem:?size=%zu", fast, 2 * (hot + cold) + (64u << 20));
    fmem_pool *p;
    int rc = fmem_open(uri, &p);
    if (rc) {
        fprintf(stderr, "%s: %s: %s\n", uri, fmem_strerror(rc), fmem_uri_error());
        return rc;
    }
    size_t nhot = hot / UNIT, ncold = cold / UNIT, size = (nhot + ncold) * (size_t)UNIT;
    fmem_region_config c = {.size = size, .cache_bytes = cache, .fetch_unit = UNIT,
                            .prefetch = FMEM_REGION_NO_PREFETCH};
    fmem_region *r;
    rc = fmem_region_create(p, &c, &r);
    if (rc) {
        fprintf(stderr, "region: %s\n", fmem_strerror(rc));
        fmem_close(p);
        return rc;
    }
    fmem_region_tuning t = {.set = st->tier == FMEM_REGION_TIER_AUTO ? 0 : FMEM_REGION_TUNE_TIER,
                            .tier = st->tier};
    fmem_region_tune(r, &t);
    uint64_t *base = fmem_region_base(r);
    size_t words = UNIT / 8;
    struct rng s;
    rng_seed(&s, 1);
    /* cold set at units nhot.., written first; then the hot set */
    for (size_t u = nhot; u < nhot + ncold; u++)
        for (size_t w = 0; w < words; w++)
            base[u * words + w] = w % 16 < 8 ? rng_next(&s) : u;
    for (size_t u = 0; u < nhot; u++)
        for (size_t w = 0; w < words; w++)
            base[u * words + w] = w % 16 < 8 ? rng_next(&s) : u;
    uint32_t *order = malloc(nhot * sizeof *order);
    for (size_t i = 0; i < nhot; i++)
        order[i] = (uint32_t)i;
    uint64_t sum = 0;
    double t0 = bench_now_s();
    for (int round = 0; round < rounds; round++) {
        rng_shuffle(&s, order, nhot);
        for (size_t i = 0; i < nhot; i++) {
            uint64_t *w = &base[order[i] * words + rng_below(&s, words)];
            *w += 1;
            if (i % 4 == 0)
                sum += base[(nhot + rng_below(&s, ncold)) * words + rng_below(&s, words)];
        }
    }
    double dt = bench_now_s() - t0;
    res->ops_s = (double)rounds * (nhot + nhot / 4) / dt;
    fmem_region_path_t paths[2];
    fmem_region_paths(r, paths, 2);
    res->fast_chunks = paths[0].chunks;
    res->slow_chunks = paths[1].chunks;
    fmem_region_stats_t rs;
    fmem_region_stats(r, &rs);
    res->moves = rs.tier_moves;
    fmem_node_stats_t ns;
    fmem_node_stats(p, 1, &ns);
    res->zmem_held = ns.held_bytes;
    if (sum == 42) /* keep the reads */
        fputc(' ', stderr);
    free(order);
    fmem_region_destroy(r);
    fmem_close(p);
    return 0;
}

static size_t arg_size(const char *v)
{
    uint64_t x;
    if (!size_parse(v, &x) || x == 0) {
        fprintf(stderr, "bad size '%s'\n", v);
        exit(2);
    }
    return (size_t)x;
}

int main(int argc, char **argv)
{
    size_t hot = 8u << 20, cold = 64u << 20, cache = 4u << 20, fast = 24u << 20;
    int rounds = 40, reps = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--hot"))
            hot = arg_size(argv[i + 1]);
        else if (!strcmp(argv[i], "--cold"))
            cold = arg_size(argv[i + 1]);
        else if (!strcmp(argv[i], "--cache"))
            cache = arg_size(argv[i + 1]);
        else if (!strcmp(argv[i], "--fast"))
            fast = arg_size(argv[i + 1]);
        else if (!strcmp(argv[i], "--rounds"))
            rounds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: %s [--hot B] [--cold B] [--cache B] [--fast B] [--rounds N] [--reps N]\n",
                    argv[0]);
            return 2;
        }
    }
    if (hot < UNIT || cold < UNIT || rounds < 1 || reps < 1) {
        fprintf(stderr, "hot and cold need a unit (64 KiB) each, rounds and reps one\n");
        return 2;
    }
    const struct setting set[] = {{"all zmem:", FMEM_REGION_TIER_SLOW},
                                  {"all fast", FMEM_REGION_TIER_FAST},
                                  {"policy", FMEM_REGION_TIER_AUTO}};
    enum { N = sizeof set / sizeof set[0] };
    struct result best[N] = {{0}};
    printf("hot %zu MiB, cold %zu MiB, cache %zu MiB, mem: node %zu MiB, %d rounds, best of %d\n",
           hot >> 20, cold >> 20, cache >> 20, fast >> 20, rounds, reps);
    for (int rep = 0; rep < reps; rep++) /* settings interleaved: same load for each */
        for (int k = 0; k < N; k++) {
            struct result res;
            if (run(&set[k], hot, cold, cache, fast, rounds, &res))
                return 1;
            if (res.ops_s > best[k].ops_s)
                best[k] = res;
        }
    printf("%-10s %12s %8s %12s %12s %8s %12s\n", "setting", "accesses/s", "ratio", "fast chunks",
           "zmem chunks", "moves", "zmem held");
    for (int k = 0; k < N; k++)
        printf("%-10s %12.0f %8.2f %12llu %12llu %8llu %12llu\n", set[k].label, best[k].ops_s,
               best[k].ops_s / best[0].ops_s, (unsigned long long)best[k].fast_chunks,
               (unsigned long long)best[k].slow_chunks, (unsigned long long)best[k].moves,
               (unsigned long long)best[k].zmem_held);
    return 0;
}
