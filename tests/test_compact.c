/* test_compact.c - compaction of compactable heaps: merged slabs keep
 * every object (checked against shadow copies), both addresses of a merged
 * range show one object, merged slabs are never merged again, frees and
 * allocations race compaction, a crash during a merge loses no chunk, bad
 * arguments are refused. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
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
#define COMPACT_RNG_SEED 88172645463325252ull
#include "compact_fixture.h"

static void pool_up(void)
{
    compact_pool_open("compact");
}

static const size_t sizes[] = {16, 48, 64, 112, 256, 640, 1024, 4096};
#define NSIZES (sizeof sizes / sizeof *sizes)

/* Allocate n objects of mixed sizes, free a random `keep_pct` % ... keep
 * the rest; returns the heap's remote bytes before compaction. */
static void fragment(fmem_heap *h, void **obj, size_t *len, size_t n, unsigned keep_pct)
{
    for (size_t i = 0; i < n; i++) {
        len[i] = sizes[xs() % NSIZES];
        obj[i] = fmem_heap_malloc(h, len[i]);
        cr_assert_not_null(obj[i]);
        fill(obj[i], len[i], i);
    }
    for (size_t i = 0; i < n; i++)
        if (xs() % 100 >= keep_pct) {
            cr_assert_eq(fmem_heap_free(h, obj[i]), 0);
            obj[i] = NULL;
        }
}

static void check_all(void **obj, size_t *len, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (obj[i])
            cr_assert(same(obj[i], len[i], i), "object %zu (%zu B) changed", i, len[i]);
}

static void shadow_case(unsigned flags)
{
    fmem_compact_policy pol = {.flags = flags};
    fmem_heap *h;
    cr_assert_eq(fmem_heap_new_compactable(pool, &pol, &h), 0);
    enum { N = 60000 };
    void **obj = calloc(N, sizeof *obj);
    size_t *len = calloc(N, sizeof *len);
    fragment(h, obj, len, N, 15);
    fmem_heap_stats_t before, after;
    fmem_heap_stats(h, &before);
    int64_t got = fmem_heap_compact(h, 0);
    fmem_heap_stats(h, &after);
    cr_assert_gt(got, 0, "nothing merged");
    cr_assert_eq((uint64_t)got, after.compact_bytes);
    /* what compaction gave back (the merged slabs' chunks and the empty
     * pages of kept slabs, less the 4 KiB blocks taken for pages that fit
     * no kept slab) the heap holds less, at least */
    cr_assert_leq(after.remote_bytes + (uint64_t)got, before.remote_bytes);
    cr_assert_gt(after.merges, 0);
    check_all(obj, len, N);
    /* the objects stay writable and usable; new ones fill merged slabs */
    for (size_t i = 0; i < N; i++)
        if (obj[i]) {
            cr_assert_eq(fmem_heap_usable_size(h, obj[i]) >= len[i], 1);
            fill(obj[i], len[i], i + 1);
        }
    void *extra[1000];
    for (int i = 0; i < 1000; i++) {
        extra[i] = fmem_heap_malloc(h, sizes[i % NSIZES]);
        cr_assert_not_null(extra[i]);
        memset(extra[i], 0xAB, sizes[i % NSIZES]);
    }
    for (size_t i = 0; i < N; i++)
        if (obj[i])
            cr_assert(same(obj[i], len[i], i + 1), "object %zu overwritten", i);
    /* a second compaction never merges a merged slab again: all intact */
    fmem_heap_compact(h, 0);
    for (size_t i = 0; i < N; i++)
        if (obj[i]) {
            cr_assert(same(obj[i], len[i], i + 1));
            cr_assert_eq(fmem_heap_free(h, obj[i]), 0);
            /* refused: a double free, or a foreign pointer once its slab
             * went back */
            int rc = fmem_heap_free(h, obj[i]);
            cr_assert(rc == FMEM_EDOUBLEFREE || rc == FMEM_EINVAL, "rc %d", rc);
        }
    for (int i = 0; i < 1000; i++)
        cr_assert_eq(fmem_heap_free(h, extra[i]), 0);
    fmem_heap_collect(h);
    fmem_heap_stats(h, &after);
    cr_assert_eq(after.slabs, 0, "%llu slabs left", (unsigned long long)after.slabs);
    cr_assert_eq(after.remote_bytes, 0);
    destroy_heap_pool_empty(h);
    free(obj);
    free(len);
}

