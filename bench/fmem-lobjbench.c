/* fmem-lobjbench - what large heap objects cost, side by side with the
 * old way (one power-of-two pool block per object, fmem_alloc + fmem_map),
 * in the same run:
 *
 *  - memory: bytes held in the pool / bytes asked, per size (sizes from
 *    16 KiB to 64 MiB, many just above a power of two) and for a live set
 *    of random sizes;
 *  - speed: allocations + frees per second of each size, untouched and
 *    with every page written once, as the ratio new / old, by CPU time
 *    (user + system: the machine is shared, wall time says little).
 *
 *   fmem-lobjbench [--uri URI] [--quick]
 *
 * URI defaults to an in-process pool (mem:); give shm:/name?size=... for a
 * shared pool (the file is unlinked at the end). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <fmem.h>
#include <fmem_far.h>

#include "clock_rng.h"

#include "lobj.h"

#define KiB ((size_t)1024)
#define MiB (KiB * 1024)

/* The live set's sizes: a 24-bit LCG fraction in [0, 1), the sequence the
 * figures in docs/far-memory.md were measured with. */
static double lcg_unit(unsigned *seed)
{
    *seed = *seed * 1103515245u + 12345u;
    return (double)(*seed >> 8) / (double)(1u << 24);
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "fmem-lobjbench: %s: %s\n", what, fmem_strerror(rc));
    exit(1);
}

static void touch(char *p, size_t len)
{
    for (size_t i = 0; i < len; i += 4096)
        p[i] = (char)i;
}

/* The old way: one block, mapped where the pool is. */
static double old_rate(fmem_pool *pool, size_t size, unsigned iters, int write)
{
    double t0 = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID);
    for (unsigned i = 0; i < iters; i++) {
        fmem_handle h;
        void *p;
        int rc = fmem_alloc(pool, size, &h);
        if (rc || (rc = fmem_map(pool, &h, &p)) != 0)
            die("old alloc", rc);
        if (write)
            touch(p, size);
        fmem_free(pool, &h);
    }
    return iters / (bench_clock_s(CLOCK_PROCESS_CPUTIME_ID) - t0);
}

static double new_rate(fmem_heap *heap, size_t size, unsigned iters, int write)
{
    double t0 = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID);
    for (unsigned i = 0; i < iters; i++) {
        char *p = fmem_heap_malloc(heap, size);
        if (!p)
            die("heap malloc", FMEM_ENOMEM);
        if (write)
            touch(p, size);
        fmem_heap_free(heap, p);
    }
    return iters / (bench_clock_s(CLOCK_PROCESS_CPUTIME_ID) - t0);
}

/* The mapping path alone (what the heap does when no freed object of the
 * size is kept for reuse). */
static double lobj_rate(fmem_pool *pool, size_t size, unsigned iters, int write)
{
    double t0 = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID);
    for (unsigned i = 0; i < iters; i++) {
        struct lobj o;
        int rc = lobj_alloc(pool, size, 0, &o);
        if (rc)
            die("lobj alloc", rc);
        if (write)
            touch(o.ptr, size);
        lobj_free(pool, &o);
    }
    return iters / (bench_clock_s(CLOCK_PROCESS_CPUTIME_ID) - t0);
}

static uint64_t pool_bytes(fmem_pool *pool)
{
    fmem_stats_t st;
    int rc = fmem_stats(pool, &st);
    if (rc)
        die("stats", rc);
    return st.allocated_bytes;
}

