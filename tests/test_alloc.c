/* test_alloc.c - the allocator through the public API on embedded pools:
 * size classes, alignment, data paths, disjointness, accounting, multi-node
 * pools, multi-section blocks and their undo, and contention control. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "crashpoint.h"
#include "fmem.h"
#include "fmem_admin.h"
#include "pool_internal.h"
#include "protocol.h"
#include "pool_helpers.h"
#include "shadow.h"

static void must_free(fmem_pool *p, const fmem_handle *h)
{
    int rc = fmem_free(p, h);
    cr_assert_eq(rc, 0, "fmem_free(node %u addr %#llx len %#llx): %s", h->node,
                 (unsigned long long)h->addr, (unsigned long long)h->length, fmem_strerror(rc));
}

/* ---- sizes -------------------------------------------------------------- */

Test(alloc, every_size_is_aligned_and_freed)
{
    fmem_pool *p = open_pool("mem:?size=64M");
    for (size_t sz = 4096; sz <= 32u << 20; sz <<= 1) {
        fmem_handle h = must_alloc(p, sz);
        cr_assert_eq(h.length, sz);
        cr_assert_eq(h.addr % sz, 0, "size %zu at %#llx", sz, (unsigned long long)h.addr);
        cr_assert_lt(h.addr, UINT64_C(64) << 20);
        cr_assert_leq(h.addr + h.length, UINT64_C(64) << 20);
        cr_assert_eq(h.node, 0);
        cr_assert_eq(h.flags, 0);
        cr_assert_neq(h.rkey, 0, "keys are never 0");
        cr_assert_eq(allocated_bytes(p), sz, "size %zu", sz);
        must_free(p, &h);
        cr_assert_eq(allocated_bytes(p), 0);
    }
    /* the whole pool in one block */
    fmem_handle h = must_alloc(p, 64u << 20);
    cr_assert_eq(h.addr, 0);
    cr_assert_eq(h.length, 64u << 20);
    must_free(p, &h);
    cr_assert_eq(allocated_bytes(p), 0);
    fmem_close(p);
}

Test(alloc, every_size_held_at_once)
{
    /* 4 KiB + 8 KiB + ... + 16 MiB = 32 MiB - 4 KiB: all fit together */
    fmem_pool *p = open_pool("mem:?size=64M");
    fmem_handle hs[13];
    uint64_t sum = 0;
    for (int i = 0; i < 13; i++) {
        size_t sz = FMEM_CHUNK_SIZE << i;
        hs[i] = must_alloc(p, sz);
        cr_assert_eq(hs[i].length, sz);
        cr_assert_eq(hs[i].addr % sz, 0);
        sum += sz;
        cr_assert_eq(allocated_bytes(p), sum);
    }
    for (int i = 0; i < 13; i++)
        for (int j = i + 1; j < 13; j++)
            cr_assert(hs[i].addr + hs[i].length <= hs[j].addr ||
                          hs[j].addr + hs[j].length <= hs[i].addr,
                      "blocks %d and %d overlap", i, j);
    for (int i = 12; i >= 0; i--)
        must_free(p, &hs[i]);
    cr_assert_eq(allocated_bytes(p), 0);
    fmem_close(p);
}

Test(alloc, size_rounding)
{
    const struct {
        size_t in, out;
    } cases[] = {
        {1, 4096},          {4095, 4096},       {4096, 4096},        {4097, 8192},
        {8192, 8192},       {8193, 16384},      {65535, 65536},      {131072, 131072},
        {131073, 262144},   {(2u << 20) - 1, 2u << 20},              {(2u << 20) + 1, 4u << 20},
        {(size_t)1 << 40, (size_t)1 << 40},     {((size_t)1 << 40) + 1, (size_t)1 << 41},
        {(size_t)1 << 62, (size_t)1 << 62},
        {(size_t)1 << 63, (size_t)1 << 63},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        cr_assert_eq(fmem_size_round(cases[i].in), cases[i].out, "round(%zu) = %zu", cases[i].in,
                     fmem_size_round(cases[i].in));
    cr_assert_eq(fmem_size_round(0), 0);
    cr_assert_eq(fmem_size_round(((size_t)1 << 62) + 1), (size_t)1 << 63);
    cr_assert_eq(fmem_size_round((size_t)1 << 63), (size_t)1 << 63);
    cr_assert_eq(fmem_size_round(((size_t)1 << 63) + 1), 0, "no block that large");
    cr_assert_eq(fmem_size_round(((size_t)1 << 63) + 4096), 0);
    cr_assert_eq(fmem_size_round(SIZE_MAX), 0);
}

Test(alloc, requests_are_rounded_like_fmem_size_round)
{
    fmem_pool *p = open_pool("mem:?size=8M");
    const size_t sizes[] = {1, 100, 4095, 4097, 12288, 65537, 131073, 1000000, 2097153};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        fmem_handle h = must_alloc(p, sizes[i]);
        cr_assert_eq(h.length, fmem_size_round(sizes[i]), "size %zu got %llu", sizes[i],
                     (unsigned long long)h.length);
        cr_assert_eq(h.addr % h.length, 0);
        must_free(p, &h);
    }
    fmem_close(p);
}

/* ---- data paths --------------------------------------------------------- */

Test(alloc, map_and_read_write_agree_to_the_last_byte)
{
    fmem_pool *p = open_pool("mem:?size=64M");
    for (size_t sz = 4096; sz <= 32u << 20; sz <<= 1) {
        fmem_handle h = must_alloc(p, sz);
        unsigned char *m;
        cr_assert_eq(fmem_map(p, &h, (void **)&m), 0);
        cr_assert_not_null(m);
        unsigned char tag = (unsigned char)(sz >> 12);
        /* map -> read: first, middle and last byte, and a run at the end */
        m[0] = tag;
        m[sz / 2] = (unsigned char)(tag + 1);
        m[sz - 1] = (unsigned char)(tag + 2);
        unsigned char b = 0;
        cr_assert_eq(fmem_read(p, &h, 0, &b, 1), 0);
        cr_assert_eq(b, tag);
        cr_assert_eq(fmem_read(p, &h, sz / 2, &b, 1), 0);
        cr_assert_eq(b, (unsigned char)(tag + 1));
        cr_assert_eq(fmem_read(p, &h, sz - 1, &b, 1), 0);
        cr_assert_eq(b, (unsigned char)(tag + 2), "last byte of %zu", sz);
        /* write -> map */
        unsigned char run[64];
        for (int i = 0; i < 64; i++)
            run[i] = (unsigned char)(i * 7 + tag);
        cr_assert_eq(fmem_write(p, &h, sz - 64, run, 64), 0);
        cr_assert_eq(memcmp(m + sz - 64, run, 64), 0, "tail of %zu", sz);
        cr_assert_eq(fmem_write(p, &h, 0, run, 64), 0);
        cr_assert_eq(memcmp(m, run, 64), 0);
        unsigned char back[64];
        cr_assert_eq(fmem_read(p, &h, sz - 64, back, 64), 0);
        cr_assert_eq(memcmp(back, run, 64), 0);
        /* zero-length access at the very end is in range */
        cr_assert_eq(fmem_read(p, &h, sz, back, 0), 0);
        must_free(p, &h);
    }
    fmem_close(p);
}

Test(alloc, whole_block_round_trip)
{
    fmem_pool *p = open_pool("mem:?size=8M");
    const size_t sz = 4u << 20; /* a two-section block */
    fmem_handle h = must_alloc(p, sz);
    unsigned char *src = malloc(sz), *dst = malloc(sz), *m;
    cr_assert(src && dst);
    for (size_t i = 0; i < sz; i++)
        src[i] = (unsigned char)(i * 2654435761u >> 13);
    cr_assert_eq(fmem_write(p, &h, 0, src, sz), 0);
    cr_assert_eq(fmem_map(p, &h, (void **)&m), 0);
    cr_assert_eq(memcmp(m, src, sz), 0);
    for (size_t i = 0; i < sz; i++)
        m[i] ^= 0x5A;
    cr_assert_eq(fmem_read(p, &h, 0, dst, sz), 0);
    for (size_t i = 0; i < sz; i++)
        cr_assert_eq(dst[i], src[i] ^ 0x5A, "byte %zu", i);
    free(src);
    free(dst);
    must_free(p, &h);
    fmem_close(p);
}

