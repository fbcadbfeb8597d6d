/* lobj.c - large objects made of several pool blocks mapped side by side
 * (lobj.h describes the three ways and the guarantees). */
#include "lobj.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "node.h"
#include "pool_internal.h"
#include "transport.h"

#define PAGE ((size_t)4096)
#define MAX_SIZE ((size_t)1 << 46)
#define PLAN_BITS 6 /* leading bits of the page count kept: slack < 2^-5 */
#define RESERVE_MIN ((size_t)2 << 20)
#define SINGLE_MAX ((size_t)128 << 10) /* a span: one block up to here */

unsigned lobj_plan(size_t size, size_t sizes[LOBJ_PLAN_MAX])
{
    if (size == 0 || size > MAX_SIZE)
        return 0;
    uint64_t pages = (size + PAGE - 1) / PAGE;
    unsigned top = 63u - (unsigned)__builtin_clzll(pages);
    if (top >= PLAN_BITS) {
        uint64_t g = (uint64_t)1 << (top - (PLAN_BITS - 1));
        pages = (pages + g - 1) & ~(g - 1);
    }
    unsigned n = 0; /* the set bits, highest first (a loop over all 64
                     * bits was a sixth of an allocate-free pair) */
    while (pages && n < LOBJ_PLAN_MAX) {
        unsigned b = 63u - (unsigned)__builtin_clzll(pages);
        sizes[n++] = (size_t)1 << b << 12;
        pages &= ~((uint64_t)1 << b);
    }
    return n;
}

/* How blocks of this pool can be mapped in pieces; *fd for ALIAS. */
static enum lobj_mode mode_of(fmem_pool *pool, const fmem_handle *h, int *fd)
{
    struct node *n;
    uint64_t chunk;
    unsigned k;
    *fd = -1;
    if (pool_resolve(pool, h, &n, &chunk, &k) != 0 || !n->tp->base || !n->tp->name ||
        strcmp(n->tp->name, "shm") != 0)
        return LOBJ_SINGLE;
    if (!shm_transport_shared(n->tp))
        return LOBJ_MOVE;
    *fd = shm_transport_data_fd(n->tp);
    return *fd >= 0 ? LOBJ_ALIAS : LOBJ_SINGLE;
}

