/* fmem-backendbench - unit reads and writes against each memory-node
 * backend, side by side with a shm: node measured in the same run.
 *
 *   fmem-backendbench [--size BYTES] [--unit BYTES] [--dir DIR] [--reps N]
 *
 * For each backend: a pool of one node; one block per unit over a working
 * set of --size bytes; sequential writes (every unit in order), sequential
 * reads, random reads and random writes (a fixed random permutation), one
 * thread, each pass timed whole and repeated --reps times (best kept).
 * The data is half compressible (text-like runs and random bytes), so the
 * compressed node does real work. Figures are MB/s (10^6 bytes) and the
 * ratio to the shm: node; then each node's own report (fmem_node_stats). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock_rng.h"
#include "fmem.h"
#include "size_parse.h"

enum { SEQ_W, SEQ_R, RND_R, RND_W, NPASS };
static const char *pass_name[NPASS] = {"seq write", "seq read", "rand read", "rand write"};

struct result {
    const char *label;
    double mb_s[NPASS];
    fmem_node_stats_t ns;
    int rc;
};

static int run(const char *uri, uint64_t size, size_t unit, int reps, struct result *res)
{
    fmem_pool *p;
    int rc = fmem_open(uri, &p);
    if (rc) {
        fprintf(stderr, "%s: %s: %s\n", uri, fmem_strerror(rc), fmem_uri_error());
        return rc;
    }
    size_t n = size / unit;
    fmem_handle *h = calloc(n, sizeof *h);
    uint32_t *perm = malloc(n * sizeof *perm);
    char *buf = aligned_alloc(4096, unit), *data = aligned_alloc(4096, unit * 64);
    uint64_t x = 0x9E3779B97F4A7C15u; /* the data's bytes as in the figures in docs/ */
    for (size_t i = 0; i < unit * 64; i += 64) { /* 16 random bytes, 48 of a run */
        for (int j = 0; j < 16; j++)
            data[i + j] = (char)xorshift64(&x);
        memset(data + i + 16, 'a' + (int)(xorshift64(&x) % 4), 48);
    }
    for (size_t i = 0; i < n; i++)
        perm[i] = (uint32_t)i;
    struct rng s;
    rng_seed(&s, 1);
    rng_shuffle(&s, perm, n);
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = fmem_alloc(p, unit, &h[i]);
    for (int pass = 0; pass < NPASS && rc == 0; pass++) {
        double best = 1e30;
        for (int r = 0; r < reps && rc == 0; r++) {
            double t0 = bench_now_s();
            for (size_t k = 0; k < n && rc == 0; k++) {
                size_t i = pass == SEQ_W || pass == SEQ_R ? k : perm[k];
                if (pass == SEQ_W || pass == RND_W)
                    rc = fmem_write(p, &h[i], 0, data + (i % 64) * unit, unit);
                else
                    rc = fmem_read(p, &h[i], 0, buf, unit);
            }
            double t = bench_now_s() - t0;
            if (t < best)
                best = t;
        }
        res->mb_s[pass] = (double)n * unit / best / 1e6;
    }
    if (rc)
        fprintf(stderr, "%s: %s\n", uri, fmem_strerror(rc));
    /* the last written content must read back */
    for (size_t i = 0; i < n && rc == 0; i++) {
        rc = fmem_read(p, &h[i], 0, buf, unit);
        if (rc == 0 && memcmp(buf, data + (i % 64) * unit, unit)) {
            fprintf(stderr, "%s: unit %zu reads back wrong\n", uri, i);
            rc = FMEM_ECORRUPT;
        }
    }
    fmem_node_stats(p, 0, &res->ns);
    free(h);
    free(perm);
    free(buf);
    free(data);
    fmem_close(p);
    return rc;
}