Test(alloc, blocks_do_not_share_data)
{
    fmem_pool *p = open_pool("mem:?size=4M");
    enum { N = 64 };
    fmem_handle hs[N];
    for (int i = 0; i < N; i++) {
        hs[i] = must_alloc(p, FMEM_CHUNK_SIZE << (i % 4));
        unsigned char *m;
        cr_assert_eq(fmem_map(p, &hs[i], (void **)&m), 0);
        memset(m, i + 1, hs[i].length);
    }
    for (int i = 0; i < N; i++) {
        unsigned char *m;
        cr_assert_eq(fmem_map(p, &hs[i], (void **)&m), 0);
        for (uint64_t b = 0; b < hs[i].length; b++)
            cr_assert_eq(m[b], i + 1, "block %d byte %llu overwritten", i, (unsigned long long)b);
    }
    for (int i = 0; i < N; i++)
        must_free(p, &hs[i]);
    fmem_close(p);
}

/* ---- disjointness and accounting under churn ----------------------------
 * One thread, random mixed sizes, up to 200 live blocks. The shadow map
 * catches any chunk handed out twice; allocated_bytes must always equal the
 * sum of the live lengths. */

static void churn(const char *uri, uint64_t pool_bytes, int ops, uint64_t seed)
{
    fmem_pool *p = open_pool(uri);
    struct shadow sh;
    struct failure fail = {0};
    cr_assert(shadow_init(&sh, 1, pool_bytes));
    enum { MAXLIVE = 200 };
    fmem_handle live[MAXLIVE];
    int nlive = 0, enomem = 0;
    uint64_t live_bytes = 0;
    struct test_rng r;
    rng_seed(&r, seed);
    for (int op = 0; op < ops; op++) {
        bool do_alloc = nlive == 0 || (nlive < MAXLIVE && rng_below(&r, 100) < 55);
        if (do_alloc) {
            size_t sz = random_block_size(&r);
            fmem_handle h;
            int rc = fmem_alloc(p, sz, &h);
            if (rc == FMEM_ENOMEM) {
                /* legitimate only when fragmentation leaves no room: never
                 * for a single chunk while most of the pool is free */
                cr_assert(sz > FMEM_CHUNK_SIZE || live_bytes > pool_bytes / 2,
                          "ENOMEM for %zu with %llu of %llu bytes live", sz,
                          (unsigned long long)live_bytes, (unsigned long long)pool_bytes);
                enomem++;
                continue;
            }
            cr_assert_eq(rc, 0, "op %d alloc %zu: %s", op, sz, fmem_strerror(rc));
            cr_assert_eq(h.length, fmem_size_round(sz));
            cr_assert_eq(h.addr % h.length, 0);
            cr_assert(shadow_claim(&sh, &h, 1, &fail), "op %d: %s", op, fail.msg);
            live[nlive++] = h;
            live_bytes += h.length;
        } else {
            int i = (int)rng_below(&r, (uint64_t)nlive);
            cr_assert(shadow_release(&sh, &live[i], 1, &fail), "op %d: %s", op, fail.msg);
            int rc = fmem_free(p, &live[i]);
            cr_assert_eq(rc, 0, "op %d free addr %#llx len %#llx: %s", op,
                         (unsigned long long)live[i].addr, (unsigned long long)live[i].length,
                         fmem_strerror(rc));
            live_bytes -= live[i].length;
            live[i] = live[--nlive];
        }
        if (op % 64 == 0)
            cr_assert_eq(allocated_bytes(p), live_bytes, "op %d", op);
    }
    cr_assert_eq(allocated_bytes(p), live_bytes);
    cr_assert_eq(shadow_owned_chunks(&sh) * FMEM_CHUNK_SIZE, live_bytes);
    while (nlive > 0) {
        nlive--;
        cr_assert(shadow_release(&sh, &live[nlive], 1, &fail), "%s", fail.msg);
        must_free(p, &live[nlive]);
    }
    cr_assert_eq(allocated_bytes(p), 0);
    /* everything went back: the whole pool is one block again */
    fmem_handle all = must_alloc(p, pool_bytes);
    must_free(p, &all);
    (void)enomem;
    shadow_destroy(&sh);
    fmem_close(p);
}

Test(churn, mixed_sizes_never_overlap_and_add_up)
{
    churn("mem:?size=64M", UINT64_C(64) << 20, 4000, 1);
}

Test(churn, mixed_sizes_on_a_small_pool)
{
    /* 8 MiB: ENOMEM, fragmentation and span release all the time */
    churn("mem:?size=8M", UINT64_C(8) << 20, 4000, 2);
}

/* ---- accounting --------------------------------------------------------- */

Test(stats, counters_and_size_classes)
{
    fmem_pool *p = open_pool("mem:?size=64M");
    fmem_stats_t st;
    cr_assert_eq(fmem_stats(p, &st), 0);
    cr_assert_eq(st.capacity_bytes, UINT64_C(64) << 20);
    cr_assert_eq(st.nodes, 1);
    cr_assert_neq(st.user_id, 0, "user id 0 means nobody");
    cr_assert_gt(st.metadata_bytes, 0);
    /* 16 B per chunk plus headers, rounded to a page: just above 0.4 % at
     * 64 MiB (the 0.4 % budget is checked from 128 MiB up in test_layout) */
    cr_assert_leq(st.metadata_bytes * 1000, st.capacity_bytes * 5, "metadata above 0.5 %%");
    cr_assert_geq(st.metadata_bytes, 16 * (st.capacity_bytes / FMEM_CHUNK_SIZE));
    cr_assert_eq(st.allocs + st.frees + st.failed_allocs, 0);

    /* class k gets k+1 allocations, k = 0 .. 9 (4 KiB .. 2 MiB) */
    fmem_handle hs[64];
    int n = 0;
    fmem_handle h8 = must_alloc(p, 8u << 20); /* class 11, first: needs 4 free sections */
    uint64_t sum = h8.length;
    for (unsigned k = 0; k < 10; k++)
        for (unsigned i = 0; i <= k; i++) {
            hs[n] = must_alloc(p, FMEM_CHUNK_SIZE << k);
            sum += hs[n++].length;
        }
    cr_assert_eq(fmem_stats(p, &st), 0);
    cr_assert_eq(st.allocated_bytes, sum);
    cr_assert_eq(st.allocs, (uint64_t)n + 1);
    for (unsigned k = 0; k < 10; k++)
        cr_assert_eq(st.size_class_allocs[k], k + 1, "class %u", k);
    cr_assert_eq(st.size_class_allocs[10], 0);
    cr_assert_eq(st.size_class_allocs[11], 1);
    for (unsigned k = 12; k < FMEM_SIZE_CLASSES; k++)
        cr_assert_eq(st.size_class_allocs[k], 0, "class %u", k);

    /* failures count, successes do not change */
    fmem_handle h;
    cr_assert_eq(fmem_alloc(p, 0, &h), FMEM_ESIZE);
    cr_assert_eq(fmem_alloc(p, (64u << 20) + 1, &h), FMEM_ESIZE);
    cr_assert_eq(fmem_alloc(p, 64u << 20, &h), FMEM_ENOMEM);
    for (int i = 0; i < n; i++)
        must_free(p, &hs[i]);
    must_free(p, &h8);
    cr_assert_eq(fmem_stats(p, &st), 0);
    cr_assert_eq(st.failed_allocs, 3);
    cr_assert_eq(st.allocs, (uint64_t)n + 1);
    cr_assert_eq(st.frees, (uint64_t)n + 1);
    cr_assert_eq(st.allocated_bytes, 0);
    cr_assert_gt(st.cas_ops, 0);
    cr_assert_gt(st.reads, 0);
    cr_assert_gt(st.round_trips, 0);
    cr_assert_eq(st.cas_failures, 0, "one thread alone never loses a CAS");
    cr_assert_eq(st.max_retries, 0);
    fmem_close(p);
}

