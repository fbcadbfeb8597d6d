/* test_layout.c - bit encodings of the 64-bit headers, redo-log entries and
 * capability entries; pool geometry; pool header validation. */
#include <criterion/criterion.h>
#include <stddef.h>
#include <string.h>

#include "fmem.h"
#include "layout.h"

/* ---- header high half: retry level and temporary redo log --------------- */

Test(header, low_half_round_trip_keeps_high_half)
{
    const uint64_t high = h_with_log(h_with_retry(H_DETACHED, 2), 17, 5, 99, 12345);
    const uint32_t lows[] = {0, 1, 0x80000000u, 0xFFFFFFFFu, 0xDEADBEEFu};
    for (size_t i = 0; i < sizeof lows / sizeof lows[0]; i++) {
        uint64_t h = h_with_lo(high, lows[i]);
        cr_assert_eq(h_lo(h), lows[i]);
        cr_assert_eq(h >> 32, high >> 32, "high half changed for lo %#x", lows[i]);
        cr_assert_eq(h_retry(h), 2);
        cr_assert_eq(h_off(h), 17);
        cr_assert_eq(h_size(h), 5);
        cr_assert_eq(h_ts(h), 99);
        cr_assert_eq(h_uid(h), 12345);
        cr_assert(h_detached(h));
    }
}

Test(header, retry_level_round_trip)
{
    const uint64_t base = h_with_log(h_with_lo(0, 0xA5A5A5A5u), 31, 7, TS_MASK, MAX_UID) | H_DETACHED;
    for (unsigned r = 0; r < 4; r++) {
        uint64_t h = h_with_retry(base, r);
        cr_assert_eq(h_retry(h), r);
        cr_assert_eq(h & ~(UINT64_C(3) << H_RETRY_SHIFT), base & ~(UINT64_C(3) << H_RETRY_SHIFT),
                     "retry %u touched other bits", r);
    }
    /* only two bits: larger values are truncated, never spill over */
    cr_assert_eq(h_retry(h_with_retry(base, 5)), 1);
    cr_assert_eq(h_off(h_with_retry(base, 0xFF)), 31);
}

Test(header, log_round_trip_every_field_at_its_bounds)
{
    const unsigned offs[] = {0, 1, 30, 31}, sizes[] = {0, 1, 6, 7};
    const unsigned tss[] = {0, 1, 63, 64, 126, 127}, uids[] = {0, 1, 8191, 16382, MAX_UID};
    for (unsigned a = 0; a < 4; a++)
        for (unsigned b = 0; b < 4; b++)
            for (unsigned c = 0; c < 6; c++)
                for (unsigned d = 0; d < 5; d++) {
                    uint64_t h0 = h_with_retry(h_with_lo(0, 0x12345678u), 3);
                    uint64_t h = h_with_log(h0, offs[a], sizes[b], tss[c], uids[d]);
                    cr_assert_eq(h_off(h), offs[a]);
                    cr_assert_eq(h_size(h), sizes[b]);
                    cr_assert_eq(h_ts(h), tss[c]);
                    cr_assert_eq(h_uid(h), uids[d]);
                    cr_assert_eq(h_lo(h), 0x12345678u);
                    cr_assert_eq(h_retry(h), 3);
                    cr_assert(!h_detached(h), "log fields reached the detached bit");
                }
}

Test(header, log_fields_are_truncated_not_spilled)
{
    uint64_t h = h_with_log(0, 32 + 5, 8 + 3, 128 + 9, MAX_UID + 1 + 77);
    cr_assert_eq(h_off(h), 5);
    cr_assert_eq(h_size(h), 3);
    cr_assert_eq(h_ts(h), 9);
    cr_assert_eq(h_uid(h), 77);
    cr_assert_eq(h_lo(h), 0);
    cr_assert_eq(h_retry(h), 0);
    cr_assert(!h_detached(h));
}

Test(header, log_replaces_previous_log_and_keeps_detached)
{
    uint64_t h = h_with_log(H_DETACHED | 0xFFFFFFFFu, 31, 7, 127, MAX_UID);
    h = h_with_log(h, 0, 0, 0, 0);
    cr_assert_eq(h, H_DETACHED | 0xFFFFFFFFu);
}

