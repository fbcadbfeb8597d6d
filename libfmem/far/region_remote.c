/* region_remote.c - the pool allocations behind a region.
 *
 * Granularity: one pool allocation ("chunk") per max(64 KiB, fetch unit) of
 * the region. 64 KiB is half a FineMem span, so every chunk is one
 * span-level CAS to allocate or free, and 64 KiB of fetch buffer per handle
 * keeps the chunk table at 32 B per 64 KiB (0.05 %). Allocating per 4 KiB
 * page would cost a pool round trip on nearly every first write; allocating
 * per 2 MiB section would pin up to 2 MiB of pool per sparsely written
 * area. A chunk is allocated on the first write to any of its units and
 * freed when the last written unit in it is released.
 *
 * A freshly allocated chunk holds someone else's old bytes: a unit is read
 * from the pool only once it has been written back (UF_REMOTE); until then
 * it reads as zeros. */
#include <string.h>

#include "region_internal.h"

/* The writer reads region memory that program threads write at other
 * times; the kernel orders the two (write-protect faults, zaps), which
 * ThreadSanitizer cannot see, so its checks are off for that copy. */
#if defined(__SANITIZE_THREAD__)
void __tsan_ignore_thread_begin(void);
void __tsan_ignore_thread_end(void);
#define UNCHECKED_BEGIN() __tsan_ignore_thread_begin()
#define UNCHECKED_END() __tsan_ignore_thread_end()
#else
#define UNCHECKED_BEGIN() ((void)0)
#define UNCHECKED_END() ((void)0)
#endif

char region_zero_page[FMEM_REGION_MAX_UNIT] __attribute__((aligned(4096)));

fmem_handle remote_handle(struct fmem_region *r, uint32_t u, uint64_t *off)
{
    uint32_t c = u / r->units_per_chunk;
    *off = (uint64_t)(u % r->units_per_chunk) << r->unit_shift;
    return r->chunks[c].h;
}

int remote_ref(struct fmem_region *r, uint32_t u)
{
    struct region_unit *un = &r->units[u];
    if (un->flags & UF_WRITTEN)
        return 0;
    struct region_chunk *c = &r->chunks[u / r->units_per_chunk];
    if (c->users == 0) {
        int rc = fmem_alloc(r->pool, r->chunk, &c->h);
        if (rc) {
            stat_add(&r->st.alloc_failures, 1);
            return rc;
        }
        uint64_t now = atomic_fetch_add(&r->st.remote_bytes, r->chunk) + r->chunk;
        uint64_t peak = atomic_load(&r->st.remote_peak);
        while (now > peak && !atomic_compare_exchange_weak(&r->st.remote_peak, &peak, now))
            ;
    }
    c->users++;
    un->flags |= UF_WRITTEN;
    return 0;
}

void remote_drop(struct fmem_region *r, uint32_t u)
{
    struct region_unit *un = &r->units[u];
    if (!(un->flags & UF_WRITTEN))
        return;
    un->flags &= (uint8_t)~(UF_WRITTEN | UF_REMOTE);
    struct region_chunk *c = &r->chunks[u / r->units_per_chunk];
    if (--c->users == 0) {
        fmem_free(r->pool, &c->h);
        memset(&c->h, 0, sizeof c->h);
        atomic_fetch_sub(&r->st.remote_bytes, r->chunk);
    }
}

int remote_fetch(struct fmem_region *r, uint32_t u, void *dst)
{
    uint64_t off;
    fmem_handle h = remote_handle(r, u, &off);
    int rc = fmem_read(r->pool, &h, off, dst, r->unit);
    if (rc == 0)
        stat_add(&r->st.bytes_fetched, r->unit);
    return rc;
}

/* Write runs of pages: from region memory where `from_region` has a bit,
 * zeros elsewhere within `pages`. */
static int write_runs(struct fmem_region *r, uint32_t u, fmem_handle h, uint64_t pages,
                      uint64_t from_region)
{
    uint64_t off;
    (void)remote_handle(r, u, &off);
    const char *ua = unit_addr(r, u);
    unsigned n = r->pages_per_unit;
    for (unsigned p = 0; p < n;) {
        if (!(pages >> p & 1)) {
            p++;
            continue;
        }
        int mapped = (int)(from_region >> p & 1);
        unsigned q = p + 1;
        while (q < n && (pages >> q & 1) && (int)(from_region >> q & 1) == mapped)
            q++;
        size_t at = (size_t)p * UFFD_PAGE, len = (size_t)(q - p) * UFFD_PAGE;
        UNCHECKED_BEGIN();
        int rc = fmem_write(r->pool, &h, off + at, mapped ? ua + at : region_zero_page, len);
        UNCHECKED_END();
        if (rc)
            return rc;
        stat_add(&r->st.bytes_written, len);
        p = q;
    }
    return 0;
}

int remote_writeback(struct fmem_region *r, uint32_t u, fmem_handle h, uint64_t present)
{
    return write_runs(r, u, h, full_mask(r), present);
}

int remote_zero_pages(struct fmem_region *r, uint32_t u, uint64_t pages)
{
    uint64_t off;
    fmem_handle h = remote_handle(r, u, &off);
    return write_runs(r, u, h, pages, 0);
}

void remote_free_all(struct fmem_region *r)
{
    for (uint32_t c = 0; c < r->nchunks; c++)
        if (r->chunks[c].users) {
            fmem_free(r->pool, &r->chunks[c].h);
            r->chunks[c].users = 0;
        }
    atomic_store(&r->st.remote_bytes, 0);
}