Test(stats, per_size_counts_follow_rounding)
{
    fmem_pool *p = open_pool("mem:?size=8M");
    fmem_handle h;
    h = must_alloc(p, 1);        /* class 0 */
    must_free(p, &h);
    h = must_alloc(p, 4097);     /* class 1 */
    must_free(p, &h);
    h = must_alloc(p, 131073);   /* class 6 */
    must_free(p, &h);
    fmem_stats_t st;
    cr_assert_eq(fmem_stats(p, &st), 0);
    cr_assert_eq(st.size_class_allocs[0], 1);
    cr_assert_eq(st.size_class_allocs[1], 1);
    cr_assert_eq(st.size_class_allocs[5], 0);
    cr_assert_eq(st.size_class_allocs[6], 1);
    fmem_close(p);
}

Test(stats, exact_fill_with_single_chunks)
{
    fmem_pool *p = open_pool("mem:?size=4M");
    enum { N = 1024 }; /* 4 MiB / 4 KiB */
    static fmem_handle hs[N];
    for (int i = 0; i < N; i++)
        hs[i] = must_alloc(p, 1);
    cr_assert_eq(allocated_bytes(p), UINT64_C(4) << 20);
    fmem_handle h;
    cr_assert_eq(fmem_alloc(p, 1, &h), FMEM_ENOMEM, "more than 1024 chunks in a 4 MiB pool");
    /* every chunk exactly once */
    static unsigned char seen[N];
    for (int i = 0; i < N; i++) {
        uint64_t c = hs[i].addr / FMEM_CHUNK_SIZE;
        cr_assert_lt(c, N);
        cr_assert_eq(seen[c], 0, "chunk %llu twice", (unsigned long long)c);
        seen[c] = 1;
    }
    for (int i = 0; i < N; i++)
        must_free(p, &hs[i]);
    cr_assert_eq(allocated_bytes(p), 0);
    fmem_close(p);
}

/* ---- multi-node pools --------------------------------------------------- */

Test(multinode, round_robin_over_all_nodes)
{
    fmem_pool *p = open_pool("mem:?size=16M&nodes=4");
    fmem_stats_t st;
    cr_assert_eq(fmem_stats(p, &st), 0);
    cr_assert_eq(st.nodes, 4);
    cr_assert_eq(st.capacity_bytes, UINT64_C(64) << 20);
    fmem_handle hs[16];
    unsigned per_node[4] = {0};
    for (int i = 0; i < 16; i++) {
        hs[i] = must_alloc(p, FMEM_CHUNK_SIZE << (i % 3));
        cr_assert_lt(hs[i].node, 4);
        if (i > 0)
            cr_assert_eq(hs[i].node, (hs[i - 1].node + 1) % 4, "allocation %d not round robin", i);
        per_node[hs[i].node]++;
    }
    for (int i = 0; i < 4; i++)
        cr_assert_eq(per_node[i], 4, "node %d got %u", i, per_node[i]);
    /* same address on different nodes are different blocks */
    for (int i = 0; i < 16; i++) {
        uint32_t tag = 0xA000u + (uint32_t)i;
        cr_assert_eq(fmem_write(p, &hs[i], 0, &tag, 4), 0);
    }
    for (int i = 0; i < 16; i++) {
        uint32_t tag;
        cr_assert_eq(fmem_read(p, &hs[i], 0, &tag, 4), 0);
        cr_assert_eq(tag, 0xA000u + (uint32_t)i, "block %d overwritten", i);
    }
    for (int i = 0; i < 16; i++)
        must_free(p, &hs[i]);
    cr_assert_eq(allocated_bytes(p), 0);
    fmem_close(p);
}

Test(multinode, full_nodes_fall_over_to_the_others)
{
    fmem_pool *p = open_pool("mem:?size=2M&nodes=4");
    fmem_handle big[4];
    unsigned seen = 0;
    for (int i = 0; i < 4; i++) {
        big[i] = must_alloc(p, 2u << 20);
        seen |= 1u << big[i].node;
    }
    cr_assert_eq(seen, 0xF, "four whole-node blocks on nodes %#x", seen);
    fmem_handle h;
    cr_assert_eq(fmem_alloc(p, 1, &h), FMEM_ENOMEM);
    /* free node 2: whatever the round-robin cursor, node 2 serves */
    int on2 = -1;
    for (int i = 0; i < 4; i++)
        if (big[i].node == 2)
            on2 = i;
    must_free(p, &big[on2]);
    for (int round = 0; round < 6; round++) {
        h = must_alloc(p, 2u << 20);
        cr_assert_eq(h.node, 2, "round %d", round);
        must_free(p, &h);
    }
    /* and 512 single chunks fill exactly node 2 */
    static fmem_handle small[512];
    for (int i = 0; i < 512; i++) {
        small[i] = must_alloc(p, 4096);
        cr_assert_eq(small[i].node, 2);
    }
    cr_assert_eq(fmem_alloc(p, 4096, &h), FMEM_ENOMEM);
    for (int i = 0; i < 512; i++)
        must_free(p, &small[i]);
    for (int i = 0; i < 4; i++)
        if (i != on2)
            must_free(p, &big[i]);
    cr_assert_eq(allocated_bytes(p), 0);
    fmem_close(p);
}

Test(multinode, nodes_of_different_sizes)
{
    fmem_pool *p = open_pool("mem:?size=2M;mem:?size=8M");
    fmem_handle h = must_alloc(p, 8u << 20);
    cr_assert_eq(h.node, 1, "only node 1 holds 8 MiB");
    fmem_handle h2;
    cr_assert_eq(fmem_alloc(p, 4u << 20, &h2), FMEM_ENOMEM);
    must_free(p, &h);
    cr_assert_eq(fmem_alloc(p, 16u << 20, &h2), FMEM_ESIZE, "larger than every node");
    fmem_close(p);
}

/* ---- multi-section blocks ----------------------------------------------- */

Test(multisection, blocks_take_whole_aligned_sections)
{
    fmem_pool *p = open_pool("mem:?size=16M");
    fmem_handle a = must_alloc(p, 4u << 20), b = must_alloc(p, 8u << 20);
    cr_assert_eq(a.addr % (4u << 20), 0);
    cr_assert_eq(b.addr % (8u << 20), 0);
    cr_assert(a.addr + a.length <= b.addr || b.addr + b.length <= a.addr);
    cr_assert_eq(allocated_bytes(p), 12u << 20);
    fmem_handle c = must_alloc(p, 4u << 20);
    cr_assert_eq(allocated_bytes(p), 16u << 20);
    fmem_handle d;
    cr_assert_eq(fmem_alloc(p, 4096, &d), FMEM_ENOMEM);
    must_free(p, &b);
    must_free(p, &a);
    must_free(p, &c);
    cr_assert_eq(allocated_bytes(p), 0);
    fmem_close(p);
}

Test(multisection, no_room_between_chunks)
{
    /* one chunk in section 1 of 2: a 4 MiB block cannot exist */
    fmem_pool *p = open_pool("mem:?size=4M");
    fmem_handle s0 = must_alloc(p, 2u << 20), s1 = must_alloc(p, 2u << 20);
    fmem_handle *hi = s0.addr ? &s0 : &s1, *lo = s0.addr ? &s1 : &s0;
    must_free(p, hi);
    fmem_handle c = must_alloc(p, 4096);
    cr_assert_geq(c.addr, 2u << 20, "the chunk must land in section 1");
    must_free(p, lo);
    fmem_handle h;
    cr_assert_eq(fmem_alloc(p, 4u << 20, &h), FMEM_ENOMEM);
    cr_assert_eq(allocated_bytes(p), 4096);
    must_free(p, &c);
    h = must_alloc(p, 4u << 20);
    must_free(p, &h);
    fmem_close(p);
}