Test(header, fields_do_not_overlap)
{
    /* every field at its maximum is exactly the whole word */
    uint64_t h = h_with_log(h_with_retry(h_with_lo(0, 0xFFFFFFFFu), 3), 31, 7, TS_MASK, MAX_UID) | H_DETACHED;
    cr_assert_eq(h, UINT64_MAX);
    /* and each one alone sets only its own bits */
    cr_assert_eq(h_with_retry(0, 3), UINT64_C(3) << 32);
    cr_assert_eq(h_with_log(0, 31, 0, 0, 0), UINT64_C(31) << 34);
    cr_assert_eq(h_with_log(0, 0, 7, 0, 0), UINT64_C(7) << 39);
    cr_assert_eq(h_with_log(0, 0, 0, TS_MASK, 0), UINT64_C(127) << 42);
    cr_assert_eq(h_with_log(0, 0, 0, 0, MAX_UID), UINT64_C(0x3FFF) << 49);
}

/* ---- section header low half: span states ------------------------------- */

Test(section, state_round_trip_every_span_every_state)
{
    for (unsigned j = 0; j < SPANS_PER_SECTION; j++)
        for (unsigned st = 0; st < 4; st++) {
            /* start from a busy header so neighbours are checked too */
            uint64_t base = h_with_log(0x1B1B1B1Bu, 3, 2, 5, 77);
            uint64_t h = sec_with_state(base, j, st);
            cr_assert_eq(sec_state(h, j), st, "span %u state %u", j, st);
            for (unsigned o = 0; o < SPANS_PER_SECTION; o++)
                if (o != j)
                    cr_assert_eq(sec_state(h, o), sec_state(base, o), "span %u changed span %u", j, o);
            cr_assert_eq(h >> 32, base >> 32, "span state reached the high half");
        }
}

Test(section, state_values)
{
    cr_assert_eq(SPAN_FREE, 0);
    cr_assert_eq(SPAN_INUSE, 1);
    cr_assert_eq(SPAN_CONTENDED, 2);
    cr_assert_eq(SPAN_FULL, 3);
    uint64_t h = 0;
    for (unsigned j = 0; j < SPANS_PER_SECTION; j++)
        h = sec_with_state(h, j, SPAN_FULL);
    cr_assert_eq(h_lo(h), 0xFFFFFFFFu);
    cr_assert_eq(h >> 32, 0);
}

Test(section, states_mask_of_aligned_runs)
{
    cr_assert_eq(sec_states_mask(0, 1), 0x3u);
    cr_assert_eq(sec_states_mask(15, 1), 0xC0000000u);
    cr_assert_eq(sec_states_mask(0, 16), 0xFFFFFFFFu);
    cr_assert_eq(sec_states_mask(8, 8), 0xFFFF0000u);
    cr_assert_eq(sec_states_mask(4, 4), 0x0000FF00u);
    cr_assert_eq(sec_states_mask(2, 2), 0x000000F0u);
    cr_assert_eq(sec_states_mask(0, 0), 0);
    /* the mask is exactly the union of the single-span masks */
    for (unsigned len = 1; len <= 16; len <<= 1)
        for (unsigned first = 0; first + len <= 16; first += len) {
            uint32_t want = 0;
            for (unsigned j = first; j < first + len; j++)
                want |= (uint32_t)sec_with_state(0, j, 3);
            cr_assert_eq(sec_states_mask(first, len), want, "first %u len %u", first, len);
        }
}

/* ---- full redo log entries ---------------------------------------------- */

Test(redolog, entry_round_trip)
{
    const unsigned log2s[] = {0, 1, 4, 5, 9, 10, 40, 63}, tss[] = {0, 1, 64, 127};
    const unsigned uids[] = {0, 1, 4096, MAX_UID};
    for (int alloc = 0; alloc < 2; alloc++)
        for (unsigned layer = 0; layer < 3; layer++)
            for (unsigned a = 0; a < 8; a++)
                for (unsigned b = 0; b < 4; b++)
                    for (unsigned c = 0; c < 4; c++) {
                        uint64_t e = log_make(alloc, layer, log2s[a], tss[b], uids[c]);
                        cr_assert(log_valid(e));
                        cr_assert_eq(log_alloc(e), (bool)alloc);
                        cr_assert_eq(log_layer(e), layer);
                        cr_assert_eq(log_log2(e), log2s[a]);
                        cr_assert_eq(log_ts(e), tss[b]);
                        cr_assert_eq(log_uid(e), uids[c]);
                        cr_assert_eq(e >> 31, 0, "entry uses bits above 30");
                    }
    cr_assert(!log_valid(0), "a zero entry must read as empty");
}

