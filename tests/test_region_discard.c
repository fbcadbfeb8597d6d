/* test_region_discard.c - memory a region heap freed and keeps mapped for
 * reuse is never written back to the pool:
 *  - freed (held) pages are not written back by a flush nor when they are
 *    evicted (the region's write-back count says so), and pages the heap
 *    hands out again are written back and survive eviction like any other;
 *  - two threads allocate, fill, resize and free objects of many sizes in
 *    a region whose cache is far smaller than their data, every object
 *    checked against a private shadow copy throughout: evictions, releases,
 *    discarded units dropped and their pages reused; with every object
 *    freed and the heap gone, a flush leaves no pool space allocated. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "region_fixture.h"

TestSuite(region_discard, .init = open_pool, .fini = close_pool, .timeout = 240);

#define UNIT 16384

static fmem_region_stats_t stats(fmem_region *r)
{
    fmem_region_stats_t st;
    cr_assert_eq(fmem_region_stats(r, &st), 0);
    return st;
}

/* Read every page of [p, p + n): fresh memory read is mapped clean, so
 * its evictions cost no write-back; it pushes everything else out. */
static unsigned read_through(const volatile unsigned char *p, size_t n)
{
    unsigned sum = 0;
    for (size_t off = 0; off < n; off += 4096)
        sum += p[off];
    return sum;
}

Test(region_discard, freed_pages_are_never_written_back)
{
    size_t cache = (size_t)8 << 20; /* held budget: 1 MiB */
    fmem_region *r = make((size_t)256 << 20, cache, UNIT);
    fmem_heap *h;
    cr_assert_eq(fmem_heap_new_region(r, &h), 0);
    size_t n = 512 * 1024; /* 31 or 32 whole units */
    unsigned char *p = fmem_heap_malloc(h, n);
    cr_assert_not_null(p);
    memset(p, 0xab, n);
    cr_assert_eq(fmem_region_flush(r), 0); /* everything clean */
    memset(p, 0xcd, n);                     /* dirty again */
    cr_assert_eq(fmem_heap_free(h, p), 0); /* held: stays mapped */

    fmem_region_stats_t a = stats(r);
    cr_assert_eq(fmem_region_flush(r), 0);
    fmem_region_stats_t b = stats(r);
    /* the heap's own bookkeeping may dirty a unit or two; the object's 31+
     * dirty units must not be written back */
    cr_assert_lt(b.writebacks - a.writebacks, 4, "flush wrote back %llu units of freed memory",
                 (unsigned long long)(b.writebacks - a.writebacks));

    /* evict everything: read a fresh object twice the cache */
    size_t big = 2 * cache;
    unsigned char *q = fmem_heap_malloc(h, big);
    cr_assert_not_null(q);
    cr_assert_neq(q, p);
    cr_assert_eq(read_through(q, big), 0);
    fmem_region_stats_t c = stats(r);
    cr_assert_gt(c.evictions - b.evictions, cache / UNIT / 2, "the read evicts");
    cr_assert_lt(c.writebacks - b.writebacks, 4, "eviction wrote back %llu units of freed memory",
                 (unsigned long long)(c.writebacks - b.writebacks));
    cr_assert_eq(fmem_heap_free(h, q), 0);

    /* the held pages handed out again are data like any other */
    unsigned char *s = fmem_heap_malloc(h, n);
    cr_assert_eq(s, p, "the freed pages are reused");
    memset(s, 0x5e, n);
    fmem_region_stats_t d = stats(r);
    cr_assert_eq(fmem_region_flush(r), 0);
    fmem_region_stats_t e = stats(r);
    cr_assert_geq(e.writebacks - d.writebacks, n / UNIT - 1, "reused pages are written back");
    unsigned char *t = fmem_heap_malloc(h, big);
    cr_assert_not_null(t);
    (void)read_through(t, big); /* evicts s */
    for (size_t i = 0; i < n; i += 61)
        cr_assert_eq(s[i], 0x5e, "byte %zu after eviction", i);
    cr_assert_eq(fmem_heap_free(h, t), 0);
    cr_assert_eq(fmem_heap_free(h, s), 0);
    fmem_heap_destroy(h);
    cr_assert_eq(fmem_region_destroy(r), 0);
}

/* ---- many objects against shadow copies, two threads, a small cache ---- */

#define SLOTS 24
#define OPS 600

struct churn {
    fmem_heap *h;
    uint64_t seed;
    unsigned bad, ops;
};