/* Section `busy` of a pool of `nsec` sections holds one chunk that client B
 * took behind client A's back; A's cached headers still show every section
 * free, so A's nsec-section allocation takes sections 0..busy-1 with real
 * CASes before it meets the busy one, and must undo them. */
static void multi_undo(unsigned nsec, unsigned busy)
{
    char name[96], uri[160];
    snprintf(name, sizeof name, "/dev/shm/fmem-test-undo-%d", (int)getpid());
    snprintf(uri, sizeof uri, "shm:%s?size=%uM", name + 8, 2 * nsec);
    pool_unlink(name);
    fmem_pool *a = open_pool(uri), *b = open_pool(uri);
    pool_unlink(name); /* both are mapped: nothing to clean up on failure */

    /* B: fill every section with a 2 MiB block, then trade section `busy`'s
     * block for a single chunk */
    fmem_handle secs[16], c;
    for (unsigned i = 0; i < nsec; i++) {
        fmem_handle h = must_alloc(b, 2u << 20);
        secs[h.addr >> 21] = h;
    }
    must_free(b, &secs[busy]);
    c = must_alloc(b, 4096);
    cr_assert_eq(c.addr >> 21, busy);
    for (unsigned i = 0; i < nsec; i++)
        if (i != busy)
            must_free(b, &secs[i]);

    fmem_stats_t before, st;
    cr_assert_eq(fmem_stats(b, &before), 0);
    cr_assert_eq(before.allocated_bytes, 4096);
    uint64_t a_fail0 = atomic_load(&a->nodes[0]->tp->n_cas_fail);

    fmem_handle h;
    cr_assert_eq(fmem_alloc(a, (size_t)nsec << 21, &h), FMEM_ENOMEM);
    cr_assert_gt(atomic_load(&a->nodes[0]->tp->n_cas_fail), a_fail0,
                 "the busy section was never tried: no undo happened");

    cr_assert_eq(fmem_stats(b, &st), 0);
    cr_assert_eq(st.allocated_bytes, before.allocated_bytes, "undo left %llu bytes",
                 (unsigned long long)(st.allocated_bytes - before.allocated_bytes));
    /* each section header is exactly as before: free, or the busy one */
    struct node *n = a->nodes[0];
    for (unsigned x = 0; x < nsec; x++) {
        uint64_t sh;
        cr_assert_eq(tp_read(n->tp, sec_hdr_off(n, x), &sh, 8), 0);
        if (x == busy)
            cr_assert_eq(h_lo(sh), SPAN_INUSE, "section %u: %#x", x, h_lo(sh));
        else
            cr_assert_eq(h_lo(sh), 0, "section %u not undone: %#x", x, h_lo(sh));
    }
    /* every free section is still usable, by either client */
    fmem_handle got[16];
    for (unsigned i = 0; i + 1 < nsec; i++) {
        got[i] = must_alloc(i % 2 ? b : a, 2u << 20);
        cr_assert_neq(got[i].addr >> 21, busy);
    }
    for (unsigned i = 0; i + 1 < nsec; i++)
        must_free(i % 2 ? b : a, &got[i]);
    must_free(b, &c);
    h = must_alloc(a, (size_t)nsec << 21);
    cr_assert_eq(h.addr, 0);
    must_free(a, &h);
    cr_assert_eq(allocated_bytes(a), 0);
    fmem_close(a);
    fmem_close(b);
}

Test(multisection, undo_when_the_second_section_is_taken)
{
    multi_undo(2, 1);
}

Test(multisection, undo_of_three_sections_when_the_fourth_is_taken)
{
    multi_undo(4, 3);
}

/* ---- empty chunk-layer spans go back to the section layer ---------------- */

Test(release, whole_pool_after_chunk_churn)
{
    fmem_pool *p = open_pool("mem:?size=16M");
    enum { N = (16 << 20) / 8192 }; /* the whole pool in 8 KiB blocks */
    static fmem_handle hs[N];
    for (int i = 0; i < N; i++)
        hs[i] = must_alloc(p, 8192);
    /* free in an order that empties spans gradually */
    for (int i = 0; i < N; i += 2)
        must_free(p, &hs[i]);
    for (int i = 1; i < N; i += 2)
        must_free(p, &hs[i]);
    cr_assert_eq(allocated_bytes(p), 0);
    /* every span was attached to the chunk layer; span-level blocks need
     * them released */
    fmem_handle secs[8];
    for (int i = 0; i < 8; i++)
        secs[i] = must_alloc(p, 2u << 20);
    for (int i = 0; i < 8; i++)
        must_free(p, &secs[i]);
    fmem_handle spans[128];
    for (int i = 0; i < 128; i++)
        spans[i] = must_alloc(p, FMEM_SPAN_SIZE);
    for (int i = 0; i < 128; i++)
        must_free(p, &spans[i]);
    fmem_handle all = must_alloc(p, 16u << 20);
    must_free(p, &all);
    cr_assert_eq(allocated_bytes(p), 0);
    fmem_close(p);
}

Test(release, whole_pool_right_after_chunks)
{
    fmem_pool *p = open_pool("mem:?size=8M");
    fmem_handle hs[64];
    for (int i = 0; i < 64; i++)
        hs[i] = must_alloc(p, FMEM_CHUNK_SIZE << (i % 5));
    for (int i = 0; i < 64; i++)
        must_free(p, &hs[i]);
    fmem_handle all = must_alloc(p, 8u << 20);
    cr_assert_eq(all.addr, 0);
    must_free(p, &all);
    fmem_close(p);
}

/* ---- redo-log entries stay current --------------------------------------
 * A block's full-log entry changes only when a block starting at its chunk
 * is allocated or freed, while its header's 7-bit timestamp moves on every
 * alloc/free flip of any block there. An entry left idle for 64+ flips
 * must still be updated by the next allocation, or the live block is
 * refused (the entry says free) by every call. */

static void expect_usable(fmem_pool *p, const fmem_handle *h, const char *what)
{
    char buf[8] = "fmem";
    void *m;
    int rc = fmem_map(p, h, &m);
    cr_assert_eq(rc, 0, "%s: fmem_map: %s", what, fmem_strerror(rc));
    rc = fmem_write(p, h, 0, buf, sizeof buf);
    cr_assert_eq(rc, 0, "%s: fmem_write: %s", what, fmem_strerror(rc));
    rc = fmem_read(p, h, 0, buf, sizeof buf);
    cr_assert_eq(rc, 0, "%s: fmem_read: %s", what, fmem_strerror(rc));
    rc = fmem_free(p, h);
    cr_assert_eq(rc, 0, "%s: fmem_free: %s", what, fmem_strerror(rc));
}

Test(redolog, chunk_entry_idle_for_64_flips)
{
    fmem_pool *p = open_pool("mem:?size=2M");
    fmem_handle keep = must_alloc(p, 4096); /* chunk 0 */
    fmem_handle y = must_alloc(p, 4096);    /* chunk 1 */
    cr_assert_eq(y.addr, 4096);
    must_free(p, &y); /* chunk 1's entry: a free */
    /* 8 KiB blocks cannot use chunk 1: they churn at chunk 2 and flip the
     * span's timestamp twice per round */
    for (int i = 0; i < 32; i++) {
        fmem_handle w = must_alloc(p, 8192);
        cr_assert_eq(w.addr, 8192);
        must_free(p, &w);
    }
    fmem_handle z = must_alloc(p, 4096); /* chunk 1 again, 65 flips later */
    cr_assert_eq(z.addr, 4096);
    expect_usable(p, &z, "4 KiB block");
    must_free(p, &keep);
    fmem_close(p);
}

