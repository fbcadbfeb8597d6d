/* test_region_evict.c - eviction a window at a time and faults waiting for
 * cache space:
 *  - threads read-modify-write random words of a region eight times its
 *    cache (each word checked against a shadow copy) while another thread
 *    writes, releases and re-reads its own blocks: the writer drops the
 *    resident units of a window with one zap, claiming the absent units
 *    between them, so faults on those race the zap and releases race the
 *    write-back;
 *  - faults that wait for a free slot of a tiny cache are served when the
 *    slot comes from a release that met the unit being flushed (no
 *    eviction frees it): the handler must be woken for it. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "region_fixture.h"

TestSuite(region_evict, .init = open_pool, .fini = close_pool, .timeout = 120);

#define WORKERS 3

struct rmw {
    uint64_t *mem, *shadow;
    size_t words; /* the workers' part: words [0, words) */
    unsigned id;
    long ops;
    size_t bad_at;
    int bad;
};

/* Worker `id` owns the words i with i % WORKERS == id. */
static void *rmw_worker(void *p)
{
    struct rmw *a = p;
    uint64_t s = 0x9e3779b97f4a7c15ull * (a->id + 1);
    for (long k = 0; k < a->ops && !a->bad; k++) {
        size_t i = (rnd(&s) % (a->words / WORKERS)) * WORKERS + a->id;
        uint64_t v = ((volatile uint64_t *)a->mem)[i];
        if (v != a->shadow[i]) {
            a->bad = 1;
            a->bad_at = i;
            break;
        }
        v = rnd(&s);
        a->mem[i] = v;
        a->shadow[i] = v;
    }
    return NULL;
}

struct releaser {
    fmem_region *r;
    unsigned char *mem;
    size_t from, to, block;
    atomic_int *stop;
    int bad;
};

/* Writes a block of its part, releases it, checks it reads as zeros. */
static void *release_loop(void *p)
{
    struct releaser *a = p;
    uint64_t s = 12345;
    size_t nblocks = (a->to - a->from) / a->block;
    while (!atomic_load(a->stop) && !a->bad) {
        size_t off = a->from + (rnd(&s) % nblocks) * a->block;
        memset(a->mem + off, 0x5a, a->block);
        if (fmem_region_release(a->r, off, a->block) != 0) {
            a->bad = 1;
            break;
        }
        for (size_t i = 0; i < a->block; i += 512)
            if (((volatile unsigned char *)a->mem)[off + i] != 0)
                a->bad = 2;
    }
    return NULL;
}

static void random_rmw(size_t unit)
{
    size_t size = (size_t)16 << 20, cache = size / 8;
    fmem_region *r = make(size, cache, unit);
    uint64_t *mem = fmem_region_base(r);
    size_t part = size * 3 / 4; /* the workers'; the rest is the releaser's */
    uint64_t *shadow = calloc(part / 8, 8);
    cr_assert_not_null(shadow);
    for (size_t i = 0; i < part / 8; i++) /* every unit written once */
        mem[i] = shadow[i] = i * 0x2545f4914f6cdd1dull;
    atomic_int stop = 0;
    struct releaser rl = {r, (unsigned char *)mem, part, size, 64 << 10, &stop, 0};
    struct rmw a[WORKERS];
    pthread_t t[WORKERS], rt;
    cr_assert_eq(pthread_create(&rt, NULL, release_loop, &rl), 0);
    for (unsigned i = 0; i < WORKERS; i++) {
        a[i] = (struct rmw){mem, shadow, part / 8, i, 25000, 0, 0};
        cr_assert_eq(pthread_create(&t[i], NULL, rmw_worker, &a[i]), 0);
    }
    for (unsigned i = 0; i < WORKERS; i++)
        pthread_join(t[i], NULL);
    atomic_store(&stop, 1);
    pthread_join(rt, NULL);
    for (unsigned i = 0; i < WORKERS; i++)
        cr_assert_eq(a[i].bad, 0, "worker %u read a wrong word %zu", i, a[i].bad_at);
    cr_assert_eq(rl.bad, 0, "releaser: %d", rl.bad);
    cr_assert_eq(fmem_region_flush(r), 0);
    for (size_t i = 0; i < part / 8; i++)
        cr_assert_eq(mem[i], shadow[i], "word %zu after the flush", i);
    fmem_region_stats_t st;
    cr_assert_eq(fmem_region_stats(r, &st), 0);
    cr_assert_gt(st.evictions, 1000, "the test is void: %llu evictions",
                 (unsigned long long)st.evictions);
    cr_assert_gt(st.releases, 0);
    cr_assert_eq(fmem_region_release(r, 0, size), 0);
    cr_assert_eq(pool_bytes(), 0, "every chunk is given back");
    cr_assert_eq(fmem_region_destroy(r), 0);
    free(shadow);
}

