/* python_share.c - CoRM-style page sharing between pymalloc pools of the
 * arenas the arena hook placed in far memory (docs/far-memory.md, "pages
 * shared between pools"). Two 4 KiB pages of different pools whose live
 * bytes do not overlap become one physical page: the live bytes of page B
 * are copied to the same offsets of page A, A's pool-file page is mapped a
 * second time at B (mremap of a shared mapping with old size 0), and B's
 * own file page is punched. Everything runs with the GIL held, with no
 * pymalloc call in between; a thread writing into B with the GIL released
 * (readinto, recv_into) is held off by a write fence from the copy to the
 * remap, where userfaultfd allows (share_fence).
 *
 * Invariants after a merge, for each pool with a shared page:
 * - its free list holds no block touching that page and its never-carved
 *   tail stops before it, so pymalloc only ever writes there into blocks
 *   that were live at the merge (and frees and reuses them: same bytes),
 *   and into its header (page 0), which the partner's bytes avoid;
 * - its count holds one extra allocation per shared page, so pymalloc
 *   never finds it empty: it is never rebuilt for another size class and
 *   its arena is never freed while the page is shared. It stays in
 *   usedpools (or is full) and keeps serving its class. Once it holds no
 *   object, python_unshare.c gives its pages memory of their own again and
 *   takes the extra count back through pymalloc's own free. */
#include "fmem_hooks_python.h"
#include "python_pools.h"
#include "python_share.h"
#include "write_fence.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- candidates: resident pages of used pools and their live bytes ------- */
#define UNIT 16 /* every block starts and ends on a 16-byte boundary */
#define UNITS (PM_HEAD_PAGE / UNIT)
#define WORDS (UNITS / 64)

struct cand {
    struct pm_pool_header *h;
    unsigned page;
    unsigned nunits;
    uint64_t m[WORDS]; /* live units of the page */
};

static void mask_range(uint64_t *m, size_t from, size_t to) /* units [from, to) */
{
    for (size_t u = from; u < to; u++)
        m[u / 64] |= 1ull << (u % 64);
}

static int masks_meet(const uint64_t *a, const uint64_t *b)
{
    for (size_t w = 0; w < WORDS; w++)
        if (a[w] & b[w])
            return 1;
    return 0;
}

/* The pages of used pool h that may be shared, appended to *cv. */
static int pool_cands(struct pm_pool_header *h, struct cand **cv, size_t *n, size_t *cap)
{
    static struct pm_free_list fl;
    size_t size = pm_block_size(h);
    unsigned shared = pm_shared_pages(h);
    unsigned extra = (unsigned)__builtin_popcount(shared);
    if (h->ref.count <= extra)
        return 0; /* only the extra count left: nothing to gain */
    long carved = pm_read_free_list(h, size, extra, &fl);
    if (carved < 0)
        return 0;
    unsigned char res[PM_PAGES];
    if (mincore(h, PM_POOL, res) != 0)
        return 0;
    unsigned resident = 0;
    for (unsigned p = 0; p < PM_PAGES; p++)
        resident |= (res[p] & 1u) << p;
    uint64_t m[PM_PAGES][WORDS];
    memset(m, 0, sizeof m);
    mask_range(m[0], 0, PM_OVERHEAD / UNIT);
    for (size_t i = 0; i < (size_t)carved; i++)
        if (!fl.isfree[i] && !pm_block_dead(h, PM_OVERHEAD + i * size, size, resident)) {
            size_t from = PM_OVERHEAD + i * size, to = from + size;
            for (size_t p = from / PM_HEAD_PAGE; p <= (to - 1) / PM_HEAD_PAGE; p++) {
                size_t a = from > p * PM_HEAD_PAGE ? from - p * PM_HEAD_PAGE : 0,
                       b = to < (p + 1) * PM_HEAD_PAGE ? to - p * PM_HEAD_PAGE : PM_HEAD_PAGE;
                mask_range(m[p], a / UNIT, b / UNIT);
            }
        }
    size_t limit = (size_t)h->maxnextoffset + size;
    for (unsigned p = 0; p < PM_PAGES; p++) {
        if ((shared & (1u << p)) || !(res[p] & 1))
            continue;
        /* page 0 cannot cut a tail that starts on it */
        if (p == 0 && h->nextoffset < PM_HEAD_PAGE && h->nextoffset + size <= limit)
            continue;
        unsigned nu = 0;
        for (size_t w = 0; w < WORDS; w++)
            nu += (unsigned)__builtin_popcountll(m[p][w]);
        if (nu == 0 || nu == UNITS)
            continue; /* nothing live (release_free_pages' job), or full */
        if (*n == *cap) {
            size_t c = *cap ? 2 * *cap : 4096;
            struct cand *v = realloc(*cv, c * sizeof *v);
            if (!v)
                return FMEM_ENOMEM;
            *cv = v;
            *cap = c;
        }
        struct cand *c = &(*cv)[(*n)++];
        c->h = h;
        c->page = p;
        c->nunits = nu;
        memcpy(c->m, m[p], sizeof c->m);
    }
    return 0;
}

