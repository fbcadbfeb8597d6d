/* python.c - CPython's allocator domains and pymalloc's arena allocator on
 * a binding. A hook installed while the interpreter runs must wrap the
 * allocator it replaces (the C API's rule): pointers the heap does not own
 * go to the saved one. Only the public fmem_hooks API is used here. */
#define PY_SSIZE_T_CLEAN
#include "fmem_hooks_python.h"
#include "python_pools.h"

#include <errno.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/vfs.h>
#include <linux/magic.h>
#include <unistd.h>

/* One installation: the binding and the allocator it wraps, freed with
 * the binding. PyMemAllocatorEx and fmem_hooks_allocator have the same
 * members, so the saved allocator serves as the fallback directly. */
struct py_domain_hook {
    struct fmem_hooks_attached link;
    fmem_hooks *b;
    fmem_hooks_allocator old;
};

#define PM_ARENA ((size_t)1 << 20) /* pymalloc's arena (3.10 on, radix tree) */

struct py_arena_hook {
    struct fmem_hooks_attached link;
    fmem_hooks *b;
    PyObjectArenaAllocator old;
    /* the arenas placed in the heap (changed with the GIL held) */
    struct pm_arena *arenas;
    size_t narenas, cap;
    pid_t pid; /* the process that installed the hook */
};

static struct py_arena_hook *arena_hook; /* the last one installed */

/* Python wants distinct non-NULL pointers for 0 bytes, and realloc to 0
 * keeps a block: the heap's minimal object, and a 1-byte resize. */
static void *dom_malloc(void *ctx, size_t n)
{
    struct py_domain_hook *k = ctx;
    return fmem_hooks_malloc_via(k->b, &k->old, n);
}

static void *dom_calloc(void *ctx, size_t n, size_t size)
{
    struct py_domain_hook *k = ctx;
    return fmem_hooks_calloc_via(k->b, &k->old, n, size);
}

static void *dom_realloc(void *ctx, void *p, size_t n)
{
    struct py_domain_hook *k = ctx;
    return fmem_hooks_realloc_via(k->b, &k->old, p, n ? n : 1);
}

static void dom_free(void *ctx, void *p)
{
    struct py_domain_hook *k = ctx;
    fmem_hooks_free_via(k->b, &k->old, p);
}

FMEM_API int fmem_hooks_python_domain(fmem_hooks *b, PyMemAllocatorDomain domain,
                                      PyMemAllocatorEx *old)
{
    if (!b || (domain != PYMEM_DOMAIN_RAW && domain != PYMEM_DOMAIN_MEM &&
               domain != PYMEM_DOMAIN_OBJ))
        return FMEM_EINVAL;
    struct py_domain_hook *k = calloc(1, sizeof *k);
    if (!k)
        return FMEM_ENOMEM;
    PyMemAllocatorEx cur;
    PyMem_GetAllocator(domain, &cur);
    k->b = b;
    k->old = (fmem_hooks_allocator){
        .ctx = cur.ctx, .malloc = cur.malloc, .calloc = cur.calloc, .realloc = cur.realloc,
        .free = cur.free,
    };
    if (old)
        *old = cur;
    fmem_hooks_attach(b, &k->link);
    PyMemAllocatorEx mine = {
        .ctx = k, .malloc = dom_malloc, .calloc = dom_calloc, .realloc = dom_realloc,
        .free = dom_free,
    };
    PyMem_SetAllocator(domain, &mine);
    return 0;
}

static void *arena_alloc(void *ctx, size_t size)
{
    struct py_arena_hook *k = ctx;
    void *p = fmem_hooks_take(k->b, size, 0);
    if (!p)
        return k->old.alloc(k->old.ctx, size);
    if (size != PM_ARENA) /* CPython's thread stack chunks come through here too */
        return p;
    if (k->narenas == k->cap) { /* untracked if this fails: never released */
        size_t cap = k->cap ? 2 * k->cap : 64;
        struct pm_arena *a = realloc(k->arenas, cap * sizeof *a);
        if (!a)
            return p;
        k->arenas = a;
        k->cap = cap;
    }
    k->arenas[k->narenas++] = (struct pm_arena){p, size};
    return p;
}

