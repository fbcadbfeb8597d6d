/* region_shadow.h - a region's pages checked against a shadow copy by
 * worker threads: each page holds a stamp in its first word and the
 * stamp's complement in its last (0 and 0: never written or released);
 * the first mismatch is kept for the test's message. */
#ifndef FMEM_TESTS_REGION_SHADOW_H
#define FMEM_TESTS_REGION_SHADOW_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <fmem_far.h>

#define SHADOW_PAGE 4096u

struct ictx {
    fmem_region *r;
    char *base;
    uint64_t *shadow; /* per page: the stamp at its start, 0: zeros */
    _Atomic int stop, bad;
    char why[160];
};

struct worker {
    struct ictx *c;
    unsigned id;
};

static void fail(struct ictx *c, const char *what, size_t p, uint64_t got, uint64_t want)
{
    if (atomic_exchange(&c->bad, 1) == 0)
        snprintf(c->why, sizeof c->why, "%s: page %zu holds %llu, expected %llu", what, p,
                 (unsigned long long)got, (unsigned long long)want);
}

static void check_page(struct ictx *c, size_t p, const char *what)
{
    const volatile uint64_t *w = (const volatile uint64_t *)(c->base + p * SHADOW_PAGE);
    uint64_t want = c->shadow[p];
    if (w[0] != want)
        fail(c, what, p, w[0], want);
    else if (w[SHADOW_PAGE / 8 - 1] != (want ? ~want : 0))
        fail(c, what, p, w[SHADOW_PAGE / 8 - 1], want ? ~want : 0);
}

#endif