static int by_units_desc(const void *x, const void *y)
{
    const struct cand *a = x, *b = y;
    return (a->nunits < b->nunits) - (a->nunits > b->nunits);
}

/* ---- merging one page into a group --------------------------------------- */
struct group {
    struct cand *owner;
    uint64_t u[WORDS]; /* live units of all its pages */
    unsigned nunits, naliases;
    int cut; /* the owner's pool is cut and its page in the table */
};

static char *page_of(const struct cand *c)
{
    return (char *)c->h + (size_t)c->page * PM_HEAD_PAGE;
}

/* Read the pool's list and check that cutting page `page` out of it is
 * safe; then pm_drop_pages does it. 0 or -1. */
static int pool_prepare(const struct cand *c, struct pm_free_list *fl)
{
    size_t size = pm_block_size(c->h);
    unsigned extra = (unsigned)__builtin_popcount(pm_shared_pages(c->h));
    if (pm_read_free_list(c->h, size, extra, fl) < 0)
        return -1;
    return pm_unlink_unsafe(c->h, size, 1u << c->page, fl) ? -1 : 0;
}

static void pool_cut(const struct cand *c, const struct pm_free_list *fl)
{
    pm_drop_pages(c->h, pm_block_size(c->h), 1u << c->page, fl);
    c->h->ref.count++; /* the shared page's extra allocation */
}

int share_fence_up(void *page)
{
    if (share_fence < 0)
        return 0;
    int rc = write_fence_up(share_fence, page, PM_HEAD_PAGE);
    if (rc == -ENOTSUP) {
        close(share_fence);
        share_fence = -1;
    }
    return rc == 0;
}

/* Merge page b into group g: 1 done, 0 skipped, FMEM error to stop. */
static int merge_into(struct group *g, struct cand *b)
{
    static struct pm_free_list fl;
    char *A = page_of(g->owner), *B = page_of(b);
    if (!g->cut && pool_prepare(g->owner, &fl) != 0)
        return 0;
    /* B's own file page, kept mapped (punched) to be mapped back later */
    void *t = mremap(B, 0, PM_HEAD_PAGE, MREMAP_MAYMOVE);
    if (t == MAP_FAILED)
        return errno == EINVAL ? FMEM_ENOTSUP : FMEM_ENOMEM;
    if (!g->cut) {
        if (!share_add((uintptr_t)A)) {
            munmap(t, PM_HEAD_PAGE);
            return FMEM_ENOMEM;
        }
        pool_cut(g->owner, &fl);
        g->cut = 1;
    }
    /* b's list is read after the owner's pool changed: they may be one */
    struct share_ent *e;
    if (pool_prepare(b, &fl) != 0 || !(e = share_add((uintptr_t)B))) {
        munmap(t, PM_HEAD_PAGE);
        return 0;
    }
    e->owner = (uintptr_t)A;
    e->t = t;
    /* writers into B (GIL released) wait from here until B shows A's page;
     * the copy reads B's bytes through t, which is not fenced */
    int fenced = share_fence_up(B);
    for (size_t u = 0; u < UNITS;) { /* b's live runs to the same offsets of A */
        if (!(b->m[u / 64] & (1ull << (u % 64)))) {
            u++;
            continue;
        }
        size_t end = u;
        while (end < UNITS && (b->m[end / 64] & (1ull << (end % 64))))
            end++;
        memcpy(A + u * UNIT, (char *)t + u * UNIT, (end - u) * UNIT);
        u = end;
    }
    if (mremap(A, 0, PM_HEAD_PAGE, MREMAP_MAYMOVE | MREMAP_FIXED, B) == MAP_FAILED) {
        /* B still maps its own page and holds its bytes; A got copies in
         * units nobody uses. B stays in the table as a private page
         * (SH_LOCAL), out of later passes, with the extra count */
        if (fenced)
            write_fence_undo(share_fence, B, PM_HEAD_PAGE);
        munmap(t, PM_HEAD_PAGE);
        e->owner = SH_LOCAL;
        e->t = NULL;
        pool_cut(b, &fl);
        return FMEM_ENOMEM;
    }
    if (fenced)
        write_fence_down(share_fence, B, PM_HEAD_PAGE);
    madvise(t, PM_HEAD_PAGE, MADV_REMOVE);
    pool_cut(b, &fl);
    share_find((uintptr_t)A)->naliases++;
    share_aliases++;
    for (size_t w = 0; w < WORDS; w++)
        g->u[w] |= b->m[w];
    g->nunits += b->nunits;
    g->naliases++;
    return 1;
}

