/* protocol.h - internals shared by the two layers of the allocation
 * protocol (chunk_layer.c, section_layer.c) and its front end (alloc.c). */
#ifndef FMEM_PROTOCOL_H
#define FMEM_PROTOCOL_H

#include "node.h"

static inline uint64_t cache_get(_Atomic uint64_t *c, uint64_t i)
{
    return atomic_load_explicit(&c[i], memory_order_relaxed);
}
static inline void cache_put(_Atomic uint64_t *c, uint64_t i, uint64_t v)
{
    atomic_store_explicit(&c[i], v, memory_order_relaxed);
}

/* 2-bit retry level recorded with each commit: how contended it was. */
static inline unsigned retry_level(unsigned fails)
{
    return fails < RETRY_LOW ? 0 : fails <= RETRY_HIGH ? 1 : 2;
}

/* Where this thread starts searching on node n (spreads threads apart). */
uint64_t home_section(const struct node *n);
uint64_t *span_hint(const struct node *n);

/* chunk_layer.c: blocks of 1..16 chunks inside one span */
int chunk_alloc(struct node *n, unsigned k, uint64_t *chunk, unsigned *fails);
/* seen: the span header as the caller just read it (saves a round trip;
 * a stale value only costs a failed CAS), or NULL. */
int chunk_free(struct node *n, uint64_t chunk, unsigned k, unsigned uid, const uint64_t *seen);
/* Move empty attached spans back to the section layer. Returns how many. */
unsigned chunk_release_empty(struct node *n, unsigned max);
/* Finish or undo a claim left by `uid` on span s (recovery). */
void chunk_clear_claim(struct node *n, uint64_t s, unsigned uid);

/* section_layer.c: blocks of 1..16 spans, and runs of whole sections */
int span_alloc(struct node *n, unsigned q, uint64_t *chunk, unsigned *fails);
int span_free(struct node *n, uint64_t chunk, unsigned q, unsigned uid, const uint64_t *seen);
int multi_alloc(struct node *n, unsigned p, uint64_t *chunk, unsigned *fails);
int multi_free(struct node *n, uint64_t chunk, unsigned p, unsigned uid);
/* Free one section of a multi-section block (recovery); `p` is what its log
 * entry records: log2 of the block's sections for the first part, else 0. */
int multi_free_part(struct node *n, uint64_t x, unsigned p, unsigned uid);

#endif
