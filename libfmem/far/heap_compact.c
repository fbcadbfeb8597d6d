/* heap_compact.c - merging sparsely used slabs without moving pointers
 * (design: heap_compact.h; protocol: docs/far-memory.md, "compaction").
 *
 * A merge needs the owner's view of both slabs (their free lists are the
 * owner's, without atomics), so fmem_heap_compact merges only slabs of the
 * calling thread's theap and of theaps whose thread exited (under their
 * lock, which adoption takes too). Other threads can still free objects
 * into those slabs: while a class is being compacted, the thread_free
 * stack of every slab taking part holds TF_LOCKED, and a remote freer that
 * finds it waits, then frees the pointer again from the top (by then the
 * page map may lead it to an alias, i.e. to the survivor).
 *
 * Writes by other threads into the victim's live objects would be lost
 * between the copy and the remap (they reach the victim's chunk, which is
 * then freed). A "fence" closes that window where userfaultfd allows:
 * the ranges that show the victim's chunk are write-protected (uffd-wp)
 * before the copy, which reads the chunk through the pool's own mapping;
 * a thread writing there meanwhile sleeps in its page fault until the
 * ranges are remapped onto the survivor and woken, and its write then
 * lands in the survivor's chunk. Without userfaultfd (no permission, old
 * kernel, a pool file that cannot be write-protected) merges go on
 * unfenced: docs/far-memory.md says when that is safe. */
#include <errno.h>
#include <unistd.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "fork.h"
#include "heap_compact.h"
#include "write_fence.h"

#define RESERVE_BYTES ((size_t)1 << 30) /* slots reserved at a time */
#define DEFAULT_INTERVAL 64

void (*heap_compact_hook)(int step);

static inline void hook(int step)
{
    if (unlikely(heap_compact_hook != NULL))
        heap_compact_hook(step);
}

struct heap_compact {
    pthread_mutex_t lock; /* the slot lists */
    int uffd;             /* the write fence's userfaultfd, -1: none */
    int pages;            /* merge page by page too (FMEM_COMPACT_PAGES) */
    int pageback;         /* slabs give back pages (FMEM_COMPACT_PAGEBACK) */
    int repack;           /* small classes repacked page by page (FMEM_COMPACT_REPACK) */
    _Atomic uint32_t flags;
    _Atomic uint32_t interval;
    _Atomic uint64_t budget;
    _Atomic uint32_t since; /* slabs taken since the last automatic run */
    /* free slots that still map a chunk, by the chunk's pool address (open
     * addressing; slot NULL: empty, TOMB: removed) */
    struct free_slot {
        char *slot;
        char *src;
    } *tab;
    size_t tab_cap, tab_used, nmapped, rover;
    char **bare; /* free slots that map nothing */
    size_t nbare, bare_cap;
    char *cur; /* unused part of the last reservation */
    size_t left;
    struct reservation {
        void *p;
        size_t len;
    } *res;
    size_t nres;
    pthread_mutex_t plock; /* the page aliases (chained through pnext) */
    struct slab *palias;
};

#define NPAGES (SLAB_SIZE / HEAP_PAGE)

/* ---- slots ------------------------------------------------------------- */

#define TOMB ((char *)1)

static size_t tab_hash(const char *src, size_t cap)
{
    return (size_t)(((uintptr_t)src >> 16) * 0x9e3779b97f4a7c15ull >> 20) & (cap - 1);
}

static int tab_put(struct heap_compact *c, char *slot, char *src)
{
    if (2 * (c->tab_used + 1) > c->tab_cap) { /* grow (and drop tombstones) */
        size_t cap = c->tab_cap ? 2 * c->tab_cap : 256;
        while (4 * (c->nmapped + 1) > cap)
            cap *= 2;
        struct free_slot *t = calloc(cap, sizeof *t);
        if (!t)
            return -1;
        for (size_t i = 0; i < c->tab_cap; i++)
            if (c->tab[i].slot && c->tab[i].slot != TOMB) {
                size_t j = tab_hash(c->tab[i].src, cap);
                while (t[j].slot)
                    j = (j + 1) & (cap - 1);
                t[j] = c->tab[i];
            }
        free(c->tab);
        c->tab = t;
        c->tab_cap = cap;
        c->tab_used = c->nmapped;
    }
    size_t j = tab_hash(src, c->tab_cap);
    while (c->tab[j].slot && c->tab[j].slot != TOMB)
        j = (j + 1) & (c->tab_cap - 1);
    if (!c->tab[j].slot)
        c->tab_used++;
    c->tab[j] = (struct free_slot){slot, src};
    c->nmapped++;
    return 0;
}

static char *tab_take_at(struct heap_compact *c, size_t j)
{
    char *slot = c->tab[j].slot;
    c->tab[j].slot = TOMB;
    c->tab[j].src = NULL;
    c->nmapped--;
    return slot;
}

/* A free slot: the one that still maps the chunk at `src` if there is one
 * (then *mapped = 1: nothing to map, and its pages are in the page tables
 * already; a chunk freed is often handed out again soon, so a heap that
 * empties and refills slabs costs no system call here), else one that maps
 * nothing, else any. */
static char *slot_take(struct heap_compact *c, const char *src, int *mapped)
{
    char *s = NULL;
    *mapped = 0;
    pthread_mutex_lock(&c->lock);
    if (c->nmapped) {
        for (size_t j = tab_hash(src, c->tab_cap); c->tab[j].slot;
             j = (j + 1) & (c->tab_cap - 1))
            if (c->tab[j].slot != TOMB && c->tab[j].src == src) {
                s = tab_take_at(c, j);
                *mapped = 1;
                goto out;
            }
    }
    if (c->nbare) {
        s = c->bare[--c->nbare];
    } else if (c->nmapped) { /* it maps another chunk: mapped over below */
        while (!c->tab[c->rover].slot || c->tab[c->rover].slot == TOMB)
            c->rover = (c->rover + 1) & (c->tab_cap - 1);
        s = tab_take_at(c, c->rover);
    } else {
        if (c->left == 0) {
            struct reservation *r = realloc(c->res, (c->nres + 1) * sizeof *r);
            if (!r)
                goto out;
            c->res = r;
            size_t len = RESERVE_BYTES + SLAB_SIZE;
            void *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (p == MAP_FAILED)
                goto out;
            c->res[c->nres++] = (struct reservation){p, len};
            /* slots are 64 KiB aligned: an offset in a slab is the low bits */
            c->cur = (char *)(((uintptr_t)p + SLAB_SIZE - 1) & ~(uintptr_t)(SLAB_SIZE - 1));
            c->left = RESERVE_BYTES / SLAB_SIZE;
        }
        s = c->cur;
        c->cur += SLAB_SIZE;
        c->left--;
    }
out:
    pthread_mutex_unlock(&c->lock);
    return s;
}

/* The slot is free for a later slab. It keeps mapping the chunk at `src`
 * (its pool mapping) if not NULL: the pool's own mapping of a freed chunk
 * stays too, so a dangling pointer meets the same thing either way. With
 * src NULL the slot is made inaccessible. */