static void arena_free(void *ctx, void *p, size_t size)
{
    struct py_arena_hook *k = ctx;
    if (!p)
        return;
    for (size_t i = k->narenas; i-- > 0;)
        if (k->arenas[i].p == p) {
            pm_share_arena_gone(p, k->arenas[i].size);
            k->arenas[i] = k->arenas[--k->narenas];
            break;
        }
    if (!fmem_hooks_give(k->b, p))
        k->old.free(k->old.ctx, p, size);
}

FMEM_API int fmem_hooks_python_arena(fmem_hooks *b, PyObjectArenaAllocator *old)
{
    if (!b)
        return FMEM_EINVAL;
    struct py_arena_hook *k = calloc(1, sizeof *k);
    if (!k)
        return FMEM_ENOMEM;
    k->b = b;
    PyObject_GetArenaAllocator(&k->old);
    if (old)
        *old = k->old;
    fmem_hooks_attach(b, &k->link);
    k->pid = getpid();
    PyObjectArenaAllocator mine = {.ctx = k, .alloc = arena_alloc, .free = arena_free};
    PyObject_SetArenaAllocator(&mine);
    arena_hook = k;
    return 0;
}

/* ---- empty pools --------------------------------------------------------
 * pymalloc cuts an arena into 16 KiB pools (from the first 16 KiB-aligned
 * address) and never gives a pool of a live arena back. A pool with no
 * allocated block (count 0: on its arena's free pool list, or never used)
 * holds nothing the program reads, except its header: pymalloc links free
 * pools through it (nextpool), finds the arena by arenaindex, and, when it
 * reuses a pool for the size class it had, takes the old free list that
 * starts in the header and continues through the blocks. So the header's
 * page stays, the other three pages are released (MADV_REMOVE: the pool
 * file's pages go back; a later touch gets fresh zero pages), and szidx is
 * set to the "no class" value so that a reuse builds a new free list.
 * Layout: python_pools.h, checked at run time against the arenas' pools
 * before the first use. */
#if PM_CHECKED
_Static_assert(sizeof(struct pm_pool_header) == 48, "POOL_OVERHEAD of 3.11, 64-bit");
#endif

/* Does an initialized pool's header look as the 3.11 layout says (a size
 * class below 512 bytes, the end of its blocks where that class puts it:
 * maxnextoffset + size is the pool's end, or the start of a page that
 * release_free_pages() or page sharing took from the never-carved tail)? */
static int pm_header_looks_right(const struct pm_pool_header *h)
{
    if (h->szidx >= 32)
        return 0;
    size_t size = pm_block_size(h), limit = (size_t)h->maxnextoffset + size;
    return limit % PM_HEAD_PAGE == 0 && limit >= PM_HEAD_PAGE && limit <= PM_POOL &&
           h->nextoffset >= sizeof *h && h->nextoffset <= PM_POOL + size &&
           h->nextoffset % 16 == 0;
}

/* Every pool of the arena at a (size bytes) empty or looking right: an
 * arena-sized block that is not an arena (a thread's 1 MiB stack chunk,
 * which also comes from the arena allocator) fails it. A pool's count
 * holds one extra allocation per shared page (python_share.c). */
int pm_arena_looks_right(uintptr_t a, size_t size)
{
    for (uintptr_t p = (a + PM_POOL - 1) & ~(uintptr_t)(PM_POOL - 1); p + PM_POOL <= a + size;
         p += PM_POOL) {
        const struct pm_pool_header *h = (const void *)p;
        if (h->ref.count == 0)
            continue;
        if (!pm_header_looks_right(h))
            return 0;
        unsigned extra = (unsigned)__builtin_popcount(pm_shared_pages(h));
        if (h->ref.count < extra || h->ref.count - extra > (PM_POOL - sizeof *h) / pm_block_size(h))
            return 0;
    }
    return 1;
}

/* With the GIL: the first pool of every tracked arena (pymalloc carves it
 * first) that holds objects looks right, and there is at least one. Only
 * the arenas' own memory is read. Checked once. */
