/* own.h - which blocks one application holds: an open-addressing hash
 * table keyed by (node, first chunk), with the block's size and key. */
#ifndef FMEM_SVC_OWN_H
#define FMEM_SVC_OWN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct own_entry {
    uint64_t key; /* 0 empty, 1 deleted, else own_key() */
    uint32_t rkey;        /* the block's key in the pool's key table */
    uint32_t app_rkey;    /* the key its holder was given: rkey, or over
                           * type-2B windows that of a window bound to the
                           * holder's queue pair (fmemd, daemon_worker.c) */
    uint8_t log2_chunks;
    bool bound2;          /* app_rkey is a type-2B window to invalidate */
};

struct own_table {
    struct own_entry *e;
    size_t cap, used, tomb; /* cap: power of two */
};

static inline uint64_t own_key(unsigned node, uint64_t chunk)
{
    return ((uint64_t)node << 48 | chunk) + 2;
}
static inline unsigned own_node(uint64_t key) { return (unsigned)((key - 2) >> 48); }
static inline uint64_t own_chunk(uint64_t key) { return (key - 2) & ((UINT64_C(1) << 48) - 1); }

/* false: out of memory */
bool own_put(struct own_table *t, uint64_t key, uint32_t rkey, unsigned log2_chunks);
struct own_entry *own_get(struct own_table *t, uint64_t key);
void own_del(struct own_table *t, struct own_entry *e);
void own_free(struct own_table *t);

#endif