Test(redolog, buffer_reallocated_after_small_object_churn)
{
    for (int rounds = 30; rounds <= 70; rounds += 8) { /* around the 64-flip edge */
        fmem_pool *p = open_pool("mem:?size=2M");
        fmem_handle small[16];
        for (int i = 0; i < 16; i++)
            small[i] = must_alloc(p, 4096);
        fmem_handle buf = must_alloc(p, 65536);
        must_free(p, &buf);
        for (int round = 0; round < rounds; round++) {
            must_free(p, &small[round % 16]);
            small[round % 16] = must_alloc(p, 4096);
        }
        fmem_handle again = must_alloc(p, 65536);
        cr_assert_eq(again.addr, buf.addr);
        expect_usable(p, &again, "64 KiB buffer");
        for (int i = 0; i < 16; i++)
            must_free(p, &small[i]);
        fmem_close(p);
    }
}

Test(redolog, span_entry_idle_for_64_flips)
{
    /* the same in the section-header domain, with span-level blocks */
    fmem_pool *p = open_pool("mem:?size=2M");
    fmem_handle keep = must_alloc(p, 128 << 10); /* span 0 */
    fmem_handle y = must_alloc(p, 128 << 10);    /* span 1 */
    cr_assert_eq(y.addr, 128 << 10);
    must_free(p, &y);
    for (int i = 0; i < 32; i++) { /* 256 KiB blocks churn at spans 2-3 */
        fmem_handle w = must_alloc(p, 256 << 10);
        must_free(p, &w);
    }
    fmem_handle z = must_alloc(p, 128 << 10);
    cr_assert_eq(z.addr, 128 << 10);
    expect_usable(p, &z, "128 KiB block");
    must_free(p, &keep);
    fmem_close(p);
}

Test(redolog, entry_records_the_live_allocation)
{
    fmem_pool *p = open_pool("mem:?size=4M");
    struct node *n = p->nodes[0];
    const struct {
        size_t size;
        unsigned layer, log2;
    } cases[] = {{4096, LAYER_CHUNK, 0},     {65536, LAYER_CHUNK, 4},
                 {128 << 10, LAYER_SPAN, 5}, {2 << 20, LAYER_SPAN, 9},
                 {4 << 20, LAYER_SECTION, 10}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fmem_handle h = must_alloc(p, cases[i].size);
        uint64_t c = h.addr / FMEM_CHUNK_SIZE, e;
        cr_assert_eq(tp_read(n->tp, log_off(n, c), &e, 8), 0);
        cr_assert(log_valid(e) && log_alloc(e), "size %zu: entry %#llx", cases[i].size,
                  (unsigned long long)e);
        cr_assert_eq(log_layer(e), cases[i].layer, "size %zu", cases[i].size);
        cr_assert_eq(log_log2(e), cases[i].log2, "size %zu", cases[i].size);
        cr_assert_eq(log_uid(e), n->uid);
        must_free(p, &h);
        cr_assert_eq(tp_read(n->tp, log_off(n, c), &e, 8), 0);
        cr_assert(log_valid(e) && !log_alloc(e), "size %zu: free not logged", cases[i].size);
    }
    fmem_close(p);
}

/* A commit in the span of the thread's previous commit, with nobody else's
 * operation in between, knows the new block's log entry from the span's
 * entries read with that commit (redolog.c, span_snap): it reads only the
 * block's key. Before, every allocation read the entry and the key. */
Test(redolog, commits_in_one_span_read_only_the_key)
{
    fmem_pool *p = open_pool("mem:?size=4M");
    struct node *n = p->nodes[0];
    enum { N = 24 };
    fmem_handle h[N];
    h[0] = must_alloc(p, 4096); /* may claim a span */
    struct tp_trace t0 = tp_trace;
    for (int i = 1; i < N; i++)
        h[i] = must_alloc(p, 4096);
    uint64_t reads = tp_trace.reads - t0.reads, hits = tp_trace.snap_hits - t0.snap_hits;
    cr_log_info("%d allocations: %llu READs, %llu knew the entry", N - 1,
                (unsigned long long)reads, (unsigned long long)hits);
    cr_assert_leq(reads, (uint64_t)N - 1 + 2, "%llu READs for %d allocations",
                  (unsigned long long)reads, N - 1);
    cr_assert_geq(hits, (uint64_t)N - 3);
    for (int i = 0; i < N; i++) {
        uint64_t e;
        cr_assert_eq(tp_read(n->tp, log_off(n, h[i].addr / FMEM_CHUNK_SIZE), &e, 8), 0);
        cr_assert(log_valid(e) && log_alloc(e) && log_log2(e) == 0 && log_uid(e) == n->uid,
                  "block %d: entry %#llx", i, (unsigned long long)e);
    }
    for (int i = 0; i < N; i++)
        must_free(p, &h[i]);
    fmem_close(p);
}

/* Threads allocating and freeing in the same few spans: every commit that
 * took its entry from a span snapshot must have found exactly that entry
 * (the mem transport answers the flush at once, so a wrong one shows), the
 * full log must record each live allocation, and the verifier must be clean. */
enum { SNAP_THREADS = 4, SNAP_ROUNDS = 20000, SNAP_HELD = 6 };

struct snap_worker {
    fmem_pool *p;
    unsigned seed;
    int bad;
    uint64_t hits;
};

static void *snap_churn(void *arg)
{
    struct snap_worker *w = arg;
    struct node *n = w->p->nodes[0];
    fmem_handle held[SNAP_HELD];
    int nheld = 0;
    uint64_t h0 = tp_trace.snap_hits;
    for (int r = 0; r < SNAP_ROUNDS && !w->bad; r++) {
        if (nheld == SNAP_HELD || (nheld && rand_r(&w->seed) % 3 == 0)) {
            int i = (int)(rand_r(&w->seed) % (unsigned)nheld);
            if (fmem_free(w->p, &held[i]))
                w->bad = 1;
            held[i] = held[--nheld];
            continue;
        }
        size_t sz = (size_t)4096 << (rand_r(&w->seed) % 3 == 0 ? rand_r(&w->seed) % 5 : 0);
        fmem_handle h;
        int rc = fmem_alloc(w->p, sz, &h);
        if (rc == FMEM_ENOMEM)
            continue;
        if (rc) {
            w->bad = 2;
            break;
        }
        uint64_t e;
        if (tp_read(n->tp, log_off(n, h.addr / FMEM_CHUNK_SIZE), &e, 8) ||
            !log_valid(e) || !log_alloc(e) || (4096ull << log_log2(e)) != sz ||
            log_uid(e) != n->uid)
            w->bad = 3;
        held[nheld++] = h;
    }
    while (nheld)
        if (fmem_free(w->p, &held[--nheld]))
            w->bad = 1;
    w->hits = tp_trace.snap_hits - h0;
    return NULL;
}

Test(redolog, span_snapshots_stay_right_under_contention, .timeout = 120)
{
    fmem_pool *p = open_pool("mem:?size=4M");
    uint64_t wrong0 = atomic_load(&log_snap_wrong), hits = 0;
    pthread_t th[SNAP_THREADS];
    struct snap_worker w[SNAP_THREADS];
    for (int i = 0; i < SNAP_THREADS; i++) {
        w[i] = (struct snap_worker){.p = p, .seed = 17u * (unsigned)i + 1};
        cr_assert_eq(pthread_create(&th[i], NULL, snap_churn, &w[i]), 0);
    }
    for (int i = 0; i < SNAP_THREADS; i++) {
        pthread_join(th[i], NULL);
        cr_expect_eq(w[i].bad, 0, "thread %d: failure %d", i, w[i].bad);
        hits += w[i].hits;
    }
    cr_log_info("%llu commits knew their entry", (unsigned long long)hits);
    cr_assert_gt(hits, 100, "the snapshots were not used");
    cr_assert_eq(atomic_load(&log_snap_wrong) - wrong0, 0, "a snapshot entry was wrong");
    fmem_verify_report rep;
    cr_assert_eq(fmem_verify(p, &rep, stderr), 0);
    cr_assert_eq(rep.errors, 0, "the verifier found %llu errors", (unsigned long long)rep.errors);
    cr_assert_eq(allocated_bytes(p), 0);
    fmem_close(p);
}