static void slot_give(struct heap_compact *c, char *slot, char *src)
{
    pthread_mutex_lock(&c->lock);
    if (src && tab_put(c, slot, src) == 0) {
        pthread_mutex_unlock(&c->lock);
        return;
    }
    pthread_mutex_unlock(&c->lock);
    mmap(slot, SLAB_SIZE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    pthread_mutex_lock(&c->lock);
    if (c->nbare == c->bare_cap) {
        size_t cap = c->bare_cap ? 2 * c->bare_cap : 64;
        char **n = realloc(c->bare, cap * sizeof *n);
        if (!n) { /* lose the slot (stays reserved, inaccessible) */
            pthread_mutex_unlock(&c->lock);
            return;
        }
        c->bare = n;
        c->bare_cap = cap;
    }
    c->bare[c->nbare++] = slot;
    pthread_mutex_unlock(&c->lock);
}

/* A second mapping of the chunk at `src` (the pool's mapping) at slot. */
static int alias_map(char *src, char *slot)
{
    void *r = mremap(src, 0, SLAB_SIZE, MREMAP_MAYMOVE | MREMAP_FIXED, slot);
    return r == MAP_FAILED ? (errno == EINVAL ? FMEM_ENOTSUP : FMEM_EIO) : 0;
}

int compact_slot_get(struct fmem_heap *h, struct span *out)
{
    struct heap_compact *c = h->compact;
    memset(out, 0, sizeof *out);
    int rc = fmem_alloc(h->pool, SLAB_SIZE, &out->h);
    if (rc)
        return rc;
    if ((rc = fmem_map(h->pool, &out->h, (void **)&out->src)) != 0)
        goto fail;
    int mapped;
    if (!(out->ptr = slot_take(c, out->src, &mapped))) {
        rc = FMEM_ENOMEM;
        goto fail;
    }
    if (!mapped) {
        if ((rc = alias_map(out->src, out->ptr)) != 0) {
            slot_give(c, out->ptr, NULL);
            goto fail;
        }
#ifdef MADV_POPULATE_WRITE
        /* the chunk's pages exist in the pool's file: map them in one call
         * rather than a fault per page */
        madvise(out->ptr, SLAB_SIZE, MADV_POPULATE_WRITE);
#endif
    }
    out->len = SLAB_SIZE;
    heap_account(h, (int64_t)out->len);
    atomic_fetch_add_explicit(&c->since, 1, memory_order_relaxed);
    return 0;
fail:
    fmem_free(h->pool, &out->h);
    memset(out, 0, sizeof *out);
    return rc;
}

void compact_slot_put(struct fmem_heap *h, struct span *sp)
{
    struct slab_pages *pb = sp->pb;
    if (pb) { /* backed page by page: each block goes back */
        for (unsigned p = 0; p < SLAB_SIZE / HEAP_PAGE; p++)
            if (pb->backed >> p & 1) {
                fmem_free(h->pool, &pb->h[p]);
                heap_account(h, -(int64_t)HEAP_PAGE);
            }
        free(pb);
        sp->pb = NULL;
        slot_give(h->compact, sp->ptr, NULL);
        return;
    }
    heap_account(h, -(int64_t)sp->len);
    slot_give(h->compact, sp->ptr, sp->src);
    fmem_free(h->pool, &sp->h);
}

static int page_map(char *src, char *at);
static int page_zero(char *at);

/* The pages of page aliases mapped onto s's chunk, which is about to go
 * back to the pool, show a read-only zero page from now on; an alias none
 * of whose pages maps a survivor any more goes too. */
static void drop_page_aliases(struct fmem_heap *h, struct slab *s)
{
    struct heap_compact *c = h->compact;
    struct slab *gone = NULL;
    pthread_mutex_lock(&c->plock);
    for (struct slab **pv = &c->palias, *v; s->hosting && (v = *pv) != NULL;) {
        for (unsigned p = 0; p < NPAGES; p++)
            if (v->page_into[p] == s) {
                page_zero(v->start + p * HEAP_PAGE);
                v->page_into[p] = NULL;
                v->used--;
                s->hosting--;
            }
        if (v->used == 0) {
            *pv = v->pnext;
            v->pnext = gone;
            gone = v;
        } else {
            pv = &v->pnext;
        }
    }
    pthread_mutex_unlock(&c->plock);
    while (gone) {
        struct slab *v = gone;
        gone = v->pnext;
        pagemap_set(&h->map, v->start, SLAB_SIZE, NULL);
        slot_give(c, v->start, NULL);
        v->pnext = NULL;
        v->paged = 0;
        v->kind = SLAB_SMALL;
        atomic_store(&v->thread_free, NULL);
        desc_free(h, v);
    }
}

void compact_drop_aliases(struct fmem_heap *h, struct slab *s)
{
    if (s->hosting)
        drop_page_aliases(h, s);
    while (s->merged) {
        struct slab *a = s->merged;
        s->merged = a->merged;
        pagemap_set(&h->map, a->start, SLAB_SIZE, NULL);
        slot_give(h->compact, a->start, NULL);
        a->merged = a->into = NULL;
        a->kind = SLAB_SMALL;
        atomic_store(&a->thread_free, NULL);
        desc_free(h, a);
    }
}

/* ---- the write fence (write_fence.h) --------------------------------- */

static int fence_open(void)
{
    return write_fence_open(0);
}

int compact_fenced(const struct fmem_heap *h)
{
    return h->compact && h->compact->uffd >= 0;
}

static void fence_undo(int fd, char *at)
{
    write_fence_undo(fd, at, SLAB_SIZE); /* wakes writers: the merge did not happen */
}

/* Fence the ranges showing b's chunk (b's and its aliases'): 0, or
 * FMEM_EIO after undoing what was done (no merge then). */
static int fence_up(struct heap_compact *c, struct slab *sb)
{
    if (c->uffd < 0)
        return 0;
    for (struct slab *x = sb; x; x = x->merged)
        if (write_fence_up(c->uffd, x->start, SLAB_SIZE) != 0) {
            for (struct slab *y = sb; y != x; y = y->merged)
                fence_undo(c->uffd, y->start);
            return FMEM_EIO;
        }
    return 0;
}

/* After the ranges were remapped (their fenced mappings are gone): the
 * writers waiting in them go on, into the new mappings. */
static void fence_down(struct heap_compact *c, struct slab *sb)
{
    if (c->uffd < 0)
        return;
    for (struct slab *x = sb; x; x = x->merged)
        write_fence_down(c->uffd, x->start, SLAB_SIZE);
}

/* ---- set-up ------------------------------------------------------------ */

static int policy_check(const fmem_compact_policy *p)
{
    return p && (p->flags & ~(FMEM_COMPACT_AUTO | FMEM_COMPACT_RANDOM)) ? FMEM_EINVAL : 0;
}

static void policy_apply(struct heap_compact *c, const fmem_compact_policy *p)
{
    atomic_store(&c->flags, p ? p->flags : 0);
    atomic_store(&c->interval, p && p->interval ? p->interval : DEFAULT_INTERVAL);
    atomic_store(&c->budget, p ? p->budget : 0);
}

int compact_init(struct fmem_heap *h, const fmem_compact_policy *policy)
{
    int rc = policy_check(policy);
    if (rc)
        return rc;
    struct heap_compact *c = calloc(1, sizeof *c);
    if (!c)
        return FMEM_ENOMEM;
    if (pthread_mutex_init(&c->lock, NULL)) {
        free(c);
        return FMEM_ENOMEM;
    }
    if (pthread_mutex_init(&c->plock, NULL)) {
        pthread_mutex_destroy(&c->lock);
        free(c);
        return FMEM_ENOMEM;
    }
    policy_apply(c, policy);
    c->uffd = fence_open();
    const char *e = getenv("FMEM_COMPACT_PAGES"); /* "0": whole slabs only */
    c->pages = !(e && strcmp(e, "0") == 0);
    e = getenv("FMEM_COMPACT_PAGEBACK"); /* "0": slabs stay one chunk each */
    c->pageback = c->pages && !(e && strcmp(e, "0") == 0);
    e = getenv("FMEM_COMPACT_REPACK"); /* "0": small classes as the larger ones */
    c->repack = c->pageback && !(e && strcmp(e, "0") == 0);
    h->compact = c;
    struct span probe; /* can this pool's chunks be mapped twice? */
    if ((rc = compact_slot_get(h, &probe)) == 0) {
        compact_slot_put(h, &probe);
        atomic_store(&c->since, 0);
    }
    return rc;
}

void compact_destroy(struct fmem_heap *h)
{
    struct heap_compact *c = h->compact;
    if (!c)
        return;
    if (c->uffd >= 0)
        close(c->uffd);
    for (size_t i = 0; i < c->nres; i++)
        munmap(c->res[i].p, c->res[i].len);
    free(c->res);
    free(c->tab);
    free(c->bare);
    pthread_mutex_destroy(&c->lock);
    pthread_mutex_destroy(&c->plock);
    free(c);
    h->compact = NULL;
}

int compact_random_placement(const struct fmem_heap *h)
{
    return h->compact && (atomic_load_explicit(&h->compact->flags, memory_order_relaxed) &
                          FMEM_COMPACT_RANDOM);
}

/* ---- random placement -------------------------------------------------- */

static uint64_t rng_next(void)
{
    static __thread uint64_t x;
    if (!x)
        x = (uint64_t)(uintptr_t)&x * 0x9e3779b97f4a7c15ull | 1;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
}

void compact_extend_random(struct slab *s)
{
    uint32_t n = s->capacity - s->bump; /* at most 4096 */
    uint16_t idx[SLAB_SIZE / 16];
    for (uint32_t i = 0; i < n; i++)
        idx[i] = (uint16_t)(s->bump + i);
    for (uint32_t i = n; i > 1; i--) { /* Fisher-Yates */
        uint32_t j = (uint32_t)(rng_next() % i);
        uint16_t t = idx[i - 1];
        idx[i - 1] = idx[j];
        idx[j] = t;
    }
    void *head = NULL;
    for (uint32_t i = 0; i < n; i++) {
        void **o = (void **)(s->start + (size_t)idx[i] * s->obj_size);
        o[0] = head;
        head = o;
    }
    s->free = head;
    s->bump = s->capacity;
}

/* ---- merging ----------------------------------------------------------- */

struct cand {
    struct slab *s;
    uint64_t *live; /* bit per object */
    int dead;       /* merged into another */
    int rebuilt;    /* its free list must be rebuilt from `live` */
};

static uint32_t obj_index(const struct slab *s, const void *o)
{
    return (uint32_t)((size_t)((const char *)o - s->start) / s->obj_size);
}

/* Stop remote frees into s (they wait) and take the ones made so far. */
static void slab_lock(struct slab *s)
{
    void **tf = atomic_exchange(&s->thread_free, TF_LOCKED);
    while (tf) {
        void **next = tf[0];
        tf[0] = s->local_free;
        s->local_free = tf;
        s->used--;
        tf = next;
    }
}

/* Whether every page object i of s lies on has memory (a slab backed
 * page by page may lack some: the object is then never handed out). */
static int obj_backed(const struct slab *s, uint32_t i)
{
    const struct slab_pages *pb = s->span.pb;
    if (!pb)
        return 1;
    size_t off = (size_t)i * s->obj_size;
    for (size_t p = off / HEAP_PAGE; p <= (off + s->obj_size - 1) / HEAP_PAGE; p++)
        if (!(pb->backed >> p & 1))
            return 0;
    return 1;
}

/* Where page p of s is in the pool's mapping. */
static char *page_src(const struct slab *s, unsigned p)
{
    return s->span.pb ? s->span.pb->src[p] : s->span.src + (size_t)p * HEAP_PAGE;
}

static void live_bits(const struct slab *s, uint64_t *live)
{
    size_t words = (s->capacity + 63) / 64;
    memset(live, 0, words * sizeof *live);
    for (uint32_t i = 0; i < s->bump; i++)
        live[i / 64] |= (uint64_t)1 << (i % 64);
    for (int l = 0; l < 2; l++)
        for (void **o = l ? s->local_free : s->free; o; o = o[0]) {
            uint32_t i = obj_index(s, o);
            if (i < s->capacity)
                live[i / 64] &= ~((uint64_t)1 << (i % 64));
        }
    if (s->span.pb) /* objects on a page without memory are never handed out */
        for (uint32_t i = 0; i < s->bump; i++)
            if (!obj_backed(s, i))
                live[i / 64] &= ~((uint64_t)1 << (i % 64));
}

static int disjoint(const uint64_t *a, const uint64_t *b, size_t words)
{
    for (size_t w = 0; w < words; w++)
        if (a[w] & b[w])
            return 0;
    return 1;
}

/* Free list of s from its live bits: every other object handed out so
 * far, with the double-free key a free writes. */
static void rebuild_free(struct fmem_heap *h, struct slab *s, const uint64_t *live)
{
    void *head = NULL;
    const struct slab_pages *pb = s->span.pb;
    for (uint32_t i = s->bump; i-- > 0;)
        if (!(live[i / 64] >> (i % 64) & 1)) {
            void **o = (void **)(s->start + (size_t)i * s->obj_size);
            if (!obj_backed(s, i)) { /* not handed out; a free of it is a double free */
                if (pb->backed >> ((size_t)i * s->obj_size / HEAP_PAGE) & 1) {
                    o[0] = NULL;
                    o[1] = (void *)(h->key ^ (uintptr_t)o);
                }
                continue;
            }
            o[0] = head;
            o[1] = (void *)(h->key ^ (uintptr_t)o);
            head = o;
        }
    s->free = head;
    s->local_free = NULL;
}

/* b's objects into a's chunk, b's range onto a's chunk, b's chunk back.
 * a's and b's remote frees are held off (slab_lock) by the caller. */
static int merge(struct theap *th, struct cand *a, struct cand *b)
{
    struct fmem_heap *h = th->heap;
    struct slab *sa = a->s, *sb = b->s;
    size_t words = (sa->capacity + 63) / 64;
    struct heap_compact *c = h->compact;
    if (fence_up(c, sb))
        return FMEM_EIO;
    a->rebuilt = 1; /* its free objects get overwritten from here on */
    /* through the pool's mappings: b's slot may be fenced (a read of a page
     * missing there would wait for this thread) */
    for (size_t w = 0; w < words; w++)
        for (uint64_t bits = b->live[w]; bits; bits &= bits - 1) {
            size_t off = (w * 64 + (size_t)__builtin_ctzll(bits)) * sa->obj_size;
            memcpy(sa->span.src + off, sb->span.src + off, sa->obj_size);
        }
    hook(1);
    /* b's own aliases (it may have been a survivor) first, then b */
    int rc = 0;
    struct slab *x, *last = sb;
    for (x = sb->merged; x && rc == 0; x = x->merged)
        if ((rc = alias_map(sa->span.src, x->start)) == 0)
            last = x;
    if (rc == 0)
        rc = alias_map(sa->span.src, sb->start);
    if (rc) { /* put back what moved: those ranges show b's chunk again */
        for (x = sb->merged; x && x != last->merged; x = x->merged)
            alias_map(sb->span.src, x->start);
        for (x = sb; c->uffd >= 0 && x; x = x->merged) /* ranges not remapped */
            fence_undo(c->uffd, x->start);
        fence_down(c, sb);
        return rc;
    }
    fence_down(c, sb);
    hook(2);
    for (size_t w = 0; w < words; w++)
        a->live[w] |= b->live[w];
    sa->used += sb->used;
    if (sb->bump > sa->bump)
        sa->bump = sb->bump;
    fmem_handle chunk = sb->span.h;
    slab_unlink(th, sb);
    sb->kind = SLAB_ALIAS;
    sb->into = sa;
    for (x = sb->merged; x; x = x->merged)
        x->into = sa; /* before b forwards: freers retrying through them */
    last->merged = sa->merged; /* a's chain: b, b's aliases, a's own */
    sa->merged = sb;
    sb->used = 0;
    sb->free = sb->local_free = NULL;
    sb->span.src = NULL;
    memset(&sb->span.h, 0, sizeof sb->span.h);
    atomic_store_explicit(&sb->owner, NULL, memory_order_relaxed);
    atomic_store(&sb->thread_free, TF_FORWARD); /* waiting freers retry */
    b->dead = 1;
    hook(3);
    fmem_free(h->pool, &chunk);
    heap_account(h, -(int64_t)SLAB_SIZE);
    atomic_fetch_sub(&h->st.slabs, 1);
    atomic_fetch_add(&h->st.merges, 1);
    atomic_fetch_add(&h->st.compact_bytes, SLAB_SIZE);
    return 0;
}

/* ---- page merging ------------------------------------------------------
 * A slab that fits no survivor as a whole may still fit page by page: its
 * 4 KiB page p is mapped onto a page t of a survivor where the objects
 * lie at the same offsets in the page (any page when the size divides
 * 4 KiB) and whose live objects there are disjoint from its own; an
 * object keeps its offset in the page and becomes the survivor's slot
 * there. Its pages may go to different survivors; pages without live
 * objects show a read-only zero page; objects straddling two pages tie
 * them to consecutive pages of one survivor. Only a slab whose every live
 * page finds a survivor is merged this way, so that its whole chunk goes
 * back to the pool. The slab becomes a page alias (SLAB_ALIAS, paged,
 * page_into[] and page_at[]); its survivors count its pages in `hosting`
 * and are never merged away themselves (they stay where they are until
 * they empty, when drop_page_aliases puts zero pages there). */

static int page_map(char *src, char *at)
{
    void *r = mremap(src, 0, HEAP_PAGE, MREMAP_MAYMOVE | MREMAP_FIXED, at);
    return r == MAP_FAILED ? FMEM_EIO : 0;
}

static int page_zero(char *at)
{
    void *r = mmap(at, HEAP_PAGE, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE,
                   -1, 0);
    return r == MAP_FAILED ? FMEM_EIO : 0;
}

/* Objects of s overlapping pages [p0, p1]: [*lo, *hi). */
static void page_objs(const struct slab *s, unsigned p0, unsigned p1, uint32_t *lo, uint32_t *hi)
{
    *lo = (uint32_t)(p0 * HEAP_PAGE / s->obj_size);
    uint32_t e = (uint32_t)(((p1 + 1) * HEAP_PAGE + s->obj_size - 1) / s->obj_size);
    *hi = e < s->capacity ? e : s->capacity;
}

static uint64_t range_mask(uint32_t w, uint32_t lo, uint32_t hi)
{
    uint32_t a = w * 64 > lo ? 0 : lo - w * 64, b = hi - w * 64 >= 64 ? 64 : hi - w * 64;
    uint64_t m = b == 64 ? ~(uint64_t)0 : ((uint64_t)1 << b) - 1;
    return m & ~(((uint64_t)1 << a) - 1);
}

/* Whether a and b share a live object among [lo, hi) (hi > lo). */
static int range_overlap(const uint64_t *a, const uint64_t *b, uint32_t lo, uint32_t hi)
{
    for (uint32_t w = lo / 64; w <= (hi - 1) / 64; w++)
        if (a[w] & b[w] & range_mask(w, lo, hi))
            return 1;
    return 0;
}

static unsigned range_count(const uint64_t *a, uint32_t lo, uint32_t hi)
{
    unsigned n = 0;
    for (uint32_t w = lo / 64; hi > lo && w <= (hi - 1) / 64; w++)
        n += (unsigned)__builtin_popcountll(a[w] & range_mask(w, lo, hi));
    return n;
}

static int range_any(const uint64_t *a, uint32_t lo, uint32_t hi)
{
    return range_overlap(a, a, lo, hi);
}

static int live_at(const uint64_t *b, uint32_t i)
{
    return b[i / 64] >> (i % 64) & 1;
}

/* n <= 64 bits of b from bit `at` (all within the slab's capacity) */
static uint64_t bits_get(const uint64_t *b, uint32_t at, unsigned n)
{
    uint32_t w = at / 64, sh = at % 64;
    uint64_t x = b[w] >> sh;
    if (sh && sh + n > 64)
        x |= b[w + 1] << (64 - sh);
    return n == 64 ? x : x & (((uint64_t)1 << n) - 1);
}

/* Whether v's live objects [lo, hi) meet a's [lo + d, hi + d). */
static int shifted_overlap(const uint64_t *v, const uint64_t *a, uint32_t lo, uint32_t hi,
                           int32_t d)
{
    for (uint32_t x = lo; x < hi; x += 64) {
        unsigned n = hi - x < 64 ? hi - x : 64;
        if (bits_get(v, x, n) & bits_get(a, (uint32_t)((int32_t)x + d), n))
            return 1;
    }
    return 0;
}

/* Pages among [t, t + n) of s without memory (a slab backed page by page). */
static unsigned unbacked(const struct slab *s, unsigned t, unsigned n)
{
    const struct slab_pages *pb = s->span.pb;
    unsigned k = 0;
    for (unsigned x = t; pb && x < t + n; x++)
        k += !(pb->backed >> x & 1);
    return k;
}

/* A survivor page for every live page of c[i] among c[from..k-1] (not
 * dead, not c[i]), first fit from the fullest survivor and its first
 * page: 1 with host[] and at[], or 0. A group of pages tied by straddling
 * objects goes to as many consecutive pages of one survivor, and only
 * where the objects lie at the same offsets in those pages (any page for
 * sizes that divide 4 KiB); two groups never share a survivor page.
 * Pages of survivors backed page by page that have no memory yet are
 * taken only where no page with memory fits; *fresh counts them (each
 * needs a 4 KiB block). */
static int page_place(struct cand *c, size_t k, size_t i, size_t from, int best_fit,
                      struct cand **host, uint8_t *at, unsigned *fresh)
{
    struct cand *v = &c[i];
    const struct slab *s = v->s;
    *fresh = 0;
    for (unsigned p = 0; p < NPAGES;) {
        unsigned q = p; /* the group [p, q]: joined by live straddling objects */
        for (;;) {
            size_t b = (size_t)(q + 1) * HEAP_PAGE;
            uint32_t idx = (uint32_t)(b / s->obj_size);
            if (q + 1 < NPAGES && b % s->obj_size && idx < s->capacity && live_at(v->live, idx))
                q++;
            else
                break;
        }
        uint32_t lo, hi;
        page_objs(s, p, q, &lo, &hi);
        struct cand *to = NULL;
        unsigned t = 0, nb = 0;
        if (hi > lo && range_any(v->live, lo, hi)) {
            /* pages with memory: best fit, the survivor page with the most
             * live objects there (packs pages tighter than first fit);
             * then pages without memory, first fit */
            unsigned best = 0, bt = 0;
            for (int pass = 0; pass < 2 && !to; pass++)
                for (size_t j = k; j-- > from && !((pass || !best_fit) && to);) {
                    if (j == i || c[j].dead || (pass && !c[j].s->span.pb))
                        continue;
                    for (unsigned u = 0; u + (q - p) < NPAGES; u++) {
                        int64_t shift = ((int64_t)u - (int64_t)p) * (int64_t)HEAP_PAGE;
                        if (shift % (int64_t)s->obj_size)
                            continue; /* objects at other offsets there */
                        int32_t d = (int32_t)(shift / (int64_t)s->obj_size);
                        if ((int64_t)hi + d > s->capacity || (int64_t)lo + d < 0)
                            continue;
                        unsigned ub = unbacked(c[j].s, u, q - p + 1);
                        if (pass ? ub == 0 : ub != 0)
                            continue;
                        int taken = 0; /* by an earlier group of v */
                        for (unsigned x = 0; x < p && !taken; x++)
                            taken = host[x] == &c[j] && at[x] >= u && at[x] <= u + (q - p);
                        if (taken || shifted_overlap(v->live, c[j].live, lo, hi, d))
                            continue;
                        unsigned score = pass ? 1 : 1 + range_count(c[j].live, (uint32_t)((int32_t)lo + d),
                                                                (uint32_t)((int32_t)hi + d));
                        if (score > best) {
                            best = score;
                            to = &c[j];
                            bt = u;
                            nb = ub;
                        }
                        if (pass || !best_fit)
                            break;
                    }
                }
            t = bt;
            if (!to)
                return 0;
            *fresh += nb;
        }
        for (unsigned x = p; x <= q; x++) {
            host[x] = to;
            at[x] = (uint8_t)(to ? t + (x - p) : 0);
        }
        p = q + 1;
    }
    return 1;
}

/* A 4 KiB pool block: its handle and where the pool maps it. */
static int block_get(struct fmem_heap *h, fmem_handle *bh, char **src)
{
    int rc = fmem_alloc(h->pool, HEAP_PAGE, bh);
    if (rc)
        return rc;
    if ((rc = fmem_map(h->pool, bh, (void **)src)) != 0) {
        fmem_free(h->pool, bh);
        return rc;
    }
    heap_account(h, (int64_t)HEAP_PAGE);
    return 0;
}

static void block_put(struct fmem_heap *h, fmem_handle *bh)
{
    fmem_free(h->pool, bh);
    heap_account(h, -(int64_t)HEAP_PAGE);
}

/* Page t of s (backed page by page, none there yet) gets a block. Its
 * objects join s's free list when the caller rebuilds it. */
static int back_page(struct fmem_heap *h, struct slab *s, unsigned t)
{
    struct slab_pages *pb = s->span.pb;
    char *va = s->start + (size_t)t * HEAP_PAGE;
    int rc = block_get(h, &pb->h[t], &pb->src[t]);
    if (rc)
        return rc;
    if ((rc = page_map(pb->src[t], va)) != 0 || (rc = pagemap_set(&h->map, va, HEAP_PAGE, s))) {
        page_zero(va);
        block_put(h, &pb->h[t]);
        return rc;
    }
    pb->backed |= (uint16_t)(1u << t);
    return 0;
}

/* Copy n bytes at offset off of s's range to offset to of d's range,
 * through the pool's mappings, a page at a time (off and to lie at the
 * same offset within their pages). */
static void copy_through_pool(struct slab *d, size_t to, const struct slab *s, size_t off,
                              size_t n)
{
    while (n) {
        size_t in = off % HEAP_PAGE, part = HEAP_PAGE - in < n ? HEAP_PAGE - in : n;
        memcpy(page_src(d, (unsigned)(to / HEAP_PAGE)) + in,
               page_src(s, (unsigned)(off / HEAP_PAGE)) + in, part);
        off += part;
        to += part;
        n -= part;
    }
}

/* v's memory goes back to the pool: its chunk, or its blocks. */
static void slab_memory_put(struct fmem_heap *h, struct span *sp)
{
    if (sp->pb) {
        for (unsigned p = 0; p < NPAGES; p++)
            if (sp->pb->backed >> p & 1)
                block_put(h, &sp->pb->h[p]);
        free(sp->pb);
        sp->pb = NULL;
    } else {
        fmem_free(h->pool, &sp->h);
        heap_account(h, -(int64_t)SLAB_SIZE);
    }
    sp->src = NULL;
    memset(&sp->h, 0, sizeof sp->h);
}

/* v's live objects into their survivors' chunks, v's pages onto those
 * chunks (or the zero page), v's memory back. The caller holds off remote
 * frees (slab_lock) of v and of every survivor. */
static int page_merge(struct theap *th, struct cand *v, struct cand **host, const uint8_t *at)
{
    struct fmem_heap *h = th->heap;
    struct heap_compact *c = h->compact;
    struct slab *sv = v->s;
    int64_t freed = sv->span.pb ? (int64_t)__builtin_popcount(sv->span.pb->backed) * (int64_t)HEAP_PAGE
                                : (int64_t)SLAB_SIZE;
    for (unsigned p = 0; p < NPAGES; p++) /* survivor pages without memory get some */
        if (host[p] && host[p]->s->span.pb && !(host[p]->s->span.pb->backed >> at[p] & 1)) {
            host[p]->rebuilt = 1; /* its new page's objects join its free list */
            int rc = back_page(h, host[p]->s, at[p]);
            if (rc)
                return rc; /* the pages backed so far stay, as free room */
            freed -= (int64_t)HEAP_PAGE;
        }
    if (fence_up(c, sv))
        return FMEM_EIO;
    for (unsigned p = 0; p < NPAGES; p++)
        if (host[p])
            host[p]->rebuilt = 1;
    size_t words = (sv->capacity + 63) / 64;
    for (size_t w = 0; w < words; w++) /* through the pool's mappings */
        for (uint64_t bits = v->live[w]; bits; bits &= bits - 1) {
            size_t off = (w * 64 + (size_t)__builtin_ctzll(bits)) * sv->obj_size;
            size_t pg = off / HEAP_PAGE, to = off + ((size_t)at[pg] - pg) * HEAP_PAGE;
            copy_through_pool(host[pg]->s, to, sv, off, sv->obj_size);
        }
    hook(1);
    int rc = 0;
    unsigned p;
    for (p = 0; p < NPAGES && rc == 0; p++) {
        char *va = sv->start + p * HEAP_PAGE;
        rc = host[p] ? page_map(page_src(host[p]->s, at[p]), va) : page_zero(va);
    }
    if (rc) { /* the pages show v's memory again */
        for (unsigned q = 0; q < p; q++) {
            char *va = sv->start + q * HEAP_PAGE;
            if (sv->span.pb && !(sv->span.pb->backed >> q & 1))
                page_zero(va);
            else
                page_map(page_src(sv, q), va);
        }
        if (c->uffd >= 0)
            fence_undo(c->uffd, sv->start);
        fence_down(c, sv);
        return rc;
    }
    fence_down(c, sv);
    hook(2);
    uint32_t pages = 0;
    for (size_t w = 0; w < words; w++)
        for (uint64_t bits = v->live[w]; bits; bits &= bits - 1) {
            uint32_t i = (uint32_t)(w * 64 + (size_t)__builtin_ctzll(bits));
            size_t pg = (size_t)i * sv->obj_size / HEAP_PAGE;
            struct cand *a = host[pg];
            uint32_t ai = (uint32_t)((int64_t)i + ((int64_t)at[pg] - (int64_t)pg) *
                                                     (int64_t)HEAP_PAGE / (int64_t)sv->obj_size);
            a->live[ai / 64] |= (uint64_t)1 << (ai % 64);
            a->s->used++;
            if (ai >= a->s->bump)
                a->s->bump = ai + 1;
        }
    struct span mem = sv->span;
    slab_unlink(th, sv);
    if (sv->span.pb) /* pages without memory were out of the page map */
        pagemap_set(&h->map, sv->start, SLAB_SIZE, sv);
    for (p = 0; p < NPAGES; p++) {
        sv->page_into[p] = host[p] ? host[p]->s : NULL;
        sv->page_at[p] = at[p];
        if (host[p]) {
            host[p]->s->hosting++;
            pages++;
        }
    }
    sv->into = NULL;
    sv->paged = 1;
    sv->kind = SLAB_ALIAS;
    sv->used = pages; /* pages still mapped onto a survivor */
    sv->free = sv->local_free = NULL;
    sv->span.src = NULL;
    sv->span.pb = NULL;
    memset(&sv->span.h, 0, sizeof sv->span.h);
    atomic_store_explicit(&sv->owner, NULL, memory_order_relaxed);
    pthread_mutex_lock(&c->plock);
    sv->pnext = c->palias;
    c->palias = sv;
    pthread_mutex_unlock(&c->plock);
    atomic_store(&sv->thread_free, TF_FORWARD); /* waiting freers retry */
    v->dead = 1;
    hook(3);
    slab_memory_put(h, &mem);
    atomic_fetch_sub(&h->st.slabs, 1);
    atomic_fetch_add(&h->st.merges, 1);
    atomic_fetch_add(&h->st.page_merges, 1);
    atomic_fetch_add(&h->st.compact_bytes, (uint64_t)freed);
    return 0;
}

/* A kept slab gives back the memory of its pages that hold no live
 * object: a slab backed by one chunk gets a 4 KiB block for each page
 * that does (copied there whole, under the fence), the others show a
 * read-only zero page and leave the page map, and the chunk goes back; a
 * slab backed page by page gives back the blocks of its empty pages.
 * Only for slabs that no range maps besides their own (no aliases, no
 * pages of page aliases on them). The bytes given back (0: nothing
 * changed, also on an error). */
static int64_t page_back(struct theap *th, struct cand *a)
{
    struct fmem_heap *h = th->heap;
    struct heap_compact *c = h->compact;
    struct slab *s = a->s;
    uint16_t want = 0;
    for (unsigned p = 0; p < NPAGES; p++) {
        uint32_t lo, hi;
        page_objs(s, p, p, &lo, &hi);
        if (hi > lo && range_any(a->live, lo, hi))
            want |= (uint16_t)(1u << p);
    }
    struct slab_pages *pb = s->span.pb;
    int64_t gone = 0;
    if (pb) { /* no live object there: nothing to fence */
        uint16_t drop = pb->backed & (uint16_t)~want;
        for (unsigned p = 0; p < NPAGES; p++)
            if (drop >> p & 1) {
                char *va = s->start + (size_t)p * HEAP_PAGE;
                if (page_zero(va))
                    continue;
                pagemap_set(&h->map, va, HEAP_PAGE, NULL);
                pb->backed &= (uint16_t)~(1u << p);
                block_put(h, &pb->h[p]);
                a->rebuilt = 1;
                gone += (int64_t)HEAP_PAGE;
            }
        atomic_fetch_add(&h->st.compact_bytes, (uint64_t)gone);
        return gone;
    }
    if (want == (uint16_t)((1u << NPAGES) - 1))
        return 0; /* every page holds objects: nothing to give back */
    if (!(pb = calloc(1, sizeof *pb)))
        return 0;
    int rc = 0;
    unsigned p;
    uint16_t got = 0;
    for (p = 0; p < NPAGES && rc == 0; p++)
        if (want >> p & 1 && (rc = block_get(h, &pb->h[p], &pb->src[p])) == 0)
            got |= (uint16_t)(1u << p);
    if (rc == 0)
        rc = fence_up(c, s);
    if (rc) {
        for (unsigned q = 0; q < NPAGES; q++)
            if (got >> q & 1)
                block_put(h, &pb->h[q]);
        free(pb);
        return 0;
    }
    for (p = 0; p < NPAGES; p++) /* whole pages: free objects keep their keys */
        if (want >> p & 1)
            memcpy(pb->src[p], s->span.src + (size_t)p * HEAP_PAGE, HEAP_PAGE);
    hook(1);
    for (p = 0; p < NPAGES && rc == 0; p++) {
        char *va = s->start + (size_t)p * HEAP_PAGE;
        rc = want >> p & 1 ? page_map(pb->src[p], va) : page_zero(va);
    }
    if (rc) { /* the pages show the chunk again */
        for (unsigned q = 0; q < p; q++)
            page_map(s->span.src + (size_t)q * HEAP_PAGE, s->start + (size_t)q * HEAP_PAGE);
        if (c->uffd >= 0)
            fence_undo(c->uffd, s->start);
        fence_down(c, s);
        for (unsigned q = 0; q < NPAGES; q++)
            if (want >> q & 1)
                block_put(h, &pb->h[q]);
        free(pb);
        return 0;
    }
    fence_down(c, s);
    hook(2);
    for (p = 0; p < NPAGES; p++)
        if (!(want >> p & 1))
            pagemap_set(&h->map, s->start + (size_t)p * HEAP_PAGE, HEAP_PAGE, NULL);
    struct span chunk = s->span;
    pb->backed = want;
    s->span.pb = pb;
    s->span.src = NULL;
    memset(&s->span.h, 0, sizeof s->span.h);
    s->bump = s->capacity; /* the free list, rebuilt, holds every other object */
    a->rebuilt = 1;
    hook(3);
    slab_memory_put(h, &chunk);
    gone = (int64_t)(NPAGES - (unsigned)__builtin_popcount(want)) * (int64_t)HEAP_PAGE;
    atomic_fetch_add(&h->st.page_backs, 1);
    atomic_fetch_add(&h->st.compact_bytes, (uint64_t)gone);
    return gone;
}

/* A slab of class cls backed page by page with no page yet, its remote
 * frees held off like the other candidates': room for victims' pages
 * that fit no survivor (each page used takes a block). */
static struct slab *overflow_new(struct theap *th, unsigned cls)
{
    struct heap_compact *c = th->heap->compact;
    struct span sp = {.len = SLAB_SIZE};
    if (!(sp.pb = calloc(1, sizeof *sp.pb)))
        return NULL;
    int mapped;
    struct slab *s = NULL;
    if ((sp.ptr = slot_take(c, NULL, &mapped)) != NULL &&
        mmap(sp.ptr, SLAB_SIZE, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE,
             -1, 0) != MAP_FAILED)
        s = slab_new_over(th, cls, &sp);
    if (!s) {
        if (sp.ptr)
            slot_give(c, sp.ptr, NULL);
        free(sp.pb);
        return NULL;
    }
    atomic_store(&s->thread_free, TF_LOCKED);
    return s;
}

/* Pages of v that hold live objects. */
static unsigned live_pages(const struct cand *v)
{
    unsigned n = 0;
    for (unsigned p = 0; p < NPAGES; p++) {
        uint32_t lo, hi;
        page_objs(v->s, p, p, &lo, &hi);
        n += hi > lo && range_any(v->live, lo, hi);
    }
    return n;
}

static int cand_cmp(const void *x, const void *y)
{
    const struct cand *a = x, *b = y;
    return (a->s->used > b->s->used) - (a->s->used < b->s->used);
}

static void unlock_all(struct fmem_heap *h, struct cand *c, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!c[i].dead) {
            if (c[i].rebuilt)
                rebuild_free(h, c[i].s, c[i].live);
            atomic_store(&c[i].s->thread_free, NULL);
        }
}

