/* heap_slab.c - slabs of small objects: creation, refilling the free list,
 * full and delayed slabs, remote frees, giving empty slabs back.
 *
 * An empty slab goes back to the backend at once, except the one a thread
 * is allocating from when it is the only available slab of its class: that
 * one is kept so that a malloc/free loop at a slab boundary does not take
 * and give back a slab every time (fmem_heap_collect returns it). */
#include <stdlib.h>
#include <string.h>

#include <sched.h>

#include "heap_compact.h"
#include "heap_internal.h"

#define DESC_BLOCK 128

const uint32_t heap_class_size[NCLASSES] = {
    16,    32,    48,    64,    80,    96,    112,   128,   160,  192,  224,  256,
    320,   384,   448,   512,   640,   768,   896,   1024,  1280, 1536, 1792, 2048,
    2560,  3072,  3584,  4096,  5120,  6144,  7168,  8192,  10240, 12288, 14336, 16384,
};

/* ---- descriptors (type-stable, see heap_internal.h) -------------------- */

struct slab *desc_alloc(struct fmem_heap *h)
{
    pthread_mutex_lock(&h->lock);
    if (!h->desc_free) {
        struct slab *blk = calloc(DESC_BLOCK, sizeof *blk);
        void **list = blk ? realloc(h->desc_blocks, (h->ndesc_blocks + 1) * sizeof *list) : NULL;
        if (!list) {
            free(blk);
            pthread_mutex_unlock(&h->lock);
            return NULL;
        }
        h->desc_blocks = list;
        h->desc_blocks[h->ndesc_blocks++] = blk;
        for (int i = 0; i < DESC_BLOCK; i++) {
            blk[i].next = h->desc_free;
            h->desc_free = &blk[i];
        }
    }
    struct slab *s = h->desc_free;
    h->desc_free = s->next;
    pthread_mutex_unlock(&h->lock);
    return s;
}

void desc_free(struct fmem_heap *h, struct slab *s)
{
    pthread_mutex_lock(&h->lock);
    s->next = h->desc_free;
    h->desc_free = s;
    pthread_mutex_unlock(&h->lock);
}

/* ---- lists --------------------------------------------------------------- */

static void list_remove(struct slab **head, struct slab *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        *head = s->next;
    if (s->next)
        s->next->prev = s->prev;
    s->next = s->prev = NULL;
}

static void list_push(struct slab **head, struct slab *s)
{
    s->prev = NULL;
    s->next = *head;
    if (*head)
        (*head)->prev = s;
    *head = s;
}

/* Second place: the head keeps being allocated from; a slab that got a few
 * objects back is used next, not right away. */
static void list_insert_second(struct slab **head, struct slab *s)
{
    if (!*head) {
        list_push(head, s);
        return;
    }
    struct slab *h = *head;
    s->prev = h;
    s->next = h->next;
    if (h->next)
        h->next->prev = s;
    h->next = s;
}

static struct slab **list_of(struct theap *th, struct slab *s)
{
    return s->list == LIST_FULL ? &th->full[s->cls] : &th->avail[s->cls];
}

void slab_unlink(struct theap *th, struct slab *s)
{
    list_remove(list_of(th, s), s);
    s->list = LIST_NONE;
}

/* ---- slab lifetime ------------------------------------------------------- */

static void slab_init(struct slab *s, struct theap *th, unsigned cls)
{
    uint32_t size = heap_class_size[cls];
    s->start = s->span.ptr;
    s->obj_size = size;
    s->capacity = (uint32_t)(SLAB_SIZE / size);
    s->recip = (uint32_t)(((uint64_t)1 << 32) / size) + 1;
    s->used = s->bump = 0;
    s->cls = (uint8_t)cls;
    s->kind = SLAB_SMALL;
    s->free = s->local_free = NULL;
    s->user = NULL;
    s->merged = s->into = s->pnext = NULL;
    s->hosting = 0;
    s->paged = 0;
    s->random = (uint8_t)compact_random_placement(th->heap);
    atomic_store_explicit(&s->thread_free, NULL, memory_order_relaxed);
    atomic_store_explicit(&s->full_state, NOT_FULL, memory_order_relaxed);
    atomic_store_explicit(&s->owner, th, memory_order_relaxed);
}

static struct slab *slab_new(struct theap *th, unsigned cls)
{
    struct fmem_heap *h = th->heap;
    struct slab *s = th->spare;
    if (s) { /* its pages still map to it in the page map */
        th->spare = s->next;
        th->nspare--;
        slab_init(s, th, cls);
    } else {
        if (!(s = desc_alloc(h)))
            return NULL;
        if (backend_get(h, SLAB_SIZE, &s->span)) {
            desc_free(h, s);
            return NULL;
        }
        slab_init(s, th, cls);
        if (pagemap_set(&h->map, s->start, SLAB_SIZE, s)) {
            backend_put(h, &s->span);
            desc_free(h, s);
            return NULL;
        }
        atomic_fetch_add(&h->st.slabs, 1);
        atomic_fetch_add(&h->st.slab_allocs, 1);
    }
    s->list = LIST_AVAIL;
    list_push(&th->avail[cls], s);
    return s;
}