TestSuite(compact, .init = pool_up, .fini = pool_down, .timeout = 120);

Test(compact, shadow_copies_survive_merges)
{
    shadow_case(0);
}

Test(compact, shadow_copies_survive_merges_random_placement)
{
    shadow_case(FMEM_COMPACT_RANDOM);
}

/* Two slabs of 64 B objects, live at alternate offsets: one merge. */
static void two_slabs(fmem_heap *h, void **a, void **b, size_t cap)
{
    for (size_t i = 0; i < cap; i++) {
        a[i] = fmem_heap_malloc(h, 64);
        fill(a[i], 64, i);
    }
    for (size_t i = 0; i < cap; i++) {
        b[i] = fmem_heap_malloc(h, 64);
        fill(b[i], 64, 100000 + i);
    }
    for (size_t i = 0; i < cap; i++) {
        cr_assert_eq(fmem_heap_free(h, (i % 2) ? a[i] : b[i]), 0);
        if (i % 2)
            a[i] = NULL;
        else
            b[i] = NULL;
    }
}

/* A compactable heap holding two_slabs() (a and b, cap entries each). */
struct two {
    fmem_heap *h;
    size_t cap;
    void **a, **b;
};

static void two_up(struct two *t)
{
    t->h = new_compactable_heap();
    t->cap = FMEM_HEAP_SLAB_SIZE / 64;
    t->a = calloc(t->cap, sizeof *t->a);
    t->b = calloc(t->cap, sizeof *t->b);
    cr_assert(t->a && t->b);
    two_slabs(t->h, t->a, t->b, t->cap);
}

static void two_down(struct two *t)
{
    fmem_heap_destroy(t->h);
    free(t->a);
    free(t->b);
}

Test(compact, both_addresses_show_one_object)
{
    struct two fx;
    two_up(&fx);
    fmem_heap *h = fx.h;
    size_t cap = fx.cap;
    void **a = fx.a, **b = fx.b;
    struct slab *sa = pagemap_get(&h->map, a[0]), *sb = pagemap_get(&h->map, b[1]);
    cr_assert_neq(sa, sb);
    struct theap *th = theap_peek(h);
    cr_assert_eq(compact_merge_pair(th, sa, sa), FMEM_EBUSY);
    cr_assert_eq(compact_merge_pair(th, sa, sb), 0);
    /* double merges refused: the victim is an alias now, the survivor
     * holds aliases */
    cr_assert_eq(compact_merge_pair(th, sa, sb), FMEM_EBUSY);
    cr_assert_eq(compact_merge_pair(th, sb, sa), FMEM_EBUSY);
    char *base_a = sa->start, *base_b = sb->start;
    for (size_t i = 0; i < cap; i++) {
        if (a[i])
            cr_assert(same(a[i], 64, i));
        if (b[i]) {
            cr_assert(same(b[i], 64, 100000 + i));
            char *twin = base_a + ((char *)b[i] - base_b);
            cr_assert(same(twin, 64, 100000 + i), "the survivor's address shows the object");
            memset(twin, 0x5A, 64); /* write through one, read through the other */
            cr_assert_eq(((unsigned char *)b[i])[63], 0x5A);
        }
    }
    /* a free through the alias lands in the survivor; a second free
     * through the survivor's address is a double free */
    char *twin1 = base_a + ((char *)b[1] - base_b);
    cr_assert_eq(fmem_heap_usable_size(h, b[1]), 64);
    cr_assert_eq(fmem_heap_free(h, b[1]), 0);
    cr_assert_eq(fmem_heap_free(h, twin1), FMEM_EDOUBLEFREE);
    b[1] = NULL;
    /* an interior pointer through the alias is still refused */
    cr_assert_eq(fmem_heap_free(h, (char *)b[3] + 8), FMEM_EINVAL);
    for (size_t i = 0; i < cap; i++) {
        if (a[i])
            cr_assert_eq(fmem_heap_free(h, a[i]), 0);
        if (b[i])
            cr_assert_eq(fmem_heap_free(h, b[i]), 0);
    }
    fmem_heap_collect(h);
    fmem_heap_stats_t st;
    fmem_heap_stats(h, &st);
    cr_assert_eq(st.remote_bytes, 0);
    /* the alias range went with the survivor */
    cr_assert_null(pagemap_get(&h->map, base_b));
    two_down(&fx);
}

