/* heap_large.c - objects above FMEM_HEAP_SMALL_MAX (and alignments above
 * 4 KiB): one backend span each, found again through the page map entry
 * of the object's first page. Freeing it gives the span back at once. */
#include <errno.h>
#include <string.h>

#include "heap_internal.h"

static void unlink_large(struct fmem_heap *h, struct slab *d)
{
    if (d->prev)
        d->prev->next = d->next;
    else
        h->large = d->next;
    if (d->next)
        d->next->prev = d->prev;
    d->next = d->prev = NULL;
}

void *large_malloc(struct fmem_heap *h, size_t size, size_t align)
{
    size_t extra = align > HEAP_PAGE ? align : 0; /* spans are page aligned */
    if (size > HEAP_MAX_OBJECT || align > HEAP_MAX_OBJECT) {
        errno = ENOMEM;
        return NULL;
    }
    struct slab *d = desc_alloc(h);
    if (!d) {
        errno = ENOMEM;
        return NULL;
    }
    struct span sp;
    if (backend_get(h, size + extra, &sp)) {
        desc_free(h, d);
        errno = ENOMEM;
        return NULL;
    }
    memset(d, 0, sizeof *d);
    d->kind = SLAB_LARGE;
    d->span = sp;
    d->user = extra ? (char *)(((uintptr_t)sp.ptr + align - 1) & ~(uintptr_t)(align - 1)) : sp.ptr;
    if (pagemap_set(&h->map, d->user, 1, d)) {
        backend_put(h, &d->span);
        desc_free(h, d);
        errno = ENOMEM;
        return NULL;
    }
    pthread_mutex_lock(&h->lock);
    d->next = h->large;
    if (h->large)
        h->large->prev = d;
    h->large = d;
    pthread_mutex_unlock(&h->lock);
    atomic_fetch_add(&h->st.large, 1);
    atomic_fetch_add(&h->st.large_mallocs, 1);
    return d->user;
}

int large_free(struct fmem_heap *h, struct slab *d, void *p)
{
    pthread_mutex_lock(&h->lock);
    /* checked under the lock: two threads freeing the same object */
    if (pagemap_get(&h->map, p) != d || d->kind != SLAB_LARGE || d->user != p) {
        pthread_mutex_unlock(&h->lock);
        atomic_fetch_add(&h->st.bad_frees, 1);
        return FMEM_EINVAL;
    }
    pagemap_set(&h->map, p, 1, NULL);
    unlink_large(h, d);
    pthread_mutex_unlock(&h->lock);
    backend_put(h, &d->span);
    atomic_fetch_sub(&h->st.large, 1);
    atomic_fetch_add(&h->st.large_frees, 1);
    desc_free(h, d);
    return 0;
}

void large_free_all(struct fmem_heap *h)
{
    for (struct slab *d = h->large; d; d = d->next)
        backend_put(h, &d->span);
    h->large = NULL;
}
