/* test_compact_pageback.c - compactable heaps' slabs giving back pages:
 * a kept slab whose pages hold no live object is rebuilt on 4 KiB pool
 * blocks (one per page that holds objects) and its chunk goes back; pages
 * of victims that fit no kept slab go onto slabs of blocks. Checked:
 * objects keep their content (shadow copies), frees/usable_size/double
 * frees through the slab and its empty pages, fewer pool bytes than
 * without give-back on a fragmented heap, frees racing it, whole merges
 * of page-backed slabs refused, a crash at each step loses no chunk, and
 * a fork child's writes stay its own. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmem.h>
#include <fmem_admin.h>
#include <fmem_far.h>

#include "heap_compact.h"
#include "heap_internal.h"
#define COMPACT_RNG_SEED 0x9E3779B97F4A7C15ull
#include "compact_fixture.h"

static void pool_up(void)
{
    compact_pool_open("slabpages-pageback");
    unsetenv("FMEM_COMPACT_PAGEBACK");
}

#define OBJ 512
#define CAP (FMEM_HEAP_SLAB_SIZE / OBJ) /* 8 a page */

/* Two slabs of 512 B objects that keep every object of pages 0-3 and
 * none of pages 4-15: no merge fits (same offsets), each can give back
 * 12 pages. */
struct two {
    void *o[2][CAP];
    char *base[2];
};

static void make_two(fmem_heap *h, struct two *t)
{
    memset(t, 0, sizeof *t);
    for (int r = 0; r < 2; r++)
        t->base[r] = fill_fresh_slab(h, OBJ, CAP, t->o[r], (uint64_t)r * 1000);
    for (int r = 0; r < 2; r++)
        for (size_t i = 32; i < CAP; i++) {
            cr_assert_eq(fmem_heap_free(h, t->o[r][i]), 0);
            t->o[r][i] = NULL;
        }
}

TestSuite(pageback, .init = pool_up, .fini = pool_down, .timeout = 120);

Test(pageback, a_kept_slab_gives_back_its_empty_pages)
{
    fmem_heap *h = new_compactable_heap();
    static struct two t;
    make_two(h, &t);
    fmem_heap_stats_t st0, st1;
    fmem_heap_stats(h, &st0);
    int64_t got = fmem_heap_compact(h, 0);
    fmem_heap_stats(h, &st1);
    cr_assert_eq(got, 2 * 12 * 4096, "each slab gives back 12 pages (got %lld)", (long long)got);
    cr_assert_eq(st0.remote_bytes - st1.remote_bytes, (uint64_t)got);
    cr_assert_eq(st1.compact_bytes, (uint64_t)got);
    for (int r = 0; r < 2; r++) {
        struct slab *s = pagemap_get(&h->map, t.base[r]);
        cr_assert_not_null(s);
        cr_assert_eq(s->kind, SLAB_SMALL);
        cr_assert_not_null(s->span.pb, "slab %d backed page by page", r);
        cr_assert_eq(s->span.pb->backed, 0x000f);
        for (size_t i = 0; i < 32; i++) { /* content, size, writes */
            cr_assert(same(t.o[r][i], OBJ, (uint64_t)r * 1000 + i), "object %d/%zu", r, i);
            cr_assert_eq(fmem_heap_usable_size(h, t.o[r][i]), OBJ);
        }
        char *empty = t.base[r] + 8 * 4096; /* a page given back */
        cr_assert_eq(fmem_heap_usable_size(h, empty), 0);
        cr_assert_eq(fmem_heap_free(h, empty), FMEM_EINVAL);
        cr_assert_eq(empty[100], 0, "a page given back reads as zeros");
    }
    /* a double free through the rebuilt slab is still caught */
    cr_assert_eq(fmem_heap_free(h, t.o[0][5]), 0);
    cr_assert_eq(fmem_heap_free(h, t.o[0][5]), FMEM_EDOUBLEFREE);
    t.o[0][5] = NULL;
    /* new objects come only from pages with memory, and are writable */
    void *fresh[64];
    for (int i = 0; i < 64; i++) {
        fresh[i] = fmem_heap_malloc(h, OBJ);
        cr_assert_not_null(fresh[i]);
        fill(fresh[i], OBJ, 777 + (uint64_t)i);
        struct slab *s = pagemap_get(&h->map, fresh[i]);
        cr_assert_not_null(s);
    }
    for (int i = 0; i < 64; i++) {
        cr_assert(same(fresh[i], OBJ, 777 + (uint64_t)i));
        cr_assert_eq(fmem_heap_free(h, fresh[i]), 0);
    }
    for (int r = 0; r < 2; r++)
        for (size_t i = 0; i < 32; i++)
            if (t.o[r][i]) {
                cr_assert(same(t.o[r][i], OBJ, (uint64_t)r * 1000 + i));
                cr_assert_eq(fmem_heap_free(h, t.o[r][i]), 0);
            }
    fmem_heap_collect(h);
    fmem_heap_stats_t st;
    fmem_heap_stats(h, &st);
    cr_assert_eq(st.remote_bytes, 0, "%llu bytes left", (unsigned long long)st.remote_bytes);
    cr_assert_eq(st.bad_frees, 2); /* the two frees into given-back pages */
    destroy_heap_pool_empty(h);
}