/* A survivor is merged in turn: its alias moves with it. */
Test(compact, a_survivor_and_its_aliases_merge_again)
{
    fmem_heap *h = new_compactable_heap();
    size_t cap = FMEM_HEAP_SLAB_SIZE / 64;
    void **o[3];
    for (int k = 0; k < 3; k++) {
        o[k] = calloc(cap, sizeof *o[k]);
        for (size_t i = 0; i < cap; i++)
            fill(o[k][i] = fmem_heap_malloc(h, 64), 64, k * 100000 + i);
    }
    for (int k = 0; k < 3; k++) /* slab k keeps the objects i % 3 == k */
        for (size_t i = 0; i < cap; i++)
            if (i % 3 != (size_t)k) {
                cr_assert_eq(fmem_heap_free(h, o[k][i]), 0);
                o[k][i] = NULL;
            }
    struct slab *s[3];
    for (int k = 0; k < 3; k++)
        s[k] = pagemap_get(&h->map, o[k][k]);
    struct theap *th = theap_peek(h);
    fmem_heap_stats_t st0, st1;
    fmem_heap_stats(h, &st0);
    cr_assert_eq(compact_merge_pair(th, s[0], s[1]), 0);
    cr_assert_eq(compact_merge_pair(th, s[2], s[0]), 0, "a survivor with an alias merges");
    cr_assert_eq(compact_merge_pair(th, s[2], s[1]), FMEM_EBUSY);
    fmem_heap_stats(h, &st1);
    cr_assert_eq(st0.remote_bytes - st1.remote_bytes, 2 * FMEM_HEAP_SLAB_SIZE);
    char *base2 = s[2]->start;
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; i < cap; i++)
            if (o[k][i]) {
                cr_assert(same(o[k][i], 64, k * 100000 + i), "slab %d object %zu", k, i);
                char *twin = base2 + ((char *)o[k][i] - (char *)((uintptr_t)o[k][i] & ~(uintptr_t)(FMEM_HEAP_SLAB_SIZE - 1)));
                cr_assert(same(twin, 64, k * 100000 + i), "the survivor shows it");
            }
    for (int k = 0; k < 3; k++) /* free through every address */
        for (size_t i = 0; i < cap; i++)
            if (o[k][i] && i + 1 < cap)
                cr_assert_eq(fmem_heap_free(h, o[k][i]), 0);
    fmem_heap_collect(h);
    fmem_heap_stats(h, &st1);
    cr_assert_eq(st1.slabs, 1, "one chunk holds the last object");
    for (int k = 0; k < 3; k++)
        if (o[k][cap - 1])
            cr_assert_eq(fmem_heap_free(h, o[k][cap - 1]), 0);
    fmem_heap_collect(h);
    fmem_heap_stats(h, &st1);
    cr_assert_eq(st1.remote_bytes, 0);
    fmem_heap_destroy(h);
    for (int k = 0; k < 3; k++)
        free(o[k]);
}

