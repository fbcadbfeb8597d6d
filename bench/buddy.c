/* buddy.c - binary buddy allocator (see buddy.h). */
#include "buddy.h"

#include <stdlib.h>

static void list_push(struct buddy *b, uint64_t c, unsigned o)
{
    b->next[c] = b->head[o];
    b->prev[c] = -1;
    if (b->head[o] >= 0)
        b->prev[b->head[o]] = (int64_t)c;
    b->head[o] = (int64_t)c;
    b->free_order[c] = (uint8_t)(o + 1);
}

static void list_remove(struct buddy *b, uint64_t c, unsigned o)
{
    if (b->prev[c] >= 0)
        b->next[b->prev[c]] = b->next[c];
    else
        b->head[o] = b->next[c];
    if (b->next[c] >= 0)
        b->prev[b->next[c]] = b->prev[c];
    b->free_order[c] = 0;
}

int buddy_init(struct buddy *b, uint64_t nchunks)
{
    *b = (struct buddy){.nchunks = nchunks};
    for (unsigned o = 0; o <= BUDDY_MAX_ORDER; o++)
        b->head[o] = -1;
    while (b->max_order < BUDDY_MAX_ORDER && (UINT64_C(2) << b->max_order) <= nchunks)
        b->max_order++;
    b->next = malloc(nchunks * sizeof *b->next);
    b->prev = malloc(nchunks * sizeof *b->prev);
    b->free_order = calloc(nchunks, 1);
    b->used_order = calloc(nchunks, 1);
    if (!nchunks || !b->next || !b->prev || !b->free_order || !b->used_order) {
        buddy_destroy(b);
        return -1;
    }
    /* cover [0, nchunks) with maximal aligned blocks; push the highest
     * first so that low addresses are handed out first */
    for (uint64_t end = nchunks; end > 0;) {
        uint64_t s = 0;
        unsigned o = 0;
        for (uint64_t x = 0; x < end;) {
            unsigned q = b->max_order;
            while ((x & ((UINT64_C(1) << q) - 1)) || x + (UINT64_C(1) << q) > end)
                q--;
            s = x;
            o = q;
            x += UINT64_C(1) << q;
        }
        list_push(b, s, o);
        end = s;
    }
    return 0;
}

void buddy_destroy(struct buddy *b)
{
    free(b->next);
    free(b->prev);
    free(b->free_order);
    free(b->used_order);
    b->next = b->prev = NULL;
    b->free_order = b->used_order = NULL;
}

int64_t buddy_alloc(struct buddy *b, unsigned order)
{
    if (order > b->max_order)
        return -1;
    unsigned o = order;
    while (o <= b->max_order && b->head[o] < 0)
        o++;
    if (o > b->max_order)
        return -1;
    uint64_t c = (uint64_t)b->head[o];
    list_remove(b, c, o);
    while (o > order) { /* split: keep the low half, free the high half */
        o--;
        list_push(b, c + (UINT64_C(1) << o), o);
    }
    b->used_order[c] = (uint8_t)(order + 1);
    return (int64_t)c;
}

int buddy_free(struct buddy *b, uint64_t c, unsigned order)
{
    if (c >= b->nchunks || b->used_order[c] != order + 1)
        return -1;
    b->used_order[c] = 0;
    while (order < b->max_order) {
        uint64_t bud = c ^ (UINT64_C(1) << order);
        if (bud >= b->nchunks || b->free_order[bud] != order + 1)
            break;
        list_remove(b, bud, order);
        c &= ~(UINT64_C(1) << order);
        order++;
    }
    list_push(b, c, order);
    return 0;
}
