/* fragbench_analyze.c - what an offset-preserving merge can reach on the
 * fragmented heap left by fmem-fragbench (--analyze).
 *
 * From the live objects' addresses (slabs are 64 KiB aligned) it builds,
 * per size class, the set of live 16-byte granules of every unit, at two
 * granularities: the 64 KiB slab (what heap_compact.c merges), a quarter
 * of it, and the 4 KiB page (a unit mapped on its own). Two units can share one physical
 * unit only when their live granules are disjoint. Per class and level:
 *   units     units holding a live object (empty ones are freed anyway)
 *   live %    live granules / granules of those units
 *   compat %  pairs of units that are disjoint
 *   2-way     units left by greedy merging, each survivor taking at most
 *             one victim
 *   k-way     units left when a survivor takes victims as long as all
 *             live granules stay disjoint, least used victims first, into
 *             the fullest survivor that fits
 *   ffd       the same by first fit decreasing: from the fullest unit
 *             down, each into the first unit kept so far that it fits
 *             (the order heap_compact.c uses)
 *   bound     the most units any one granule position is live in: no
 *             offset-preserving scheme can end with fewer units
 * For 4 KiB units a last line gives ffd among pages of the same index in
 * their slabs only (what page merges that keep an object's offset in the
 * slab, as heap_compact.c's, could reach if each page were a chunk).
 * The totals turn the units into bytes and divide by the live bytes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fragbench_analyze.h"

/* the heap's size classes (libfmem/far/heap_slab.c) up to 16 KiB */
static const uint32_t class_size[] = {
    16,   32,   48,   64,   80,   96,   112,  128,  160,  192,   224,   256,
    320,  384,  448,  512,  640,  768,  896,  1024, 1280, 1536,  1792,  2048,
    2560, 3072, 3584, 4096, 5120, 6144, 7168, 8192, 10240, 12288, 14336, 16384,
};
#define NCLS (sizeof class_size / sizeof class_size[0])
#define SLAB ((uintptr_t)65536)

static unsigned class_of(size_t n)
{
    unsigned c = 0;
    while (c + 1 < NCLS && class_size[c] < n)
        c++;
    return c;
}

static const char *unit_name(uintptr_t unit)
{
    return unit == SLAB ? "64K" : unit == 16384 ? "16K" : "4K";
}

struct rec { /* one object's granules in one unit */
    uint32_t cls;
    uintptr_t base;
    uint32_t g0, g1; /* granules [g0, g1) */
};

static int rec_cmp(const void *x, const void *y)
{
    const struct rec *a = x, *b = y;
    if (a->cls != b->cls)
        return a->cls < b->cls ? -1 : 1;
    return (a->base > b->base) - (a->base < b->base);
}

struct unit {
    uint64_t *bits;
    uint32_t used; /* live granules */
    uintptr_t base;
};

static int unit_cmp(const void *x, const void *y)
{
    const struct unit *a = x, *b = y;
    return (a->used > b->used) - (a->used < b->used);
}

static int disjoint(const uint64_t *a, const uint64_t *b, size_t w)
{
    for (size_t i = 0; i < w; i++)
        if (a[i] & b[i])
            return 0;
    return 1;
}

/* Units left by greedy merging; ways: victims a survivor may take (0: any). */
static size_t greedy(const struct unit *u0, size_t n, size_t w, unsigned ways)
{
    struct unit *u = malloc(n * sizeof *u);
    uint64_t *bits = malloc(n * w * sizeof *bits);
    unsigned *took = calloc(n, sizeof *took);
    char *dead = calloc(n, 1);
    if (!u || !bits || !took || !dead) {
        free(u), free(bits), free(took), free(dead);
        return n;
    }
    memcpy(u, u0, n * sizeof *u);
    qsort(u, n, sizeof *u, unit_cmp);
    for (size_t i = 0; i < n; i++) {
        memcpy(bits + i * w, u[i].bits, w * sizeof *bits);
        u[i].bits = bits + i * w;
    }
    size_t left = n;
    for (size_t i = 0; i < n; i++) {
        if (dead[i] || took[i])
            continue;
        for (size_t j = n; j-- > 0;) {
            if (j == i || dead[j] || (ways && took[j] >= ways) ||
                !disjoint(u[i].bits, u[j].bits, w))
                continue;
            for (size_t k = 0; k < w; k++)
                u[j].bits[k] |= u[i].bits[k];
            u[j].used += u[i].used;
            took[j]++;
            dead[i] = 1;
            left--;
            break;
        }
    }
    free(u), free(bits), free(took), free(dead);
    return left;
}

/* First fit decreasing (what fmem_heap_compact does): from the fullest
 * unit down, each into the first unit kept so far that it stays disjoint
 * with, else kept itself. */
static size_t ffd(const struct unit *u0, size_t n, size_t w)
{
    struct unit *u = malloc(n * sizeof *u);
    uint64_t *bins = calloc(n * w, sizeof *bins);
    size_t nb = 0;
    if (!u || !bins) {
        free(u), free(bins);
        return n;
    }
    memcpy(u, u0, n * sizeof *u);
    qsort(u, n, sizeof *u, unit_cmp);
    for (size_t i = n; i-- > 0;) {
        size_t b;
        for (b = 0; b < nb; b++)
            if (disjoint(bins + b * w, u[i].bits, w))
                break;
        if (b == nb)
            nb++;
        for (size_t k = 0; k < w; k++)
            bins[b * w + k] |= u[i].bits[k];
    }
    free(u), free(bins);
    return nb;
}

struct level_total {
    size_t units, k2, kway, ffd, bound, same;
};