int main(int argc, char **argv)
{
    uint64_t size = 64 << 20, unit = 64 << 10;
    const char *dir = "/var/tmp";
    int reps = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--size") && i + 1 < argc && size_parse(argv[i + 1], &size))
            i++;
        else if (!strcmp(argv[i], "--unit") && i + 1 < argc && size_parse(argv[i + 1], &unit))
            i++;
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc)
            dir = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--size BYTES] [--unit BYTES] [--dir DIR] [--reps N]\n",
                    argv[0]);
            return 2;
        }
    }
    if (unit < 4096 || unit & (unit - 1) || size < unit || reps < 1) {
        fprintf(stderr, "unit: a power of two >= 4K, size >= unit, reps >= 1\n");
        return 2;
    }
    char shm[128], ssd[PATH_MAX + 64], ssd_sync[PATH_MAX + 64], ssd_path[PATH_MAX];
    /* the pool holds the working set twice over: room for the allocator */
    unsigned long long psize = (unsigned long long)size * 2;
    snprintf(shm, sizeof shm, "shm:/fmem-backendbench-%d?size=%llu", (int)getpid(), psize);
    snprintf(ssd_path, sizeof ssd_path, "%s/fmem-backendbench-%d.ssd", dir, (int)getpid());
    snprintf(ssd, sizeof ssd, "ssd:%s?size=%llu", ssd_path, psize);
    snprintf(ssd_sync, sizeof ssd_sync, "ssd:%s?size=%llu&io=sync", ssd_path, psize);
    char zl[128], zz[128];
    snprintf(zl, sizeof zl, "zmem:?size=%llu&codec=lz4", psize);
    snprintf(zz, sizeof zz, "zmem:?size=%llu&codec=zstd", psize);
    struct {
        const char *label, *uri;
    } cases[] = {
        {"shm (baseline)", shm}, {"zmem lz4", zl}, {"zmem zstd", zz},
        {"ssd io_uring", ssd},   {"ssd pread", ssd_sync},
    };
    enum { NC = sizeof cases / sizeof cases[0] };
    struct result res[NC] = {0};
    printf("fmem-backendbench: %llu MiB working set, %llu KiB units, best of %d, one thread; "
           "ssd file in %s\n", (unsigned long long)(size >> 20), (unsigned long long)(unit >> 10),
           reps, dir);
    int status = 0;
    for (int c = 0; c < NC; c++) {
        res[c].label = cases[c].label;
        res[c].rc = run(cases[c].uri, size, unit, reps, &res[c]);
        status |= res[c].rc != 0;
        if (c == 0)
            fmem_unlink(shm);
    }
    unlink(ssd_path);
    printf("%-16s", "MB/s (x shm)");
    for (int k = 0; k < NPASS; k++)
        printf(" %20s", pass_name[k]);
    printf("\n");
    for (int c = 0; c < NC; c++) {
        printf("%-16s", res[c].label);
        for (int k = 0; k < NPASS; k++) {
            char cell[40];
            if (res[c].rc)
                snprintf(cell, sizeof cell, "failed");
            else
                snprintf(cell, sizeof cell, "%.0f (%.3fx)", res[c].mb_s[k],
                         res[0].mb_s[k] ? res[c].mb_s[k] / res[0].mb_s[k] : 0);
            printf(" %20s", cell);
        }
        printf("\n");
    }
    printf("\nnode reports (fmem_node_stats):\n");
    for (int c = 1; c < NC; c++) {
        fmem_node_stats_t *ns = &res[c].ns;
        printf("%-16s %s [%s]: held %.1f MiB", res[c].label, ns->kind, ns->detail,
               ns->held_bytes / 1048576.0);
        if (ns->stored_bytes)
            printf(" for %.1f MiB (ratio %.2f)", ns->stored_bytes / 1048576.0,
                   ns->compression_ratio);
        printf("; read %.0f MB/s, %.1f us/op; write %.0f MB/s, %.1f us/op; errors %llu\n",
               ns->read_mb_s, ns->read_lat_us, ns->write_mb_s, ns->write_lat_us,
               (unsigned long long)ns->errors);
    }
    return status;
}
