/* zmem.c - the zmem: store: a node's data area compressed in this
 * process's memory, block by block (block= bytes, 4 KiB by default: the
 * unit a region moves most often, and a partial write only recompresses
 * one block). A block of zeros - never written, or released and zeroed -
 * holds nothing; one that does not compress is kept as it is. Every block
 * is its own allocation, swapped in under a lock striped over the blocks.
 *
 * codec=lz4 (default: fast) or zstd (denser, slower); level= is zstd's
 * level or lz4's acceleration. limit= caps the bytes held: a write that
 * would go past it fails, as a full disk would. */
#include <errno.h>
#include <lz4.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <zstd.h>

#include "store.h"

#define ZM_LOCKS 1024

struct zslot {
    void *data;    /* NULL: all zeros */
    uint32_t len;  /* bytes at data; == block: kept uncompressed */
};

struct zmem_store {
    struct store s;
    bool zstd;
    int level;
    uint32_t block;
    unsigned shift;
    uint64_t nblocks;
    struct zslot *slots; /* mmap'd: only touched pages cost */
    size_t slots_len;
    uint64_t limit;
    _Atomic uint64_t held, stored;
    pthread_mutex_t locks[ZM_LOCKS];
};

/* per-thread buffers and codec contexts */
struct zm_scratch {
    char *raw, *comp;
    size_t raw_cap, comp_cap;
    ZSTD_CCtx *cctx;
    ZSTD_DCtx *dctx;
};
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_free(void *p)
{
    struct zm_scratch *z = p;
    free(z->raw);
    free(z->comp);
    ZSTD_freeCCtx(z->cctx);
    ZSTD_freeDCtx(z->dctx);
    free(z);
}

static void scratch_init(void)
{
    pthread_key_create(&scratch_key, scratch_free);
}

static struct zm_scratch *scratch(struct zmem_store *z)
{
    pthread_once(&scratch_once, scratch_init);
    struct zm_scratch *t = pthread_getspecific(scratch_key);
    if (!t) {
        t = calloc(1, sizeof *t);
        if (!t || pthread_setspecific(scratch_key, t)) {
            free(t);
            return NULL;
        }
    }
    size_t bound = z->zstd ? ZSTD_compressBound(z->block) : (size_t)LZ4_compressBound((int)z->block);
    if (t->raw_cap < z->block) {
        free(t->raw);
        t->raw = malloc(z->block);
        t->raw_cap = t->raw ? z->block : 0;
    }
    if (t->comp_cap < bound) {
        free(t->comp);
        t->comp = malloc(bound);
        t->comp_cap = t->comp ? bound : 0;
    }
    if (z->zstd && !t->cctx)
        t->cctx = ZSTD_createCCtx();
    if (z->zstd && !t->dctx)
        t->dctx = ZSTD_createDCtx();
    if (!t->raw_cap || !t->comp_cap || (z->zstd && (!t->cctx || !t->dctx)))
        return NULL;
    return t;
}

static pthread_mutex_t *lock_of(struct zmem_store *z, uint64_t b)
{
    return &z->locks[b % ZM_LOCKS];
}

/* Decompress slot b into dst (a whole block). Lock held. */
static int unpack(struct zmem_store *z, struct zm_scratch *t, uint64_t b, char *dst)
{
    struct zslot *sl = &z->slots[b];
    if (!sl->data) {
        memset(dst, 0, z->block);
        return 0;
    }
    if (sl->len == z->block) {
        memcpy(dst, sl->data, z->block);
        return 0;
    }
    size_t n;
    if (z->zstd) {
        n = ZSTD_decompressDCtx(t->dctx, dst, z->block, sl->data, sl->len);
        if (ZSTD_isError(n))
            n = 0;
    } else {
        int r = LZ4_decompress_safe(sl->data, dst, (int)sl->len, (int)z->block);
        n = r < 0 ? 0 : (size_t)r;
    }
    if (n != z->block) {
        store_fail(&z->s, "zmem: block %llu does not decompress", (unsigned long long)b);
        return FMEM_ECORRUPT;
    }
    return 0;
}

/* (p may be unaligned: a caller's buffer) */
static bool all_zero(const char *p, size_t n)
{
    return p[0] == 0 && !memcmp(p, p + 1, n - 1);
}

/* Compress a whole block into a fresh allocation: *out NULL for zeros. */
static int pack(struct zmem_store *z, struct zm_scratch *t, const char *src, void **out,
                uint32_t *len)
{
    *out = NULL;
    *len = 0;
    if (all_zero(src, z->block))
        return 0;
    size_t n;
    if (z->zstd) {
        n = ZSTD_compressCCtx(t->cctx, t->comp, t->comp_cap, src, z->block, z->level ? z->level : 1);
        if (ZSTD_isError(n))
            n = z->block;
    } else {
        int r = LZ4_compress_fast(src, t->comp, (int)z->block, (int)t->comp_cap,
                                  z->level ? z->level : 1);
        n = r <= 0 ? z->block : (size_t)r;
    }
    const char *from = t->comp;
    if (n >= z->block) { /* does not compress: keep it as it is */
        n = z->block;
        from = src;
    }
    *out = malloc(n);
    if (!*out) {
        store_fail(&z->s, "zmem: out of memory");
        return FMEM_ENOMEM;
    }
    memcpy(*out, from, n);
    *len = (uint32_t)n;
    return 0;
}