static int pm_layout_ok(const struct py_arena_hook *k)
{
    static int state; /* 0: not checked, 1: fine, -1: not */
    if (state != 0)
        return state == 1;
    int seen = 0;
    for (size_t i = 0; i < k->narenas; i++) {
        uintptr_t a = (uintptr_t)k->arenas[i].p;
        const struct pm_pool_header *h =
            (const void *)((a + PM_POOL - 1) & ~(uintptr_t)(PM_POOL - 1));
        if (h->ref.count == 0)
            continue;
        if (!pm_header_looks_right(h)) {
            state = -1;
            return 0;
        }
        seen++;
    }
    if (seen)
        state = 1;
    return seen > 0;
}

/* ---- blocks nobody can use ------------------------------------------------
 * Page release and page sharing take free blocks off a pool's free list
 * for good (until pymalloc sets the pool up again). Such a block looks
 * allocated (carved, not on the list), so a later pass would count its
 * bytes as live; a block reaching into a released page would keep the page
 * it starts on from being released or shared. Two signs tell them apart:
 * - A block whose first page is not resident (mincore) is not live: every
 *   block pymalloc hands out had its first word written (the list link when
 *   it was carved or freed; the first block of a new pool is on page 0),
 *   and a page is released only when no live block touches it. This holds
 *   while the pool's file pages cannot leave memory: so it is used only
 *   when the arenas' file is on tmpfs (a page of a file on disk can be
 *   written back and dropped) and the system has no swap space (a
 *   swapped-out tmpfs page is not resident either; /proc/swaps, read once
 *   per pass).
 * - A block taken off the list gets a mark in its first 16 bytes (when its
 *   first page stays the pool's own): a value made from a per-process
 *   random secret, the block's address and its size, whose first word is
 *   no pointer (bits 0 and 63 set). pymalloc writes a link (NULL or a
 *   block's address) into the first word of every block it hands out
 *   (carved or freed before), so a block that still holds its mark was not
 *   handed out since it was marked. */
static uint64_t pm_secret[2];
static int pm_noswap;

/* Is the file that maps address a on tmpfs (/proc/self/maps names it;
 * the directory it was in says the file system, even once it is
 * unlinked)? Asked once: the arenas' pool does not change. */
static int pm_on_tmpfs(uintptr_t a)
{
    static int state; /* 0: not asked, 1: tmpfs, -1: not or unknown */
    if (state)
        return state == 1;
    state = -1;
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return 0;
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        int at = 0;
        if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &lo, &hi, &at) < 2 || a < lo || a >= hi)
            continue;
        char *path = line + at, *slash = strrchr(path, '/');
        struct statfs fs;
        if (at && path[0] == '/' && slash) {
            *slash = '\0';
            if (statfs(slash == path ? "/" : path, &fs) == 0 && fs.f_type == TMPFS_MAGIC)
                state = 1;
        }
        break;
    }
    fclose(f);
    return state == 1;
}

void pm_residency_check(uintptr_t a)
{
    FILE *f = fopen("/proc/swaps", "r");
    int lines = 0, c;
    if (f) {
        while ((c = getc(f)) != EOF)
            lines += c == '\n';
        fclose(f);
    }
    pm_noswap = f && lines == 1 && pm_on_tmpfs(a); /* the header only */
}

static void pm_magic(uintptr_t at, size_t size, uint64_t m[2])
{
    if (!pm_secret[0]) {
        if (getrandom(pm_secret, sizeof pm_secret, GRND_NONBLOCK) != (ssize_t)sizeof pm_secret) {
            pm_secret[0] = (uint64_t)(uintptr_t)&pm_secret ^ (uint64_t)getpid() << 32;
            pm_secret[1] = pm_secret[0] * 0x9E3779B97F4A7C15ull;
        }
        pm_secret[0] |= 1;
    }
    m[0] = (pm_secret[0] ^ (at * 0x9E3779B97F4A7C15ull) ^ size) | 0x8000000000000001ull;
    m[1] = pm_secret[1] ^ (at * 0xC2B2AE3D27D4EB4Full);
}

static void pm_mark_dead(char *block, size_t size)
{
    uint64_t m[2];
    pm_magic((uintptr_t)block, size, m);
    memcpy(block, m, sizeof m);
}

