/* test_compact_pages.c - page-by-page merging of compactable heaps: a slab
 * that fits no other slab as a whole goes page by page onto several
 * survivors (objects checked against shadow copies through both
 * addresses), its empty pages read as zeros and refuse frees and writes,
 * a survivor that empties takes the alias pages on it along, merged and
 * hosting slabs are never merged again, frees racing page merges land,
 * and a crash during a page merge loses no chunk. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
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
#define COMPACT_RNG_SEED 0x2545F4914F6CDD1Dull
#include "compact_fixture.h"

static void pool_up(void)
{
    compact_pool_open("pagemerge");
    /* these cases place pages of 64 B slabs onto kept slabs: not the
     * repacking of small classes (test_compact_pageback.c) */
    setenv("FMEM_COMPACT_REPACK", "0", 1);
}

#define CAP (FMEM_HEAP_SLAB_SIZE / 64) /* 64 B objects, 64 a page */

/* Which objects each of three slabs keeps: A (role 0) [0,48) of pages 0-7
 * and [0,16) of pages 8-15, C (role 2) the other way round, B (role 1)
 * [16,40) of pages 0-14 and nothing on page 15. A and C overlap, and B
 * overlaps both as a whole; but B's pages fit pages 8-15 of A and 0-7 of
 * C (15 pages onto 16 free ones: both survivors are needed), never onto
 * the pages at their own index. A keeps 2 more objects, so it is the
 * fuller survivor, tried first. */
static int keeps(int role, size_t idx)
{
    size_t pg = idx / 64, in = idx % 64;
    switch (role) {
    case 0: return pg < 8 ? in < 48 + (pg == 0) * 2 : in < 16;
    case 1: return pg < 15 && in >= 16 && in < 40;
    default: return pg < 8 ? in < 16 : in < 48;
    }
}

struct layout {
    void *o[3][CAP];
    char *base[3];
};

static void make_layout(fmem_heap *h, struct layout *l)
{
    memset(l, 0, sizeof *l);
    for (int r = 0; r < 3; r++)
        l->base[r] = fill_fresh_slab(h, 64, CAP, l->o[r], (uint64_t)r * 100000);
    for (int r = 0; r < 3; r++)
        for (size_t i = 0; i < CAP; i++)
            if (!keeps(r, i)) {
                cr_assert_eq(fmem_heap_free(h, l->o[r][i]), 0);
                l->o[r][i] = NULL;
            }
}

/* The survivor's address of B's object i (sb: B's page alias) */
static char *host_of(const struct layout *l, const struct slab *sb, size_t i)
{
    size_t off = (size_t)((char *)l->o[1][i] - l->base[1]), pg = off / 4096;
    return sb->page_into[pg]->start + (size_t)sb->page_at[pg] * 4096 + off % 4096;
}

static sigjmp_buf jb;
static void on_segv(int sig)
{
    (void)sig;
    siglongjmp(jb, 1);
}

/* 1 if writing a byte at p faults (p unchanged then) */
static int write_faults(volatile char *p)
{
    struct sigaction sa = {.sa_handler = on_segv}, old;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &old);
    int faulted = 1;
    if (sigsetjmp(jb, 1) == 0) {
        *p = 1;
        faulted = 0;
    }
    sigaction(SIGSEGV, &old, NULL);
    return faulted;
}

TestSuite(pagemerge, .init = pool_up, .fini = pool_down, .timeout = 120);