/* ---- the pass --------------------------------------------------------------- */
#define WINDOW 512 /* open groups a page is tried against (the newest) */

static size_t alias_budget(void)
{
    static size_t max;
    if (!max) {
        max = 65530;
        FILE *f = fopen("/proc/sys/vm/max_map_count", "r");
        if (f) {
            unsigned long v;
            if (fscanf(f, "%lu", &v) == 1 && v > 0)
                max = v;
            fclose(f);
        }
    }
    /* each alias splits its arena's mapping (up to two more mappings) and
     * keeps its own page mapped (one more) */
    return max / 6 > share_aliases ? max / 6 - share_aliases : 0;
}

FMEM_API int64_t fmem_hooks_python_share_pages(void)
{
    size_t n, ncand = 0, cap = 0;
    int err;
    const struct pm_arena *ar = pm_arenas(&n, &err);
    if (!ar)
        return err;
    struct cand *cv = NULL;
    for (size_t i = 0; i < n && !err; i++) {
        uintptr_t a = (uintptr_t)ar[i].p, end = a + ar[i].size;
        if (!pm_arena_looks_right(a, ar[i].size))
            continue;
        for (uintptr_t p = (a + PM_POOL - 1) & ~(uintptr_t)(PM_POOL - 1);
             p + PM_POOL <= end && !err; p += PM_POOL) {
            struct pm_pool_header *h = (void *)p;
            if (h->ref.count != 0)
                err = pool_cands(h, &cv, &ncand, &cap);
        }
    }
    if (err || ncand < 2) {
        free(cv);
        return err;
    }
    if (!share_pid) {
        share_pid = getpid();
        share_fence = write_fence_open(1);
    }
    qsort(cv, ncand, sizeof *cv, by_units_desc);
    struct group *gv = malloc(ncand * sizeof *gv);
    if (!gv) {
        free(cv);
        return FMEM_ENOMEM;
    }
    size_t ng = 0, budget = alias_budget();
    int64_t got = 0;
    int rc = 0;
    for (size_t i = 0; i < ncand && budget && rc >= 0; i++) {
        struct cand *c = &cv[i];
        int placed = 0;
        for (size_t j = ng, tried = 0; j-- > 0 && tried < WINDOW && !placed; tried++) {
            struct group *g = &gv[j];
            if (g->nunits + c->nunits > UNITS || masks_meet(g->u, c->m))
                continue;
            rc = merge_into(g, c);
            if (rc < 0)
                break;
            if (rc == 1) {
                placed = 1;
                got += (int64_t)PM_HEAD_PAGE;
                budget--;
            }
        }
        if (!placed && rc >= 0) {
            gv[ng].owner = c;
            memcpy(gv[ng].u, c->m, sizeof c->m);
            gv[ng].nunits = c->nunits;
            gv[ng].naliases = 0;
            gv[ng].cut = 0;
            ng++;
        }
    }
    free(gv);
    free(cv);
    return got ? got : rc < 0 ? rc : 0;
}
