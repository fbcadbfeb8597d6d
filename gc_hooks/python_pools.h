/* python_pools.h - pymalloc's pool layout (CPython 3.11, Objects/obmalloc.c,
 * not in the installed headers) and the pool walks python.c and
 * python_share.c share. Everything here runs with the GIL held. */
#ifndef FMEM_GC_HOOKS_PYTHON_POOLS_H
#define FMEM_GC_HOOKS_PYTHON_POOLS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000 && SIZEOF_VOID_P == 8
#define PM_CHECKED 1
#else
#define PM_CHECKED 0
#endif
#define PM_POOL ((size_t)16384)
#define PM_HEAD_PAGE ((size_t)4096)
#define PM_PAGES (PM_POOL / PM_HEAD_PAGE)
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

#define PM_OVERHEAD sizeof(struct pm_pool_header) /* the first block's offset */
#define PM_MAX_BLOCKS ((PM_POOL - PM_OVERHEAD) / 16)

/* A used pool's free list as read before anything changes: the blocks'
 * indexes in list order, and which blocks are free. */
struct pm_free_list {
    size_t n;
    uint16_t order[PM_MAX_BLOCKS];
    unsigned char isfree[PM_MAX_BLOCKS];
};

static inline size_t pm_block_size(const struct pm_pool_header *h)
{
    return ((size_t)h->szidx + 1) * 16;
}

/* Read pool h's free list into *fl and check it (on the block grid, no
 * cycle, no more free blocks than carved ones once the count's extra
 * allocations, `extra`, are taken off). The carved blocks, or -1. */
long pm_read_free_list(const struct pm_pool_header *h, size_t size, unsigned extra,
                       struct pm_free_list *fl);

/* The free list is rebuilt without the blocks touching a page of gone (a
 * bit per page), the tail is cut before the first of them it reaches, and
 * a pool in usedpools keeps a free block (or is unlinked as full). */
void pm_drop_pages(struct pm_pool_header *h, size_t size, unsigned gone,
                   const struct pm_free_list *fl);

/* Would pm_drop_pages(h, size, gone, fl) unlink h as full, and are its
 * neighbours' links then not as pymalloc left them? 1: do not touch. */
int pm_unlink_unsafe(const struct pm_pool_header *h, size_t size, unsigned gone,
                     const struct pm_free_list *fl);

/* Pages of pool h that are resident (bit p for page p). */
unsigned pm_resident(const struct pm_pool_header *h);
/* Is the carved block at off (not on the free list) one nobody can use
 * (python.c, "blocks nobody can use")? resident: pm_resident(h). */
int pm_block_dead(const struct pm_pool_header *h, size_t off, size_t size, unsigned resident);
/* Whether a block whose first page is not resident is not live: the
 * arenas' file (the one mapping a) is on tmpfs and the system has no swap
 * space. Asked once per pass (pm_arenas). */
void pm_residency_check(uintptr_t a);

/* The arenas the arena hook placed in far memory, checked (NULL and 0
 * when there are none, in a fork child, or the layout is not the one
 * checked: *err then says FMEM_ENOTSUP, else 0). */
struct pm_arena {
    char *p;
    size_t size;
};
const struct pm_arena *pm_arenas(size_t *n, int *err);
/* Every pool of the arena at a (size bytes) empty or looking right. */
int pm_arena_looks_right(uintptr_t a, size_t size);

/* ---- shared pages (python_share.c) ---- */
/* Pages of pool h that share a physical page with another pool's page
 * (bit p for page p). Each one counts one extra allocation in h's count. */
unsigned pm_shared_pages(const struct pm_pool_header *h);
/* The arena at p (size bytes) is freed: pages of other arenas sharing its
 * pages get memory of their own first. */
void pm_share_arena_gone(char *p, size_t size);

#endif