Test(pagemerge, a_slab_goes_page_by_page_onto_two_survivors)
{
    fmem_heap *h = new_compactable_heap();
    static struct layout l;
    make_layout(h, &l);
    fmem_heap_stats_t st0, st1;
    fmem_heap_stats(h, &st0);
    cr_assert_eq(fmem_heap_compact(h, 0), FMEM_HEAP_SLAB_SIZE, "B merged page by page");
    fmem_heap_stats(h, &st1);
    cr_assert_eq(st0.remote_bytes - st1.remote_bytes, FMEM_HEAP_SLAB_SIZE);
    cr_assert_eq(atomic_load(&h->st.page_merges), 1);
    struct slab *sa = pagemap_get(&h->map, l.base[0]), *sb = pagemap_get(&h->map, l.base[1]),
                *sc = pagemap_get(&h->map, l.base[2]);
    cr_assert_eq(sb->kind, SLAB_ALIAS);
    cr_assert(sb->paged);
    int on[2] = {0, 0};
    for (int pg = 0; pg < 15; pg++) {
        cr_assert(sb->page_into[pg] == sa || sb->page_into[pg] == sc, "page %d", pg);
        on[sb->page_into[pg] == sc]++;
        cr_assert_neq(sb->page_at[pg], pg, "page %d onto another index", pg);
        for (int q = 0; q < pg; q++) /* no survivor page shared */
            cr_assert(sb->page_into[q] != sb->page_into[pg] || sb->page_at[q] != sb->page_at[pg]);
    }
    cr_assert(on[0] && on[1], "B's pages went to both survivors (%d, %d)", on[0], on[1]);
    cr_assert_eq(sa->hosting + sc->hosting, 15);
    cr_assert_null(sb->page_into[15]);
    for (int r = 0; r < 3; r++)
        for (size_t i = 0; i < CAP; i++)
            if (l.o[r][i])
                cr_assert(same(l.o[r][i], 64, (uint64_t)r * 100000 + i), "slab %d object %zu",
                          r, i);
    for (size_t i = 0; i < CAP; i++)
        if (l.o[1][i]) { /* one object through both addresses */
            char *twin = host_of(&l, sb, i);
            cr_assert(same(twin, 64, 100000 + i), "the survivor shows object %zu", i);
            memset(l.o[1][i], 0x5A, 64);
            cr_assert_eq((unsigned char)twin[63], 0x5A);
            fill(twin, 64, 100000 + i);
            cr_assert(same(l.o[1][i], 64, 100000 + i));
        }
    /* the empty page reads zeros and is no object */
    char *empty = l.base[1] + 15 * 4096;
    for (size_t i = 0; i < 4096; i++)
        cr_assert_eq(empty[i], 0);
    cr_assert_eq(fmem_heap_free(h, empty), FMEM_EINVAL);
    cr_assert_eq(fmem_heap_usable_size(h, empty), 0);
    cr_assert(write_faults(empty + 64), "a write to the empty page faults");
    /* double merges refused: B is an alias, A and C hold its pages */
    struct theap *th = theap_peek(h);
    cr_assert_eq(compact_merge_pair(th, sa, sb), FMEM_EBUSY);
    cr_assert_eq(compact_merge_pair(th, sc, sa), FMEM_EBUSY);
    cr_assert_eq(compact_merge_pair(th, sa, sc), FMEM_EBUSY);
    cr_assert_eq(fmem_heap_compact(h, 0), 0, "nothing left to merge");
    /* new objects never land on B's objects */
    void *extra[2000];
    for (int i = 0; i < 2000; i++) {
        cr_assert_not_null(extra[i] = fmem_heap_malloc(h, 64));
        memset(extra[i], 0xEE, 64);
    }
    for (size_t i = 0; i < CAP; i++)
        if (l.o[1][i])
            cr_assert(same(l.o[1][i], 64, 100000 + i), "object %zu overwritten", i);
    for (int i = 0; i < 2000; i++)
        cr_assert_eq(fmem_heap_free(h, extra[i]), 0);
    /* a free through B lands in the survivor: a second one through the
     * survivor's address is a double free */
    cr_assert_eq(fmem_heap_usable_size(h, l.o[1][16]), 64);
    char *twin16 = host_of(&l, sb, 16);
    cr_assert_eq(fmem_heap_free(h, l.o[1][16]), 0);
    cr_assert_eq(fmem_heap_free(h, twin16), FMEM_EDOUBLEFREE);
    l.o[1][16] = NULL;
    for (int r = 0; r < 3; r++)
        for (size_t i = 0; i < CAP; i++)
            if (l.o[r][i])
                cr_assert_eq(fmem_heap_free(h, l.o[r][i]), 0);
    fmem_heap_collect(h);
    fmem_heap_stats(h, &st1);
    cr_assert_eq(st1.slabs, 0);
    cr_assert_eq(st1.remote_bytes, 0);
    cr_assert_null(pagemap_get(&h->map, l.base[1]), "the alias went with its survivors");
    destroy_heap_pool_empty(h);
}

