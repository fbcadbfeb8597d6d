/* python_unshare.c - undoing page sharing (python_share.c). A pool with a
 * shared page holds one extra allocation per such page, so pymalloc never
 * finds it empty. Once it holds no object (its count is only those extra
 * ones), each of its shared pages gets memory of its own again:
 * - an alias maps its own pool-file page back (kept mapped, punched, since
 *   the merge), after the shared page's bytes were copied into it;
 * - an owner hands its physical page over to its first alias: the bytes go
 *   into that alias's own file page, which the other aliases then map;
 *   the owner keeps its own page (page release gives it back later).
 * Then the extra count goes, the last unit of it through pymalloc's own
 * free of a block nobody uses (carved and off the free list, or carved
 * from the tail for it), so that pymalloc itself finds the pool empty,
 * moves it to its arena's free pools and frees the arena when it is all
 * free. With the GIL held, no Python code in between; while an owner
 * hands over, its aliases (pages of pools with objects) are write-fenced
 * where userfaultfd allows (share_fence), so that a write into them
 * without the GIL between the copy and the remap is not lost. */
#include "fmem_hooks_python.h"
#include "python_pools.h"
#include "python_share.h"
#include "write_fence.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PAGE PM_HEAD_PAGE

/* pymalloc's own object allocator, under the debug hooks if they are
 * installed (3.11: their ctx is a debug_alloc_api_t {char api_id;
 * PyMemAllocatorEx alloc;} with api_id 'o'). 0 when it cannot be told. */
static int pymalloc_of(PyMemAllocatorEx *raw)
{
    PyMemAllocatorEx a;
    PyMem_GetAllocator(PYMEM_DOMAIN_OBJ, &a);
    if (!a.ctx) {
        *raw = a;
        return 1;
    }
    const struct {
        char api_id;
        PyMemAllocatorEx alloc;
    } *dbg = a.ctx;
    if (dbg->api_id != 'o' || dbg->alloc.ctx)
        return 0;
    *raw = dbg->alloc;
    return 1;
}

/* Alias a of owner page `owner`, if fenced: its writers go on, into its
 * new mapping, or (undo) into the page it still maps. */
static void fence_off(struct share_ent *a, uintptr_t owner, int undo)
{
    if (!a->page || a->owner != owner || !a->fenced)
        return;
    a->fenced = 0;
    if (share_fence < 0)
        return; /* closed meanwhile (a page that could not be fenced): woken */
    if (undo)
        write_fence_undo(share_fence, (void *)a->page, PAGE);
    else
        write_fence_down(share_fence, (void *)a->page, PAGE);
}

/* Give page (in the table) memory of its own. 0, or -1 if a mapping
 * failed (the page then stays shared). */