Test(redolog, entry_fields_are_truncated)
{
    uint64_t e = log_make(true, 4 + 2, 64 + 3, 128 + 5, MAX_UID + 1 + 9);
    cr_assert_eq(log_layer(e), 2);
    cr_assert_eq(log_log2(e), 3);
    cr_assert_eq(log_ts(e), 5);
    cr_assert_eq(log_uid(e), 9);
    cr_assert(log_alloc(e));
}

Test(redolog, domains)
{
    cr_assert(log_same_domain(LAYER_CHUNK, LAYER_CHUNK));
    cr_assert(log_same_domain(LAYER_SPAN, LAYER_SECTION));
    cr_assert(log_same_domain(LAYER_SECTION, LAYER_SPAN));
    cr_assert(!log_same_domain(LAYER_CHUNK, LAYER_SPAN));
    cr_assert(!log_same_domain(LAYER_SECTION, LAYER_CHUNK));
}

Test(redolog, timestamp_order_on_the_circle)
{
    cr_assert(ts_newer(1, 0));
    cr_assert(!ts_newer(0, 1));
    cr_assert(!ts_newer(5, 5), "equal timestamps are not newer");
    /* wrap-around 127 -> 0 */
    cr_assert(ts_newer(0, 127));
    cr_assert(!ts_newer(127, 0));
    cr_assert(ts_newer(3, 125));
    /* the window: up to 63 ahead is newer, 64 and more is older */
    cr_assert(ts_newer(63, 0));
    cr_assert(!ts_newer(64, 0));
    cr_assert(ts_newer(0, 64 + 1));
    cr_assert(!ts_newer(0, 64));
    for (unsigned b = 0; b < 128; b++)
        for (unsigned d = 0; d < 128; d++) {
            unsigned a = (b + d) & TS_MASK;
            cr_assert_eq(ts_newer(a, b), d >= 1 && d <= 63, "a %u b %u", a, b);
        }
}

/* ---- capability entries ------------------------------------------------- */

Test(capability, round_trip)
{
    const uint32_t keys[] = {0, 1, 0x7FFFFFFFu, 0x80000000u, 0xFFFFFFFFu, 0x12345678u};
    for (size_t i = 0; i < 6; i++)
        for (size_t j = 0; j < 6; j++) {
            uint64_t c = cap_make(keys[i], keys[j]);
            cr_assert_eq(cap_main(c), keys[i]);
            cr_assert_eq(cap_backup(c), keys[j]);
        }
}

/* ---- geometry ----------------------------------------------------------- */

static void check_geometry(uint64_t nsections, uint64_t align)
{
    struct geometry g;
    layout_geometry(nsections, align, &g);
    cr_assert_eq(g.nsections, nsections);
    cr_assert_eq(g.nspans, nsections * SPANS_PER_SECTION);
    cr_assert_eq(g.nchunks, nsections * CHUNKS_PER_SECTION);
    cr_assert_eq(g.data_size, nsections * FMEM_SECTION_SIZE);
    cr_assert_eq(g.total_size, g.data_off + g.data_size);
    cr_assert_eq(g.metadata_bytes, g.data_off);
    cr_assert(g.nusers >= 64 && g.nusers <= MAX_UID + 1, "nusers %llu", (unsigned long long)g.nusers);

    /* regions in order, each large enough, 8-byte aligned, no overlap */
    struct {
        const char *name;
        uint64_t off, len;
    } r[] = {
        {"header", 0, POOL_HDR_SIZE},
        {"users", g.users_off, 4 * g.nusers},
        {"sections", g.sect_off, 8 * g.nsections},
        {"spans", g.span_off, 8 * g.nspans},
        {"caps", g.cap_off, 8 * g.nchunks},
        {"log", g.log_off, 8 * g.nchunks},
        {"data", g.data_off, g.data_size},
    };
    const size_t nr = sizeof r / sizeof r[0];
    cr_assert(sizeof(struct pool_hdr) <= POOL_HDR_SIZE);
    for (size_t i = 0; i < nr; i++) {
        cr_assert_eq(r[i].off % 8, 0, "%s at %llu is not 8-byte aligned", r[i].name,
                     (unsigned long long)r[i].off);
        if (i > 0)
            cr_assert(r[i - 1].off + r[i - 1].len <= r[i].off, "%s overlaps %s", r[i - 1].name,
                      r[i].name);
    }
    cr_assert_eq(g.data_off % 4096, 0);
    cr_assert_eq(g.data_off % (align ? align : 4096), 0);
    cr_assert_eq(r[nr - 1].off + r[nr - 1].len, g.total_size);
}