/* The candidates of a class and the slabs of blocks made for pages of
 * victims that fit no survivor: c[0..k), at most max in all; open: the
 * one with pages left (0: none). */
struct overflow {
    struct cand *c;
    size_t k, open, max;
    uint64_t *bits;
    size_t words;
    unsigned cls;
};

/* Merge c[i] page by page onto candidates from c[from] on (other than
 * itself), taking blocks for pages that fit nowhere (on slabs of blocks)
 * only if it then needs fewer than the pages it would keep: 0 with
 * *freed, the pool bytes given back, or 1 (not merged) or an error. */
static int try_pages(struct theap *th, struct overflow *ov, size_t i, size_t from, int64_t *freed)
{
    struct cand *c = ov->c, *v = &c[i];
    struct cand *host[NPAGES];
    uint8_t at[NPAGES];
    unsigned fresh, need = live_pages(v);
    int ok = page_place(c, ov->k, i, from, from > i, host, at, &fresh) && fresh < need;
    if (!ok && ov->k < ov->max && th->heap->compact->pageback) {
        if (ov->open == 0 || c[ov->open].s->span.pb->backed == (uint16_t)((1u << NPAGES) - 1)) {
            struct slab *o = overflow_new(th, ov->cls);
            if (o) {
                c[ov->k] = (struct cand){.s = o, .live = ov->bits + ov->k * ov->words};
                ov->open = ov->k++;
            }
        }
        if (ov->open)
            ok = page_place(c, ov->k, i, from, from > i, host, at, &fresh) && fresh < need;
    }
    if (!ok)
        return 1;
    const struct slab_pages *pb = v->s->span.pb;
    int64_t mem = pb ? (int64_t)__builtin_popcount(pb->backed) * (int64_t)HEAP_PAGE
                     : (int64_t)SLAB_SIZE;
    int rc = page_merge(th, v, host, at);
    *freed = mem - (int64_t)fresh * (int64_t)HEAP_PAGE;
    return rc;
}