Test(pageback, page_backed_slabs_are_never_merged_whole)
{
    fmem_heap *h = new_compactable_heap();
    static struct two t;
    make_two(h, &t);
    cr_assert_gt(fmem_heap_compact(h, 0), 0);
    /* a third slab whose objects are disjoint from both: a whole merge of
     * it into a page-backed slab, or of one into it, is refused */
    void *o[2 * CAP];
    size_t n = 0, first = 0;
    do { /* until one lands in a new slab */
        o[n] = fmem_heap_malloc(h, OBJ);
        cr_assert_not_null(o[n]);
        first = n;
    } while ((SLAB_OF(o[n]) == t.base[0] || SLAB_OF(o[n]) == t.base[1]) && ++n < 2 * CAP);
    cr_assert_lt(n, 2 * CAP);
    n++;
    struct slab *a = pagemap_get(&h->map, t.base[0]), *c = pagemap_get(&h->map, o[first]);
    cr_assert_not_null(a->span.pb);
    cr_assert_null(c->span.pb);
    struct theap *th = theap_peek(h);
    cr_assert_eq(compact_merge_pair(th, a, c), FMEM_EBUSY);
    cr_assert_eq(compact_merge_pair(th, c, a), FMEM_EBUSY);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(fmem_heap_free(h, o[i]), 0);
    fmem_heap_destroy(h);
}

/* ---- a fragmented heap: shadow copies, footprint against no give-back --- */

enum { FN = 40000 };
static const size_t sizes[] = {16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 1024, 2048};

/* Allocates FN objects of mixed sizes, frees about 85 % at random. */
static void fragment(fmem_heap *h, void **obj, size_t *len)
{
    for (size_t i = 0; i < FN; i++) {
        len[i] = sizes[xs() % (sizeof sizes / sizeof *sizes)];
        obj[i] = fmem_heap_malloc(h, len[i]);
        cr_assert_not_null(obj[i]);
        fill(obj[i], len[i], i);
    }
    for (size_t i = 0; i < FN; i++)
        if (xs() % 100 < 85) {
            cr_assert_eq(fmem_heap_free(h, obj[i]), 0);
            obj[i] = NULL;
        }
}

/* Pool bytes the heap holds after compacting the fragmented heap; every
 * object checked, rewritten, freed. */
static uint64_t footprint(int pageback, uint64_t seed)
{
    if (!pageback)
        setenv("FMEM_COMPACT_PAGEBACK", "0", 1);
    fmem_heap *h = new_compactable_heap();
    unsetenv("FMEM_COMPACT_PAGEBACK");
    static void *obj[FN];
    static size_t len[FN];
    rng = seed;
    fragment(h, obj, len);
    cr_assert_gt(fmem_heap_compact(h, 0), 0);
    fmem_heap_stats_t st;
    fmem_heap_stats(h, &st);
    uint64_t held = st.remote_bytes;
    for (size_t i = 0; i < FN; i++)
        if (obj[i]) {
            cr_assert(same(obj[i], len[i], i), "object %zu (%zu B) damaged", i, len[i]);
            cr_assert_geq(fmem_heap_usable_size(h, obj[i]), len[i]);
            fill(obj[i], len[i], i + 5);
        }
    cr_assert_gt(fmem_heap_compact(h, 0) + 1, 0); /* a second round changes nothing seen */
    for (size_t i = 0; i < FN; i++)
        if (obj[i]) {
            cr_assert(same(obj[i], len[i], i + 5), "object %zu damaged by round 2", i);
            cr_assert_eq(fmem_heap_free(h, obj[i]), 0);
        }
    fmem_heap_collect(h);
    fmem_heap_stats(h, &st);
    cr_assert_eq(st.remote_bytes, 0);
    destroy_heap_pool_empty(h);
    return held;
}