Test(compact, overlapping_slabs_are_not_merged)
{
    fmem_heap *h = new_compactable_heap();
    size_t cap = FMEM_HEAP_SLAB_SIZE / 64;
    void **a = calloc(cap, sizeof *a), **b = calloc(cap, sizeof *b);
    for (size_t i = 0; i < cap; i++)
        fill(a[i] = fmem_heap_malloc(h, 64), 64, i);
    for (size_t i = 0; i < cap; i++)
        fill(b[i] = fmem_heap_malloc(h, 64), 64, 100000 + i);
    for (size_t i = 1; i < cap; i += 2) { /* both live at even offsets */
        cr_assert_eq(fmem_heap_free(h, a[i]), 0);
        cr_assert_eq(fmem_heap_free(h, b[i]), 0);
        a[i] = b[i] = NULL;
    }
    struct slab *sa = pagemap_get(&h->map, a[0]), *sb = pagemap_get(&h->map, b[0]);
    struct theap *th = theap_peek(h);
    cr_assert_eq(compact_merge_pair(th, sa, sb), FMEM_ERANGE);
    cr_assert_eq(fmem_heap_compact(h, 0), 0, "nothing compatible");
    /* both still work as before */
    for (size_t i = 0; i < cap; i += 2) {
        cr_assert(same(a[i], 64, i));
        cr_assert(same(b[i], 64, 100000 + i));
    }
    void *n = fmem_heap_malloc(h, 64);
    cr_assert_not_null(n);
    cr_assert_eq(fmem_heap_free(h, n), 0);
    fmem_heap_destroy(h);
    free(a);
    free(b);
}

Test(compact, bad_arguments)
{
    cr_assert_eq(fmem_heap_compact(NULL, 0), FMEM_EINVAL);
    fmem_heap *h;
    cr_assert_eq(fmem_heap_new(pool, &h), 0);
    cr_assert_eq(fmem_heap_compact(h, 0), FMEM_ENOTSUP, "not a compactable heap");
    fmem_compact_policy pol = {.flags = FMEM_COMPACT_AUTO};
    cr_assert_eq(fmem_heap_set_compact_policy(h, &pol), FMEM_ENOTSUP);
    cr_assert_eq(fmem_heap_set_compact_policy(h, NULL), FMEM_EINVAL);
    fmem_heap_destroy(h);
    pol.flags = 0x80;
    cr_assert_eq(fmem_heap_new_compactable(pool, &pol, &h), FMEM_EINVAL);
    cr_assert_null(h);
    cr_assert_eq(fmem_heap_new_compactable(NULL, NULL, &h), FMEM_EINVAL);
    cr_assert_eq(fmem_heap_new_compactable(pool, NULL, NULL), FMEM_EINVAL);
    cr_assert_eq(fmem_heap_new_compactable(pool, NULL, &h), 0);
    cr_assert_eq(fmem_heap_set_compact_policy(h, &pol), FMEM_EINVAL);
    pol.flags = FMEM_COMPACT_AUTO;
    cr_assert_eq(fmem_heap_set_compact_policy(h, &pol), 0);
    cr_assert_eq(fmem_heap_compact(h, 0), 0, "an empty heap gives nothing back");
    fmem_heap_destroy(h);
    /* a private pool's chunks cannot be mapped twice */
    fmem_pool *priv;
    cr_assert_eq(fmem_open("mem:?size=16M", &priv), 0);
    cr_assert_eq(fmem_heap_new_compactable(priv, NULL, &h), FMEM_ENOTSUP);
    cr_assert_null(h);
    fmem_stats_t ps;
    fmem_stats(priv, &ps);
    cr_assert_eq(ps.allocated_bytes, 0, "the probe's chunk went back");
    fmem_close(priv);
}