/* ---- repacking small classes page by page ------------------------------
 * In the classes of small objects whole slabs almost never fit each
 * other, and page merges onto the slabs kept by first fit decreasing
 * leave those slabs' own sparse pages where they are (a slab hosting
 * pages never moves). Here first fit decreasing runs over the pages
 * instead: every live page of the class's slabs that may move (or a
 * group of pages that live objects straddle), fullest first, goes onto
 * the first kept pages where its objects lie at the same offsets in the
 * page and do not meet live ones, or is kept itself, at the first such
 * free place on a new slab of blocks. Each kept page gets a 4 KiB block,
 * and every slab is merged page by page onto them (page_merge: objects
 * keep their offsets within the page, two pages of one slab may share a
 * kept page). Up to 192 B objects: on fmem-fragbench's defaults the
 * 256 and 512 B classes ended on as many pages as without, the 384 B
 * class on 8 % more. */
#define REPACK_MAX 192

struct rgroup {
    uint32_t i;     /* candidate */
    uint8_t p, q;   /* its pages [p, q] */
    uint8_t at;     /* the first page it goes to */
    uint16_t n;     /* live objects there */
    uint32_t os;    /* the new slab it goes to */
};

static int rgroup_cmp(const void *x, const void *y)
{
    const struct rgroup *a = x, *b = y;
    if (a->n != b->n)
        return a->n < b->n ? 1 : -1;
    return a->i != b->i ? (a->i > b->i) - (a->i < b->i) : (a->p > b->p) - (a->p < b->p);
}