Test(pageback, shadow_copies_survive_and_fewer_bytes_are_held)
{
    for (uint64_t seed = 1; seed <= 3; seed++) {
        uint64_t with = footprint(1, seed * 0x9E3779B97F4A7C15ull);
        uint64_t without = footprint(0, seed * 0x9E3779B97F4A7C15ull);
        cr_assert_lt(with, without, "seed %llu: %llu bytes with give-back, %llu without",
                     (unsigned long long)seed, (unsigned long long)with,
                     (unsigned long long)without);
    }
}

/* ---- frees racing the give-back ----------------------------------------- */

static fmem_heap *race_heap;
static void *race_obj[FN];
static size_t race_len[FN];
static _Atomic int race_go;

static void *race_freer(void *arg)
{
    size_t part = (size_t)(uintptr_t)arg;
    while (!atomic_load(&race_go))
        ;
    for (size_t i = part; i < FN; i += 4) /* half of its share */
        if (race_obj[i] && (i / 4) % 2 == 0) {
            if (!same(race_obj[i], race_len[i], i))
                return (void *)2;
            if (fmem_heap_free(race_heap, race_obj[i]) != 0)
                return (void *)1;
        }
    return NULL;
}

Test(pageback, frees_race_the_give_back, .timeout = 180)
{
    uint64_t backs = 0;
    for (int round = 0; round < 6; round++) {
        cr_assert_eq(fmem_heap_new_compactable(pool, NULL, &race_heap), 0);
        rng = 0x1234567ull + (uint64_t)round;
        fragment(race_heap, race_obj, race_len);
        atomic_store(&race_go, 0);
        pthread_t t[3];
        for (int r = 0; r < 3; r++)
            pthread_create(&t[r], NULL, race_freer, (void *)(uintptr_t)r);
        atomic_store(&race_go, 1);
        cr_assert_geq(fmem_heap_compact(race_heap, 0), 0);
        for (int r = 0; r < 3; r++) {
            void *rv;
            pthread_join(t[r], &rv);
            cr_assert_null(rv, "a free was refused or an object damaged");
        }
        backs += atomic_load(&race_heap->st.page_backs);
        for (size_t i = 0; i < FN; i++)
            if (race_obj[i] && !(i % 4 < 3 && (i / 4) % 2 == 0)) {
                cr_assert(same(race_obj[i], race_len[i], i), "object %zu damaged", i);
                cr_assert_eq(fmem_heap_free(race_heap, race_obj[i]), 0);
            }
        fmem_heap_collect(race_heap);
        fmem_heap_stats_t st;
        fmem_heap_stats(race_heap, &st);
        cr_assert_eq(st.remote_bytes, 0, "round %d: %llu bytes left: a free got lost", round,
                     (unsigned long long)st.remote_bytes);
        cr_assert_eq(st.bad_frees + st.double_frees, 0);
        fmem_heap_destroy(race_heap);
    }
    cr_assert_gt(backs, 0, "no slab gave back pages");
}

/* ---- a crash during the give-back --------------------------------------- */

static void fill_two(fmem_heap *h)
{
    static struct two t; /* the first hooks reached are a give-back's */
    make_two(h, &t);
}

static void fill_fragmented(fmem_heap *h)
{
    static void *obj[FN];
    static size_t len[FN];
    rng = 42;
    fragment(h, obj, len);
}

static void crash_at(int step, int skip, void (*populate)(fmem_heap *))
{
    crash_skip = skip;
    compact_crash_at("slabpages", step, populate);
}

Test(pageback, crash_after_page_copy_loses_no_chunk) { crash_at(1, 0, fill_two); }
Test(pageback, crash_after_page_remap_loses_no_chunk) { crash_at(2, 0, fill_two); }
Test(pageback, crash_before_chunk_free_loses_no_chunk) { crash_at(3, 0, fill_two); }
/* later hooks of a fragmented heap: merges that take blocks for pages and
 * give-backs of slabs of blocks among them */
Test(pageback, crash_late_in_a_fragmented_heap_loses_no_chunk)
{
    for (int step = 1; step <= 3; step++)
        for (int skip = 5; skip <= 85; skip += 40)
            crash_at(step, skip, fill_fragmented);
}

