/* own.c - per-application ownership table (linear probing, tombstones). */
#include "service/own.h"

#include <stdlib.h>

static size_t slot_of(const struct own_table *t, uint64_t key)
{
    uint64_t h = key * 0x9E3779B97F4A7C15u;
    return (size_t)(h >> 17) & (t->cap - 1);
}

static bool grow(struct own_table *t)
{
    size_t ncap = t->cap ? t->cap * 2 : 64;
    if (t->used * 2 < t->cap) /* mostly tombstones: rehash at this size */
        ncap = t->cap;
    struct own_entry *ne = calloc(ncap, sizeof *ne);
    if (!ne)
        return false;
    struct own_table nt = {.e = ne, .cap = ncap};
    for (size_t i = 0; i < t->cap; i++)
        if (t->e[i].key > 1) {
            size_t j = slot_of(&nt, t->e[i].key);
            while (ne[j].key)
                j = (j + 1) & (ncap - 1);
            ne[j] = t->e[i];
            nt.used++;
        }
    free(t->e);
    *t = nt;
    return true;
}

bool own_put(struct own_table *t, uint64_t key, uint32_t rkey, unsigned log2_chunks)
{
    struct own_entry *old = own_get(t, key);
    if (old) {
        old->rkey = old->app_rkey = rkey;
        old->bound2 = false;
        old->log2_chunks = (uint8_t)log2_chunks;
        return true;
    }
    if ((t->used + t->tomb + 1) * 4 > t->cap * 3 && !grow(t))
        return false;
    size_t j = slot_of(t, key);
    while (t->e[j].key > 1 && t->e[j].key != key)
        j = (j + 1) & (t->cap - 1);
    if (t->e[j].key == 1)
        t->tomb--;
    if (t->e[j].key != key)
        t->used++;
    t->e[j] = (struct own_entry){.key = key, .rkey = rkey, .app_rkey = rkey,
                                 .log2_chunks = (uint8_t)log2_chunks};
    return true;
}

struct own_entry *own_get(struct own_table *t, uint64_t key)
{
    if (!t->cap)
        return NULL;
    for (size_t j = slot_of(t, key), n = 0; n < t->cap; j = (j + 1) & (t->cap - 1), n++) {
        if (t->e[j].key == key)
            return &t->e[j];
        if (t->e[j].key == 0)
            return NULL;
    }
    return NULL;
}

void own_del(struct own_table *t, struct own_entry *e)
{
    e->key = 1;
    t->used--;
    t->tomb++;
}

void own_free(struct own_table *t)
{
    free(t->e);
    *t = (struct own_table){0};
}