unsigned pm_resident(const struct pm_pool_header *h)
{
    unsigned char v[PM_PAGES];
    unsigned bits = 0;
    if (mincore((void *)h, PM_POOL, v) != 0)
        return (1u << PM_PAGES) - 1; /* all resident: no block is dead by it */
    for (size_t p = 0; p < PM_PAGES; p++)
        if (v[p] & 1)
            bits |= 1u << p;
    return bits;
}

int pm_block_dead(const struct pm_pool_header *h, size_t off, size_t size, unsigned resident)
{
    if (!(resident & (1u << (off / PM_HEAD_PAGE))))
        return pm_noswap;
    uint64_t m[2];
    pm_magic((uintptr_t)h + off, size, m);
    return memcmp((const char *)h + off, m, sizeof m) == 0;
}

const struct pm_arena *pm_arenas(size_t *n, int *err)
{
    *n = 0;
    *err = PM_CHECKED ? 0 : FMEM_ENOTSUP;
    struct py_arena_hook *k = arena_hook;
    /* a fork child's arenas are the parent's pages */
    if (!PM_CHECKED || !k || k->pid != getpid() || k->narenas == 0)
        return NULL;
    if (!pm_layout_ok(k)) {
        *err = FMEM_ENOTSUP;
        return NULL;
    }
    *n = k->narenas;
    pm_residency_check((uintptr_t)k->arenas[0].p);
    return k->arenas;
}

/* Run release(h) on every pool of the hooked arenas; the bytes given back
 * in all, or release's error if nothing was given back before it. */
static int64_t pm_each_pool(int64_t (*release)(struct pm_pool_header *h))
{
    size_t n;
    int err;
    const struct pm_arena *ar = pm_arenas(&n, &err);
    if (!ar)
        return err;
    int64_t got = 0;
    for (size_t i = 0; i < n; i++) {
        uintptr_t a = (uintptr_t)ar[i].p, end = a + ar[i].size;
        if (!pm_arena_looks_right(a, ar[i].size))
            continue;
        for (uintptr_t p = (a + PM_POOL - 1) & ~(uintptr_t)(PM_POOL - 1); p + PM_POOL <= end;
             p += PM_POOL) {
            int64_t r = release((struct pm_pool_header *)p);
            if (r < 0)
                return got ? got : r;
            got += r;
        }
    }
    return got;
}

static int64_t pm_release_empty_pool(struct pm_pool_header *h)
{
    /* in use; released before and not used since; never used (a zero
     * header: its pages were never touched either). A pool with a shared
     * page is never empty (its count holds one more). */
    if (h->ref.count != 0 || h->szidx == PM_NO_CLASS || h->nextoffset == 0)
        return 0;
    /* A pool is in its arena's free pools only if its free list has two
     * blocks or more (pymalloc empties a pool there only when the list was
     * not empty before the last free). A pool that was full (off
     * usedpools, as page release can leave one with a single object) goes
     * back to usedpools by that free with count 0 and a one-block list: it
     * is still in use for pymalloc, which reads szidx to relink it. */
    if (!h->freeblock || !*(void *const *)h->freeblock)
        return 0;
    if (madvise((char *)h + PM_HEAD_PAGE, PM_POOL - PM_HEAD_PAGE, MADV_REMOVE) != 0)
        return errno == EINVAL || errno == EOPNOTSUPP ? FMEM_ENOTSUP : FMEM_EIO;
    h->szidx = PM_NO_CLASS;
    return (int64_t)(PM_POOL - PM_HEAD_PAGE);
}

FMEM_API int64_t fmem_hooks_python_release_empty_pools(void)
{
    return pm_each_pool(pm_release_empty_pool);
}

