/* python.c - CPython's allocator domains and pymalloc's arena allocator on
 * a binding. A hook installed while the interpreter runs must wrap the
 * allocator it replaces (the C API's rule): pointers the heap does not own
 * go to the saved one. Only the public fmem_hooks API is used here. */
#define PY_SSIZE_T_CLEAN
#include "fmem_hooks_python.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
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
    struct py_arena {
        char *p;
        size_t size;
    } *arenas;
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
        struct py_arena *a = realloc(k->arenas, cap * sizeof *a);
        if (!a)
            return p;
        k->arenas = a;
        k->cap = cap;
    }
    k->arenas[k->narenas++] = (struct py_arena){p, size};
    return p;
}

static void arena_free(void *ctx, void *p, size_t size)
{
    struct py_arena_hook *k = ctx;
    if (!p)
        return;
    for (size_t i = k->narenas; i-- > 0;)
        if (k->arenas[i].p == p) {
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
 * Layout: Objects/obmalloc.c of CPython 3.11 (not in the installed
 * headers), checked at run time against the arenas' pools before the
 * first use. */
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
#define PM_CHECKED 1
#else
#define PM_CHECKED 0
#endif
#define PM_POOL ((size_t)16384)
#define PM_HEAD_PAGE ((size_t)4096)
#define PM_NO_CLASS 0xffffu /* DUMMY_SIZE_IDX */

struct pm_pool_header {
    union {
        void *padding;
        unsigned count; /* allocated blocks */
    } ref;
    void *freeblock;
    void *nextpool, *prevpool;
    unsigned arenaindex, szidx, nextoffset, maxnextoffset;
};

/* Does an initialized pool's header look as the 3.11 layout says (a size
 * class below 512 bytes, the end of its blocks where that class puts it)? */
static int pm_header_looks_right(const struct pm_pool_header *h)
{
    if (h->szidx >= 32)
        return 0;
    size_t size = ((size_t)h->szidx + 1) * 16;
    return h->maxnextoffset == PM_POOL - size && h->nextoffset >= sizeof *h &&
           h->nextoffset <= PM_POOL + size && h->nextoffset % 16 == 0;
}

/* Every pool of the arena at a (size bytes) empty or looking right: an
 * arena-sized block that is not an arena (a thread's 1 MiB stack chunk,
 * which also comes from the arena allocator) fails it. */
static int pm_arena_looks_right(uintptr_t a, size_t size)
{
    for (uintptr_t p = (a + PM_POOL - 1) & ~(uintptr_t)(PM_POOL - 1); p + PM_POOL <= a + size;
         p += PM_POOL) {
        const struct pm_pool_header *h = (const void *)p;
        if (h->ref.count != 0 &&
            (!pm_header_looks_right(h) ||
             h->ref.count > (PM_POOL - sizeof *h) / (((size_t)h->szidx + 1) * 16)))
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

FMEM_API int64_t fmem_hooks_python_release_empty_pools(void)
{
    if (!PM_CHECKED)
        return FMEM_ENOTSUP;
    struct py_arena_hook *k = arena_hook;
    /* a fork child's arenas are the parent's pages */
    if (!k || k->pid != getpid() || k->narenas == 0)
        return 0;
    if (!pm_layout_ok(k))
        return FMEM_ENOTSUP;
    int64_t got = 0;
    for (size_t i = 0; i < k->narenas; i++) {
        uintptr_t a = (uintptr_t)k->arenas[i].p, end = a + k->arenas[i].size;
        if (!pm_arena_looks_right(a, k->arenas[i].size))
            continue;
        for (uintptr_t p = (a + PM_POOL - 1) & ~(uintptr_t)(PM_POOL - 1); p + PM_POOL <= end;
             p += PM_POOL) {
            struct pm_pool_header *h = (void *)p;
            /* in use; released before and not used since; never used (a
             * zero header: its pages were never touched either) */
            if (h->ref.count != 0 || h->szidx == PM_NO_CLASS || h->nextoffset == 0)
                continue;
            if (madvise((char *)p + PM_HEAD_PAGE, PM_POOL - PM_HEAD_PAGE, MADV_REMOVE) != 0)
                return got ? got : (errno == EINVAL || errno == EOPNOTSUPP ? FMEM_ENOTSUP : FMEM_EIO);
            h->szidx = PM_NO_CLASS;
            got += (int64_t)(PM_POOL - PM_HEAD_PAGE);
        }
    }
    return got;
}