/* ---- fork ---------------------------------------------------------------- */

Test(pageback, fork_child_writes_do_not_reach_the_parent)
{
    fmem_heap *h = new_compactable_heap();
    static struct two t;
    make_two(h, &t);
    cr_assert_gt(fmem_heap_compact(h, 0), 0);
    cr_assert_not_null(((struct slab *)pagemap_get(&h->map, t.base[0]))->span.pb);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        int bad = 0;
        for (int r = 0; r < 2; r++)
            for (size_t i = 0; i < 32; i++) {
                bad |= !same(t.o[r][i], OBJ, (uint64_t)r * 1000 + i);
                memset(t.o[r][i], 0xEE, OBJ);
                if (i % 3 == 0)
                    bad |= fmem_heap_free(h, t.o[r][i]) != 0;
            }
        for (int i = 0; i < 40; i++) { /* into the freed slots and new slabs */
            void *p = fmem_heap_malloc(h, OBJ);
            bad |= p == NULL;
            if (p)
                memset(p, 0xDD, OBJ);
        }
        _exit(bad ? 1 : 0);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %#x", status);
    for (int r = 0; r < 2; r++)
        for (size_t i = 0; i < 32; i++) {
            cr_assert(same(t.o[r][i], OBJ, (uint64_t)r * 1000 + i),
                      "the child's write reached the parent (%d/%zu)", r, i);
            cr_assert_eq(fmem_heap_free(h, t.o[r][i]), 0);
        }
    fmem_heap_destroy(h);
}

/* ---- small classes repacked page by page ---------------------------------- */

#define SOBJ 64
#define SCAP (FMEM_HEAP_SLAB_SIZE / SOBJ) /* 64 a page */

/* Two slabs of 64 B objects. A keeps, on page p, the 8 objects of stripe
 * p % 8 (objects 8s..8s+7 of the page); B keeps 7 of the same stripe on
 * each page. A and B overlap as wholes (page p of each holds stripe p % 8),
 * so no whole merge; placing B's pages onto A's pages leaves A's 16 pages.
 * Page by page, A's pages fill 2 pages (8 stripes each), B's 2 more. */
struct stripes {
    void *o[2][SCAP];
    char *base[2];
};

static int stripe_keeps(int r, size_t i)
{
    size_t p = i / 64, in = i % 64, s = p % 8;
    return in >= 8 * s && in < 8 * s + (r == 0 ? 8 : 7);
}

static void make_stripes(fmem_heap *h, struct stripes *t)
{
    memset(t, 0, sizeof *t);
    for (int r = 0; r < 2; r++)
        t->base[r] = fill_fresh_slab(h, SOBJ, SCAP, t->o[r], (uint64_t)r * 5000);
    for (int r = 0; r < 2; r++)
        for (size_t i = 0; i < SCAP; i++)
            if (!stripe_keeps(r, i)) {
                cr_assert_eq(fmem_heap_free(h, t->o[r][i]), 0);
                t->o[r][i] = NULL;
            }
}