/* ---- free pages of used pools -------------------------------------------
 * A pool that still holds a few objects keeps all 16 KiB. Its pages 1-3
 * (the header's page 0 stays) can go back when no live block lies on them.
 * pymalloc's view of a used pool: blocks below nextoffset were carved and
 * are either allocated or on the free list (freeblock, linked through the
 * first word of each free block, NULL-terminated); blocks from nextoffset
 * up to maxnextoffset were never carved; pymalloc_alloc takes the list's
 * head, carves the next tail block when the list runs out, and unlinks the
 * pool from usedpools as full when neither is left (a full pool has
 * freeblock NULL; the next free relinks it). The list is read first; once
 * pages went (MADV_REMOVE), with no pymalloc call in between:
 * - every free block touching one leaves the free list (the list is rebuilt
 *   from what was read, through the blocks that stay, all on kept pages);
 * - maxnextoffset is lowered so that no tail block reaches it (to the
 *   page's start minus the block size: still "the end of the blocks");
 * - when that leaves no free block and no tail, the pool is unlinked as
 *   full, as pymalloc does; otherwise the list is non-empty (a tail block is
 *   carved onto it if needed), as pymalloc_alloc requires.
 * Blocks taken off the list are neither free nor allocated for pymalloc:
 * they come back when the pool empties and is rebuilt (release_empty_pools
 * resets its size class, as does reuse for another class); a pool reused
 * for the same class before that keeps the shorter list. Such blocks look
 * allocated to a later pass, so their (already released) pages are never
 * released or written again. A block is live when it was carved and is not
 * on the free list; a pool whose list does not check out (off the block
 * grid, a cycle, more free blocks than carved ones) is left alone. Pages
 * shared with another pool (python_share.c) are never released here. */
long pm_read_free_list(const struct pm_pool_header *h, size_t size, unsigned extra,
                       struct pm_free_list *fl)
{
    size_t nblocks = (PM_POOL - PM_OVERHEAD) / size;
    if (h->nextoffset < PM_OVERHEAD || (h->nextoffset - PM_OVERHEAD) % size != 0 ||
        h->ref.count < extra)
        return -1;
    size_t carved = (h->nextoffset - PM_OVERHEAD) / size, count = h->ref.count - extra;
    if (carved > nblocks)
        carved = nblocks;
    memset(fl->isfree, 0, nblocks);
    fl->n = 0;
    for (const char *bp = h->freeblock; bp; bp = *(char *const *)bp) {
        uintptr_t off = (uintptr_t)bp - (uintptr_t)h;
        if (off < PM_OVERHEAD || off >= PM_POOL || (off - PM_OVERHEAD) % size != 0)
            return -1;
        size_t i = (off - PM_OVERHEAD) / size;
        if (i >= carved || fl->isfree[i] || fl->n + 1 + count > carved)
            return -1;
        fl->isfree[i] = 1;
        fl->order[fl->n++] = (uint16_t)i;
    }
    return (long)carved;
}

/* Pages of pool h (a used pool of a checked arena) that no live block
 * touches and no other pool shares: bit p for page p (1-3). Fills *fl. 0
 * when none, or when the pool does not check out. */
static unsigned pm_free_pages(const struct pm_pool_header *h, size_t size,
                              struct pm_free_list *fl)
{
    unsigned shared = pm_shared_pages(h);
    long carved = pm_read_free_list(h, size, (unsigned)__builtin_popcount(shared), fl);
    if (carved < 0)
        return 0;
    /* pages at or past the tail's end (maxnextoffset + size) went before */
    size_t limit = (size_t)h->maxnextoffset + size;
    unsigned dead = 0;
    for (size_t p = 1; p < PM_PAGES && p * PM_HEAD_PAGE < limit; p++)
        dead |= 1u << p;
    dead &= ~shared;
    unsigned resident = dead ? pm_resident(h) : 0;
    for (size_t i = 0; i < (size_t)carved && dead; i++)
        if (!fl->isfree[i] && !pm_block_dead(h, PM_OVERHEAD + i * size, size, resident)) {
            size_t first = (PM_OVERHEAD + i * size) / PM_HEAD_PAGE,
                   last = (PM_OVERHEAD + (i + 1) * size - 1) / PM_HEAD_PAGE;
            for (size_t p = first; p <= last; p++)
                dead &= ~(1u << p);
        }
    return dead;
}

/* Does the block at offset off (size bytes) touch a page of dead? */
static int pm_on_dead_page(size_t off, size_t size, unsigned dead)
{
    for (size_t p = off / PM_HEAD_PAGE; p <= (off + size - 1) / PM_HEAD_PAGE; p++)
        if (dead & (1u << p))
            return 1;
    return 0;
}

/* The end of the carvable tail once the pages of dead are gone: the first
 * of them that the tail reaches. */