Test(compact, automatic_policy)
{
    fmem_compact_policy pol = {.flags = FMEM_COMPACT_AUTO, .interval = 8};
    fmem_heap *h;
    cr_assert_eq(fmem_heap_new_compactable(pool, &pol, &h), 0);
    enum { N = 20000 };
    void **obj = calloc(N, sizeof *obj);
    size_t *len = calloc(N, sizeof *len);
    fragment(h, obj, len, N, 15);
    fmem_heap_stats_t st;
    fmem_heap_stats(h, &st);
    uint64_t merges0 = st.merges;
    /* new slabs of another class trigger it */
    void *more[200];
    for (int i = 0; i < 200; i++)
        cr_assert_not_null(more[i] = fmem_heap_malloc(h, 8192));
    fmem_heap_stats(h, &st);
    cr_assert_gt(st.merges, merges0, "no automatic compaction");
    check_all(obj, len, N);
    /* turned off: no more merges */
    pol.flags = 0;
    cr_assert_eq(fmem_heap_set_compact_policy(h, &pol), 0);
    for (int i = 0; i < 200; i++)
        fmem_heap_free(h, more[i]);
    fragment(h, obj, len, N, 15); /* leaks the first round's: destroy frees */
    fmem_heap_stats(h, &st);
    uint64_t merges1 = st.merges;
    for (int i = 0; i < 200; i++)
        cr_assert_not_null(more[i] = fmem_heap_malloc(h, 8192));
    fmem_heap_stats(h, &st);
    cr_assert_eq(st.merges, merges1);
    fmem_heap_destroy(h);
    free(obj);
    free(len);
}

/* ---- frees and allocations racing compaction ---------------------------- */

#define RACE_N 40000
static fmem_heap *race_heap;
static void *race_obj[RACE_N];
static _Atomic int race_claim[RACE_N];
static _Atomic int race_stop;

static void *race_thread(void *arg)
{
    uint64_t r = (uint64_t)(uintptr_t)arg * 0x9E3779B97F4A7C15ull | 1;
    void *mine[64] = {0};
    while (!atomic_load(&race_stop)) {
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        size_t i = r % RACE_N;
        int exp = 0; /* free an object the main thread allocated */
        if (race_obj[i] && atomic_compare_exchange_strong(&race_claim[i], &exp, 1)) {
            if (!same(race_obj[i], 64, i))
                return (void *)1;
            int rc = fmem_heap_free(race_heap, race_obj[i]);
            if (rc != 0) {
                fprintf(stderr, "free %zu %p: %d\n", i, race_obj[i], rc);
                return (void *)2;
            }
        }
        /* and allocate and free objects of its own */
        unsigned k = (unsigned)(r >> 20) % 64;
        if (mine[k]) {
            if (!same(mine[k], 48, k))
                return (void *)3;
            fmem_heap_free(race_heap, mine[k]);
            mine[k] = NULL;
        } else if ((mine[k] = fmem_heap_malloc(race_heap, 48)) != NULL) {
            fill(mine[k], 48, k);
        }
    }
    for (int k = 0; k < 64; k++)
        fmem_heap_free(race_heap, mine[k]);
    return NULL;
}