Test(pageback, small_objects_are_repacked_page_by_page)
{
    fmem_heap *h = new_compactable_heap();
    static struct stripes t;
    make_stripes(h, &t);
    fmem_heap_stats_t st0, st1;
    fmem_heap_stats(h, &st0);
    cr_assert_eq(st0.remote_bytes, 2 * FMEM_HEAP_SLAB_SIZE);
    int64_t got = fmem_heap_compact(h, 0);
    fmem_heap_stats(h, &st1);
    cr_assert_eq(st1.remote_bytes, 4 * 4096, "%llu bytes held, not 4 pages",
                 (unsigned long long)st1.remote_bytes);
    cr_assert_eq((uint64_t)got, st0.remote_bytes - st1.remote_bytes);
    cr_assert_eq(st1.compact_bytes, (uint64_t)got);
    cr_assert_eq(atomic_load(&h->st.page_merges), 2, "both slabs merged page by page");
    for (int r = 0; r < 2; r++) {
        struct slab *s = pagemap_get(&h->map, t.base[r]);
        cr_assert_not_null(s);
        cr_assert_eq(s->kind, SLAB_ALIAS);
        cr_assert(s->paged);
        for (size_t i = 0; i < SCAP; i++)
            if (t.o[r][i]) {
                cr_assert(same(t.o[r][i], SOBJ, (uint64_t)r * 5000 + i), "object %d/%zu", r, i);
                cr_assert_eq(fmem_heap_usable_size(h, t.o[r][i]), SOBJ);
            }
    }
    /* writes through one address are seen through the other: A's page 0
     * and page 1 share one page now, as do B's pages 0 and 1 */
    struct slab *a = pagemap_get(&h->map, t.base[0]);
    cr_assert_eq(a->page_into[0], a->page_into[1]);
    cr_assert_eq(a->page_at[0], a->page_at[1]);
    char *other = t.base[0] + 4096; /* A's page 1 shows A's stripe 0 too */
    cr_assert(same(other, SOBJ, 0), "stripe 0 of A through page 1");
    memset(t.o[0][3], 0x5A, SOBJ);
    cr_assert_eq(((unsigned char *)other)[3 * SOBJ], 0x5A);
    fill(t.o[0][3], SOBJ, 3);
    /* frees and double frees through the alias addresses */
    cr_assert_eq(fmem_heap_free(h, t.o[1][64 + 8]), 0);
    cr_assert_eq(fmem_heap_free(h, t.o[1][64 + 8]), FMEM_EDOUBLEFREE);
    t.o[1][64 + 8] = NULL;
    cr_assert_eq(fmem_heap_free(h, other + 3 * SOBJ), 0); /* A's object 3, by page 1 */
    cr_assert_eq(fmem_heap_free(h, t.o[0][3]), FMEM_EDOUBLEFREE);
    t.o[0][3] = NULL;
    /* new objects land in the repacked pages' free slots, writable */
    void *fresh[200];
    for (int i = 0; i < 200; i++) {
        fresh[i] = fmem_heap_malloc(h, SOBJ);
        cr_assert_not_null(fresh[i]);
        fill(fresh[i], SOBJ, 90000 + (uint64_t)i);
    }
    for (int r = 0; r < 2; r++)
        for (size_t i = 0; i < SCAP; i++)
            if (t.o[r][i])
                cr_assert(same(t.o[r][i], SOBJ, (uint64_t)r * 5000 + i), "object %d/%zu", r, i);
    for (int i = 0; i < 200; i++) {
        cr_assert(same(fresh[i], SOBJ, 90000 + (uint64_t)i));
        cr_assert_eq(fmem_heap_free(h, fresh[i]), 0);
    }
    for (int r = 0; r < 2; r++)
        for (size_t i = 0; i < SCAP; i++)
            if (t.o[r][i])
                cr_assert_eq(fmem_heap_free(h, t.o[r][i]), 0);
    fmem_heap_collect(h);
    fmem_heap_stats_t st;
    fmem_heap_stats(h, &st);
    cr_assert_eq(st.remote_bytes, 0, "%llu bytes left", (unsigned long long)st.remote_bytes);
    destroy_heap_pool_empty(h);
}

/* Pool bytes held after compaction of the fragmented heap, with or
 * without repacking of the small classes. */
static uint64_t footprint_repack(int repack, uint64_t seed)
{
    if (!repack)
        setenv("FMEM_COMPACT_REPACK", "0", 1);
    uint64_t held = footprint(1, seed);
    unsetenv("FMEM_COMPACT_REPACK");
    return held;
}

Test(pageback, repacking_keeps_shadow_copies_and_holds_fewer_bytes)
{
    for (uint64_t seed = 1; seed <= 3; seed++) {
        uint64_t with = footprint_repack(1, seed * 0x2545F4914F6CDD1Dull);
        uint64_t without = footprint_repack(0, seed * 0x2545F4914F6CDD1Dull);
        cr_assert_lt(with, without, "seed %llu: %llu bytes repacked, %llu without",
                     (unsigned long long)seed, (unsigned long long)with,
                     (unsigned long long)without);
    }
}

static void fill_stripes(fmem_heap *h)
{
    static struct stripes t; /* the first hooks reached are the repack's */
    make_stripes(h, &t);
}

Test(pageback, crash_during_a_repack_loses_no_chunk)
{
    for (int step = 1; step <= 3; step++)
        for (int skip = 0; skip <= 1; skip++)
            crash_at(step, skip, fill_stripes);
}