Test(region_evict, random_rmw_and_releases_4k_unit)
{
    random_rmw(4096);
}

Test(region_evict, random_rmw_and_releases_16k_unit)
{
    random_rmw(16384);
}

/* ---- faults waiting for space ------------------------------------------- */

struct waiter {
    unsigned char *mem;
    size_t size, unit;
    unsigned id;
    atomic_int *stop;
    long faults;
};

/* Touches random units of its own stripe until told to stop. */
static void *touch_loop(void *p)
{
    struct waiter *a = p;
    uint64_t s = 777 + a->id;
    size_t units = a->size / a->unit;
    while (!atomic_load(a->stop)) {
        size_t u = (rnd(&s) % (units / 4)) * 4 + a->id; /* stripes 0..2; 3 is the flusher's */
        ((volatile unsigned char *)a->mem)[u * a->unit + (rnd(&s) % a->unit)] += 1;
        a->faults++;
    }
    return NULL;
}

/* A cache of the least units, three threads faulting all over a region
 * and one that writes its units, flushes and releases them at once, so
 * that releases meet units being written back and free their slots from
 * there. Every fault must be served: a thread left waiting for a slot
 * shows as the test's timeout. */
Test(region_evict, faults_waiting_for_space_see_slots_freed_by_flushes)
{
    size_t unit = 16384, size = (size_t)4 << 20;
    fmem_region *r = make(size, FMEM_REGION_MIN_CACHE_UNITS * unit, unit);
    unsigned char *mem = fmem_region_base(r);
    atomic_int stop = 0;
    struct waiter w[3];
    pthread_t t[3];
    for (unsigned i = 0; i < 3; i++) {
        w[i] = (struct waiter){mem, size, unit, i, &stop, 0};
        cr_assert_eq(pthread_create(&t[i], NULL, touch_loop, &w[i]), 0);
    }
    uint64_t s = 99;
    size_t units = size / unit;
    for (int round = 0; round < 3000; round++) {
        size_t u = (rnd(&s) % (units / 4)) * 4 + 3;
        mem[u * unit] = 1;
        mem[u * unit + unit - 1] = 1;
        cr_assert_eq(fmem_region_flush(r), 0);
        cr_assert_eq(fmem_region_release(r, u * unit, unit), 0);
        cr_assert_eq(mem[u * unit], 0);
    }
    atomic_store(&stop, 1);
    for (unsigned i = 0; i < 3; i++) {
        pthread_join(t[i], NULL);
        cr_assert_gt(w[i].faults, 0);
    }
    cr_assert_eq(fmem_region_destroy(r), 0);
}

/* ---- a writing scan over memory never written --------------------------- */

/* A program fills fresh memory, every other 64 KiB chunk with zeros: the
 * read-ahead maps the units writable (no write-protect fault each) and
 * the writer gives pool space only to units that hold data. */