/* 4 KiB units: first fit decreasing among the pages at the same index of
 * their 64 KiB slabs only (a page that keeps its offset in the slab, as
 * heap_compact.c's page merges do) */
static size_t ffd_same_index(const struct unit *u, size_t n, size_t w)
{
    struct unit *sub = malloc((n ? n : 1) * sizeof *sub);
    if (!sub)
        return n;
    size_t total = 0;
    for (uintptr_t idx = 0; idx < SLAB / 4096; idx++) {
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            if ((u[i].base & (SLAB - 1)) / 4096 == idx)
                sub[m++] = u[i];
        total += m ? ffd(sub, m, w) : 0;
    }
    free(sub);
    return total;
}

static void analyze_class(unsigned cls, const struct rec *r, size_t nr, uintptr_t unit, FILE *out,
                          struct level_total *t)
{
    size_t g = unit / 16, w = g / 64;
    size_t n = 0;
    for (size_t i = 0; i < nr; i++)
        n += i == 0 || r[i].base != r[i - 1].base;
    struct unit *u = calloc(n, sizeof *u);
    uint64_t *bits = calloc(n * w, sizeof *bits);
    uint32_t *count = calloc(g, sizeof *count);
    if (!u || !bits || !count) {
        free(u), free(bits), free(count);
        return;
    }
    size_t k = 0;
    for (size_t i = 0; i < nr; i++) {
        if (i > 0 && r[i].base != r[i - 1].base)
            k++;
        u[k].bits = bits + k * w;
        u[k].base = r[i].base;
        for (uint32_t x = r[i].g0; x < r[i].g1; x++)
            if (!(u[k].bits[x / 64] >> (x % 64) & 1)) {
                u[k].bits[x / 64] |= (uint64_t)1 << (x % 64);
                u[k].used++;
                count[x]++;
            }
    }
    uint64_t live = 0, pairs = 0, compat = 0;
    for (size_t i = 0; i < n; i++)
        live += u[i].used;
    /* every pair up to 4000 units, else 2 million pairs drawn at random */
    uint64_t s = 0x9e3779b97f4a7c15ull ^ cls;
    if (n <= 4000) {
        for (size_t i = 0; i < n; i++)
            for (size_t j = i + 1; j < n; j++, pairs++)
                compat += (uint64_t)disjoint(u[i].bits, u[j].bits, w);
    } else {
        for (; pairs < 2000000; pairs++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            size_t i = s % n, j = (s >> 32) % n;
            compat += i != j && disjoint(u[i].bits, u[j].bits, w);
        }
    }
    uint32_t bound = 0;
    for (size_t x = 0; x < g; x++)
        if (count[x] > bound)
            bound = count[x];
    size_t k2 = greedy(u, n, w, 1), kw = greedy(u, n, w, 0), ff = ffd(u, n, w);
    fprintf(out, "  %5u %6s %7zu %6.1f %8.3f %7zu %7zu %7zu %7u\n", class_size[cls],
            unit_name(unit), n, 100.0 * (double)live / (double)(n * g),
            pairs ? 100.0 * (double)compat / (double)pairs : 0.0, k2, kw, ff, bound);
    t->units += n;
    t->k2 += k2;
    t->kway += kw;
    t->ffd += ff;
    t->bound += bound;
    if (unit == 4096)
        t->same += ffd_same_index(u, n, w);
    free(u), free(bits), free(count);
}

static void analyze_level(void *const *obj, const size_t *len, size_t n, uintptr_t unit,
                          uint64_t live_bytes, FILE *out)
{
    size_t nr = 0, cap = n + n / 4 + 16;
    struct rec *r = malloc(cap * sizeof *r);
    if (!r)
        return;
    for (size_t i = 0; i < n; i++) {
        if (!obj[i])
            continue;
        unsigned c = class_of(len[i]);
        uintptr_t a = (uintptr_t)obj[i], end = a + class_size[c];
        while (a < end) { /* an object may cover several units */
            uintptr_t base = a & ~(unit - 1), stop = end < base + unit ? end : base + unit;
            if (nr == cap) {
                struct rec *m = realloc(r, (cap *= 2) * sizeof *r);
                if (!m) {
                    free(r);
                    return;
                }
                r = m;
            }
            r[nr++] = (struct rec){c, base, (uint32_t)((a - base) / 16),
                                   (uint32_t)((stop - base + 15) / 16)};
            a = stop;
        }
    }
    qsort(r, nr, sizeof *r, rec_cmp);
    struct level_total t = {0};
    for (size_t i = 0, j; i < nr; i = j) {
        for (j = i; j < nr && r[j].cls == r[i].cls; j++)
            ;
        analyze_class(r[i].cls, r + i, j - i, unit, out, &t);
    }
    double u = (double)unit, lb = (double)live_bytes;
    fprintf(out,
            "  total %5s %7zu  footprint / live bytes: now %.2fx, 2-way %.2fx, k-way %.2fx, "
            "ffd %.2fx, bound %.2fx\n",
            unit_name(unit), t.units, (double)t.units * u / lb, (double)t.k2 * u / lb,
            (double)t.kway * u / lb, (double)t.ffd * u / lb, (double)t.bound * u / lb);
    if (unit == 4096)
        fprintf(out, "  total 4K, pages kept at their index in the slab: ffd %.2fx\n",
                (double)t.same * u / lb);
    free(r);
}

void frag_analyze(void *const *obj, const size_t *len, size_t n, uint64_t live_bytes, FILE *out)
{
    fprintf(out, "  class   unit   units live %% compat %%   2-way   k-way     ffd   bound\n");
    for (uintptr_t unit = SLAB; unit >= 4096; unit /= 4)
        analyze_level(obj, len, n, unit, live_bytes, out);
}
