/* test_size_parse.c - the one size parser (size_parse.h): every spelling of
 * every unit, junk, overflow; and the places that take a size (pool URIs,
 * fmemd's flags through uri_parse_size) accept the same spellings. */
#include <criterion/criterion.h>
#include <stdio.h>

#include "fmem.h"
#include "size_parse.h"
#include "uri.h"

static const struct {
    const char *s;
    uint64_t v;
} good[] = {
    {"0", 0},           {"4096", 4096},
    {"4K", 4096},       {"4k", 4096},      {"4KB", 4096},     {"4kb", 4096},
    {"4KiB", 4096},     {"4kib", 4096},    {"4KIB", 4096},
    {"2M", 2u << 20},   {"2MiB", 2u << 20}, {"2mb", 2u << 20},
    {"3G", UINT64_C(3) << 30}, {"3GiB", UINT64_C(3) << 30}, {"3gB", UINT64_C(3) << 30},
    {"5T", UINT64_C(5) << 40}, {"5TiB", UINT64_C(5) << 40}, {"5tb", UINT64_C(5) << 40},
    {"18446744073709551615", UINT64_MAX},
    {"16777215T", UINT64_C(16777215) << 40},
};

static const char *const bad[] = {
    "", "K", "-1", "+1", " 1", "1 ", "1.5G", "0x10", "1P", "1Ki", "1KiBB", "1iB",
    "1BK", "16777216T", "18446744073709551616", "99999999999999999999999",
};

Test(size_parse, units_in_every_spelling)
{
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        uint64_t v = 12345;
        cr_assert(size_parse(good[i].s, &v), "\"%s\" rejected", good[i].s);
        cr_assert_eq(v, good[i].v, "\"%s\" -> %llu", good[i].s, (unsigned long long)v);
        /* the URI layer's parser is the same one */
        v = 12345;
        cr_assert(uri_parse_size(good[i].s, &v) && v == good[i].v, "uri: \"%s\"", good[i].s);
    }
}

Test(size_parse, junk_and_overflow_rejected_and_out_untouched)
{
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t v = 777;
        cr_assert(!size_parse(bad[i], &v), "\"%s\" accepted", bad[i]);
        cr_assert_eq(v, 777);
        cr_assert(!uri_parse_size(bad[i], &v), "uri: \"%s\" accepted", bad[i]);
    }
    cr_assert(!size_parse(NULL, &(uint64_t){0}));
}

/* a pool URI takes the same spellings as everything else */
Test(size_parse, pool_uri_sizes)
{
    const char *sizes[] = {"64M", "64MiB", "64mb", "65536K", "65536KiB", "67108864"};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        char uri[64];
        snprintf(uri, sizeof uri, "mem:?size=%s", sizes[i]);
        fmem_pool *p = NULL;
        cr_assert_eq(fmem_open(uri, &p), 0, "%s", uri);
        fmem_stats_t st;
        cr_assert_eq(fmem_stats(p, &st), 0);
        cr_assert_geq(st.capacity_bytes, UINT64_C(64) << 20, "%s", uri);
        fmem_close(p);
    }
}