/* One survivor empties: the alias pages on it read zeros from then on,
 * those on the other survivor keep their objects. */
Test(pagemerge, a_survivor_that_empties_takes_its_alias_pages)
{
    fmem_heap *h = new_compactable_heap();
    static struct layout l;
    make_layout(h, &l);
    cr_assert_eq(fmem_heap_compact(h, 0), FMEM_HEAP_SLAB_SIZE);
    struct slab *sb = pagemap_get(&h->map, l.base[1]), *sc = pagemap_get(&h->map, l.base[2]);
    int on_c[16] = {0}, left = 0;
    for (int pg = 0; pg < 15; pg++) {
        on_c[pg] = sb->page_into[pg] == sc;
        left += !on_c[pg];
    }
    for (size_t i = 0; i < CAP; i++) { /* C's objects and B's on C */
        if (l.o[2][i])
            cr_assert_eq(fmem_heap_free(h, l.o[2][i]), 0);
        l.o[2][i] = NULL;
        if (l.o[1][i] && on_c[i / 64]) {
            cr_assert_eq(fmem_heap_free(h, l.o[1][i]), 0);
            l.o[1][i] = NULL;
        }
    }
    fmem_heap_collect(h);
    cr_assert_null(pagemap_get(&h->map, l.base[2]), "C went back");
    cr_assert_eq(pagemap_get(&h->map, l.base[1]), sb);
    cr_assert_eq(sb->used, (uint32_t)left, "B's pages on A stay");
    for (int pg = 0; pg < 15; pg++)
        if (on_c[pg]) {
            cr_assert_null(sb->page_into[pg]);
            for (size_t i = 0; i < 4096; i++)
                cr_assert_eq(l.base[1][pg * 4096 + i], 0);
            cr_assert_eq(fmem_heap_free(h, l.base[1] + pg * 4096 + 16 * 64), FMEM_EINVAL);
        }
    for (size_t i = 0; i < CAP; i++)
        if (l.o[1][i])
            cr_assert(same(l.o[1][i], 64, 100000 + i));
    for (int r = 0; r < 2; r++)
        for (size_t i = 0; i < CAP; i++)
            if (l.o[r][i])
                cr_assert_eq(fmem_heap_free(h, l.o[r][i]), 0);
    fmem_heap_collect(h);
    fmem_heap_stats_t st;
    fmem_heap_stats(h, &st);
    cr_assert_eq(st.remote_bytes, 0);
    cr_assert_null(pagemap_get(&h->map, l.base[1]));
    fmem_heap_destroy(h);
}