static int rgroup_by_slab(const void *x, const void *y)
{
    const struct rgroup *a = x, *b = y;
    return a->i != b->i ? (a->i > b->i) - (a->i < b->i) : (a->p > b->p) - (a->p < b->p);
}

static void shifted_or(uint64_t *to, const uint64_t *from, uint32_t lo, uint32_t hi, int32_t d)
{
    for (uint32_t x = lo; x < hi; x++)
        if (live_at(from, x))
            to[(uint32_t)((int32_t)x + d) / 64] |= (uint64_t)1 << ((uint32_t)((int32_t)x + d) % 64);
}

/* Repack the candidates c[0..ov->k) of one class; the pool bytes given
 * back. Slabs that host pages or carry whole-slab aliases stay as they
 * are; nothing happens unless the pages kept are at most 3/4 of the
 * pages that hold live objects. */
static int64_t repack(struct theap *th, struct overflow *ov, uint64_t *left)
{
    struct cand *c = ov->c;
    size_t k = ov->k, maxos = ov->max - ov->k;
    uint32_t size = heap_class_size[ov->cls], cap = (uint32_t)(SLAB_SIZE / size);
    unsigned period = 1; /* pages u, p hold objects at the same offsets iff u = p mod period */
    while ((period * HEAP_PAGE) % size)
        period++;
    struct rgroup *g = malloc(k * NPAGES * sizeof *g);
    uint64_t *pl = calloc(maxos * ov->words, sizeof *pl); /* planned live objects */
    uint16_t *busy = calloc(maxos, sizeof *busy);           /* planned pages */
    int64_t got = 0;
    if (!g || !pl || !busy)
        goto out;
    size_t n = 0, nos = 0, pages = 0;
    uint64_t cost = 0;
    for (size_t i = 0; i < k; i++) {
        const struct slab *s = c[i].s;
        uint64_t ci = (uint64_t)s->used * size;
        if (c[i].dead || s->hosting || s->merged || cost + ci > *left)
            continue;
        cost += ci;
        for (unsigned p = 0; p < NPAGES;) {
            unsigned q = p; /* tied to the next page by a live object across */
            for (;;) {
                size_t b = (size_t)(q + 1) * HEAP_PAGE;
                uint32_t idx = (uint32_t)(b / size);
                if (q + 1 < NPAGES && b % size && idx < cap && live_at(c[i].live, idx))
                    q++;
                else
                    break;
            }
            uint32_t lo, hi;
            page_objs(s, p, q, &lo, &hi);
            unsigned m = hi > lo ? range_count(c[i].live, lo, hi) : 0;
            if (m) {
                g[n++] = (struct rgroup){.i = (uint32_t)i, .p = (uint8_t)p, .q = (uint8_t)q,
                                         .n = (uint16_t)m};
                pages += q - p + 1;
            }
            p = q + 1;
        }
    }
    qsort(g, n, sizeof *g, rgroup_cmp);
    for (size_t r = 0; r < n; r++) {
        const struct cand *v = &c[g[r].i];
        unsigned p = g[r].p, len = g[r].q - p + 1;
        uint16_t span = (uint16_t)(((1u << len) - 1));
        uint32_t lo, hi;
        page_objs(v->s, p, g[r].q, &lo, &hi);
        size_t to = nos;
        unsigned at = 0;
        for (int fresh = 0; fresh < 2 && to == nos; fresh++) /* kept pages, then unused ones */
            for (size_t os = 0; os <= nos && os < maxos && to == nos; os++) {
                if (os == nos && !fresh)
                    break;
                for (unsigned u = p % period; u + len <= NPAGES; u += period) {
                    uint16_t m = (uint16_t)(span << u);
                    if (fresh ? (busy[os] & m) != 0 : (busy[os] & m) != m)
                        continue;
                    int32_t d = (int32_t)(((int64_t)u - (int64_t)p) * (int64_t)HEAP_PAGE / (int64_t)size);
                    if ((int64_t)lo + d < 0 || (int64_t)hi + d > cap)
                        continue;
                    const uint64_t *b = pl + os * ov->words;
                    if (!fresh && shifted_overlap(v->live, b, lo, hi, d))
                        continue;
                    to = os; /* first fit */
                    at = u;
                    break;
                }
            }
        if (to == nos) {
            if (nos == maxos)
                goto out; /* no room planned: nothing done */
            nos++;
        }
        int32_t d = (int32_t)(((int64_t)at - (int64_t)p) * (int64_t)HEAP_PAGE / (int64_t)size);
        busy[to] |= (uint16_t)(span << at);
        shifted_or(pl + to * ov->words, v->live, lo, hi, d);
        g[r].os = (uint32_t)to;
        g[r].at = (uint8_t)at;
    }
    size_t kept = 0;
    for (size_t os = 0; os < nos; os++)
        kept += (size_t)__builtin_popcount(busy[os]);
    if (n == 0 || 4 * kept > 3 * pages)
        goto out;
    size_t first = ov->k;
    for (size_t x = 0; x < nos; x++) {
        struct slab *o = overflow_new(th, ov->cls);
        if (!o)
            goto out; /* the slabs made so far hold no page: dropped later */
        c[ov->k] = (struct cand){.s = o, .live = ov->bits + ov->k * ov->words};
        ov->open = ov->k++;
    }
    /* each slab onto the kept pages: its groups are together now */
    qsort(g, n, sizeof *g, rgroup_by_slab);
    for (size_t r = 0, e; r < n; r = e) {
        struct cand *v = &c[g[r].i];
        struct cand *host[NPAGES] = {0};
        uint8_t at[NPAGES] = {0};
        for (e = r; e < n && g[e].i == g[r].i; e++)
            for (unsigned pg = g[e].p; pg <= g[e].q; pg++) {
                host[pg] = &c[first + g[e].os];
                at[pg] = (uint8_t)(g[e].at + (pg - g[e].p));
            }
        uint64_t ci = (uint64_t)v->s->used * size;
        if (ci > *left)
            continue;
        const struct slab_pages *pb = v->s->span.pb;
        int64_t mem = pb ? (int64_t)__builtin_popcount(pb->backed) * (int64_t)HEAP_PAGE
                         : (int64_t)SLAB_SIZE;
        for (unsigned p = 0; p < NPAGES; p++) { /* a block for each kept page new here */
            int seen = 0;
            for (unsigned q = 0; q < p && !seen; q++)
                seen = host[q] == host[p] && at[q] == at[p];
            if (host[p] && !seen && !(host[p]->s->span.pb->backed >> at[p] & 1))
                mem -= (int64_t)HEAP_PAGE;
        }
        if (page_merge(th, v, host, at) == 0) {
            *left -= ci;
            got += mem;
        }
    }
out:
    free(g);
    free(pl);
    free(busy);
    return got;
}