static void *reserve(size_t len)
{
    void *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* Put a range back into the reservation (no memory, no access). */
static void unreserve_range(char *at, size_t len)
{
    mmap(at, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
}

/* Map block b at `at` in the object's mode. 0 or FMEM_E*. */
static int map_block(fmem_pool *pool, enum lobj_mode mode, struct lobj_block *b, char *at)
{
    void *home;
    int rc = fmem_map(pool, &b->h, &home);
    if (rc)
        return rc;
    size_t len = b->h.length;
    if (mode == LOBJ_ALIAS) {
        struct node *n;
        uint64_t chunk;
        unsigned k;
        if (pool_resolve(pool, &b->h, &n, &chunk, &k))
            return FMEM_EBADHANDLE;
        /* the data file is mapped right after the metadata (libfmem/transport/shm.c) */
        uint64_t off = (uint64_t)((char *)home - ((char *)n->tp->base + n->tp->meta_size));
        if (mmap(at, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, b->fd, (off_t)off) ==
            MAP_FAILED)
            return FMEM_EIO;
        return 0;
    }
    if (mremap(home, len, len, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP, at) == MAP_FAILED)
        return FMEM_EIO;
    return 0;
}

static void free_blocks(fmem_pool *pool, struct lobj_block *b, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        fmem_free(pool, &b[i].h);
}

/* Allocate blocks of the planned sizes into b[*n..]; a size the pool
 * cannot give whole is asked for as two halves while the list has room.
 * Returns 0 or the pool's error (the new blocks freed again). */
static int take_blocks(fmem_pool *pool, const size_t *sizes, unsigned k, struct lobj_block *b,
                       unsigned *n)
{
    size_t todo[LOBJ_MAX_BLOCKS];
    unsigned nt = 0, first = *n;
    for (unsigned i = k; i-- > 0;) /* a stack: largest on top */
        todo[nt++] = sizes[i];
    int rc = 0;
    while (nt > 0) {
        size_t s = todo[--nt];
        if (*n >= LOBJ_MAX_BLOCKS) {
            rc = FMEM_ENOMEM;
            break;
        }
        rc = fmem_alloc(pool, s, &b[*n].h);
        if (rc == 0) {
            b[(*n)++].fd = -1;
            continue;
        }
        if ((rc != FMEM_ENOMEM && rc != FMEM_ESIZE) || s <= PAGE || nt + 2 > LOBJ_MAX_BLOCKS ||
            *n + nt + 2 > LOBJ_MAX_BLOCKS)
            break;
        todo[nt++] = s / 2; /* two halves, in address order */
        todo[nt++] = s / 2;
        rc = 0;
    }
    if (rc) {
        free_blocks(pool, b + first, *n - first);
        *n = first;
    }
    return rc;
}

/* The old way: one block holding size (+ align), mapped where the pool is. */
static int alloc_single(fmem_pool *pool, size_t size, size_t align, struct lobj *o)
{
    size_t extra = align > PAGE ? align : 0;
    int rc;
    void *home;
    /* a pool may mix nodes whose blocks cannot be mapped (ssd:, zmem:):
     * the next allocation goes to the next node */
    for (int tries = 0;; tries++) {
        if ((rc = fmem_alloc(pool, size + extra, &o->b[0].h)) != 0)
            return rc;
        if ((rc = fmem_map(pool, &o->b[0].h, &home)) == 0)
            break;
        fmem_free(pool, &o->b[0].h);
        if (rc != FMEM_ENOTSUP || tries + 1 >= 64)
            return rc;
    }
    o->b[0].fd = -1;
    o->n = 1;
    o->mode = LOBJ_SINGLE;
    o->held = o->b[0].h.length;
    o->ptr = extra ? (char *)(((uintptr_t)home + align - 1) & ~(uintptr_t)(align - 1)) : home;
    o->len = (size_t)((char *)home + o->held - o->ptr);
    return 0;
}

int lobj_alloc(fmem_pool *pool, size_t size, size_t align, struct lobj *o)
{
    if (!o)
        return FMEM_EINVAL;
    memset(o, 0, sizeof *o);
    if (!pool || (align & (align - 1)) || align > MAX_SIZE)
        return FMEM_EINVAL;
    size_t sizes[LOBJ_PLAN_MAX];
    unsigned k = lobj_plan(size, sizes);
    if (k == 0)
        return size ? FMEM_ENOMEM : FMEM_EINVAL;
    /* Up to a span, or when one block is the whole plan, the pool's own
     * mapping of one block wastes at most what rounding to a span costs
     * and needs no system call: 0.3-0.6 us against 15-30 us for a range
     * of its own (bench/fmem-lobjbench). */
    if ((size <= SINGLE_MAX || k == 1) && align <= PAGE)
        return alloc_single(pool, size, align, o);
    unsigned n = 0;
    int rc = take_blocks(pool, sizes, k, o->b, &n);
    if (rc)
        return rc;
    int fd;
    enum lobj_mode mode = mode_of(pool, &o->b[0].h, &fd);
    size_t held = 0;
    for (unsigned i = 0; i < n; i++) {
        int f;
        if (mode_of(pool, &o->b[i].h, &f) != mode)
            mode = LOBJ_SINGLE;
        o->b[i].fd = f;
        held += o->b[i].h.length;
    }
    if (mode == LOBJ_SINGLE && n == 1 && align <= PAGE) { /* one block is all it takes */
        void *home;
        if ((rc = fmem_map(pool, &o->b[0].h, &home)) != 0) {
            free_blocks(pool, o->b, n);
            memset(o, 0, sizeof *o);
            if (rc != FMEM_ENOTSUP)
                return rc;
            if ((rc = alloc_single(pool, size, align, o)) != 0) /* from a mapped node */
                memset(o, 0, sizeof *o);
            return rc;
        }
        o->b[0].fd = -1;
        o->n = 1;
        o->held = o->len = held;
        o->ptr = home;
        return 0;
    }
    if (mode != LOBJ_SINGLE) {
        /* 2 MiB aligned when that large: the pages of huge-page pools
         * then move (and map) a page-table entry per 2 MiB */
        size_t a = align > PAGE ? align : held >= RESERVE_MIN ? RESERVE_MIN : PAGE;
        size_t res_len = (held < RESERVE_MIN ? RESERVE_MIN : held) + held + a - PAGE;
        char *res = reserve(res_len);
        if (res) {
            char *ptr = (char *)(((uintptr_t)res + a - 1) & ~(uintptr_t)(a - 1));
            size_t off = 0;
            unsigned i = 0;
            for (; i < n; i++) {
                if (map_block(pool, mode, &o->b[i], ptr + off))
                    break;
                off += o->b[i].h.length;
            }
            if (i == n) {
                o->ptr = ptr;
                o->len = o->held = held;
                o->res = res;
                o->res_len = res_len;
                o->mode = (uint8_t)mode;
                o->n = (uint8_t)n;
                return 0;
            }
            munmap(res, res_len); /* e.g. a hugetlbfs file: no 4 KiB pieces */
        }
    }
    free_blocks(pool, o->b, n);
    memset(o, 0, sizeof *o);
    rc = alloc_single(pool, size, align, o);
    if (rc)
        memset(o, 0, sizeof *o);
    return rc;
}

/* Move the mapped blocks to a new reservation of res_len bytes. */
static int relocate(struct lobj *o, size_t res_len)
{
    uintptr_t align = (uintptr_t)1 << __builtin_ctzll((unsigned long long)(uintptr_t)o->ptr);
    if (align > ((uintptr_t)1 << 30))
        align = (uintptr_t)1 << 30;
    if (align < PAGE)
        align = PAGE;
    char *res = reserve(res_len + align - PAGE);
    if (!res)
        return FMEM_ENOMEM;
    char *ptr = (char *)(((uintptr_t)res + align - 1) & ~(align - 1));
    size_t off = 0;
    for (unsigned i = 0; i < o->n; i++) {
        size_t len = o->b[i].h.length;
        if (mremap(o->ptr + off, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, ptr + off) ==
            MAP_FAILED) {
            /* put back what moved (cannot fail for lack of room: the old
             * places are free again) */
            for (size_t back = 0, j = 0; j < i; j++) {
                size_t l = o->b[j].h.length;
                mremap(ptr + back, l, l, MREMAP_MAYMOVE | MREMAP_FIXED, o->ptr + back);
                back += l;
            }
            munmap(res, res_len + align - PAGE);
            return FMEM_ENOMEM;
        }
        off += len;
    }
    munmap(o->res, o->res_len);
    o->res = res;
    o->res_len = res_len + align - PAGE;
    o->ptr = ptr;
    return 0;
}

/* Make room for `need` bytes from o->ptr: widen the reservation in place
 * or (may_move) move. */
static int make_room(struct lobj *o, size_t need, int may_move)
{
    char *end = o->res + o->res_len;
    if (o->ptr + need <= end)
        return 0;
    size_t want = need + need / 2 - (size_t)(end - o->ptr);
    void *got = mmap(end, want, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (got == end) {
        o->res_len += want;
        return 0;
    }
    if (got != MAP_FAILED)
        munmap(got, want); /* a kernel that took it as a hint */
    return may_move ? relocate(o, need + need / 2) : FMEM_ENOMEM;
}

int lobj_resize(fmem_pool *pool, struct lobj *o, size_t size, int may_move)
{
    if (!pool || !o || o->n == 0 || size == 0 || size > MAX_SIZE)
        return FMEM_EINVAL;
    if (o->mode == LOBJ_SINGLE)
        return size <= o->len ? 0 : FMEM_ENOMEM;
    size_t need = (size + PAGE - 1) & ~(PAGE - 1);
    if (need <= o->held) { /* give back whole trailing blocks */
        while (o->n > 1 && o->held - o->b[o->n - 1].h.length >= need) {
            struct lobj_block *b = &o->b[o->n - 1];
            size_t len = b->h.length;
            o->held -= len;
            unreserve_range(o->ptr + o->held, len);
            fmem_free(pool, &b->h);
            o->n--;
        }
        o->len = o->held;
        return 0;
    }
    size_t sizes[LOBJ_PLAN_MAX];
    unsigned k = lobj_plan(need - o->held, sizes);
    if (k == 0 || o->n + k > LOBJ_MAX_BLOCKS)
        return FMEM_ENOMEM;
    /* blocks first: a failure then leaves the object where it was */
    unsigned n = o->n, first = n;
    int rc = take_blocks(pool, sizes, k, o->b, &n);
    if (rc)
        return rc == FMEM_ESIZE ? FMEM_ENOMEM : rc;
    size_t grown = 0;
    for (unsigned i = first; i < n; i++) {
        int fd;
        if (mode_of(pool, &o->b[i].h, &fd) != o->mode)
            rc = FMEM_ENOMEM;
        o->b[i].fd = fd;
        grown += o->b[i].h.length;
    }
    if (rc || (rc = make_room(o, o->held + grown, may_move)) != 0) {
        free_blocks(pool, o->b + first, n - first);
        return rc;
    }
    /* from here a failure may leave the object moved (o->ptr), never lost */
    size_t off = o->held;
    for (unsigned i = first; i < n; i++) {
        if ((rc = map_block(pool, (enum lobj_mode)o->mode, &o->b[i], o->ptr + off)) != 0)
            break;
        off += o->b[i].h.length;
    }
    if (rc) {
        unreserve_range(o->ptr + o->held, off - o->held);
        free_blocks(pool, o->b + first, n - first);
        return rc;
    }
    o->n = (uint8_t)n;
    o->held = o->len = off;
    return 0;
}

void lobj_free(fmem_pool *pool, struct lobj *o)
{
    if (!o || o->n == 0)
        return;
    if (o->res)
        munmap(o->res, o->res_len);
    free_blocks(pool, o->b, o->n);
    memset(o, 0, sizeof *o);
}

int lobj_fork_child(struct lobj *o)
{
    if (!o || o->mode != LOBJ_ALIAS)
        return 0;
    size_t off = 0;
    int rc = 0;
    for (unsigned i = 0; i < o->n; i++) {
        size_t len = o->b[i].h.length;
        char *at = o->ptr + off;
        off += len;
        if (o->b[i].fd < 0)
            continue;
        void *copy = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (copy == MAP_FAILED) {
            rc = FMEM_EIO;
            continue;
        }
        memcpy(copy, at, len);
        if (mremap(copy, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, at) == MAP_FAILED) {
            munmap(copy, len);
            rc = FMEM_EIO;
            continue;
        }
        o->b[i].fd = -1;
    }
    return rc;
}