static int unshare_page(uintptr_t page)
{
    struct share_ent *e = share_find(page);
    if (e->owner == SH_LOCAL || (e->owner == SH_OWNER && !e->naliases)) {
        share_del(page);
        return 0;
    }
    if (e->owner != SH_OWNER) { /* an alias */
        uintptr_t owner = e->owner;
        memcpy(e->t, (void *)page, PAGE);
        if (mremap(e->t, PAGE, PAGE, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)page) == MAP_FAILED)
            return -1;
        share_del(page);
        share_aliases--;
        share_find(owner)->naliases--;
        return 0;
    }
    struct share_ent *heir = NULL; /* an owner: its first alias takes over */
    for (size_t i = 0; i < share_cap && !heir; i++)
        if (share_tab[i].page && share_tab[i].owner == page)
            heir = &share_tab[i];
    if (!heir) { /* the count said otherwise: none maps it */
        share_del(page);
        return 0;
    }
    /* the aliases hold other pools' objects: writers into them without
     * the GIL wait from the copy until they map the heir's page */
    for (size_t i = 0; i < share_cap; i++)
        if (share_tab[i].page && share_tab[i].owner == page)
            share_tab[i].fenced = share_fence_up((void *)share_tab[i].page);
    uintptr_t to = heir->page;
    memcpy(heir->t, (void *)page, PAGE);
    if (mremap(heir->t, PAGE, PAGE, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)to) == MAP_FAILED) {
        for (size_t i = 0; i < share_cap; i++)
            fence_off(&share_tab[i], page, 1);
        return -1;
    }
    fence_off(heir, page, 0);
    heir->owner = SH_OWNER;
    heir->fenced = 0;
    heir->t = NULL;
    heir->naliases = 0;
    share_aliases--;
    unsigned failed = 0;
    for (size_t i = 0; i < share_cap; i++) {
        struct share_ent *a = &share_tab[i];
        if (!a->page || a->owner != page)
            continue;
        if (mremap((void *)to, 0, PAGE, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)a->page) ==
            MAP_FAILED) {
            fence_off(a, page, 1);
            failed++; /* it still maps this page, which stays its owner */
            continue;
        }
        fence_off(a, page, 0);
        a->owner = to;
        heir->naliases++;
    }
    if (failed) {
        e->naliases = failed;
        return -1;
    }
    share_del(page);
    return 0;
}

/* Owners left without aliases in pools that still hold objects: their
 * extra count goes (the pool's count stays above 0: it holds objects). */
static void drop_lone_owners(void)
{
    for (size_t i = 0; i < share_cap;) {
        struct share_ent *e = &share_tab[i];
        struct pm_pool_header *h = (void *)(e->page & ~(uintptr_t)(PM_POOL - 1));
        if (e->page && e->owner == SH_OWNER && !e->naliases &&
            h->ref.count > (unsigned)__builtin_popcount(pm_shared_pages(h))) {
            h->ref.count--;
            share_del(e->page); /* may shift a later entry into slot i */
            continue;
        }
        i++;
    }
}

/* An arena is freed (or cached by the heap for reuse): its alias pages
 * get a private zero page (the heap may hand the range out again), and
 * alias pages elsewhere that map one of its pages get a private copy.
 * pymalloc frees an arena only when all its pools are empty, which a pool
 * with a shared page never is, so this is a safety net. In a fork child
 * the mappings are private copies already: only the table changes. */
