/* heap_pagemap.c - which slab or large object a pointer belongs to: a
 * two-level table indexed by the 4 KiB page number (48-bit addresses).
 * Both levels are reserved with MAP_NORESERVE, so memory is spent only on
 * the table pages that cover used addresses (8 B per 4 KiB page). A lookup
 * is two dependent loads and never touches object memory, which matters
 * for heaps inside a region. Pointers not in the table are foreign. */
#include <sys/mman.h>

#include "heap_internal.h"

#define TOP_ENTRIES ((size_t)1 << PM_TOP_BITS)
#define LEAF_ENTRIES ((size_t)1 << PM_LEAF_BITS)

static void *reserve(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

int pagemap_init(struct pagemap *pm)
{
    pm->top = reserve(TOP_ENTRIES * sizeof *pm->top);
    pm->made = reserve(TOP_ENTRIES / 8);
    return pm->top && pm->made ? 0 : FMEM_ENOMEM;
}

void pagemap_destroy(struct pagemap *pm)
{
    if (pm->top && pm->made)
        for (size_t w = 0; w < TOP_ENTRIES / 64; w++)
            for (uint64_t bits = atomic_load(&pm->made[w]); bits; bits &= bits - 1) {
                size_t i = w * 64 + (size_t)__builtin_ctzll(bits);
                munmap(atomic_load(&pm->top[i]), LEAF_ENTRIES * sizeof(_Atomic(struct slab *)));
            }
    if (pm->top)
        munmap(pm->top, TOP_ENTRIES * sizeof *pm->top);
    if (pm->made)
        munmap((void *)pm->made, TOP_ENTRIES / 8);
    pm->top = NULL;
    pm->made = NULL;
}

static _Atomic(struct slab *) *leaf_for(struct pagemap *pm, uintptr_t a)
{
    _Atomic(_Atomic(struct slab *) *) *slot = &pm->top[a >> (12 + PM_LEAF_BITS)];
    _Atomic(struct slab *) *leaf = atomic_load_explicit(slot, memory_order_acquire);
    if (leaf)
        return leaf;
    _Atomic(struct slab *) *fresh = reserve(LEAF_ENTRIES * sizeof *fresh);
    if (!fresh)
        return NULL;
    if (!atomic_compare_exchange_strong(slot, &leaf, fresh)) {
        munmap(fresh, LEAF_ENTRIES * sizeof *fresh); /* another thread won */
        return leaf;
    }
    size_t i = a >> (12 + PM_LEAF_BITS);
    atomic_fetch_or(&pm->made[i / 64], (uint64_t)1 << (i % 64));
    return fresh;
}

int pagemap_set(struct pagemap *pm, const void *start, size_t len, struct slab *s)
{
    uintptr_t a = (uintptr_t)start & ~(uintptr_t)(HEAP_PAGE - 1), end = (uintptr_t)start + len;
    if (end >> 48)
        return FMEM_EINVAL;
    for (; a < end; a += HEAP_PAGE) {
        _Atomic(struct slab *) *leaf = leaf_for(pm, a);
        if (!leaf)
            return FMEM_ENOMEM;
        atomic_store_explicit(&leaf[(a >> 12) & (LEAF_ENTRIES - 1)], s, memory_order_release);
    }
    return 0;
}