Test(geometry, regions_ordered_aligned_disjoint)
{
    const uint64_t ns[] = {1, 2, 3, 7, 64, 512, 8192, 1u << 20};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        check_geometry(ns[i], 4096);
        check_geometry(ns[i], 2u << 20);
    }
}

/* Pools are formatted with 4 KiB data alignment (node_open). */
static void check_overhead(uint64_t pool_bytes)
{
    struct geometry g;
    layout_geometry(pool_bytes / FMEM_SECTION_SIZE, 4096, &g);
    cr_assert_eq(g.data_size, pool_bytes);
    /* metadata <= 0.4 % of the data: meta * 1000 <= data * 4 */
    cr_assert(g.metadata_bytes * 1000 <= g.data_size * 4,
              "%llu MiB pool: %llu bytes of metadata (%.4f %%)",
              (unsigned long long)(pool_bytes >> 20), (unsigned long long)g.metadata_bytes,
              100.0 * (double)g.metadata_bytes / (double)g.data_size);
}

Test(geometry, metadata_overhead_at_most_0_4_percent)
{
    check_overhead(UINT64_C(128) << 20);
    check_overhead(UINT64_C(1) << 30);
    check_overhead(UINT64_C(16) << 30);
}

Test(geometry, user_table_grows_with_the_pool_and_is_capped)
{
    struct geometry small, big, huge;
    layout_geometry(1, 4096, &small);
    layout_geometry(512, 4096, &big);
    layout_geometry(1u << 16, 4096, &huge);
    cr_assert_eq(small.nusers, 64);
    cr_assert(big.nusers > small.nusers);
    cr_assert_eq(huge.nusers, MAX_UID + 1);
}

/* ---- pool header -------------------------------------------------------- */

/* FNV-1a over the header fields before the checksum (as layout.c). */
static uint64_t fnv1a_hdr(const struct pool_hdr *h)
{
    const unsigned char *p = (const unsigned char *)h;
    uint64_t x = 1469598103934665603u;
    for (size_t i = 0; i < offsetof(struct pool_hdr, checksum); i++)
        x = (x ^ p[i]) * 1099511628211u;
    return x;
}

struct hdr_fixture {
    struct geometry g;
    struct pool_hdr h;
};

static void make_hdr(struct hdr_fixture *f, uint64_t nsections)
{
    layout_geometry(nsections, 4096, &f->g);
    layout_write_hdr(&f->h, &f->g);
}

Test(pool_header, written_header_is_accepted)
{
    const uint64_t ns[] = {1, 2, 32, 512, 8192};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        struct hdr_fixture f;
        make_hdr(&f, ns[i]);
        cr_assert_eq(memcmp(f.h.magic, POOL_MAGIC, 8), 0);
        cr_assert_eq(f.h.version, POOL_VERSION);
        cr_assert_eq(f.h.hdr_size, POOL_HDR_SIZE);
        cr_assert_eq(f.h.checksum, fnv1a_hdr(&f.h), "checksum is not FNV-1a of the fields");
        struct geometry got;
        cr_assert_eq(layout_check_hdr(&f.h, f.g.total_size, &got), 0, "%llu sections",
                     (unsigned long long)ns[i]);
        cr_assert_eq(memcmp(&got, &f.g, sizeof got), 0, "recomputed geometry differs");
        /* a file larger than the pool is fine */
        cr_assert_eq(layout_check_hdr(&f.h, f.g.total_size + 12345, &got), 0);
    }
}

Test(pool_header, two_mib_aligned_data_is_accepted)
{
    struct geometry g, got;
    struct pool_hdr h;
    layout_geometry(64, 2u << 20, &g);
    layout_write_hdr(&h, &g);
    cr_assert_eq(layout_check_hdr(&h, g.total_size, &got), 0);
    cr_assert_eq(got.data_off, g.data_off);
}

Test(pool_header, every_corrupted_byte_is_rejected)
{
    struct hdr_fixture f;
    make_hdr(&f, 64);
    struct geometry got;
    for (size_t i = 0; i < sizeof f.h; i++)
        for (unsigned bit = 0; bit < 8; bit++) {
            struct pool_hdr bad = f.h;
            ((unsigned char *)&bad)[i] ^= (unsigned char)(1u << bit);
            cr_assert_eq(layout_check_hdr(&bad, f.g.total_size, &got), FMEM_ECORRUPT,
                         "flip of byte %zu bit %u accepted", i, bit);
        }
}