static int zm_read(struct store *s, uint64_t off, void *dst, size_t len)
{
    struct zmem_store *z = (struct zmem_store *)s;
    struct zm_scratch *t = scratch(z);
    if (!t) {
        store_fail(s, "zmem: out of memory");
        return FMEM_ENOMEM;
    }
    char *out = dst;
    while (len) {
        uint64_t b = off >> z->shift, in = off & (z->block - 1);
        size_t n = z->block - in < len ? z->block - in : len;
        pthread_mutex_t *mu = lock_of(z, b);
        pthread_mutex_lock(mu);
        int rc;
        if (n == z->block) {
            rc = unpack(z, t, b, out);
        } else {
            rc = unpack(z, t, b, t->raw);
            if (rc == 0)
                memcpy(out, t->raw + in, n);
        }
        pthread_mutex_unlock(mu);
        if (rc)
            return rc;
        off += n;
        out += n;
        len -= n;
    }
    return 0;
}

static int zm_write(struct store *s, uint64_t off, const void *src, size_t len)
{
    struct zmem_store *z = (struct zmem_store *)s;
    struct zm_scratch *t = scratch(z);
    if (!t) {
        store_fail(s, "zmem: out of memory");
        return FMEM_ENOMEM;
    }
    const char *in_p = src;
    while (len) {
        uint64_t b = off >> z->shift, in = off & (z->block - 1);
        size_t n = z->block - in < len ? z->block - in : len;
        pthread_mutex_t *mu = lock_of(z, b);
        void *data;
        uint32_t dlen;
        int rc;
        pthread_mutex_lock(mu);
        if (n == z->block) {
            rc = pack(z, t, in_p, &data, &dlen);
        } else { /* part of a block: merge with what it holds */
            rc = unpack(z, t, b, t->raw);
            if (rc == 0) {
                memcpy(t->raw + in, in_p, n);
                rc = pack(z, t, t->raw, &data, &dlen);
            }
        }
        struct zslot *sl = &z->slots[b];
        if (rc == 0 && z->limit && dlen > sl->len &&
            atomic_load(&z->held) + (dlen - sl->len) > z->limit) {
            store_fail(s, "zmem: full: holding %llu bytes would pass limit=%llu",
                       (unsigned long long)(atomic_load(&z->held) + dlen - sl->len),
                       (unsigned long long)z->limit);
            free(data);
            rc = FMEM_EIO;
        }
        if (rc == 0) {
            atomic_fetch_add(&z->held, (uint64_t)dlen - sl->len);
            atomic_fetch_add(&z->stored, (uint64_t)(data ? z->block : 0) - (sl->data ? z->block : 0));
            free(sl->data);
            sl->data = data;
            sl->len = dlen;
        }
        pthread_mutex_unlock(mu);
        if (rc)
            return rc;
        off += n;
        in_p += n;
        len -= n;
    }
    return 0;
}

static void zm_stats(struct store *s, fmem_node_stats_t *st)
{
    struct zmem_store *z = (struct zmem_store *)s;
    st->held_bytes = atomic_load(&z->held);
    st->stored_bytes = atomic_load(&z->stored);
    snprintf(st->detail, sizeof st->detail, "%s level %d, %u-byte blocks",
             z->zstd ? "zstd" : "lz4", z->level ? z->level : 1, z->block);
}

static void zm_close(struct store *s)
{
    struct zmem_store *z = (struct zmem_store *)s;
    if (z->slots) {
        for (uint64_t b = 0; b < z->nblocks && atomic_load(&z->stored); b++)
            free(z->slots[b].data);
        munmap(z->slots, z->slots_len);
    }
    for (unsigned i = 0; i < ZM_LOCKS; i++)
        pthread_mutex_destroy(&z->locks[i]);
    store_fini(&z->s);
    free(z);
}

static const struct store_ops zmem_ops = {
    .read = zm_read, .write = zm_write, .stats = zm_stats, .close = zm_close};

int zmem_store_open(const struct node_uri *u, uint64_t data_size, struct store **out)
{
    struct zmem_store *z = calloc(1, sizeof *z);
    if (!z)
        return FMEM_ENOMEM;
    for (unsigned i = 0; i < ZM_LOCKS; i++)
        pthread_mutex_init(&z->locks[i], NULL);
    store_init(&z->s, &zmem_ops, "zmem", data_size);
    z->zstd = !strcmp(u->codec, "zstd");
    z->level = u->level;
    z->block = u->block ? (uint32_t)u->block : 4096;
    z->shift = (unsigned)__builtin_ctz(z->block);
    z->limit = u->limit;
    if (z->zstd && z->level > ZSTD_maxCLevel()) {
        uri_set_error("zmem: level=%d is above zstd's highest, %d", z->level, ZSTD_maxCLevel());
        zm_close(&z->s);
        return FMEM_EURI;
    }
    z->nblocks = (data_size + z->block - 1) >> z->shift;
    z->slots_len = z->nblocks * sizeof *z->slots;
    z->slots = mmap(NULL, z->slots_len, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (z->slots == MAP_FAILED) {
        z->slots = NULL;
        zm_close(&z->s);
        return FMEM_ENOMEM;
    }
    *out = &z->s;
    return 0;
}