Test(compact, frees_and_allocations_race_compaction, .timeout = 180)
{
    fmem_compact_policy pol = {.flags = FMEM_COMPACT_RANDOM};
    cr_assert_eq(fmem_heap_new_compactable(pool, &pol, &race_heap), 0);
    for (size_t i = 0; i < RACE_N; i++) {
        race_obj[i] = fmem_heap_malloc(race_heap, 64);
        fill(race_obj[i], 64, i);
    }
    for (size_t i = 0; i < RACE_N; i++) /* sparse slabs to merge */
        if (xs() % 100 < 80) {
            fmem_heap_free(race_heap, race_obj[i]);
            race_obj[i] = NULL;
        }
    enum { T = 3, OWN = 4000 };
    pthread_t t[T];
    for (int i = 0; i < T; i++)
        pthread_create(&t[i], NULL, race_thread, (void *)(uintptr_t)(i + 1));
    /* the compacting thread allocates and frees in its slabs too */
    static void *own[OWN];
    int64_t got = 0;
    for (int round = 0; round < 30; round++) {
        int64_t g = fmem_heap_compact(race_heap, 0);
        cr_assert_geq(g, 0);
        got += g;
        for (size_t i = 0; i < OWN; i++) {
            if (own[i]) {
                cr_assert(same(own[i], 64, 7 * i + 1), "own object %zu damaged", i);
                if (xs() % 100 < 85) {
                    cr_assert_eq(fmem_heap_free(race_heap, own[i]), 0);
                    own[i] = NULL;
                }
            } else if ((own[i] = fmem_heap_malloc(race_heap, 64)) != NULL) {
                fill(own[i], 64, 7 * i + 1);
            }
        }
    }
    atomic_store(&race_stop, 1);
    for (int i = 0; i < T; i++) {
        void *rv;
        pthread_join(t[i], &rv);
        cr_assert_null(rv, "thread %d saw a damaged object or a refused free (%p)", i, rv);
    }
    cr_assert_gt(got, 0, "nothing was merged while the threads ran");
    for (size_t i = 0; i < OWN; i++)
        if (own[i]) {
            cr_assert(same(own[i], 64, 7 * i + 1));
            cr_assert_eq(fmem_heap_free(race_heap, own[i]), 0);
        }
    for (size_t i = 0; i < RACE_N; i++)
        if (race_obj[i] && !atomic_load(&race_claim[i])) {
            cr_assert(same(race_obj[i], 64, i), "object %zu damaged", i);
            cr_assert_eq(fmem_heap_free(race_heap, race_obj[i]), 0);
        }
    fmem_heap_collect(race_heap);
    fmem_heap_stats_t st;
    fmem_heap_stats(race_heap, &st);
    cr_assert_eq(st.remote_bytes, 0, "%llu bytes left: a free got lost",
                 (unsigned long long)st.remote_bytes);
    cr_assert_eq(st.bad_frees + st.double_frees, 0);
    fmem_heap_destroy(race_heap);
}

/* ---- crash during a merge ---------------------------------------------- */

static void fill_fragmented(fmem_heap *h)
{
    static void *o[20000];
    for (int i = 0; i < 20000; i++)
        o[i] = fmem_heap_malloc(h, 128);
    for (int i = 0; i < 20000; i++)
        if (i % 7)
            fmem_heap_free(h, o[i]);
}
static void crash_at(int step) { compact_crash_at("compact", step, fill_fragmented); }

Test(compact, crash_after_copy_loses_no_chunk) { crash_at(1); }
Test(compact, crash_after_remap_loses_no_chunk) { crash_at(2); }
Test(compact, crash_before_chunk_free_loses_no_chunk) { crash_at(3); }

/* ---- writes racing a merge ---------------------------------------------- */

static _Atomic int fence_go, fence_started;
static unsigned char *fence_target;

static void *fence_writer(void *arg)
{
    (void)arg;
    while (!atomic_load(&fence_go))
        sched_yield();
    atomic_store(&fence_started, 1);
    memset(fence_target, 0xA7, 64);
    return NULL;
}

/* Between the copy and the remap: let the writer write, and give it time
 * to finish (unfenced it does, into the victim's chunk). */
static void fence_hook(int step)
{
    if (step != 1)
        return;
    atomic_store(&fence_go, 1);
    while (!atomic_load(&fence_started))
        sched_yield();
    usleep(100 * 1000);
}

/* A write into one of the victim's live objects while its slab is being
 * merged ends up in the survivor, seen through both addresses. */