/* Corrupt one field, then make the checksum match again: the field itself
 * must be rejected, not just the checksum. */
#define EXPECT_FIELD_REJECTED(field, value)                                              \
    do {                                                                                 \
        struct pool_hdr bad = f.h;                                                       \
        bad.field = (value);                                                             \
        bad.checksum = fnv1a_hdr(&bad);                                                  \
        cr_assert_eq(layout_check_hdr(&bad, f.g.total_size, &got), FMEM_ECORRUPT,        \
                     #field " = " #value " accepted");                                   \
    } while (0)

Test(pool_header, each_field_with_a_matching_checksum_is_checked)
{
    struct hdr_fixture f;
    make_hdr(&f, 64);
    struct geometry got;
    {
        struct pool_hdr bad = f.h;
        memcpy(bad.magic, "FMEMPOOX", 8);
        bad.checksum = fnv1a_hdr(&bad);
        cr_assert_eq(layout_check_hdr(&bad, f.g.total_size, &got), FMEM_ECORRUPT, "magic");
    }
    EXPECT_FIELD_REJECTED(version, POOL_VERSION + 1);
    EXPECT_FIELD_REJECTED(version, 0);
    EXPECT_FIELD_REJECTED(hdr_size, POOL_HDR_SIZE * 2);
    EXPECT_FIELD_REJECTED(nsections, 0);
    EXPECT_FIELD_REJECTED(nsections, 63);
    EXPECT_FIELD_REJECTED(nsections, 65);
    EXPECT_FIELD_REJECTED(nsections, (UINT64_C(1) << 24) + 1);
    EXPECT_FIELD_REJECTED(nsections, UINT64_MAX);
    EXPECT_FIELD_REJECTED(nusers, f.h.nusers + 1);
    EXPECT_FIELD_REJECTED(users_off, f.h.users_off + 8);
    EXPECT_FIELD_REJECTED(sect_off, f.h.sect_off + 8);
    EXPECT_FIELD_REJECTED(sect_off, 0);
    EXPECT_FIELD_REJECTED(span_off, f.h.span_off - 8);
    EXPECT_FIELD_REJECTED(cap_off, f.h.cap_off + 8);
    EXPECT_FIELD_REJECTED(log_off, f.h.log_off + 4096);
    EXPECT_FIELD_REJECTED(data_off, f.h.data_off + 4096);
    EXPECT_FIELD_REJECTED(data_off, 0);
    EXPECT_FIELD_REJECTED(total_size, f.h.total_size - 4096);
    EXPECT_FIELD_REJECTED(total_size, f.h.total_size + 4096);
    /* the checksum itself */
    {
        struct pool_hdr bad = f.h;
        bad.checksum ^= 1;
        cr_assert_eq(layout_check_hdr(&bad, f.g.total_size, &got), FMEM_ECORRUPT, "checksum");
        bad.checksum = 0;
        cr_assert_eq(layout_check_hdr(&bad, f.g.total_size, &got), FMEM_ECORRUPT, "zero checksum");
    }
}

Test(pool_header, pool_larger_than_its_file_is_rejected)
{
    struct hdr_fixture f;
    make_hdr(&f, 64);
    struct geometry got;
    cr_assert_eq(layout_check_hdr(&f.h, f.g.total_size - 1, &got), FMEM_ECORRUPT);
    cr_assert_eq(layout_check_hdr(&f.h, f.g.total_size / 2, &got), FMEM_ECORRUPT);
    cr_assert_eq(layout_check_hdr(&f.h, 0, &got), FMEM_ECORRUPT);
    cr_assert_eq(layout_check_hdr(&f.h, f.g.total_size, &got), 0);
}

Test(pool_header, consistent_header_of_another_size_is_rejected_by_file_size)
{
    /* a genuine header of a bigger pool in a file that is too short (the
     * file was truncated after creation) */
    struct hdr_fixture small, big;
    make_hdr(&small, 8);
    make_hdr(&big, 16);
    struct geometry got;
    cr_assert_eq(layout_check_hdr(&big.h, small.g.total_size, &got), FMEM_ECORRUPT);
    cr_assert_eq(layout_check_hdr(&small.h, big.g.total_size, &got), 0);
}