static size_t pick_size(uint64_t *s)
{
    switch (rnd(s) % 4) {
    case 0:
        return rnd(s) % 4096 + 1; /* slab objects */
    case 1:
        return rnd(s) % (64 * 1024) + 4096;
    case 2:
        return rnd(s) % (512 * 1024) + 64 * 1024; /* held when freed */
    default:
        return rnd(s) % (3 << 20) + 512 * 1024; /* beyond the held budget */
    }
}

static void fill(unsigned char *p, unsigned char *shadow, size_t from, size_t to, uint64_t *s)
{
    uint64_t v = rnd(s);
    for (size_t i = from; i < to; i++) {
        unsigned char c = (unsigned char)(v >> (i % 8 * 8)) ^ (unsigned char)(i / 8);
        p[i] = shadow[i] = c;
    }
}

static unsigned check(const unsigned char *p, const unsigned char *shadow, size_t n)
{
    return memcmp(p, shadow, n) != 0;
}

static void *churn(void *arg)
{
    struct churn *c = arg;
    unsigned char *obj[SLOTS] = {0}, *shadow[SLOTS] = {0};
    size_t len[SLOTS] = {0};
    uint64_t s = c->seed;
    for (unsigned op = 0; op < OPS; op++) {
        unsigned i = (unsigned)(rnd(&s) % SLOTS);
        unsigned what = (unsigned)(rnd(&s) % 8);
        if (obj[i])
            c->bad += check(obj[i], shadow[i], len[i]);
        if (!obj[i] || what < 3) { /* (re)place it */
            if (obj[i]) {
                c->bad += fmem_heap_free(c->h, obj[i]) != 0;
                free(shadow[i]);
            }
            len[i] = pick_size(&s);
            obj[i] = fmem_heap_malloc(c->h, len[i]);
            shadow[i] = malloc(len[i]);
            if (!obj[i] || !shadow[i]) {
                c->bad++;
                break;
            }
            fill(obj[i], shadow[i], 0, len[i], &s);
        } else if (what < 5) { /* resize, keep the common part */
            size_t n = pick_size(&s);
            unsigned char *q = fmem_heap_realloc(c->h, obj[i], n);
            unsigned char *sq = realloc(shadow[i], n);
            if (!q || !sq) {
                c->bad++;
                break;
            }
            obj[i] = q;
            shadow[i] = sq;
            if (n > len[i])
                fill(q, sq, len[i], n, &s);
            len[i] = n;
            c->bad += check(q, sq, n);
        } else if (what < 7) { /* rewrite part of it */
            size_t a = rnd(&s) % len[i], b = a + rnd(&s) % (len[i] - a) + 1;
            fill(obj[i], shadow[i], a, b, &s);
        } else { /* free it */
            c->bad += fmem_heap_free(c->h, obj[i]) != 0;
            free(shadow[i]);
            obj[i] = shadow[i] = NULL;
        }
        c->ops++;
    }
    for (unsigned i = 0; i < SLOTS; i++)
        if (obj[i]) {
            c->bad += check(obj[i], shadow[i], len[i]);
            c->bad += fmem_heap_free(c->h, obj[i]) != 0;
            free(shadow[i]);
        }
    return NULL;
}

Test(region_discard, objects_match_shadow_copies_through_evictions_and_reuse)
{
    size_t cache = (size_t)4 << 20; /* the two threads hold tens of MiB */
    fmem_region *r = make((size_t)512 << 20, cache, UNIT);
    fmem_heap *h;
    cr_assert_eq(fmem_heap_new_region(r, &h), 0);
    struct churn c[2] = {{.h = h, .seed = 0x9e3779b97f4a7c15u}, {.h = h, .seed = 12345}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, churn, &c[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(c[i].ops, OPS, "thread %d stopped after %u operations", i, c[i].ops);
        cr_assert_eq(c[i].bad, 0, "thread %d: %u objects differ from their shadow", i, c[i].bad);
    }
    fmem_region_stats_t st = stats(r);
    cr_assert_gt(st.evictions, 1000, "the cache was too large to test eviction");
    cr_assert_gt(st.writebacks, 0);
    cr_assert_gt(st.releases, 0, "objects beyond the held budget are released");
    fmem_heap_destroy(h);
    /* nothing alive: no pool space left, also after a flush (which once
     * took chunks for units mapped writable ahead that held only zeros) */
    cr_assert_eq(fmem_region_flush(r), 0);
    st = stats(r);
    cr_assert_eq(st.remote_bytes, 0, "%llu pool bytes left with no object alive",
                 (unsigned long long)st.remote_bytes);
    cr_assert_eq(fmem_region_destroy(r), 0);
}