Test(pageback, fork_child_writes_to_repacked_pages_stay_its_own)
{
    fmem_heap *h = new_compactable_heap();
    static struct stripes t;
    make_stripes(h, &t);
    cr_assert_gt(fmem_heap_compact(h, 0), 0);
    cr_assert_eq(((struct slab *)pagemap_get(&h->map, t.base[1]))->kind, SLAB_ALIAS);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        int bad = 0;
        for (int r = 0; r < 2; r++)
            for (size_t i = 0; i < SCAP; i++)
                if (t.o[r][i]) {
                    bad |= !same(t.o[r][i], SOBJ, (uint64_t)r * 5000 + i);
                    memset(t.o[r][i], 0xEE, SOBJ);
                    if (i % 3 == 0)
                        bad |= fmem_heap_free(h, t.o[r][i]) != 0;
                }
        for (int i = 0; i < 100; i++) {
            void *p = fmem_heap_malloc(h, SOBJ);
            bad |= p == NULL;
            if (p)
                memset(p, 0xDD, SOBJ);
        }
        _exit(bad ? 1 : 0);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %#x", status);
    for (int r = 0; r < 2; r++)
        for (size_t i = 0; i < SCAP; i++)
            if (t.o[r][i]) {
                cr_assert(same(t.o[r][i], SOBJ, (uint64_t)r * 5000 + i),
                          "the child's write reached the parent (%d/%zu)", r, i);
                cr_assert_eq(fmem_heap_free(h, t.o[r][i]), 0);
            }
    fmem_heap_destroy(h);
}

/* 48 B objects (some straddle pages; a page's objects lie at the same
 * offsets only in pages 3 apart): after a repack every object keeps its
 * content, each alias page maps a page 3k apart, and the two pages under
 * a live straddling object map two consecutive pages of one slab. */
Test(pageback, straddling_objects_are_repacked_with_their_pages)
{
    enum { N = 12000, SZ = 48 };
    fmem_heap *h = new_compactable_heap();
    static void *o[N];
    rng = 0x5151ull;
    for (size_t i = 0; i < N; i++) {
        o[i] = fmem_heap_malloc(h, SZ);
        cr_assert_not_null(o[i]);
        fill(o[i], SZ, i);
    }
    for (size_t i = 0; i < N; i++)
        if (xs() % 100 < 85) {
            cr_assert_eq(fmem_heap_free(h, o[i]), 0);
            o[i] = NULL;
        }
    fmem_heap_stats_t st0, st1;
    fmem_heap_stats(h, &st0);
    cr_assert_gt(fmem_heap_compact(h, 0), 0);
    fmem_heap_stats(h, &st1);
    cr_assert_lt(st1.remote_bytes, st0.remote_bytes / 4 * 3, "%llu of %llu bytes held",
                 (unsigned long long)st1.remote_bytes, (unsigned long long)st0.remote_bytes);
    size_t straddling = 0, aliased = 0;
    for (size_t i = 0; i < N; i++) {
        if (!o[i])
            continue;
        cr_assert(same(o[i], SZ, i), "object %zu", i);
        cr_assert_eq(fmem_heap_usable_size(h, o[i]), SZ);
        struct slab *s = pagemap_get(&h->map, o[i]);
        cr_assert_not_null(s);
        if (s->kind != SLAB_ALIAS || !s->paged)
            continue;
        aliased++;
        size_t off = (size_t)((char *)o[i] - SLAB_OF(o[i])), p = off / 4096;
        cr_assert_not_null(s->page_into[p]);
        cr_assert_eq(((int)s->page_at[p] - (int)p) % 3, 0, "page %zu onto %u", p, s->page_at[p]);
        if ((off + SZ - 1) / 4096 != p) {
            straddling++;
            cr_assert_eq(s->page_into[p + 1], s->page_into[p]);
            cr_assert_eq(s->page_at[p + 1], s->page_at[p] + 1);
        }
    }
    cr_assert_gt(aliased, 0);
    cr_assert_gt(straddling, 0, "no live object across two pages was moved");
    for (size_t i = 0; i < N; i++)
        if (o[i]) {
            fill(o[i], SZ, i + 7);
            cr_assert(same(o[i], SZ, i + 7));
            cr_assert_eq(fmem_heap_free(h, o[i]), 0);
        }
    fmem_heap_collect(h);
    fmem_heap_stats_t st;
    fmem_heap_stats(h, &st);
    cr_assert_eq(st.remote_bytes, 0);
    cr_assert_eq(st.bad_frees + st.double_frees, 0);
    destroy_heap_pool_empty(h);
}
