/* heap_compact.h - compaction of compactable pool heaps (heap_compact.c).
 *
 * A compactable heap gives every slab an address of its own (a "slot" in
 * address space the heap reserves), mapped onto the slab's pool chunk with
 * mremap(old_size = 0), which makes a second mapping of the same shared
 * pages. Merging slab B into slab A (same class, disjoint live offsets)
 * copies B's live objects into A's chunk at the same offsets, maps B's slot
 * onto A's chunk, and frees B's chunk. B's descriptor stays as an alias
 * (kind SLAB_ALIAS, `into` = A, thread_free = TF_FORWARD): the page map
 * still leads B's addresses to it, and a free there is turned into a free
 * of the same offset in A. docs/far-memory.md, "compaction", describes the
 * protocol against concurrent frees. */
#ifndef FMEM_FAR_HEAP_COMPACT_H
#define FMEM_FAR_HEAP_COMPACT_H

#include "heap_internal.h"

struct heap_compact;

/* A slab backed page by page (span.pb): compaction gave back the chunk of
 * a slab with empty pages, and each page that holds live objects maps a
 * 4 KiB pool block of its own; a page without a block shows a read-only
 * zero page and is out of the page map, and an object is handed out only
 * if all its pages have a block. Such a slab can take a page of another
 * slab onto a page that has no block yet (a block is then taken for it). */
struct slab_pages {
    uint16_t backed; /* bit per page with a block */
    fmem_handle h[SLAB_SIZE / HEAP_PAGE];
    char *src[SLAB_SIZE / HEAP_PAGE]; /* the block in the pool's mapping */
};

/* fmem_heap_new_compactable: set up (and check that the pool's chunks can
 * be mapped twice: FMEM_ENOTSUP if not). */
int compact_init(struct fmem_heap *h, const fmem_compact_policy *policy);
void compact_destroy(struct fmem_heap *h);

/* The slab backend of a compactable heap (heap_backend.c). */
int compact_slot_get(struct fmem_heap *h, struct span *out);
void compact_slot_put(struct fmem_heap *h, struct span *sp);

int compact_random_placement(const struct fmem_heap *h);
/* slab_extend for randomized slabs: every object not yet handed out goes
 * on the free list, in random order. */
void compact_extend_random(struct slab *s);

/* A pointer into an alias: the survivor, *p moved into its range (the
 * same offset for a whole-slab alias; for a page alias the same offset in
 * the survivor's page that the alias's page maps), or NULL (a page of a
 * page alias that holds no object). */
static inline struct slab *compact_resolve(struct slab *alias, void **p)
{
    size_t off = (size_t)((char *)*p - alias->start);
    if (!alias->paged) {
        *p = alias->into->start + off;
        return alias->into;
    }
    size_t pg = off / HEAP_PAGE;
    struct slab *a = alias->page_into[pg];
    if (a)
        *p = a->start + (size_t)alias->page_at[pg] * HEAP_PAGE + off % HEAP_PAGE;
    return a;
}

/* A survivor goes back to the pool: its aliases' ranges go too, and the
 * pages of page aliases mapped onto it show a zero page from then on. */
void compact_drop_aliases(struct fmem_heap *h, struct slab *s);

/* In a fork child: slab ranges become private copies (heap_thread.c). */
void compact_fork_child(struct fmem_heap *h);

/* Automatic compaction from the allocation slow path (owner thread). */
int compact_auto_due(struct theap *th);
void compact_auto(struct theap *th);

/* Merge b into a (both of th, which the caller has exclusive access to):
 * 0, or FMEM_EBUSY (a or b is an alias - a merged range is never merged
 * again - or a == b, or b has pages of page aliases mapped onto its chunk;
 * a survivor with aliases may be merged, its aliases
 * move with it), FMEM_EINVAL (other class or heap,
 * or a large slab), FMEM_ERANGE (live offsets overlap), FMEM_EIO (the
 * remap failed; nothing changed). For tests; fmem_heap_compact picks
 * pairs itself. */
int compact_merge_pair(struct theap *th, struct slab *a, struct slab *b);

/* Whether merges are fenced against concurrent writes (userfaultfd
 * write-protection available): heap_compact.c. */
int compact_fenced(const struct fmem_heap *h);

/* Test hook: called between the steps of a merge (1: objects copied,
 * 2: victim range remapped, 3: victim's chunk about to be freed). */
extern void (*heap_compact_hook)(int step);

#endif