int main(int argc, char **argv)
{
    const char *uri = "mem:?size=2G";
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--uri") && i + 1 < argc)
            uri = argv[++i];
        else if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else {
            fprintf(stderr, "usage: fmem-lobjbench [--uri URI] [--quick]\n");
            return 2;
        }
    }
    fmem_pool *pool;
    fmem_heap *heap;
    int rc = fmem_open(uri, &pool);
    if (rc)
        die(uri, rc);
    if ((rc = fmem_heap_new(pool, &heap)) != 0)
        die("heap", rc);

    printf("pool %s\n\n", uri);
    printf("held: bytes the pool holds for one object; asked: its size; r4k: its size "
           "rounded to 4 KiB\n"
           "speed: (allocation + free) rate of the new way / the old way, same size over and "
           "over;\n"
           "  by CPU time of the process (user + system);\n"
           "  heap = fmem_heap_malloc/free (a freed object of <= 1 MiB is kept for reuse),\n"
           "  map = lobj_alloc/free (the mapping path, no reuse); untouched, or every page "
           "written once\n\n");
    printf("%-10s %10s %10s %9s %9s %9s %6s | %8s %8s %8s %8s | %s\n", "size", "old held",
           "new held", "old/asked", "new/asked", "new/r4k", "blocks", "heap", "map", "heap",
           "map", "us old/heap/map untouched; written");
    printf("%-10s %10s %10s %9s %9s %9s %6s | %8s %8s %8s %8s |\n", "", "", "", "", "", "", "",
           "untouch", "untouch", "written", "written");
    static const size_t bases[] = {16 * KiB, 20 * KiB, 48 * KiB, 64 * KiB, 100 * KiB,
                                   128 * KiB, 300 * KiB, 1 * MiB, 3 * MiB, 8 * MiB,
                                   24 * MiB, 64 * MiB};
    double worst_old = 0, worst_new = 0, sum_old = 0, sum_new = 0, sum_asked = 0;
    double gm_untouched = 1, gm_written = 1, gm_map_untouched = 1, gm_map_written = 1;
    double worst_r4k = 0;
    unsigned nsizes = 0;
    for (unsigned b = 0; b < sizeof bases / sizeof *bases; b++)
        for (int plus = 0; plus < 2; plus++) {
            size_t size = plus ? bases[b] + 1 : bases[b] - bases[b] / 10;
            if (size <= FMEM_HEAP_SMALL_MAX)
                continue;
            fmem_heap_collect(heap); /* no freed object kept for reuse */
            uint64_t before = pool_bytes(pool);
            fmem_handle h;
            if ((rc = fmem_alloc(pool, size, &h)) != 0)
                die("old alloc", rc);
            uint64_t old_held = pool_bytes(pool) - before;
            fmem_free(pool, &h);
            char *p = fmem_heap_malloc(heap, size);
            if (!p)
                die("heap malloc", FMEM_ENOMEM);
            uint64_t new_held = pool_bytes(pool) - before;
            fmem_heap_free(heap, p);
            struct lobj o;
            if ((rc = lobj_alloc(pool, size, 0, &o)) != 0)
                die("lobj", rc);
            unsigned blocks = o.n;
            lobj_free(pool, &o);

            unsigned iters = (unsigned)(quick ? 4 * MiB / size : 64 * MiB / size);
            if (iters < 20)
                iters = 20;
            unsigned witers = (unsigned)(quick ? 16 * MiB / size : 256 * MiB / size);
            if (witers < 10)
                witers = 10;
            /* interleaved, three times, best of each: the VM is shared */
            double o0 = 0, n0 = 0, m0 = 0, o1 = 0, n1 = 0, m1 = 0, r;
            for (int rep = 0; rep < 3; rep++) {
                if ((r = old_rate(pool, size, iters, 0)) > o0)
                    o0 = r;
                if ((r = new_rate(heap, size, iters, 0)) > n0)
                    n0 = r;
                if ((r = lobj_rate(pool, size, iters, 0)) > m0)
                    m0 = r;
                if ((r = old_rate(pool, size, witers, 1)) > o1)
                    o1 = r;
                if ((r = new_rate(heap, size, witers, 1)) > n1)
                    n1 = r;
                if ((r = lobj_rate(pool, size, witers, 1)) > m1)
                    m1 = r;
            }
            fmem_heap_collect(heap);
            double ro = (double)old_held / (double)size, rn = (double)new_held / (double)size;
            size_t r4k = (size + 4095) & ~(size_t)4095;
            printf("%-10zu %10llu %10llu %9.3f %9.3f %9.3f %6u | %8.2f %8.2f %8.2f %8.2f | "
                   "%.2f/%.2f/%.2f; %.1f/%.1f/%.1f\n",
                   size, (unsigned long long)old_held, (unsigned long long)new_held, ro, rn,
                   (double)new_held / (double)r4k, blocks, n0 / o0, m0 / o0, n1 / o1, m1 / o1,
                   1e6 / o0, 1e6 / n0, 1e6 / m0, 1e6 / o1, 1e6 / n1, 1e6 / m1);
            worst_r4k = (double)new_held / (double)r4k > worst_r4k ? (double)new_held / (double)r4k
                                                                   : worst_r4k;
            gm_map_untouched *= m0 / o0;
            gm_map_written *= m1 / o1;
            worst_old = ro > worst_old ? ro : worst_old;
            worst_new = rn > worst_new ? rn : worst_new;
            sum_old += (double)old_held;
            sum_new += (double)new_held;
            sum_asked += (double)size;
            gm_untouched *= n0 / o0;
            gm_written *= n1 / o1;
            nsizes++;
        }
    printf("\nover these sizes: held/asked old %.3f new %.3f (worst old %.3f new %.3f, new "
           "against the 4 KiB-rounded size %.3f)\n",
           sum_old / sum_asked, sum_new / sum_asked, worst_old, worst_new, worst_r4k);
    printf("speed new/old, geometric mean: heap untouched %.2f written %.2f; map untouched "
           "%.2f written %.2f\n",
           pow(gm_untouched, 1.0 / nsizes), pow(gm_written, 1.0 / nsizes),
           pow(gm_map_untouched, 1.0 / nsizes), pow(gm_map_written, 1.0 / nsizes));

    /* a live set of random large sizes (16 KiB .. 4 MiB, log-uniform) */
    enum { LIVE = 400 };
    static char *live_new[LIVE];
    static fmem_handle live_old[LIVE];
    size_t asked = 0;
    unsigned seed = 12345;
    uint64_t before = pool_bytes(pool);
    for (unsigned i = 0; i < LIVE; i++) {
        double f = lcg_unit(&seed);
        size_t size = (size_t)(16.0 * KiB * exp2(f * 8.0)) + 1;
        asked += size;
        if ((rc = fmem_alloc(pool, size, &live_old[i])) != 0)
            die("old alloc", rc);
    }
    uint64_t old_live = pool_bytes(pool) - before;
    for (unsigned i = 0; i < LIVE; i++)
        fmem_free(pool, &live_old[i]);
    seed = 12345;
    for (unsigned i = 0; i < LIVE; i++) {
        double f = lcg_unit(&seed);
        size_t size = (size_t)(16.0 * KiB * exp2(f * 8.0)) + 1;
        if (!(live_new[i] = fmem_heap_malloc(heap, size)))
            die("heap malloc", FMEM_ENOMEM);
    }
    uint64_t new_live = pool_bytes(pool) - before;
    for (unsigned i = 0; i < LIVE; i++)
        fmem_heap_free(heap, live_new[i]);
    printf("live set of %d random sizes 16 KiB..4 MiB (%.1f MiB asked): held/asked old %.3f "
           "new %.3f\n",
           LIVE, (double)asked / MiB, (double)old_live / (double)asked,
           (double)new_live / (double)asked);

    fmem_heap_destroy(heap);
    fmem_close(pool);
    if (!strncmp(uri, "shm:", 4))
        fmem_unlink(uri);
    return 0;
}