static void slab_to_pool(struct fmem_heap *h, struct slab *s);

struct slab *slab_new_over(struct theap *th, unsigned cls, const struct span *sp)
{
    struct fmem_heap *h = th->heap;
    struct slab *s = desc_alloc(h);
    if (!s)
        return NULL;
    s->span = *sp;
    slab_init(s, th, cls);
    s->bump = s->capacity; /* its free list is made by the caller */
    atomic_fetch_add(&h->st.slabs, 1);
    atomic_fetch_add(&h->st.slab_allocs, 1);
    s->list = LIST_AVAIL;
    list_insert_second(&th->avail[cls], s);
    return s;
}

void slab_drop(struct theap *th, struct slab *s)
{
    slab_unlink(th, s);
    slab_to_pool(th->heap, s);
}

static void slab_to_pool(struct fmem_heap *h, struct slab *s)
{
    if (s->merged || s->hosting)
        compact_drop_aliases(h, s);
    pagemap_set(&h->map, s->start, SLAB_SIZE, NULL);
    atomic_store_explicit(&s->owner, NULL, memory_order_relaxed);
    backend_put(h, &s->span);
    atomic_fetch_sub(&h->st.slabs, 1);
    atomic_fetch_add(&h->st.slab_frees, 1);
    desc_free(h, s);
}

/* An empty slab leaves its list: kept as a spare by a live thread that has
 * room for one, else given back to the pool. */
static void slab_release(struct theap *th, struct slab *s, int to_pool)
{
    list_remove(list_of(th, s), s);
    s->list = LIST_NONE;
    if (!to_pool && th->nspare < SPARE_MAX && !s->merged && !s->hosting &&
        !s->span.pb) { /* a slab backed page by page has pages without memory */
        s->capacity = 0; /* frees into a spare are refused */
        s->next = th->spare;
        th->spare = s;
        th->nspare++;
        return;
    }
    slab_to_pool(th->heap, s);
}

/* Give s back if it is empty and not on a delayed stack. */
static void slab_try_release(struct theap *th, struct slab *s, int to_pool)
{
    if (s->used != 0 || atomic_load(&s->full_state) == NOTIFIED)
        return;
    if (s->list == LIST_FULL) {
        int exp = FULL;
        if (!atomic_compare_exchange_strong(&s->full_state, &exp, NOT_FULL))
            return;
    }
    slab_release(th, s, to_pool);
}

/* Take the other threads' frees; returns how many. */
static uint32_t slab_collect(struct slab *s)
{
    void *tf = atomic_load_explicit(&s->thread_free, memory_order_relaxed);
    if (!tf)
        return 0;
    tf = atomic_exchange_explicit(&s->thread_free, NULL, memory_order_acquire);
    uint32_t n = 1;
    void **tail = tf;
    while (tail[0]) {
        tail = tail[0];
        n++;
    }
    tail[0] = s->local_free;
    s->local_free = tf;
    s->used -= n;
    return n;
}

/* Link up to a page worth of never-used objects into the free list. */
static void slab_extend(struct slab *s)
{
    if (s->random) {
        compact_extend_random(s);
        return;
    }
    uint32_t n = (uint32_t)(HEAP_PAGE / s->obj_size);
    if (n == 0)
        n = 1;
    if (n > s->capacity - s->bump)
        n = s->capacity - s->bump;
    char *first = s->start + (size_t)s->bump * s->obj_size;
    for (uint32_t i = 0; i + 1 < n; i++)
        *(void **)(first + (size_t)i * s->obj_size) = first + (size_t)(i + 1) * s->obj_size;
    *(void **)(first + (size_t)(n - 1) * s->obj_size) = NULL;
    s->free = first;
    s->bump += n;
}

/* Refill an empty free list: own frees, then others', then fresh objects. */
static void slab_refill(struct slab *s)
{
    slab_collect(s);
    if (s->local_free) {
        s->free = s->local_free;
        s->local_free = NULL;
    } else if (s->bump < s->capacity) {
        slab_extend(s);
    }
}

static void make_available(struct theap *th, struct slab *s)
{
    if (s->list == LIST_AVAIL)
        return;
    list_remove(&th->full[s->cls], s);
    s->list = LIST_AVAIL;
    list_insert_second(&th->avail[s->cls], s);
}

/* Nothing left to allocate in s: park it on the full list. A remote free
 * racing with this either sees FULL (and notifies) or is seen here. */
static void park_full(struct theap *th, struct slab *s)
{
    list_remove(&th->avail[s->cls], s);
    s->list = LIST_FULL;
    list_push(&th->full[s->cls], s);
    atomic_store(&s->full_state, FULL);
    if (atomic_load(&s->thread_free)) {
        int exp = FULL;
        if (atomic_compare_exchange_strong(&s->full_state, &exp, NOT_FULL))
            make_available(th, s);
    }
}