/* ---- contention control ------------------------------------------------- */

/* Span of a chunk-layer block. */
static uint64_t span_of(const fmem_handle *h)
{
    return h->addr / FMEM_SPAN_SIZE;
}

static void set_span_retry(struct node *n, uint64_t s, unsigned level)
{
    uint64_t hv, old;
    cr_assert_eq(tp_read(n->tp, span_hdr_off(n, s), &hv, 8), 0);
    cr_assert_eq(tp_cas(n->tp, span_hdr_off(n, s), hv, h_with_retry(hv, level), &old), 1);
    node_refresh_all(n);
    *span_hint(n) = 0; /* forget this thread's last span */
}

/* Take every span that is still free with span-level blocks. */
static int take_free_spans(fmem_pool *p, fmem_handle *out, int max)
{
    int n = 0;
    fmem_handle h;
    while (n < max && fmem_alloc(p, FMEM_SPAN_SIZE, &h) == 0)
        out[n++] = h;
    return n;
}

Test(contention, commits_record_retry_level_zero_when_alone)
{
    fmem_pool *p = open_pool("mem:?size=2M");
    struct node *n = p->nodes[0];
    fmem_handle h = must_alloc(p, 4096);
    uint64_t hv;
    cr_assert_eq(tp_read(n->tp, span_hdr_off(n, span_of(&h)), &hv, 8), 0);
    cr_assert_eq(h_retry(hv), 0);
    cr_assert_eq(h_uid(hv), n->uid, "the commit logs its user");
    cr_assert_eq(h_off(hv), (h.addr / FMEM_CHUNK_SIZE) % CHUNKS_PER_SPAN);
    cr_assert_eq(h_size(hv), 0);
    must_free(p, &h);
    fmem_close(p);
}

Test(contention, span_with_retry_level_2_is_avoided_until_nothing_else_is_left)
{
    fmem_pool *p = open_pool("mem:?size=2M");
    struct node *n = p->nodes[0];
    fmem_handle first = must_alloc(p, 4096);
    uint64_t hot = span_of(&first);
    set_span_retry(n, hot, 2);

    fmem_handle other = must_alloc(p, 4096);
    cr_assert_neq(span_of(&other), hot, "allocated in a span recorded as contended");
    must_free(p, &other);

    /* leave only the hot span: it is the fallback, not a dead end */
    fmem_handle spans[16];
    int taken = take_free_spans(p, spans, 16);
    cr_assert_eq(taken, 15, "took %d spans", taken);
    *span_hint(n) = 0;
    fmem_handle last = must_alloc(p, 4096);
    cr_assert_eq(span_of(&last), hot);
    must_free(p, &last);
    must_free(p, &first);
    for (int i = 0; i < taken; i++)
        must_free(p, &spans[i]);
    cr_assert_eq(allocated_bytes(p), 0);
    fmem_close(p);
}

Test(contention, contended_span_state_is_avoided_and_reset_after_a_calm_commit)
{
    fmem_pool *p = open_pool("mem:?size=2M");
    struct node *n = p->nodes[0];
    fmem_handle first = must_alloc(p, 4096);
    uint64_t hot = span_of(&first);
    unsigned j = hot % SPANS_PER_SECTION;
    uint64_t sh, old;
    cr_assert_eq(tp_read(n->tp, sec_hdr_off(n, 0), &sh, 8), 0);
    cr_assert_eq(sec_state(sh, j), SPAN_INUSE);
    cr_assert_eq(tp_cas(n->tp, sec_hdr_off(n, 0), sh, sec_with_state(sh, j, SPAN_CONTENDED), &old), 1);
    node_refresh_all(n);
    *span_hint(n) = 0;

    fmem_handle other = must_alloc(p, 4096);
    cr_assert_neq(span_of(&other), hot, "allocated in a span marked contended (10)");
    must_free(p, &other);

    fmem_handle spans[16];
    int taken = take_free_spans(p, spans, 16);
    cr_assert_eq(taken, 15);
    *span_hint(n) = 0;
    fmem_handle last = must_alloc(p, 4096);
    cr_assert_eq(span_of(&last), hot);
    /* a commit with no CAS failure turns 10 back into 01 */
    cr_assert_eq(tp_read(n->tp, sec_hdr_off(n, 0), &sh, 8), 0);
    cr_assert_eq(sec_state(sh, j), SPAN_INUSE, "state %u", sec_state(sh, j));
    must_free(p, &last);
    must_free(p, &first);
    for (int i = 0; i < taken; i++)
        must_free(p, &spans[i]);
    cr_assert_eq(allocated_bytes(p), 0);
    fmem_close(p);
}

Test(contention, section_with_retry_level_2_is_avoided_for_span_blocks)
{
    fmem_pool *p = open_pool("mem:?size=4M");
    struct node *n = p->nodes[0];
    fmem_handle a = must_alloc(p, FMEM_SPAN_SIZE);
    uint64_t x = a.addr >> 21, sh, old;
    cr_assert_eq(tp_read(n->tp, sec_hdr_off(n, x), &sh, 8), 0);
    cr_assert_eq(tp_cas(n->tp, sec_hdr_off(n, x), sh, h_with_retry(sh, 2), &old), 1);
    node_refresh_all(n);
    fmem_handle b = must_alloc(p, FMEM_SPAN_SIZE);
    cr_assert_neq(b.addr >> 21, x, "span block placed in a hot section while another was free");
    must_free(p, &b);
    must_free(p, &a);
    fmem_close(p);
}

/* Two threads hammering one small pool: CAS failures happen, but no single
 * allocation has to retry without bound. */
struct light_arg {
    fmem_pool *p;
    int fails;
};

static void *light_worker(void *arg)
{
    struct light_arg *a = arg;
    fmem_handle hs[8];
    for (int round = 0; round < 400; round++) {
        for (int i = 0; i < 8; i++)
            if (fmem_alloc(a->p, 4096, &hs[i]) != 0)
                a->fails++;
        for (int i = 0; i < 8; i++)
            if (fmem_free(a->p, &hs[i]) != 0)
                a->fails++;
    }
    return NULL;
}