/* Compact one class of th; *left: bytes that may still be copied. */
static int64_t compact_class(struct theap *th, unsigned cls, uint64_t *left)
{
    struct fmem_heap *h = th->heap;
    size_t n = 0;
    for (struct slab *s = th->avail[cls]; s; s = s->next)
        n++;
    if (n < 2)
        return 0;
    uint32_t cap = (uint32_t)(SLAB_SIZE / heap_class_size[cls]);
    size_t words = (cap + 63) / 64;
    /* room for as many slabs of blocks made for victims' pages (below) */
    struct cand *c = calloc(2 * n, sizeof *c);
    uint64_t *bits = calloc(2 * n * words, sizeof *bits);
    if (!c || !bits) {
        free(c);
        free(bits);
        return 0;
    }
    size_t k = 0;
    for (struct slab *s = th->avail[cls]; s; s = s->next)
        if (s->kind == SLAB_SMALL && s->capacity == cap &&
            atomic_load(&s->full_state) == NOT_FULL) {
            c[k].s = s;
            c[k].live = bits + k * words;
            k++;
        }
    for (size_t i = 0; i < k; i++)
        slab_lock(c[i].s);
    for (size_t i = 0; i < k; i++)
        live_bits(c[i].s, c[i].live);
    qsort(c, k, sizeof *c, cand_cmp); /* least used first */
    int64_t got = 0;
    /* First fit decreasing: from the fullest slab down, each goes into the
     * first (fullest) slab kept so far whose live objects it does not
     * overlap, or is kept itself. (Least used victims into the fullest
     * survivor left about 5-15 % more slabs: fmem-fragbench --analyze.)
     * A slab no kept slab takes whole is tried page by page. */
    struct overflow ov = {c, k, 0, 2 * n, bits, words, cls};
    /* When a kept slab gives back its empty pages: as soon as it is kept
     * (victims can then take its pages without memory, but it takes no
     * whole victim, so more slabs go page by page), or after both passes.
     * Early packs small objects tighter (fmem-fragbench defaults: 1.51x
     * against 1.53x); late is 2-3x faster for objects of 1 KiB and more,
     * a few to a page, where it leaves as few bytes (within 1 %). */
    int early = h->compact->pageback && heap_class_size[cls] <= 512;
    int late = h->compact->pageback && !early;
    uint32_t size = heap_class_size[cls];
    if (h->compact->repack && size <= REPACK_MAX)
        got += repack(th, &ov, left);
    for (size_t i = k; i-- > 0;) {
        struct cand *v = &c[i];
        uint64_t cost = (uint64_t)v->s->used * v->s->obj_size;
        if (v->dead || cost > *left || v->s->hosting) /* page survivors stay */
            continue;
        size_t j = i;
        if (!v->s->span.pb) /* whole merges: of slabs backed by one chunk */
            for (j = k; --j > i;) {
                struct cand *a = &c[j];
                if (!a->dead && !a->s->span.pb && a->s->used + v->s->used <= cap &&
                    disjoint(a->live, v->live, words))
                    break;
            }
        int rc = 1;
        int64_t freed = (int64_t)SLAB_SIZE;
        if (j > i) /* the whole slab fits one survivor */
            rc = merge(th, &c[j], v);
        else if (h->compact->pages && !v->s->merged) /* page by page */
            rc = try_pages(th, &ov, i, i + 1, &freed);
        if (rc == 0) {
            *left -= cost;
            got += freed;
        } else if (early && !v->s->merged && !v->s->hosting) {
            int64_t g = page_back(th, v); /* kept: its empty pages' memory goes back */
            if (g > 0)
                *left -= cost; /* within the budget: checked above */
            got += g;
        }
    }
    /* The slabs kept, least used first, page by page onto all the others
     * (the pass above offered each only the slabs fuller than itself). */
    for (size_t i = 0; h->compact->pageback && i < k; i++) {
        struct cand *v = &c[i];
        uint64_t cost = (uint64_t)v->s->used * v->s->obj_size;
        int64_t freed;
        if (v->dead || v->s->hosting || v->s->merged || cost > *left)
            continue;
        if (try_pages(th, &ov, i, 0, &freed) == 0) {
            *left -= cost;
            got += freed;
        }
    }
    for (size_t i = 0; late && i < k; i++) { /* the kept slabs give back empty pages */
        uint64_t cost = (uint64_t)c[i].s->used * c[i].s->obj_size; /* copied, about */
        if (!c[i].dead && !c[i].s->merged && !c[i].s->hosting && cost <= *left) {
            int64_t g = page_back(th, &c[i]);
            if (g > 0)
                *left -= cost;
            got += g;
        }
    }
    unlock_all(h, c, ov.k);
    for (size_t x = k; x < ov.k; x++) /* slabs of blocks no page went to */
        if (c[x].s->span.pb->backed == 0)
            slab_drop(th, c[x].s);
    free(c);
    free(bits);
    return got;
}