static size_t pm_tail_limit(const struct pm_pool_header *h, size_t size, unsigned dead)
{
    size_t limit = (size_t)h->maxnextoffset + size;
    for (size_t p = 1; p < PM_PAGES; p++)
        if ((dead & (1u << p)) && (p + 1) * PM_HEAD_PAGE > h->nextoffset)
            return p * PM_HEAD_PAGE < limit ? p * PM_HEAD_PAGE : limit;
    return limit;
}

/* Would the pool be left with no free block and no tail? */
static int pm_left_full(const struct pm_pool_header *h, size_t size, unsigned dead,
                        const struct pm_free_list *fl)
{
    for (size_t j = 0; j < fl->n; j++)
        if (!pm_on_dead_page(PM_OVERHEAD + fl->order[j] * size, size, dead))
            return 0;
    return h->nextoffset + size > pm_tail_limit(h, size, dead);
}

int pm_unlink_unsafe(const struct pm_pool_header *h, size_t size, unsigned gone,
                     const struct pm_free_list *fl)
{
    if (!h->freeblock || !pm_left_full(h, size, gone, fl))
        return 0;
    const struct pm_pool_header *prev = h->prevpool, *next = h->nextpool;
    return !prev || !next || prev->nextpool != h || next->prevpool != h;
}

void pm_drop_pages(struct pm_pool_header *h, size_t size, unsigned gone,
                   const struct pm_free_list *fl)
{
    int was_linked = h->freeblock != NULL;
    size_t limit = pm_tail_limit(h, size, gone);
    unsigned foreign = gone | pm_shared_pages(h); /* no marks written there */
    void **link = &h->freeblock;
    for (size_t j = 0; j < fl->n; j++) {
        size_t off = PM_OVERHEAD + fl->order[j] * size;
        if (!pm_on_dead_page(off, size, gone)) {
            *link = (char *)h + off;
            link = (void **)((char *)h + off);
        } else if (!(foreign & (1u << (off / PM_HEAD_PAGE)))) {
            pm_mark_dead((char *)h + off, size);
        }
    }
    *link = NULL;
    h->maxnextoffset = (unsigned)(limit - size);
    if (h->freeblock || !was_linked)
        return;
    if (h->nextoffset + size <= limit) { /* carve one, as pymalloc would */
        h->freeblock = (char *)h + h->nextoffset;
        h->nextoffset += (unsigned)size;
        *(void **)h->freeblock = NULL;
        return;
    }
    struct pm_pool_header *prev = h->prevpool, *next = h->nextpool; /* full */
    next->prevpool = prev;
    prev->nextpool = next;
}

/* With the GIL: release the pages of one used pool that hold no live
 * block. Nothing in the pool changes unless a page was released. Bytes
 * given back, or a negative FMEM error when none could be. */
static int64_t pm_release_pool_pages(struct pm_pool_header *h)
{
    static struct pm_free_list fl; /* with the GIL */
    size_t size = pm_block_size(h);
    unsigned dead = pm_free_pages(h, size, &fl);
    if (!dead)
        return 0;
    /* a pool that may end up unlinked: its neighbours must link to it */
    if (pm_unlink_unsafe(h, size, dead, &fl))
        return 0;
    unsigned gone = 0;
    int err = 0;
    for (size_t p = 1; p < PM_PAGES && !err; p++)
        if (dead & (1u << p)) {
            if (madvise((char *)h + p * PM_HEAD_PAGE, PM_HEAD_PAGE, MADV_REMOVE) == 0)
                gone |= 1u << p;
            else
                err = errno;
        }
    if (!gone)
        return err == EINVAL || err == EOPNOTSUPP ? FMEM_ENOTSUP : FMEM_EIO;
    pm_drop_pages(h, size, gone, &fl);
    return (int64_t)__builtin_popcount(gone) * (int64_t)PM_HEAD_PAGE;
}

static int64_t pm_release_used_pool(struct pm_pool_header *h)
{
    /* empty pools: release_empty_pools */
    return h->ref.count == 0 ? 0 : pm_release_pool_pages(h);
}

FMEM_API int64_t fmem_hooks_python_release_free_pages(void)
{
    return pm_each_pool(pm_release_used_pool);
}