Test(compact, a_write_racing_a_merge_is_kept)
{
    struct two fx;
    two_up(&fx);
    if (!compact_fenced(fx.h)) {
        two_down(&fx);
        cr_skip_test("no userfaultfd write-protection here: merges are not fenced");
    }
    fmem_heap *h = fx.h;
    size_t cap = fx.cap;
    void **a = fx.a, **b = fx.b;
    struct slab *sa = pagemap_get(&h->map, a[0]), *sb = pagemap_get(&h->map, b[1]);
    fence_target = b[1];
    char *twin = sa->start + ((char *)b[1] - sb->start);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, fence_writer, NULL), 0);
    heap_compact_hook = fence_hook;
    int rc = compact_merge_pair(theap_peek(h), sa, sb);
    heap_compact_hook = NULL;
    pthread_join(t, NULL);
    cr_assert_eq(rc, 0);
    for (int i = 0; i < 64; i++) {
        cr_assert_eq(((unsigned char *)b[1])[i], 0xA7, "byte %d of the write was lost", i);
        cr_assert_eq(((unsigned char *)twin)[i], 0xA7);
    }
    for (size_t i = 3; i < cap; i += 2) /* the other objects as they were */
        cr_assert(same(b[i], 64, 100000 + i));
    two_down(&fx);
}

/* Stress: a thread keeps writing counters into objects of the compacting
 * thread's slabs while rounds of fragmentation are compacted; it always
 * reads back what it wrote last, and every object ends with the last
 * value written to it. */
#define WR_N 96
static _Atomic int wr_stop;
static uint64_t *wr_obj[WR_N];
static uint64_t wr_last[WR_N];

static _Atomic uint64_t wr_lost, wr_loops;

/* Reads back what it wrote the last time: a write that went to the
 * victim's chunk after the copy shows up as an older value. */
static void *wr_thread(void *arg)
{
    (void)arg;
    uint64_t v = 0;
    while (!atomic_load_explicit(&wr_stop, memory_order_relaxed)) {
        for (int i = 0; i < WR_N; i++) {
            volatile uint64_t *o = wr_obj[i];
            if (wr_last[i] && *o != wr_last[i])
                atomic_fetch_add(&wr_lost, 1);
            *o = ++v;
            wr_last[i] = v;
        }
        atomic_fetch_add(&wr_loops, 1);
    }
    return NULL;
}

static void wr_hook(int step)
{
    if (step == 1)
        usleep(300);
}

Test(compact, writes_race_compaction, .timeout = 180)
{
    fmem_heap *h = new_compactable_heap();
    if (!compact_fenced(h)) {
        fmem_heap_destroy(h);
        cr_skip_test("no userfaultfd write-protection here: merges are not fenced");
    }
    enum { ROUND = 3000, ROUNDS = 12, SZ = 1024 };
    void **obj = calloc((size_t)ROUND * ROUNDS, sizeof *obj);
    int nw = 0;
    for (int r = 0; r < ROUNDS; r++) {
        void **o = obj + (size_t)r * ROUND;
        for (int i = 0; i < ROUND; i++) {
            o[i] = fmem_heap_malloc(h, SZ);
            cr_assert_not_null(o[i]);
            fill(o[i], SZ, (uint64_t)r * ROUND + (uint64_t)i);
        }
    }
    for (int r = 0; r < ROUNDS; r++) { /* frees after all allocations: no hole refilled */
        void **o = obj + (size_t)r * ROUND;
        for (int i = 0; i < ROUND; i++)
            if (xs() % 100 < 90) {
                fmem_heap_free(h, o[i]);
                o[i] = NULL;
            } else if (nw < (r + 1) * WR_N / ROUNDS) {
                wr_obj[nw++] = o[i];
                o[i] = NULL; /* the writer's now */
            }
    }
    cr_assert_eq(nw, WR_N);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, wr_thread, NULL), 0);
    while (!atomic_load(&wr_loops))
        sched_yield();
    heap_compact_hook = wr_hook; /* a wider window between copy and remap */
    int64_t got = 0;
    for (int k = 0; k < 4; k++) {
        int64_t g = fmem_heap_compact(h, 0);
        cr_assert_geq(g, 0);
        got += g;
        usleep(2000);
    }
    heap_compact_hook = NULL;
    atomic_store(&wr_stop, 1);
    pthread_join(t, NULL);
    cr_assert_gt(got, 0, "nothing was merged");
    cr_assert_eq(atomic_load(&wr_lost), 0, "%llu writes lost",
                 (unsigned long long)atomic_load(&wr_lost));
    for (int i = 0; i < WR_N; i++)
        cr_assert_eq(*wr_obj[i], wr_last[i], "object %d: %llu, last written %llu", i,
                     (unsigned long long)*wr_obj[i], (unsigned long long)wr_last[i]);
    for (size_t i = 0; i < (size_t)ROUND * ROUNDS; i++)
        if (obj[i])
            cr_assert(same(obj[i], SZ, i), "object %zu damaged", i);
    fmem_heap_destroy(h);
    free(obj);
}

