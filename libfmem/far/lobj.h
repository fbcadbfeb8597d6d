/* lobj.h - large objects on a pool without power-of-two waste.
 *
 * A pool hands out blocks of 4 KiB x 2^k, so one block per object wastes
 * up to half of it. A large object here is instead a few blocks (at most
 * six when allocated, LOBJ_MAX_BLOCKS after growing) whose sizes add up to
 * the request rounded to 4 KiB and then to its six leading bits (slack
 * < 1/32 of the size), mapped side by side into a virtual range of its own:
 *
 *  - LOBJ_ALIAS: pools over files other processes may map (shm:, file:):
 *    each block's range of the data file is mmap'ed (MAP_SHARED) at its
 *    place in the range, so the pool's bytes are the object's bytes.
 *  - LOBJ_MOVE: in-process pools (mem:, private anonymous memory): each
 *    block's pages are moved into the range with
 *    mremap(MREMAP_DONTUNMAP); the block's own place in the pool then
 *    reads as zeros until the block is freed (nothing in the pool reads a
 *    held block's bytes). Freeing unmaps the range: its memory goes back
 *    to the system, the blocks to the pool. (Not moved back: after a fork,
 *    moves back into the pool racing with other threads' use of their
 *    objects made those fault on Linux 6.18; tests/test_fork.c found it.)
 *  - LOBJ_SINGLE: objects up to a span (128 KiB) and objects whose plan
 *    is one block (no waste, and a range of its own would cost system
 *    calls on every allocation), and anything else (pools that cannot be mapped in pieces,
 *    e.g. through an allocation service, hugetlbfs files): one block, as
 *    before.
 *
 * The range is reserved larger than the object (PROT_NONE, no memory), so
 * lobj_resize can grow it in place by mapping more blocks after it; when
 * the reservation or the block list is full it moves the blocks' pages to
 * a new range (mremap: page tables only, no copy) and reports the move.
 *
 * fork(): a LOBJ_MOVE range is private anonymous memory, a copy-on-write
 * snapshot in the child as the pool itself. A LOBJ_ALIAS range is shared
 * with the parent: the child's fork handler calls lobj_fork_child, which
 * replaces it with a private copy (the pool's own fork handling makes the
 * blocks the child's private copies too; it only frees them later).
 *
 * Not thread safe per object (the caller serialises calls on one lobj);
 * different objects may be used from any threads. Needs no malloc. Every
 * call takes the fork gate through the pool calls it makes. */
#ifndef FMEM_FAR_LOBJ_H
#define FMEM_FAR_LOBJ_H

#include <stddef.h>
#include <stdint.h>

#include "fmem.h"

#define LOBJ_MAX_BLOCKS 32
#define LOBJ_PLAN_MAX 6 /* blocks of a fresh object */

enum lobj_mode { LOBJ_SINGLE, LOBJ_ALIAS, LOBJ_MOVE };

struct lobj_block {
    fmem_handle h;
    int fd; /* ALIAS: the data file of the block's node; -1 once private */
};

struct lobj {
    char *ptr;      /* the object (aligned as asked) */
    size_t len;     /* usable bytes from ptr */
    size_t held;    /* pool bytes held: the blocks' lengths */
    char *res;      /* ALIAS/MOVE: the reservation holding [ptr, ptr + len) */
    size_t res_len;
    uint8_t mode;   /* enum lobj_mode */
    uint8_t n;      /* blocks, in address order */
    struct lobj_block b[LOBJ_MAX_BLOCKS];
};

/* Block sizes for an object of `size` bytes (largest first); returns how
 * many (<= LOBJ_PLAN_MAX), 0 if size is 0 or absurd. Their sum is what
 * the object holds. */
unsigned lobj_plan(size_t size, size_t sizes[LOBJ_PLAN_MAX]);

/* A new object of at least `size` bytes at an `align`-aligned address
 * (power of two; 0 or <= 4096: page aligned). 0, or FMEM_EINVAL (bad
 * arguments), FMEM_ENOMEM/FMEM_ESIZE (no pool space), FMEM_EIO (no address
 * space). On failure *o is left empty and nothing is held. */
int lobj_alloc(fmem_pool *pool, size_t size, size_t align, struct lobj *o);

/* Make the object `size` bytes (its first min(old, new) bytes kept).
 * Shrinking gives whole trailing blocks back. Growing maps new blocks after
 * the object: in place when its reservation has room (or can be widened);
 * else, if may_move, the pages move to a new range (o->ptr changes, no
 * bytes are copied). 0, or FMEM_ENOMEM when it cannot be done that way (the
 * caller copies into a new object), FMEM_EINVAL. After a failure the object
 * is intact at o->ptr, which moved only if a mapping failed after a move
 * (FMEM_EIO). */
int lobj_resize(fmem_pool *pool, struct lobj *o, size_t size, int may_move);

/* Give the blocks back and unmap the range. */
void lobj_free(fmem_pool *pool, struct lobj *o);

/* In a fork child (its only thread, the parent waiting): make a shared
 * (ALIAS) mapping a private copy. 0 or FMEM_EIO. */
int lobj_fork_child(struct lobj *o);

#endif
