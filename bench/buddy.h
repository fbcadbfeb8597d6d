/* buddy.h - a binary buddy allocator over chunk indices: the metadata the
 * RPC baseline's server keeps in its local memory. Not thread-safe: only
 * the server thread touches it. */
#ifndef FMEM_BENCH_BUDDY_H
#define FMEM_BENCH_BUDDY_H

#include <stdint.h>

#define BUDDY_MAX_ORDER 40

struct buddy {
    uint64_t nchunks;
    unsigned max_order;
    int64_t head[BUDDY_MAX_ORDER + 1]; /* free lists, -1: empty */
    int64_t *next, *prev;              /* per chunk, for free block heads */
    uint8_t *free_order;  /* per chunk: order + 1 if a free block starts here */
    uint8_t *used_order;  /* per chunk: order + 1 if an allocation starts here */
};

int buddy_init(struct buddy *b, uint64_t nchunks);
void buddy_destroy(struct buddy *b);
/* First chunk of a free block of 2^order chunks, or -1. */
int64_t buddy_alloc(struct buddy *b, unsigned order);
/* 0, or -1 if (chunk, order) is not a live allocation. */
int buddy_free(struct buddy *b, uint64_t chunk, unsigned order);

#endif