/* Objects straddling pages (48 and 112 B): every object intact. */
Test(pagemerge, straddling_objects_keep_their_content)
{
    fmem_heap *h = new_compactable_heap();
    enum { N = 40000 };
    void **obj = calloc(N, sizeof *obj);
    size_t *len = calloc(N, sizeof *len);
    for (size_t i = 0; i < N; i++) {
        len[i] = xs() % 2 ? 48 : 112;
        cr_assert_not_null(obj[i] = fmem_heap_malloc(h, len[i]));
        fill(obj[i], len[i], i);
    }
    for (size_t i = 0; i < N; i++)
        if (xs() % 100 < 88) {
            cr_assert_eq(fmem_heap_free(h, obj[i]), 0);
            obj[i] = NULL;
        }
    cr_assert_gt(fmem_heap_compact(h, 0), 0);
    cr_assert_gt(atomic_load(&h->st.page_merges), 0, "no page merge");
    for (size_t i = 0; i < N; i++)
        if (obj[i]) {
            cr_assert(same(obj[i], len[i], i), "object %zu (%zu B) changed", i, len[i]);
            cr_assert_eq(fmem_heap_usable_size(h, obj[i]), len[i]);
            fill(obj[i], len[i], i + 3);
        }
    for (size_t i = 0; i < N; i++)
        if (obj[i]) {
            cr_assert(same(obj[i], len[i], i + 3), "object %zu", i);
            cr_assert_eq(fmem_heap_free(h, obj[i]), 0);
        }
    fmem_heap_collect(h);
    fmem_heap_stats_t st;
    fmem_heap_stats(h, &st);
    cr_assert_eq(st.remote_bytes, 0);
    cr_assert_eq(st.bad_frees + st.double_frees, 0);
    fmem_heap_destroy(h);
    free(obj);
    free(len);
}

/* ---- other threads free objects of the slabs being merged -------------- */

static struct layout race_l;
static fmem_heap *race_heap;
static atomic_int race_go;

static void *race_freer(void *arg)
{
    int r = (int)(uintptr_t)arg;
    while (!atomic_load(&race_go))
        ;
    for (size_t i = 0; i < CAP; i++) /* every other object of slab r */
        if (race_l.o[r][i] && i % 2 == 0 && fmem_heap_free(race_heap, race_l.o[r][i]) != 0)
            return (void *)1;
    return NULL;
}

Test(pagemerge, frees_race_page_merges, .timeout = 180)
{
    uint64_t paged = 0;
    for (int round = 0; round < 20; round++) {
        cr_assert_eq(fmem_heap_new_compactable(pool, NULL, &race_heap), 0);
        make_layout(race_heap, &race_l);
        atomic_store(&race_go, 0);
        pthread_t t[3];
        for (int r = 0; r < 3; r++)
            pthread_create(&t[r], NULL, race_freer, (void *)(uintptr_t)r);
        atomic_store(&race_go, 1);
        int64_t got = fmem_heap_compact(race_heap, 0);
        cr_assert_geq(got, 0);
        for (int r = 0; r < 3; r++) {
            void *rv;
            pthread_join(t[r], &rv);
            cr_assert_null(rv, "a free was refused");
        }
        for (int r = 0; r < 3; r++)
            for (size_t i = 0; i < CAP; i++)
                if (race_l.o[r][i] && i % 2) {
                    cr_assert(same(race_l.o[r][i], 64, (uint64_t)r * 100000 + i));
                    cr_assert_eq(fmem_heap_free(race_heap, race_l.o[r][i]), 0);
                }
        fmem_heap_collect(race_heap);
        fmem_heap_stats_t st;
        fmem_heap_stats(race_heap, &st);
        cr_assert_eq(st.remote_bytes, 0, "round %d: a free got lost", round);
        cr_assert_eq(st.bad_frees + st.double_frees, 0);
        paged += atomic_load(&race_heap->st.page_merges);
        fmem_heap_destroy(race_heap);
    }
    cr_assert_gt(paged, 0, "no round merged page by page");
}

/* ---- crash during a page merge ------------------------------------------ */

static void fill_layout(fmem_heap *h)
{
    static struct layout l; /* only page merges are possible here */
    make_layout(h, &l);
}
static void crash_at(int step) { compact_crash_at("pagemerge", step, fill_layout); }

Test(pagemerge, crash_after_page_copy_loses_no_chunk) { crash_at(1); }
Test(pagemerge, crash_after_page_remap_loses_no_chunk) { crash_at(2); }
Test(pagemerge, crash_before_victim_chunk_free_loses_no_chunk) { crash_at(3); }