/* Caller: exclusive access to th (its thread, or its lock with no owner). */
static int64_t compact_theap(struct theap *th, uint64_t *left)
{
    theap_collect(th, 0);
    int64_t got = 0;
    for (unsigned cls = 0; cls < NCLASSES && *left; cls++)
        got += compact_class(th, cls, left);
    return got;
}

int compact_merge_pair(struct theap *th, struct slab *a, struct slab *b)
{
    if (!th || !a || !b)
        return FMEM_EINVAL;
    if (a == b || a->kind == SLAB_ALIAS || b->kind == SLAB_ALIAS || b->hosting || a->span.pb ||
        b->span.pb)
        return FMEM_EBUSY;
    if (a->kind != SLAB_SMALL || b->kind != SLAB_SMALL || a->cls != b->cls ||
        !th->heap->compact || atomic_load(&a->owner) != th || atomic_load(&b->owner) != th ||
        a->list != LIST_AVAIL || b->list != LIST_AVAIL)
        return FMEM_EINVAL;
    size_t words = (a->capacity + 63) / 64;
    uint64_t *bits = calloc(2 * words, sizeof *bits);
    if (!bits)
        return FMEM_ENOMEM;
    struct cand c[2] = {{.s = a, .live = bits}, {.s = b, .live = bits + words}};
    slab_lock(a);
    slab_lock(b);
    live_bits(a, c[0].live);
    live_bits(b, c[1].live);
    int rc = a->used + b->used > a->capacity || !disjoint(c[0].live, c[1].live, words)
                 ? FMEM_ERANGE
                 : merge(th, &c[0], &c[1]);
    unlock_all(th->heap, c, 2);
    free(bits);
    return rc;
}