/* ---- region heaps ------------------------------------------------------- */

Test(compact, region_heaps_refuse_clearly)
{
    fmem_region_config c = {.size = 4 << 20, .cache_bytes = 1 << 20};
    fmem_region *r;
    int rc = fmem_region_create(pool, &c, &r);
    if (rc == FMEM_EACCES || rc == FMEM_ENOTSUP)
        cr_skip_test("userfaultfd is not available here: %s", fmem_strerror(rc));
    cr_assert_eq(rc, 0);
    fmem_heap *h;
    cr_assert_eq(fmem_heap_new_region(r, &h), 0);
    void *p = fmem_heap_malloc(h, 64);
    cr_assert_not_null(p);
    cr_assert_eq(fmem_heap_compact(h, 0), FMEM_ENOTSUP);
    fmem_heap_free(h, p);
    fmem_heap_destroy(h);
    fmem_region_destroy(r);
}

/* ---- fork ---------------------------------------------------------------- */

Test(compact, fork_child_writes_do_not_reach_the_parent)
{
    struct two fx;
    two_up(&fx);
    fmem_heap *h = fx.h;
    size_t cap = fx.cap;
    void **a = fx.a, **b = fx.b;
    cr_assert_gt(fmem_heap_compact(h, 0), 0);
    /* free slots that still map their chunks (slabs emptied and given back) */
    enum { NK = 640 };
    static void *k[NK];
    for (int i = 0; i < NK; i++)
        cr_assert_not_null(k[i] = fmem_heap_malloc(h, 1024));
    for (int i = 0; i < NK; i++)
        cr_assert_eq(fmem_heap_free(h, k[i]), 0);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        int bad = 0;
        for (size_t i = 0; i < cap; i++) {
            void *p = a[i] ? a[i] : b[i];
            size_t seed = a[i] ? i : 100000 + i;
            bad |= !same(p, 64, seed);
            memset(p, 0xEE, 64);
            if (i % 3 == 0)
                bad |= fmem_heap_free(h, p) != 0;
        }
        void *n[100];
        for (int i = 0; i < 100; i++) /* new slabs in the child work too */
            memset(n[i] = fmem_heap_malloc(h, 64), 0xDD, 64);
        for (int i = 0; i < NK; i++) /* on the free slots too */
            memset(k[i] = fmem_heap_malloc(h, 1024), 0xDD, 1024);
        _exit(bad ? 1 : 0);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %#x", status);
    for (int i = 0; i < NK; i++) { /* the parent's slabs of that class again */
        unsigned char *q = k[i] = fmem_heap_malloc(h, 1024);
        cr_assert_not_null(q);
        memset(q, i & 0xff, 1024);
    }
    for (int i = 0; i < NK; i++)
        cr_assert_eq(((unsigned char *)k[i])[1023], i & 0xff);
    for (size_t i = 0; i < cap; i++) {
        if (a[i])
            cr_assert(same(a[i], 64, i), "the child's write reached the parent");
        if (b[i])
            cr_assert(same(b[i], 64, 100000 + i), "the child's write reached the parent");
    }
    two_down(&fx);
}
