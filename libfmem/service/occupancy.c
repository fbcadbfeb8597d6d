/* occupancy.c - space accounting and span states from a pool's metadata. */
#include "service/occupancy.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static uint64_t load64(const void *meta, uint64_t off)
{
    return __atomic_load_n((const uint64_t *)((const char *)meta + off), __ATOMIC_RELAXED);
}

/* Largest aligned run of 2^k set bits (k <= kmax) in a mask of `bits`. */
static unsigned largest_run(uint32_t free_mask, unsigned kmax)
{
    for (int k = (int)kmax; k >= 0; k--) {
        unsigned len = 1u << k;
        uint32_t want = len >= 32 ? 0xFFFFFFFFu : ((1u << len) - 1);
        for (unsigned o = 0; o + len <= 32; o += len)
            if (((free_mask >> o) & want) == want)
                return len;
    }
    return 0;
}

/* The state byte of span j of a section (header sh), span header ph. */
static uint8_t span_byte(uint64_t sh, unsigned j, uint64_t ph)
{
    unsigned st = sec_state(sh, j);
    if (h_detached(ph) && h_size(ph) == SPAN_LOG_CLAIM && h_uid(ph) != 0)
        return OCC_MOVING;
    if (st == SPAN_FULL && h_detached(ph))
        return OCC_SPAN_BLOCK;
    if (!h_detached(ph)) {
        uint8_t b = (uint8_t)(OCC_CHUNK_BASE + __builtin_popcount(h_lo(ph)));
        return st == SPAN_CONTENDED ? (uint8_t)(b | OCC_CONTENDED) : b;
    }
    return OCC_FREE;
}

void occ_states(const struct geometry *g, const void *meta, uint64_t first, uint64_t count,
                uint8_t *states)
{
    for (uint64_t s = first; s < first + count && s < g->nspans; s++) {
        uint64_t x = s / SPANS_PER_SECTION;
        uint64_t sh = load64(meta, g->sect_off + 8 * x);
        states[s - first] = span_byte(sh, (unsigned)(s % SPANS_PER_SECTION),
                                      load64(meta, g->span_off + 8 * s));
    }
}

void occ_scan(const struct geometry *g, const void *meta, struct occ_report *r, uint8_t *states)
{
    memset(r, 0, sizeof *r);
    r->nsections = g->nsections;
    r->nspans = g->nspans;
    r->nchunks = g->nchunks;
    r->nusers = g->nusers;
    r->capacity_bytes = g->data_size;
    r->metadata_bytes = g->metadata_bytes;
    uint64_t used_chunks = 0, largest = 0, free_run_secs = 0;
    for (uint64_t x = 0; x < g->nsections; x++) {
        uint64_t sh = load64(meta, g->sect_off + 8 * x);
        uint32_t free_spans = 0; /* bit j: span j could be given out whole */
        for (unsigned j = 0; j < SPANS_PER_SECTION; j++) {
            uint64_t s = x * SPANS_PER_SECTION + j;
            uint64_t ph = load64(meta, g->span_off + 8 * s);
            uint8_t b = span_byte(sh, j, ph);
            if (b == OCC_MOVING) {
                r->spans_moving++;
            } else if (b == OCC_SPAN_BLOCK) {
                r->spans_block++;
                used_chunks += CHUNKS_PER_SPAN;
            } else if (b != OCC_FREE) {
                unsigned used = occ_used_chunks(b);
                used_chunks += used;
                if (b & OCC_CONTENDED)
                    r->spans_contended++;
                r->spans_chunk++;
                if (used == 0)
                    free_spans |= 1u << j;
                else if (largest < largest_run(~h_lo(ph), 4))
                    largest = largest_run(~h_lo(ph), 4);
            } else {
                r->spans_free++;
                free_spans |= 1u << j;
            }
            if (states)
                states[s] = b;
        }
        /* whole free spans: aligned runs inside the section, in chunks */
        unsigned run = 0;
        for (int q = 4; q >= 0 && !run; q--) {
            unsigned len = 1u << q;
            uint32_t want = (uint32_t)((UINT64_C(1) << len) - 1);
            for (unsigned o = 0; o + len <= SPANS_PER_SECTION; o += len)
                if (((free_spans >> o) & want) == want) {
                    run = len;
                    break;
                }
        }
        if ((uint64_t)run * CHUNKS_PER_SPAN > largest)
            largest = (uint64_t)run * CHUNKS_PER_SPAN;
        /* whole free sections: aligned power-of-two runs of them */
        if (free_spans == 0xFFFF) {
            free_run_secs++;
            uint64_t start = x + 1 - free_run_secs, len = 1;
            while (len * 2 <= free_run_secs) len *= 2;
            /* the largest aligned power-of-two run ending at x */
            for (uint64_t l = len; l >= 1; l /= 2)
                if (((x + 1) % l) == 0 && x + 1 - l >= start) {
                    if (l * CHUNKS_PER_SECTION > largest)
                        largest = l * CHUNKS_PER_SECTION;
                    break;
                }
        } else {
            free_run_secs = 0;
        }
    }
    r->used_bytes = used_chunks << CHUNK_SHIFT;
    r->free_bytes = r->capacity_bytes - r->used_bytes;
    r->largest_free_bytes = largest << CHUNK_SHIFT;
    r->fragmentation = r->free_bytes ? 1.0 - (double)r->largest_free_bytes / (double)r->free_bytes : 0;
    /* live blocks by size, from the full redo log */
    for (uint64_t c = 0; c < g->nchunks; c++) {
        uint64_t e = load64(meta, g->log_off + 8 * c);
        if (!log_valid(e) || !log_alloc(e))
            continue;
        unsigned k = log_log2(e);
        if (log_layer(e) == LAYER_SECTION && k <= 9)
            continue; /* a later section of a multi-section block */
        r->blocks[k < FMEM_SIZE_CLASSES ? k : FMEM_SIZE_CLASSES - 1]++;
    }
    for (uint64_t u = 1; u < g->nusers; u++) {
        uint32_t pid = __atomic_load_n((const uint32_t *)((const char *)meta + g->users_off + 4 * u),
                                       __ATOMIC_RELAXED);
        r->users_active += pid != 0;
    }
}

int occ_map_file(const char *path, struct geometry *g, const void **meta, size_t *len)
{
    /* as pool_files.c: never through a link; a pipe or device is no pool
     * (and must not block the reader) */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return FMEM_EIO;
    struct stat st;
    struct pool_hdr h;
    int rc = FMEM_ECORRUPT;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size < sizeof h ||
        pread(fd, &h, sizeof h, 0) != sizeof h)
        goto out;
    /* the header's total covers metadata + data; this file is the metadata */
    char data_path[4200];
    snprintf(data_path, sizeof data_path, "%s.data", path);
    struct stat dst;
    if (lstat(data_path, &dst) < 0 || !S_ISREG(dst.st_mode))
        goto out;
    if (layout_check_hdr(&h, (uint64_t)st.st_size + (uint64_t)dst.st_size, g) ||
        g->data_off != (uint64_t)st.st_size)
        goto out;
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        rc = FMEM_EIO;
        goto out;
    }
    *meta = m;
    *len = (size_t)st.st_size;
    rc = 0;
out:
    close(fd);
    return rc;
}