int compact_auto_due(struct theap *th)
{
    struct heap_compact *c = th->heap->compact;
    return (atomic_load_explicit(&c->flags, memory_order_relaxed) & FMEM_COMPACT_AUTO) &&
           atomic_load_explicit(&c->since, memory_order_relaxed) >=
               atomic_load_explicit(&c->interval, memory_order_relaxed);
}

void compact_auto(struct theap *th)
{
    struct heap_compact *c = th->heap->compact;
    atomic_store(&c->since, 0);
    uint64_t left = atomic_load(&c->budget);
    if (!left)
        left = UINT64_MAX;
    compact_theap(th, &left);
}

/* ---- fork ---------------------------------------------------------------
 * The slots map the pool's shared pages: a fork child would write into the
 * parent's objects through them. In the child every slab range becomes a
 * private copy (moved over the slot in one mremap); the ranges of a merged
 * slab become copies of their own, each showing the objects reached
 * through it. Merging in the child then fails for inherited slabs (their
 * chunks are private copies now, which cannot be mapped twice) and works
 * for new ones. */
static void privatize(char *at)
{
    void *tmp = mmap(NULL, SLAB_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (tmp == MAP_FAILED)
        return;
    memcpy(tmp, at, SLAB_SIZE);
    if (mremap(tmp, SLAB_SIZE, SLAB_SIZE, MREMAP_MAYMOVE | MREMAP_FIXED, at) == MAP_FAILED)
        munmap(tmp, SLAB_SIZE);
}

static void privatize_list(struct slab *s)
{
    for (; s; s = s->next) {
        privatize(s->start);
        for (struct slab *a = s->merged; a; a = a->merged)
            privatize(a->start);
    }
}

void compact_fork_child(struct fmem_heap *h)
{
    if (!h->compact)
        return;
    /* free slots that map a chunk: it is the parent's; make them private
     * copies and forget the chunk (they get mapped over when reused) */
    struct heap_compact *c = h->compact;
    if (c->uffd >= 0) { /* the parent's: its ranges are not this process's */
        close(c->uffd);
        c->uffd = fence_open();
    }
    for (size_t i = 0; i < c->tab_cap; i++)
        if (c->tab[i].slot && c->tab[i].slot != TOMB) {
            privatize(c->tab[i].slot);
            c->tab[i].src = TOMB; /* matches no chunk */
        }
    for (struct slab *v = c->palias; v; v = v->pnext)
        privatize(v->start); /* its zero pages become writable zeros */
    for (struct theap *th = h->theaps; th; th = th->next) {
        for (unsigned c = 0; c < NCLASSES; c++) {
            privatize_list(th->avail[c]);
            privatize_list(th->full[c]);
        }
        privatize_list(th->spare);
    }
}

/* ---- public calls ------------------------------------------------------ */

int fmem_heap_set_compact_policy(fmem_heap *h, const fmem_compact_policy *policy)
{
    if (!h || !policy)
        return FMEM_EINVAL;
    int rc = policy_check(policy);
    if (rc)
        return rc;
    if (!h->compact)
        return FMEM_ENOTSUP;
    policy_apply(h->compact, policy);
    return 0;
}

int64_t fmem_heap_compact(fmem_heap *h, size_t budget)
{
    if (!h)
        return FMEM_EINVAL;
    if (!h->compact)
        return FMEM_ENOTSUP;
    fork_gate_enter();
    uint64_t left = budget ? budget : UINT64_MAX;
    int64_t got = 0;
    struct theap *self = theap_peek(h);
    if (self)
        got += compact_theap(self, &left);
    pthread_mutex_lock(&h->lock);
    struct theap *first = h->theaps; /* the list only grows at its head */
    pthread_mutex_unlock(&h->lock);
    for (struct theap *th = first; th && left; th = th->next) {
        if (th == self)
            continue;
        pthread_mutex_lock(&th->lock);
        if (!atomic_load(&th->owned))
            got += compact_theap(th, &left);
        pthread_mutex_unlock(&th->lock);
    }
    fork_gate_leave();
    return got;
}