Test(contention, retries_stay_small_under_light_contention)
{
    fmem_pool *p = open_pool("mem:?size=4M");
    pthread_t t[2];
    struct light_arg args[2] = {{p, 0}, {p, 0}};
    for (int i = 0; i < 2; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, light_worker, &args[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    cr_assert_eq(args[0].fails + args[1].fails, 0);
    fmem_stats_t st;
    cr_assert_eq(fmem_stats(p, &st), 0);
    cr_assert_leq(st.max_retries, 2 * RETRY_HIGH, "max retries %llu",
                  (unsigned long long)st.max_retries);
    cr_assert_eq(st.allocated_bytes, 0);
    fmem_close(p);
}

/* Make the next `n` CASes on one header lose, as if another client had just
 * changed it (toggling the retry bits between 0 and 1 changes nothing
 * else). */
static struct {
    struct transport_ops ops;
    const struct transport_ops *orig;
    uint64_t off;
    int left;
} interfere;

static int interfering_batch(struct transport *t, struct tp_op *ops, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (ops[i].kind == TP_CAS && ops[i].off == interfere.off && interfere.left > 0) {
            interfere.left--;
            __atomic_fetch_xor((uint64_t *)((char *)t->base + ops[i].off), UINT64_C(1) << 32,
                               __ATOMIC_SEQ_CST);
        }
    return interfere.orig->batch(t, ops, n);
}

static void interfere_with(struct node *n, uint64_t off, int cas_to_lose)
{
    interfere.orig = n->tp->ops;
    interfere.ops = *n->tp->ops;
    interfere.ops.batch = interfering_batch;
    interfere.off = off;
    interfere.left = cas_to_lose;
    n->tp->ops = &interfere.ops;
}

Test(contention, hot_span_is_marked_contended_and_left)
{
    fmem_pool *p = open_pool("mem:?size=2M");
    struct node *n = p->nodes[0];
    fmem_handle first = must_alloc(p, 4096);
    uint64_t hot = span_of(&first);
    unsigned j = hot % SPANS_PER_SECTION;

    /* a few lost CASes: the allocation retries in place */
    interfere_with(n, span_hdr_off(n, hot), RETRY_LOW);
    fmem_handle calm = must_alloc(p, 4096);
    cr_assert_eq(span_of(&calm), hot);
    cr_assert_eq(node_last_retries, RETRY_LOW);
    n->tp->ops = interfere.orig;

    /* more than RETRY_HIGH: it gives up on the span and marks it 10 */
    interfere_with(n, span_hdr_off(n, hot), RETRY_HIGH + 1);
    fmem_handle moved = must_alloc(p, 4096);
    n->tp->ops = interfere.orig;
    cr_assert_eq(interfere.left, 0);
    cr_assert_neq(span_of(&moved), hot, "stayed in a span that lost %d CASes", RETRY_HIGH + 1);
    uint64_t sh;
    cr_assert_eq(tp_read(n->tp, sec_hdr_off(n, 0), &sh, 8), 0);
    cr_assert_eq(sec_state(sh, j), SPAN_CONTENDED, "state %u", sec_state(sh, j));
    fmem_stats_t st;
    cr_assert_eq(fmem_stats(p, &st), 0);
    cr_assert_geq(st.max_retries, RETRY_HIGH + 1);

    /* the next allocations stay away from it, from any thread's start */
    *span_hint(n) = 0;
    fmem_handle next = must_alloc(p, 4096);
    cr_assert_neq(span_of(&next), hot);
    must_free(p, &next);
    must_free(p, &moved);
    must_free(p, &calm);
    must_free(p, &first);
    cr_assert_eq(allocated_bytes(p), 0);
    fmem_close(p);
}

/* ---- the header caches are hints -----------------------------------------
 * A client's cached headers can be arbitrarily stale (other clients, and
 * other threads storing an older value late). Moving a span between the
 * layers must still leave the section header right. A crash-point hook
 * poisons the cache at the moment the protocol is about to use it. */

static struct {
    struct node *n;
    enum crash_point at;
    uint32_t states; /* low half to plant in the cached section header 0 */
    int hits;
} poison;

static void poison_hook(enum crash_point cp)
{
    if (cp != poison.at)
        return;
    uint64_t v = cache_get(poison.n->sec_cache, 0);
    cache_put(poison.n->sec_cache, 0, h_with_lo(v, poison.states));
    poison.hits++;
}

static void poison_at(struct node *n, enum crash_point at, uint32_t states)
{
    poison.n = n;
    poison.at = at;
    poison.states = states;
    poison.hits = 0;
    fmem_crash_hook = poison_hook;
}

static unsigned real_state(struct node *n, uint64_t s)
{
    uint64_t sh;
    cr_assert_eq(tp_read(n->tp, sec_hdr_off(n, s / SPANS_PER_SECTION), &sh, 8), 0);
    return sec_state(sh, s % SPANS_PER_SECTION);
}

Test(stale_cache, claim_sets_the_section_state_even_if_the_cache_says_inuse)
{
    fmem_pool *p = open_pool("mem:?size=2M");
    struct node *n = p->nodes[0];
    /* the cache claims every span is in the chunk layer already (as it was
     * in some earlier epoch) */
    poison_at(n, CP_CLAIM_RECORDED, 0x55555555u);
    fmem_handle h = must_alloc(p, 4096);
    fmem_crash_hook = NULL;
    cr_assert_eq(poison.hits, 1);
    cr_assert_eq(real_state(n, span_of(&h)), SPAN_INUSE,
                 "span attached to the chunk layer while the section says %u",
                 real_state(n, span_of(&h)));
    /* so the section layer cannot hand the same span out again */
    fmem_handle spans[16];
    int taken = take_free_spans(p, spans, 16);
    cr_assert_eq(taken, 15);
    for (int i = 0; i < taken; i++)
        cr_assert_neq(spans[i].addr / FMEM_SPAN_SIZE, span_of(&h), "span handed out twice");
    for (int i = 0; i < taken; i++)
        must_free(p, &spans[i]);
    must_free(p, &h);
    fmem_close(p);
}

static void release_with_poisoned_cache(uint32_t states)
{
    fmem_pool *p = open_pool("mem:?size=2M");
    struct node *n = p->nodes[0];
    fmem_handle h = must_alloc(p, 4096);
    uint64_t s = span_of(&h);
    must_free(p, &h);
    cr_assert_eq(real_state(n, s), SPAN_INUSE);
    poison_at(n, CP_RELEASE_DETACHED, states);
    unsigned released = chunk_release_empty(n, (unsigned)n->g.nspans);
    fmem_crash_hook = NULL;
    cr_assert_eq(released, 1);
    cr_assert_eq(poison.hits, 1);
    cr_assert_eq(real_state(n, s), SPAN_FREE, "released span left in state %u: lost for good",
                 real_state(n, s));
    fmem_handle all = must_alloc(p, 2u << 20);
    must_free(p, &all);
    fmem_close(p);
}

Test(stale_cache, release_frees_the_span_if_the_cache_says_free)
{
    release_with_poisoned_cache(0);
}

Test(stale_cache, release_frees_the_span_if_the_cache_says_full)
{
    release_with_poisoned_cache(0xFFFFFFFFu);
}

Test(contention, hot_section_is_avoided_after_a_give_up)
{
    fmem_pool *p = open_pool("mem:?size=8M");
    struct node *n = p->nodes[0];
    fmem_handle first = must_alloc(p, FMEM_SPAN_SIZE);
    uint64_t hot = first.addr >> 21;
    interfere_with(n, sec_hdr_off(n, hot), RETRY_HIGH + 1);
    fmem_handle second = must_alloc(p, FMEM_SPAN_SIZE);
    n->tp->ops = interfere.orig;
    cr_assert_eq(interfere.left, 0, "the hot section was not tried");
    cr_assert_neq(second.addr >> 21, hot);
    uint64_t sh;
    cr_assert_eq(tp_read(n->tp, sec_hdr_off(n, hot), &sh, 8), 0);
    cr_assert_eq(h_retry(sh), 2, "a give-up must leave retry level 2, found %u", h_retry(sh));
    fmem_handle third = must_alloc(p, FMEM_SPAN_SIZE);
    cr_assert_neq(third.addr >> 21, hot,
                  "section %llu just lost %d CASes in a row and is used first again",
                  (unsigned long long)hot, RETRY_HIGH + 1);
    /* only when nothing else is left is it used, and a calm commit there
     * clears the mark */
    fmem_handle rest[64];
    int nrest = 0;
    fmem_handle h;
    while (nrest < 64 && fmem_alloc(p, FMEM_SPAN_SIZE, &h) == 0)
        rest[nrest++] = h;
    cr_assert_eq(nrest, 64 - 3, "the hot section's spans were never used");
    cr_assert_eq(tp_read(n->tp, sec_hdr_off(n, hot), &sh, 8), 0);
    cr_assert_lt(h_retry(sh), 2);
    while (nrest > 0)
        must_free(p, &rest[--nrest]);
    must_free(p, &third);
    must_free(p, &second);
    must_free(p, &first);
    cr_assert_eq(allocated_bytes(p), 0);
    fmem_close(p);
}

/* Other threads of a client store headers into the shared cache late (each
 * failed CAS and each refresh stores what it read, possibly after a newer
 * value): the release of a span must not take its starting point from the
 * cache. A thread stores a stale section header continuously while spans
 * are claimed and released. */
static struct {
    struct node *n;
    atomic_int stop;
} stale;

static void *stale_cache_writer(void *arg)
{
    (void)arg;
    while (!atomic_load_explicit(&stale.stop, memory_order_relaxed))
        cache_put(stale.n->sec_cache, 0, 0); /* the header as it was at format */
    return NULL;
}

Test(stale_cache, release_under_a_concurrently_stale_cache, .timeout = 30)
{
    fmem_pool *p = open_pool("mem:?size=2M");
    stale.n = p->nodes[0];
    atomic_store(&stale.stop, 0);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, stale_cache_writer, NULL), 0);
    int leaked_round = -1, rounds = 0, rc = 0;
    unsigned leaked_state = 0;
    double end = now_seconds() + 1.0;
    for (; leaked_round < 0 && now_seconds() < end; rounds++) {
        fmem_handle h;
        if ((rc = fmem_alloc(p, 4096, &h)) != 0)
            break;
        uint64_t s = span_of(&h);
        if ((rc = fmem_free(p, &h)) != 0)
            break;
        chunk_release_empty(stale.n, 16);
        uint64_t sh;
        tp_read(stale.n->tp, sec_hdr_off(stale.n, 0), &sh, 8);
        if (sec_state(sh, (unsigned)s) != SPAN_FREE) {
            leaked_round = rounds;
            leaked_state = sec_state(sh, (unsigned)s);
        }
    }
    atomic_store(&stale.stop, 1);
    pthread_join(t, NULL);
    cr_log_info("%d claim/release rounds", rounds);
    cr_assert_eq(rc, 0, "%s", fmem_strerror(rc));
    cr_assert_eq(leaked_round, -1, "round %d: a released span was left in state %u", leaked_round,
                 leaked_state);
    cr_assert_gt(rounds, 100);
    fmem_handle all = must_alloc(p, 2u << 20);
    must_free(p, &all);
    fmem_close(p);
}