/* Take back the slabs remote frees made non-full. */
static void drain_delayed(struct theap *th)
{
    struct slab *s = atomic_exchange_explicit(&th->delayed, NULL, memory_order_acquire);
    while (s) {
        struct slab *next = s->delayed_next;
        atomic_store(&s->full_state, NOT_FULL);
        if (atomic_load_explicit(&s->owner, memory_order_relaxed) == th && s->list == LIST_FULL)
            make_available(th, s);
        s = next;
    }
}

void slab_emptied(struct theap *th, struct slab *s)
{
    if (s->list == LIST_AVAIL && th->avail[s->cls] == s && !s->next)
        return; /* the only available slab of its class: keep it */
    slab_try_release(th, s, 0);
}

void slab_unfull(struct theap *th, struct slab *s)
{
    int exp = FULL;
    if (atomic_compare_exchange_strong(&s->full_state, &exp, NOT_FULL))
        make_available(th, s);
}

/* A remote free landed in a slab of a theap whose thread exited: collect
 * it now, so that the memory goes back without waiting for an adopter. */
static void collect_orphan(struct theap *ow, struct slab *s)
{
    pthread_mutex_lock(&ow->lock);
    /* still unowned, and s still one of its slabs (not released and
     * reused since the push) */
    if (!atomic_load(&ow->owned) && atomic_load_explicit(&s->owner, memory_order_relaxed) == ow &&
        s->list != LIST_NONE) {
        drain_delayed(ow);
        slab_collect(s);
        if (s->used == 0)
            slab_try_release(ow, s, 1);
        else if (s->list == LIST_FULL && s->local_free)
            slab_unfull(ow, s);
    }
    pthread_mutex_unlock(&ow->lock);
}

int slab_remote_free(struct slab *s, void **o)
{
    void *head = atomic_load_explicit(&s->thread_free, memory_order_relaxed);
    do {
        if (unlikely(head == TF_LOCKED || head == TF_FORWARD)) {
            /* being merged (or merged): the object may have moved to the
             * survivor's chunk meanwhile, so free it again from the top */
            while (atomic_load(&s->thread_free) == TF_LOCKED)
                sched_yield();
            return 1;
        }
        o[0] = head;
    } while (!atomic_compare_exchange_weak(&s->thread_free, &head, (void *)o));
    /* seq_cst push, then loads: pairs with park_full and theap_abandon */
    struct theap *ow = atomic_load_explicit(&s->owner, memory_order_relaxed);
    if (atomic_load(&s->full_state) == FULL) {
        int exp = FULL;
        if (atomic_compare_exchange_strong(&s->full_state, &exp, NOTIFIED)) {
            ow = atomic_load_explicit(&s->owner, memory_order_relaxed);
            struct slab *top = atomic_load_explicit(&ow->delayed, memory_order_relaxed);
            do
                s->delayed_next = top;
            while (!atomic_compare_exchange_weak_explicit(&ow->delayed, &top, s,
                                                          memory_order_release,
                                                          memory_order_relaxed));
        }
    }
    if (ow && !atomic_load(&ow->owned))
        collect_orphan(ow, s);
    return 0;
}

void *small_malloc_slow(struct theap *th, unsigned cls)
{
    for (int round = 0; round < 2; round++) {
        struct slab *s;
        while ((s = th->avail[cls]) != NULL) {
            if (!s->free)
                slab_refill(s);
            if (s->free) {
                void **o = s->free;
                s->free = o[0];
                o[0] = o[1] = NULL;
                s->used++;
                return o;
            }
            park_full(th, s);
        }
        if (round == 0)
            drain_delayed(th);
    }
    if (unlikely(th->heap->compact) && compact_auto_due(th)) {
        compact_auto(th); /* may leave room in this class's slabs */
        if (th->avail[cls])
            return small_malloc_slow(th, cls);
    }
    if (!slab_new(th, cls))
        return NULL;
    return small_malloc_slow(th, cls);
}

/* ---- whole-theap operations (caller has exclusive access) -------------- */

void theap_collect(struct theap *th, int keep_current)
{
    drain_delayed(th);
    for (unsigned c = 0; c < NCLASSES; c++) {
        for (struct slab *s = th->full[c], *next; s; s = next) {
            next = s->next;
            if (slab_collect(s) || s->local_free)
                slab_unfull(th, s);
        }
        for (struct slab *s = th->avail[c], *next; s; s = next) {
            next = s->next;
            slab_collect(s);
            if (!(keep_current && s == th->avail[c] && !s->next))
                slab_try_release(th, s, 1);
        }
    }
    while (th->spare) {
        struct slab *s = th->spare;
        th->spare = s->next;
        th->nspare--;
        slab_to_pool(th->heap, s);
    }
}

void theap_free_all(struct theap *th)
{
    struct fmem_heap *h = th->heap;
    for (unsigned c = 0; c <= NCLASSES; c++)
        for (int l = 0; l < 2; l++) {
            struct slab **head = c == NCLASSES ? (l ? NULL : &th->spare)
                                 : l           ? &th->full[c]
                                               : &th->avail[c];
            while (head && *head) {
                struct slab *s = *head;
                *head = s->next;
                backend_put(h, &s->span);
                atomic_fetch_sub(&h->st.slabs, 1);
            }
        }
    th->nspare = 0;
}