void pm_share_arena_gone(char *p, size_t size)
{
    if (!share_n)
        return;
    uintptr_t lo = (uintptr_t)p, hi = lo + size;
    int child = share_pid != getpid();
    static char buf[PAGE];
    for (size_t i = 0; i < share_cap; i++) {
        struct share_ent *e = &share_tab[i];
        if (!e->page || e->page < lo || e->page >= hi)
            continue;
        if (e->owner == SH_OWNER) {
            for (size_t j = 0; j < share_cap; j++) {
                struct share_ent *a = &share_tab[j];
                if (!a->page || a->owner != e->page)
                    continue;
                if (!child) {
                    memcpy(buf, (void *)a->page, PAGE);
                    if (mmap((void *)a->page, PAGE, PROT_READ | PROT_WRITE,
                             MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) != MAP_FAILED)
                        memcpy((void *)a->page, buf, PAGE);
                }
                if (a->t && !child)
                    munmap(a->t, PAGE);
                a->t = NULL;
                a->owner = SH_LOCAL;
                share_aliases--;
            }
        } else if (e->owner != SH_LOCAL) {
            struct share_ent *o = share_find(e->owner);
            if (o)
                o->naliases--;
            share_aliases--;
            if (!child)
                mmap((void *)e->page, PAGE, PROT_READ | PROT_WRITE,
                     MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        }
        if (e->t && !child)
            munmap(e->t, PAGE);
        e->t = NULL;
        e->owner = SH_LOCAL; /* dropped below */
    }
    for (size_t i = 0; i < share_cap;) {
        if (share_tab[i].page >= lo && share_tab[i].page < hi) {
            share_del(share_tab[i].page);
            continue;
        }
        i++;
    }
}

/* Blocks of pool h (count 1 extra, no object, no shared page) that
 * nobody uses, `need` of them, into x[]: carved ones off the free list,
 * then ones carved from the tail, then (if the list keeps one) its head.
 * How many were found; a later free of them is pymalloc's own. */
static unsigned spare_blocks(struct pm_pool_header *h, unsigned need, void **x)
{
    static struct pm_free_list fl;
    size_t size = pm_block_size(h);
    long carved = pm_read_free_list(h, size, 1, &fl);
    unsigned n = 0;
    if (carved < 0)
        return 0;
    for (long i = 0; i < carved && n < need; i++)
        if (!fl.isfree[i])
            x[n++] = (char *)h + PM_OVERHEAD + (size_t)i * size;
    while (n < need && h->nextoffset <= h->maxnextoffset) {
        x[n++] = (char *)h + h->nextoffset;
        h->nextoffset += (unsigned)size;
    }
    if (n < need && h->freeblock && fl.n >= 2) {
        x[n++] = h->freeblock;
        h->freeblock = *(void **)h->freeblock;
    }
    return n;
}

FMEM_API int64_t fmem_hooks_python_unshare_empty_pools(void)
{
    size_t n;
    int err;
    PyMemAllocatorEx raw;
    if (!share_n || !pm_arenas(&n, &err) || share_pid != getpid() || !pymalloc_of(&raw))
        return 0;
    /* the pools whose count is only their shared pages' (each found once:
     * at its first shared page, in address order within the pool) */
    size_t cap = 64, np = 0;
    struct pm_pool_header **pools = malloc(cap * sizeof *pools);
    if (!pools)
        return FMEM_ENOMEM;
    for (size_t i = 0; i < share_cap; i++) {
        uintptr_t page = share_tab[i].page;
        if (!page)
            continue;
        struct pm_pool_header *h = (void *)(page & ~(uintptr_t)(PM_POOL - 1));
        unsigned shared = pm_shared_pages(h);
        if ((uintptr_t)h + (size_t)__builtin_ctz(shared) * PAGE != page ||
            h->ref.count != (unsigned)__builtin_popcount(shared))
            continue;
        if (np == cap) {
            struct pm_pool_header **v = realloc(pools, 2 * cap * sizeof *v);
            if (!v)
                break;
            pools = v;
            cap *= 2;
        }
        pools[np++] = h;
    }
    drop_lone_owners();
    int64_t emptied = 0;
    size_t nfree = 0;
    void **frees = malloc(2 * np * sizeof *frees + 1);
    for (size_t j = 0; j < np && frees; j++) {
        struct pm_pool_header *h = pools[j];
        unsigned shared = pm_shared_pages(h), left = shared;
        for (unsigned p = 0; p < PM_PAGES; p++)
            if ((shared & (1u << p)) && unshare_page((uintptr_t)h + p * PAGE) == 0)
                left &= ~(1u << p);
        if (left) { /* stays in use, holding the extra counts of what is left */
            h->ref.count = (unsigned)__builtin_popcount(left);
            continue;
        }
        /* pymalloc frees the last extra allocation; a full pool (off
         * usedpools) gets two, so that it is relinked before it empties */
        unsigned need = h->freeblock ? 1 : 2;
        h->ref.count = 1;
        void *x[2];
        unsigned got = spare_blocks(h, need, x);
        if (got < need)
            continue; /* stays in use with one allocation nobody frees */
        h->ref.count = need;
        emptied++;
        for (unsigned i = 0; i < need; i++)
            frees[nfree++] = x[i];
    }
    free(pools);
    /* pymalloc frees last: an emptied arena goes through the arena hook */
    for (size_t i = 0; i < nfree; i++)
        raw.free(raw.ctx, frees[i]);
    free(frees);
    return emptied;
}