/* A free's entry that is written late (here: the crash-point hook allocates
 * the same chunk between the free's header commit and its log flush) must
 * not overwrite the newer allocation's entry. */
static struct {
    fmem_pool *p;
    enum crash_point at;
    size_t size;
    fmem_handle block;
    int rc;
} between;

static void alloc_in_between(enum crash_point cp)
{
    if (cp != between.at)
        return;
    fmem_crash_hook = NULL; /* once, and not inside the nested call */
    between.rc = fmem_alloc(between.p, between.size, &between.block);
}

static void late_free_entry(const char *uri, size_t size, enum crash_point at)
{
    fmem_pool *p = open_pool(uri);
    fmem_handle old = must_alloc(p, size);
    between.p = p;
    between.at = at;
    between.size = size;
    between.rc = 1;
    fmem_crash_hook = alloc_in_between;
    int rc = fmem_free(p, &old);
    fmem_crash_hook = NULL;
    cr_assert_eq(rc, 0, "free: %s", fmem_strerror(rc));
    cr_assert_eq(between.rc, 0, "allocation in between: %d", between.rc);
    cr_assert_eq(between.block.addr, old.addr, "the block in between went elsewhere");
    expect_usable(p, &between.block, uri);
    fmem_close(p);
}

Test(redolog, chunk_block_allocated_before_the_free_is_logged)
{
    late_free_entry("mem:?size=2M", 4096, CP_CHUNK_FREE_COMMIT);
}

Test(redolog, span_block_allocated_before_the_free_is_logged)
{
    late_free_entry("mem:?size=2M", 128 << 10, CP_SPAN_FREE_COMMIT);
}

/* ---- quarantine of whole-section blocks ----------------------------------
 * A free of a block of whole sections commits like the others (key revoked,
 * every part's log entry marked) and leaves the block allocated in all its
 * section headers until its finish (on shm with fmem_quarantine_local the
 * freeing client finishes it itself, right after CP_FREE_QUARANTINED).
 * Before, such a free revoked and freed in the layer without quarantine. */
struct qstate {
    struct node *n;
    uint64_t chunk;
    unsigned log2c;
    uint32_t rkey;
    int seen, bad;
};
static struct qstate qs;

static void quarantined_sections_hook(enum crash_point cp)
{
    if (cp != CP_FREE_QUARANTINED || !qs.n)
        return;
    qs.seen++;
    uint64_t base = qs.chunk / CHUNKS_PER_SECTION, nb = UINT64_C(1) << (qs.log2c - 9);
    for (uint64_t i = 0; i < nb; i++) {
        uint64_t sh, e;
        if (tp_read(qs.n->tp, sec_hdr_off(qs.n, base + i), &sh, 8) ||
            tp_read(qs.n->tp, log_off(qs.n, (base + i) * CHUNKS_PER_SECTION), &e, 8))
            qs.bad |= 1;
        if (h_lo(sh) != 0xFFFFFFFFu)
            qs.bad |= 2; /* a part was freed in its layer before the finish */
        if (!log_quarantined(e) || log_layer(e) != LAYER_SECTION ||
            log_log2(e) != (i ? 9 : qs.log2c))
            qs.bad |= 4; /* a part not marked */
    }
    /* the old key is refused already */
    if (node_check_access(qs.n, qs.chunk, qs.log2c, qs.rkey) != FMEM_EACCES)
        qs.bad |= 8;
}

Test(quarantine, whole_section_block_is_marked_and_kept_until_its_finish)
{
    fmem_pool *p = open_pool("mem:?size=32M");
    struct node *n = p->nodes[0];
    fmem_quarantine_local = true;
    for (unsigned log2c = 10; log2c <= 12; log2c++) {
        size_t sz = (size_t)FMEM_CHUNK_SIZE << log2c;
        fmem_handle h = must_alloc(p, sz);
        qs = (struct qstate){.n = n, .chunk = h.addr / FMEM_CHUNK_SIZE, .log2c = log2c,
                          .rkey = h.rkey};
        fmem_crash_hook = quarantined_sections_hook;
        int rc = fmem_free(p, &h);
        fmem_crash_hook = NULL;
        qs.n = NULL;
        cr_assert_eq(rc, 0, "free of %zu bytes: %s", sz, fmem_strerror(rc));
        cr_assert_eq(qs.seen, 1, "the free of %zu bytes was not quarantined", sz);
        cr_assert_eq(qs.bad, 0, "%zu bytes: state at the commit %#x", sz, qs.bad);
        /* finished: every part free, no mark left */
        for (uint64_t i = 0; i < (UINT64_C(1) << (log2c - 9)); i++) {
            uint64_t sh, e, x = qs.chunk / CHUNKS_PER_SECTION + i;
            cr_assert_eq(tp_read(n->tp, sec_hdr_off(n, x), &sh, 8), 0);
            cr_assert_eq(tp_read(n->tp, log_off(n, x * CHUNKS_PER_SECTION), &e, 8), 0);
            cr_assert_eq(h_lo(sh), 0, "%zu bytes: part %llu still allocated", sz,
                         (unsigned long long)i);
            cr_assert(log_valid(e) && !log_alloc(e) && !(e & LOG_QUARANTINE),
                      "%zu bytes: part %llu entry %#llx", sz, (unsigned long long)i,
                      (unsigned long long)e);
        }
        cr_assert_eq(allocated_bytes(p), 0);
        /* and its old key stays refused once the block is handed out again */
        fmem_handle again = must_alloc(p, sz);
        cr_assert_eq(again.addr, h.addr);
        cr_assert_neq(again.rkey, h.rkey, "%zu bytes: the old key came back", sz);
        cr_assert_eq(fmem_read(p, &h, 0, &(char){0}, 1), FMEM_EACCES);
        must_free(p, &again);
    }
    /* a double free of a quarantined-and-finished block is refused */
    fmem_handle h = must_alloc(p, 4 << 20);
    must_free(p, &h);
    cr_assert_neq(fmem_free(p, &h), 0);
    fmem_quarantine_local = false;
    fmem_verify_report rep;
    cr_assert_eq(fmem_verify(p, &rep, stderr), 0);
    cr_assert_eq(rep.errors, 0);
    fmem_close(p);
}