Test(region_evict, writing_scan_of_fresh_memory_pays_for_data_only)
{
    size_t unit = 16384, size = (size_t)32 << 20, cache = size / 4, chunk = 64 << 10;
    fmem_region *r = make(size, cache, unit);
    unsigned char *m = fmem_region_base(r);
    fmem_region_stats_t a, b;
    cr_assert_eq(fmem_region_stats(r, &a), 0);
    for (size_t off = 0; off < size; off += 8)
        *(uint64_t *)(m + off) = (off / chunk) % 2 ? 0 : off + 1;
    cr_assert_eq(fmem_region_stats(r, &b), 0);
    uint64_t wp = b.wp_faults - a.wp_faults, units = size / unit;
    cr_assert_lt(wp, units / 8, "%llu write-protect faults for %llu units",
                 (unsigned long long)wp, (unsigned long long)units);
    /* the zero chunks that left the cache took no pool space */
    uint64_t held = pool_bytes();
    cr_assert_leq(held, size / 2 + cache, "%llu pool bytes for %zu bytes of data",
                  (unsigned long long)held, size / 2);
    for (size_t off = 0; off < size; off += 8)
        cr_assert_eq(*(uint64_t *)(m + off), (off / chunk) % 2 ? 0 : off + 1, "word at %zu", off);
    cr_assert_eq(fmem_region_destroy(r), 0);
}

/* First touches of fresh memory in no particular order: a fault maps the
 * never-written units after it too (a read-ahead step), so groups of
 * neighbours touched in a random group order cost one fault each. */
Test(region_evict, first_touch_maps_fresh_neighbours)
{
    size_t unit = 16384, size = (size_t)16 << 20, group = 8, units = size / unit;
    fmem_region *r = make(size, size, unit);
    unsigned char *m = fmem_region_base(r);
    size_t ngroups = units / group, order[units / 8];
    uint64_t s = 4242;
    for (size_t i = 0; i < ngroups; i++)
        order[i] = i;
    for (size_t i = ngroups - 1; i > 0; i--) {
        size_t j = rnd(&s) % (i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    fmem_region_stats_t a, b;
    cr_assert_eq(fmem_region_stats(r, &a), 0);
    for (size_t i = 0; i < ngroups; i++)
        for (size_t k = 0; k < group; k++)
            m[(order[i] * group + k) * unit + 100] = (unsigned char)(k + 1);
    cr_assert_eq(fmem_region_stats(r, &b), 0);
    uint64_t faults = b.missing_faults - a.missing_faults;
    cr_assert_lt(faults, ngroups * 3 / 2, "%llu faults for %zu groups of %zu fresh units",
                 (unsigned long long)faults, ngroups, group);
    for (size_t u = 0; u < units; u++)
        cr_assert_eq(m[u * unit + 100], (unsigned char)(u % group + 1), "unit %zu", u);
    cr_assert_eq(fmem_region_destroy(r), 0);
}

/* A cache as large as the region never evicts, also when a read-ahead
 * stream reaches the last free slots (it stops instead of asking the
 * writer for space, which would drop a whole window). */
Test(region_evict, full_cache_never_evicts)
{
    size_t unit = 16384, size = (size_t)16 << 20;
    fmem_region *r = make(size, size, unit);
    unsigned char *m = fmem_region_base(r);
    for (int pass = 0; pass < 2; pass++)
        for (size_t off = 0; off < size; off += 4096)
            m[off] = (unsigned char)(off / 4096 + pass);
    cr_assert_eq(fmem_region_flush(r), 0);
    fmem_region_stats_t st;
    cr_assert_eq(fmem_region_stats(r, &st), 0);
    cr_assert_eq(st.evictions, 0, "%llu evictions", (unsigned long long)st.evictions);
    for (size_t off = 0; off < size; off += 4096)
        cr_assert_eq(m[off], (unsigned char)(off / 4096 + 1));
    cr_assert_eq(fmem_region_destroy(r), 0);
}
