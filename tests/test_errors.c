/* test_errors.c - every error code of the public API, and that a failed
 * call leaves the pool and the blocks in it untouched. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fmem.h"
#include "layout.h"
#include "pool_helpers.h"
#include "shadow.h"

#define EXPECT_RC(call, want)                                                             \
    do {                                                                                  \
        int rc_ = (call);                                                                 \
        cr_assert_eq(rc_, (want), "%s = %d (%s), want %s", #call, rc_, fmem_strerror(rc_), \
                     #want);                                                              \
    } while (0)

/* Stamp a block with a pattern through the mapping; check it later. */
static void stamp(fmem_pool *p, const fmem_handle *h, unsigned char v)
{
    unsigned char *m;
    EXPECT_RC(fmem_map(p, h, (void **)&m), 0);
    memset(m, v, h->length);
}

static void expect_stamp(fmem_pool *p, const fmem_handle *h, unsigned char v)
{
    unsigned char *m;
    EXPECT_RC(fmem_map(p, h, (void **)&m), 0);
    for (uint64_t i = 0; i < h->length; i++)
        cr_assert_eq(m[i], v, "byte %llu changed", (unsigned long long)i);
}

/* ---- FMEM_EINVAL -------------------------------------------------------- */

Test(einval, null_arguments)
{
    fmem_pool *p = open_pool("mem:?size=2M");
    fmem_handle h = must_alloc(p, 4096);
    void *ptr = &ptr;
    char buf[8];
    fmem_stats_t st;

    EXPECT_RC(fmem_open("mem:", NULL), FMEM_EINVAL);
    EXPECT_RC(fmem_alloc(NULL, 4096, &h), FMEM_EINVAL);
    EXPECT_RC(fmem_alloc(p, 4096, NULL), FMEM_EINVAL);
    EXPECT_RC(fmem_free(NULL, &h), FMEM_EINVAL);
    EXPECT_RC(fmem_free(p, NULL), FMEM_EINVAL);
    EXPECT_RC(fmem_map(NULL, &h, &ptr), FMEM_EINVAL);
    EXPECT_RC(fmem_map(p, NULL, &ptr), FMEM_EINVAL);
    cr_assert_null(ptr, "a failed fmem_map left *ptr set");
    EXPECT_RC(fmem_map(p, &h, NULL), FMEM_EINVAL);
    EXPECT_RC(fmem_read(NULL, &h, 0, buf, 8), FMEM_EINVAL);
    EXPECT_RC(fmem_read(p, NULL, 0, buf, 8), FMEM_EINVAL);
    EXPECT_RC(fmem_read(p, &h, 0, NULL, 8), FMEM_EINVAL);
    EXPECT_RC(fmem_write(NULL, &h, 0, buf, 8), FMEM_EINVAL);
    EXPECT_RC(fmem_write(p, NULL, 0, buf, 8), FMEM_EINVAL);
    EXPECT_RC(fmem_write(p, &h, 0, NULL, 8), FMEM_EINVAL);
    EXPECT_RC(fmem_stats(NULL, &st), FMEM_EINVAL);
    EXPECT_RC(fmem_stats(p, NULL), FMEM_EINVAL);
    uint64_t ra = 1;
    EXPECT_RC(fmem_remote(NULL, &h, &ra), FMEM_EINVAL);
    cr_assert_eq(ra, 0, "a failed fmem_remote left the address set");
    EXPECT_RC(fmem_remote(p, NULL, &ra), FMEM_EINVAL);
    EXPECT_RC(fmem_remote(p, &h, NULL), FMEM_EINVAL);
    EXPECT_RC(fmem_remote(p, &h, &ra), FMEM_ENOTSUP); /* shared memory: use fmem_map */
    /* NULL buffers are fine for zero-length copies */
    EXPECT_RC(fmem_read(p, &h, 0, NULL, 0), 0);
    EXPECT_RC(fmem_write(p, &h, 0, NULL, 0), 0);
    fmem_close(NULL); /* a no-op */

    /* the block survived all that */
    EXPECT_RC(fmem_free(p, &h), 0);
    fmem_close(p);
}

/* ---- FMEM_ESIZE --------------------------------------------------------- */

Test(esize, zero_and_larger_than_the_pool)
{
    fmem_pool *p = open_pool("mem:?size=8M");
    fmem_handle h;
    memset(&h, 0xFF, sizeof h);
    EXPECT_RC(fmem_alloc(p, 0, &h), FMEM_ESIZE);
    cr_assert_eq(h.length, 0, "a failed allocation left a handle behind");
    EXPECT_RC(fmem_alloc(p, (8u << 20) + 1, &h), FMEM_ESIZE);
    EXPECT_RC(fmem_alloc(p, 16u << 20, &h), FMEM_ESIZE);
    EXPECT_RC(fmem_alloc(p, SIZE_MAX, &h), FMEM_ESIZE);
    EXPECT_RC(fmem_alloc(p, ((size_t)1 << 63) + 1, &h), FMEM_ESIZE);
    /* the pool size itself is fine */
    h = must_alloc(p, 8u << 20);
    EXPECT_RC(fmem_free(p, &h), 0);
    fmem_close(p);
}

/* ---- FMEM_ENOMEM -------------------------------------------------------- */

Test(enomem, exhaustion_and_recovery)
{
    fmem_pool *p = open_pool("mem:?size=4M");
    static fmem_handle hs[1024];
    int n = 0;
    fmem_handle h;
    int rc;
    while ((rc = fmem_alloc(p, 16384, &h)) == 0)
        hs[n++] = h;
    EXPECT_RC(rc, FMEM_ENOMEM);
    cr_assert_eq(n, 256, "a 4 MiB pool holds 256 blocks of 16 KiB, got %d", n);
    EXPECT_RC(fmem_alloc(p, 4096, &h), FMEM_ENOMEM);
    EXPECT_RC(fmem_alloc(p, 128 << 10, &h), FMEM_ENOMEM);
    EXPECT_RC(fmem_alloc(p, 2 << 20, &h), FMEM_ENOMEM);
    EXPECT_RC(fmem_alloc(p, 4 << 20, &h), FMEM_ENOMEM);
    cr_assert_eq(allocated_bytes(p), 4u << 20, "ENOMEM calls changed the pool");

    /* one block back: exactly that room is usable again */
    EXPECT_RC(fmem_free(p, &hs[77]), 0);
    fmem_handle a = must_alloc(p, 4096), b = must_alloc(p, 8192);
    EXPECT_RC(fmem_alloc(p, 8192, &h), FMEM_ENOMEM);
    fmem_handle c = must_alloc(p, 4096);
    cr_assert(a.addr >= hs[77].addr && a.addr < hs[77].addr + 16384);
    cr_assert(b.addr >= hs[77].addr && b.addr < hs[77].addr + 16384);
    cr_assert(c.addr >= hs[77].addr && c.addr < hs[77].addr + 16384);
    EXPECT_RC(fmem_free(p, &a), 0);
    EXPECT_RC(fmem_free(p, &b), 0);
    EXPECT_RC(fmem_free(p, &c), 0);

    /* everything back: the whole pool again */
    for (int i = 0; i < n; i++)
        if (i != 77)
            EXPECT_RC(fmem_free(p, &hs[i]), 0);
    cr_assert_eq(allocated_bytes(p), 0);
    h = must_alloc(p, 4u << 20);
    EXPECT_RC(fmem_free(p, &h), 0);

    fmem_stats_t st;
    cr_assert_eq(fmem_stats(p, &st), 0);
    cr_assert_eq(st.failed_allocs, 6);
    fmem_close(p);
}

Test(enomem, larger_than_a_non_power_of_two_pool)
{
    /* 3 sections: 4 MiB fits, 6 MiB rounds to 8 MiB which never can */
    fmem_pool *p = open_pool("mem:?size=6M");
    fmem_handle h = must_alloc(p, 4u << 20);
    EXPECT_RC(fmem_free(p, &h), 0);
    int rc = fmem_alloc(p, 6u << 20, &h);
    cr_assert(rc == FMEM_ENOMEM || rc == FMEM_ESIZE, "got %d", rc);
    fmem_close(p);
}

/* ---- FMEM_EDOUBLEFREE --------------------------------------------------- */

static void double_free_of(size_t size)
{
    fmem_pool *p = open_pool("mem:?size=16M");
    fmem_handle h = must_alloc(p, size);
    fmem_handle keep = must_alloc(p, 4096);
    stamp(p, &keep, 0x3C);
    EXPECT_RC(fmem_free(p, &h), 0);
    uint64_t before = allocated_bytes(p);
    EXPECT_RC(fmem_free(p, &h), FMEM_EDOUBLEFREE);
    EXPECT_RC(fmem_free(p, &h), FMEM_EDOUBLEFREE);
    cr_assert_eq(allocated_bytes(p), before);
    expect_stamp(p, &keep, 0x3C);
    EXPECT_RC(fmem_free(p, &keep), 0);
    cr_assert_eq(allocated_bytes(p), 0);
    fmem_close(p);
}

Test(edoublefree, chunk_block) { double_free_of(4096); }
Test(edoublefree, multi_chunk_block) { double_free_of(64 << 10); }
Test(edoublefree, span_block) { double_free_of(128 << 10); }
Test(edoublefree, multi_span_block) { double_free_of(1 << 20); }
Test(edoublefree, section_block) { double_free_of(2 << 20); }
Test(edoublefree, multi_section_block) { double_free_of(8 << 20); }

Test(edoublefree, freed_handle_after_other_allocations_in_the_span)
{
    fmem_pool *p = open_pool("mem:?size=2M");
    fmem_handle a = must_alloc(p, 4096), b = must_alloc(p, 4096);
    EXPECT_RC(fmem_free(p, &a), 0);
    fmem_handle c = must_alloc(p, 8192); /* does not reuse a's chunk */
    EXPECT_RC(fmem_free(p, &a), FMEM_EDOUBLEFREE);
    EXPECT_RC(fmem_free(p, &b), 0);
    EXPECT_RC(fmem_free(p, &c), 0);
    fmem_close(p);
}

/* Two threads free the same handle at the same moment: exactly one wins,
 * the other is told the block is gone (or its key is dead). */
struct racing_free {
    fmem_pool *p;
    fmem_handle h;
    atomic_int *gate;
    int rc;
};

static void *free_at_gate(void *arg)
{
    struct racing_free *r = arg;
    atomic_fetch_add(r->gate, 1);
    while (atomic_load(r->gate) < 2)
        ;
    r->rc = fmem_free(r->p, &r->h);
    return NULL;
}

Test(edoublefree, concurrent_frees_of_one_block)
{
    fmem_pool *p = open_pool("mem:?size=8M&rtt_ns=200");
    const size_t sizes[] = {4096, 16384, 128 << 10, 2 << 20, 4 << 20};
    for (int round = 0; round < 100; round++) {
        size_t size = sizes[round % 5];
        fmem_handle h = must_alloc(p, size);
        atomic_int gate = 0;
        struct racing_free r[2] = {{p, h, &gate, 1}, {p, h, &gate, 1}};
        pthread_t t[2];
        for (int i = 0; i < 2; i++)
            cr_assert_eq(pthread_create(&t[i], NULL, free_at_gate, &r[i]), 0);
        for (int i = 0; i < 2; i++)
            pthread_join(t[i], NULL);
        int wins = (r[0].rc == 0) + (r[1].rc == 0);
        cr_assert_eq(wins, 1, "round %d (%zu): frees returned %d and %d", round, size, r[0].rc,
                     r[1].rc);
        int loser = r[0].rc ? r[0].rc : r[1].rc;
        cr_assert(loser == FMEM_EDOUBLEFREE || loser == FMEM_EACCES, "round %d: loser got %d (%s)",
                  round, loser, fmem_strerror(loser));
        cr_assert_eq(allocated_bytes(p), 0, "round %d", round);
    }
    fmem_close(p);
}

/* ---- FMEM_EBADHANDLE ---------------------------------------------------- */

/* Every operation on `bad` fails with `want`; the real block is intact. */
static void expect_bad(fmem_pool *p, const fmem_handle *good, fmem_handle bad, int want,
                       const char *what)
{
    char buf[16];
    void *ptr = &ptr;
    int rc;
    rc = fmem_free(p, &bad);
    cr_assert_eq(rc, want, "%s: free = %d (%s)", what, rc, fmem_strerror(rc));
    rc = fmem_map(p, &bad, &ptr);
    cr_assert_eq(rc, want, "%s: map = %d (%s)", what, rc, fmem_strerror(rc));
    cr_assert_null(ptr, "%s: map left a pointer", what);
    rc = fmem_read(p, &bad, 0, buf, sizeof buf);
    cr_assert_eq(rc, want, "%s: read = %d (%s)", what, rc, fmem_strerror(rc));
    rc = fmem_write(p, &bad, 0, buf, sizeof buf);
    cr_assert_eq(rc, want, "%s: write = %d (%s)", what, rc, fmem_strerror(rc));
    expect_stamp(p, good, 0xA7);
}

Test(ebadhandle, handles_that_name_no_allocation)
{
    fmem_pool *p = open_pool("mem:?size=4M&nodes=2");
    fmem_handle h;
    do /* a 16 KiB block on node 0 */
        h = must_alloc(p, 16384);
    while (h.node != 0);
    stamp(p, &h, 0xA7);
    uint64_t before = allocated_bytes(p);
    fmem_handle bad;

    bad = h, bad.node = 2;
    expect_bad(p, &h, bad, FMEM_EBADHANDLE, "node index past the last node");
    bad = h, bad.node = UINT16_MAX;
    expect_bad(p, &h, bad, FMEM_EBADHANDLE, "node 65535");
    bad = h, bad.addr += 1;
    expect_bad(p, &h, bad, FMEM_EBADHANDLE, "addr + 1");
    bad = h, bad.addr += 2048;
    expect_bad(p, &h, bad, FMEM_EBADHANDLE, "addr + 2 KiB");
    bad = h, bad.addr = 4u << 20;
    expect_bad(p, &h, bad, FMEM_EBADHANDLE, "addr at the end of the pool");
    bad = h, bad.addr = UINT64_MAX & ~UINT64_C(4095);
    expect_bad(p, &h, bad, FMEM_EBADHANDLE, "addr far beyond the pool");
    bad = h, bad.length = 12288;
    expect_bad(p, &h, bad, FMEM_EBADHANDLE, "length 12 KiB");
    bad = h, bad.length = 16385;
    expect_bad(p, &h, bad, FMEM_EBADHANDLE, "length 16 KiB + 1");
    bad = h, bad.length = 0;
    expect_bad(p, &h, bad, FMEM_EBADHANDLE, "length 0");
    bad = h, bad.length = 2048;
    expect_bad(p, &h, bad, FMEM_EBADHANDLE, "length 2 KiB");
    bad = h, bad.length = UINT64_C(1) << 63;
    expect_bad(p, &h, bad, FMEM_EBADHANDLE, "length 2^63");
    bad = h, bad.flags = 1;
    expect_bad(p, &h, bad, FMEM_EBADHANDLE, "flags 1");
    bad = h, bad.flags = 0x8000;
    expect_bad(p, &h, bad, FMEM_EBADHANDLE, "flags 0x8000");
    /* right key and address, wrong length: not this allocation */
    bad = h, bad.length = 8192;
    expect_bad(p, &h, bad, FMEM_EBADHANDLE, "right key, half the length");
    bad = h, bad.length = 4096;
    expect_bad(p, &h, bad, FMEM_EBADHANDLE, "right key, a quarter of the length");
    if (h.addr % 32768 == 0) {
        bad = h, bad.length = 32768;
        expect_bad(p, &h, bad, FMEM_EBADHANDLE, "right key, twice the length");
    }
    /* a length of another layer: the layer's own header says "free" */
    bad = h, bad.length = 2u << 20, bad.addr = h.addr & ~((UINT64_C(2) << 20) - 1);
    if (bad.addr == h.addr)
        expect_bad(p, &h, bad, FMEM_EBADHANDLE, "right key, a section's length");
    /* a length whose block would run past the end of the pool */
    bad = h, bad.addr = 2u << 20, bad.length = 4u << 20;
    expect_bad(p, &h, bad, FMEM_EBADHANDLE, "block past the end");

    cr_assert_eq(allocated_bytes(p), before, "a bad handle changed the pool");
    EXPECT_RC(fmem_free(p, &h), 0);
    cr_assert_eq(allocated_bytes(p), 0);
    fmem_close(p);
}

Test(ebadhandle, span_and_section_blocks_with_wrong_length)
{
    fmem_pool *p = open_pool("mem:?size=16M");
    const size_t sizes[] = {128 << 10, 512 << 10, 2 << 20, 4 << 20, 8 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        fmem_handle h = must_alloc(p, sizes[i]);
        stamp(p, &h, 0xA7);
        /* (a handle in the chunk layer for a span-layer block finds a
         * detached span header, which alone would read as "free") */
        fmem_handle bad = h;
        bad.length = h.length / 2;
        expect_bad(p, &h, bad, FMEM_EBADHANDLE, "half length");
        if (h.length >= (256 << 10)) {
            bad.length = h.length / 4;
            expect_bad(p, &h, bad, FMEM_EBADHANDLE, "quarter length");
        }
        bad.length = 4096;
        expect_bad(p, &h, bad, FMEM_EBADHANDLE, "one chunk");
        cr_assert_eq(allocated_bytes(p), h.length);
        EXPECT_RC(fmem_free(p, &h), 0);
    }
    cr_assert_eq(allocated_bytes(p), 0);
    fmem_close(p);
}

Test(ebadhandle, chunk_block_with_a_section_length)
{
    fmem_pool *p = open_pool("mem:?size=4M");
    fmem_handle h = must_alloc(p, 16384);
    cr_assert_eq(h.addr % (2u << 20), 0, "first block not at a section start");
    stamp(p, &h, 0xA7);
    fmem_handle bad = h;
    bad.length = 2u << 20;
    expect_bad(p, &h, bad, FMEM_EBADHANDLE, "16 KiB block as 2 MiB");
    EXPECT_RC(fmem_free(p, &h), 0);
    fmem_close(p);
}

/* A holder of a 4 KiB block must not free its neighbour by asking for
 * 8 KiB with its own key (the log entry records the block's size). */
Test(ebadhandle, wrong_length_cannot_free_a_neighbour)
{
    fmem_pool *p = open_pool("mem:?size=2M");
    fmem_handle mine = must_alloc(p, 4096), theirs = must_alloc(p, 4096);
    cr_assert_eq(theirs.addr, mine.addr + 4096);
    stamp(p, &theirs, 0xA7);
    fmem_handle forged = mine;
    forged.length = 8192;
    EXPECT_RC(fmem_free(p, &forged), FMEM_EBADHANDLE);
    cr_assert_eq(allocated_bytes(p), 8192, "the neighbour's block was freed");
    expect_stamp(p, &theirs, 0xA7);
    EXPECT_RC(fmem_free(p, &theirs), 0);
    EXPECT_RC(fmem_free(p, &mine), 0);
    fmem_close(p);
}

/* ---- FMEM_EACCES -------------------------------------------------------- */

Test(eacces, forged_key)
{
    fmem_pool *p = open_pool("mem:?size=16M");
    const size_t sizes[] = {4096, 32768, 128 << 10, 2 << 20, 4 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        fmem_handle h = must_alloc(p, sizes[i]);
        stamp(p, &h, 0xA7);
        const uint32_t forged[] = {h.rkey ^ 1, h.rkey + 1, ~h.rkey, 0, 0xFFFFFFFFu};
        for (size_t k = 0; k < sizeof forged / sizeof forged[0]; k++) {
            if (forged[k] == h.rkey)
                continue;
            fmem_handle bad = h;
            bad.rkey = forged[k];
            expect_bad(p, &h, bad, FMEM_EACCES, "forged key");
        }
        cr_assert_eq(allocated_bytes(p), h.length, "a forged free released the block");
        EXPECT_RC(fmem_free(p, &h), 0);
    }
    fmem_close(p);
}

Test(eacces, key_of_another_block)
{
    fmem_pool *p = open_pool("mem:?size=2M");
    fmem_handle a = must_alloc(p, 4096), b = must_alloc(p, 4096);
    stamp(p, &a, 0xA7);
    cr_assert_neq(a.rkey, b.rkey, "two blocks share a key");
    fmem_handle bad = a;
    bad.rkey = b.rkey;
    expect_bad(p, &a, bad, FMEM_EACCES, "b's key on a's block");
    EXPECT_RC(fmem_free(p, &a), 0);
    EXPECT_RC(fmem_free(p, &b), 0);
    fmem_close(p);
}

Test(eacces, key_dies_at_free)
{
    fmem_pool *p = open_pool("mem:?size=2M");
    fmem_handle h = must_alloc(p, 8192);
    char buf[8] = "abcdefg";
    EXPECT_RC(fmem_write(p, &h, 0, buf, 8), 0);
    EXPECT_RC(fmem_free(p, &h), 0);
    void *ptr;
    EXPECT_RC(fmem_read(p, &h, 0, buf, 8), FMEM_EACCES);
    EXPECT_RC(fmem_write(p, &h, 0, buf, 8), FMEM_EACCES);
    EXPECT_RC(fmem_map(p, &h, &ptr), FMEM_EACCES);
    fmem_close(p);
}

/* A handle kept after its free must not reach the block's next owner. */
static void stale_handle_for(size_t size)
{
    char name[96], uri[128];
    snprintf(name, sizeof name, "/dev/shm/fmem-test-stale-%d", (int)getpid());
    snprintf(uri, sizeof uri, "shm:%s?size=8M", name + 8);
    pool_unlink(name);
    fmem_pool *mine = open_pool(uri), *theirs = open_pool(uri);
    pool_unlink(name);
    fmem_handle old = must_alloc(mine, size);
    EXPECT_RC(fmem_free(mine, &old), 0);
    /* the other user allocates until it gets the same block */
    fmem_handle now, others[64];
    int nothers = 0;
    for (;;) {
        now = must_alloc(theirs, size);
        if (now.addr == old.addr)
            break;
        cr_assert_lt(nothers, 64, "the freed block never came back");
        others[nothers++] = now;
    }
    while (nothers > 0)
        EXPECT_RC(fmem_free(theirs, &others[--nothers]), 0);
    cr_assert_eq(now.length, old.length);
    cr_assert_neq(now.rkey, old.rkey, "the block's key was handed out again");
    stamp(theirs, &now, 0xA7);
    char buf[16];
    void *ptr;
    EXPECT_RC(fmem_free(mine, &old), FMEM_EACCES);
    EXPECT_RC(fmem_read(mine, &old, 0, buf, sizeof buf), FMEM_EACCES);
    EXPECT_RC(fmem_write(mine, &old, 0, buf, sizeof buf), FMEM_EACCES);
    EXPECT_RC(fmem_map(mine, &old, &ptr), FMEM_EACCES);
    expect_stamp(theirs, &now, 0xA7);
    /* the new owner's handle works from any client */
    EXPECT_RC(fmem_read(mine, &now, 0, buf, sizeof buf), 0);
    EXPECT_RC(fmem_free(theirs, &now), 0);
    fmem_close(mine);
    fmem_close(theirs);
}

Test(eacces, stale_chunk_handle_after_reallocation) { stale_handle_for(4096); }
Test(eacces, stale_span_handle_after_reallocation) { stale_handle_for(256 << 10); }
Test(eacces, stale_section_handle_after_reallocation) { stale_handle_for(4 << 20); }

/* ---- FMEM_ERANGE -------------------------------------------------------- */

Test(erange, reads_and_writes_outside_the_block)
{
    fmem_pool *p = open_pool("mem:?size=2M");
    fmem_handle h = must_alloc(p, 8192);
    fmem_handle next = must_alloc(p, 4096);
    stamp(p, &next, 0xA7);
    char buf[64] = {0};
    EXPECT_RC(fmem_read(p, &h, 8192 - 64, buf, 64), 0);
    EXPECT_RC(fmem_read(p, &h, 8192 - 63, buf, 64), FMEM_ERANGE);
    EXPECT_RC(fmem_write(p, &h, 8192 - 63, buf, 64), FMEM_ERANGE);
    EXPECT_RC(fmem_read(p, &h, 8192, buf, 1), FMEM_ERANGE);
    EXPECT_RC(fmem_write(p, &h, 8192, buf, 1), FMEM_ERANGE);
    EXPECT_RC(fmem_read(p, &h, 8193, buf, 0), FMEM_ERANGE);
    EXPECT_RC(fmem_read(p, &h, 0, buf, 8193), FMEM_ERANGE);
    EXPECT_RC(fmem_write(p, &h, 0, buf, 8193), FMEM_ERANGE);
    /* offset + len wrapping around 2^64 */
    EXPECT_RC(fmem_read(p, &h, UINT64_MAX, buf, 2), FMEM_ERANGE);
    EXPECT_RC(fmem_write(p, &h, 4096, buf, SIZE_MAX), FMEM_ERANGE);
    EXPECT_RC(fmem_write(p, &h, UINT64_MAX - 10, buf, 64), FMEM_ERANGE);
    expect_stamp(p, &next, 0xA7);
    EXPECT_RC(fmem_free(p, &h), 0);
    EXPECT_RC(fmem_free(p, &next), 0);
    fmem_close(p);
}

/* ---- FMEM_ECORRUPT ------------------------------------------------------ */

/* A pool file in /dev/shm removed at the end of the test, even on failure
 * (the fixture's fini runs after a failed assertion too). */
static char corrupt_path[96];

static void corrupt_init(void)
{
    snprintf(corrupt_path, sizeof corrupt_path, "/dev/shm/fmem-test-corrupt-%d", (int)getpid());
    pool_unlink(corrupt_path);
}

static void corrupt_fini(void)
{
    pool_unlink(corrupt_path);
}

TestSuite(ecorrupt, .init = corrupt_init, .fini = corrupt_fini);

/* The pool file holding `data`, and a plausible data file beside it so that
 * the opener judges the pool file itself. */
static void write_file(const void *data, size_t len)
{
    int fd = open(corrupt_path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, data, len), (ssize_t)len);
    close(fd);
    char data_path[128];
    snprintf(data_path, sizeof data_path, "%s.data", corrupt_path);
    fd = open(data_path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    cr_assert_geq(fd, 0);
    cr_assert_eq(ftruncate(fd, 4 << 20), 0);
    close(fd);
}

static void expect_open_fails_once(int want, const char *what)
{
    char uri[128];
    snprintf(uri, sizeof uri, "shm:%s", corrupt_path + 8);
    fmem_pool *p = (fmem_pool *)&p;
    int rc = fmem_open(uri, &p);
    cr_assert_eq(rc, want, "%s: fmem_open = %d (%s)", what, rc, fmem_strerror(rc));
    cr_assert_null(p);
}

static void expect_open_fails(int want, const char *what)
{
    expect_open_fails_once(want, what);
    /* create=1 with a size must not reformat a corrupt pool either */
    char uri[128];
    snprintf(uri, sizeof uri, "shm:%s?size=2M", corrupt_path + 8);
    fmem_pool *p;
    int rc = fmem_open(uri, &p);
    cr_assert_eq(rc, want, "%s (size given): fmem_open = %d (%s)", what, rc, fmem_strerror(rc));
}

/* Create a valid 2-section pool at corrupt_path. */
/* A pool holding one block; the returned client holds it (closing a pool
 * gives back what it still holds). */
static fmem_pool *make_valid_pool_held(void)
{
    char uri[128];
    snprintf(uri, sizeof uri, "shm:%s?size=4M", corrupt_path + 8);
    fmem_pool *p = open_pool(uri);
    fmem_handle h = must_alloc(p, 4096);
    (void)h;
    return p;
}

static void make_valid_pool(void)
{
    fmem_close(make_valid_pool_held());
}

Test(ecorrupt, garbage_file)
{
    unsigned char junk[64 << 10];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (unsigned char)(i * 131 + 7);
    write_file(junk, sizeof junk);
    expect_open_fails(FMEM_ECORRUPT, "garbage");
}

Test(ecorrupt, text_file_shorter_than_a_header)
{
    write_file("hello, pool\n", 12);
    expect_open_fails(FMEM_ECORRUPT, "12-byte file");
}

Test(ecorrupt, page_of_text)
{
    static char page[4096] = "hello, pool\n";
    write_file(page, sizeof page);
    expect_open_fails(FMEM_ECORRUPT, "a page of text");
}

Test(ecorrupt, empty_file)
{
    write_file("", 0);
    expect_open_fails(FMEM_ECORRUPT, "empty file");
}

Test(ecorrupt, other_magic)
{
    char buf[4096] = "FMEMPOOZ";
    write_file(buf, sizeof buf);
    expect_open_fails(FMEM_ECORRUPT, "wrong magic");
}

/* Truncate file `path` of a valid pool in steps; each step is corrupt. */
static void truncate_steps(const char *path)
{
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    off_t size = st.st_size;
    const struct {
        off_t size;
        const char *what;
    } steps[] = {
        {size - 4096, "truncated by a page"},
        {size - 1, "truncated by a byte"},
        {size / 2, "truncated to half"},
        {(size / 2) & ~(off_t)4095, "truncated to half, whole pages"},
        {4096, "truncated to one page"},
        {200, "truncated to 200 bytes"},
        {12, "truncated inside the header"},
    };
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        cr_assert_eq(truncate(path, steps[i].size), 0);
        expect_open_fails(FMEM_ECORRUPT, steps[i].what);
    }
}

Test(ecorrupt, truncated_valid_pool)
{
    make_valid_pool();
    /* a reopen works before the damage */
    char uri[128];
    snprintf(uri, sizeof uri, "shm:%s", corrupt_path + 8);
    fmem_pool *p = open_pool(uri);
    fmem_close(p);
    truncate_steps(corrupt_path);
}

Test(ecorrupt, truncated_data_file)
{
    char data_path[128];
    snprintf(data_path, sizeof data_path, "%s.data", corrupt_path);
    make_valid_pool();
    if (access(data_path, F_OK) != 0)
        cr_skip_test("pool data lives in the pool file");
    truncate_steps(data_path);
}

Test(ecorrupt, every_flipped_header_byte)
{
    fmem_pool *holder = make_valid_pool_held();
    int fd = open(corrupt_path, O_RDWR);
    cr_assert_geq(fd, 0);
    for (off_t i = 0; i < (off_t)sizeof(struct pool_hdr); i++) {
        unsigned char b, f;
        cr_assert_eq(pread(fd, &b, 1, i), 1);
        f = b ^ 0x10;
        cr_assert_eq(pwrite(fd, &f, 1, i), 1);
        char what[48];
        snprintf(what, sizeof what, "byte %d flipped", (int)i);
        expect_open_fails(FMEM_ECORRUPT, what);
        cr_assert_eq(pwrite(fd, &b, 1, i), 1);
    }
    close(fd);
    /* restored: opens again, and the block allocated before is still there */
    char uri[128];
    snprintf(uri, sizeof uri, "shm:%s", corrupt_path + 8);
    fmem_pool *p = open_pool(uri);
    cr_assert_eq(allocated_bytes(p), 4096);
    fmem_close(p);
    fmem_close(holder);
}

Test(ecorrupt, unformatted_zero_file_times_out, .timeout = 20)
{
    /* looks like a pool whose creator died before writing the header */
    static char zeros[64 << 10];
    write_file(zeros, sizeof zeros);
    expect_open_fails_once(FMEM_ECORRUPT, "all zeros");
}

/* ---- other codes -------------------------------------------------------- */

Test(other, absent_pool_file_is_eio)
{
    char uri[128];
    snprintf(uri, sizeof uri, "file:/nonexistent-dir-%d/pool?size=2M", (int)getpid());
    fmem_pool *p = (fmem_pool *)&p;
    EXPECT_RC(fmem_open(uri, &p), FMEM_EIO);
    cr_assert_null(p);
}

Test(other, no_free_user_id_is_ebusy)
{
    char name[96], uri[128];
    snprintf(name, sizeof name, "/dev/shm/fmem-test-busy-%d", (int)getpid());
    snprintf(uri, sizeof uri, "shm:%s?size=2M", name + 8);
    pool_unlink(name);
    /* a 2 MiB pool has 64 user slots; slot 0 is never used */
    fmem_pool *ps[63];
    for (int i = 0; i < 63; i++) {
        int rc = fmem_open(uri, &ps[i]);
        if (rc)
            pool_unlink(name);
        cr_assert_eq(rc, 0, "client %d: %s", i, fmem_strerror(rc));
    }
    fmem_pool *extra = (fmem_pool *)&extra;
    int rc = fmem_open(uri, &extra);
    /* closing one client frees its slot */
    fmem_close(ps[0]);
    fmem_pool *again = NULL;
    int rc2 = fmem_open(uri, &again);
    pool_unlink(name);
    cr_assert_eq(rc, FMEM_EBUSY, "64th client: %d (%s)", rc, fmem_strerror(rc));
    cr_assert_null(extra);
    cr_assert_eq(rc2, 0);
    fmem_close(again);
    for (int i = 1; i < 63; i++)
        fmem_close(ps[i]);
}

Test(other, unlink_removes_a_named_pool)
{
    char name[96], uri[160];
    snprintf(name, sizeof name, "/dev/shm/fmem-test-unlink-%d", (int)getpid());
    snprintf(uri, sizeof uri, "shm:%s?size=2M", name + 8);
    pool_unlink(name);
    fmem_pool *p = open_pool(uri);
    fmem_close(p);
    cr_assert_eq(access(name, F_OK), 0);
    EXPECT_RC(fmem_unlink(uri), 0);
    cr_assert_neq(access(name, F_OK), 0, "pool file still there");
    char data[128];
    snprintf(data, sizeof data, "%s.data", name);
    cr_assert_neq(access(data, F_OK), 0, "data file still there");
    EXPECT_RC(fmem_unlink(uri), FMEM_EIO);
    EXPECT_RC(fmem_unlink("shm:/a/b"), FMEM_EURI);
    EXPECT_RC(fmem_unlink("mem:?size=2M"), 0); /* nothing to remove */
}

/* ---- fmem_strerror ------------------------------------------------------ */

Test(strerror, distinct_messages_for_every_code)
{
    const int codes[] = {FMEM_OK,      FMEM_EINVAL, FMEM_ESIZE,  FMEM_ENOMEM,  FMEM_EDOUBLEFREE,
                         FMEM_EBADHANDLE, FMEM_ECORRUPT, FMEM_EIO, FMEM_EACCES, FMEM_EURI,
                         FMEM_ENOTSUP, FMEM_ERANGE, FMEM_EBUSY, FMEM_EQUOTA, FMEM_ESTALE};
    const size_t n = sizeof codes / sizeof codes[0];
    cr_assert_eq(n, 15, "a code was added: list it here");
    const char *unknown = fmem_strerror(-9999);
    cr_assert_not_null(unknown);
    cr_assert_gt(strlen(unknown), 0);
    for (size_t i = 0; i < n; i++) {
        const char *m = fmem_strerror(codes[i]);
        cr_assert_not_null(m, "code %d", codes[i]);
        cr_assert_gt(strlen(m), 0, "code %d", codes[i]);
        cr_assert_str_neq(m, unknown, "code %d reads as unknown", codes[i]);
        for (size_t j = 0; j < i; j++)
            cr_assert_str_neq(m, fmem_strerror(codes[j]), "codes %d and %d share \"%s\"", codes[i],
                              codes[j], m);
    }
    const int odd[] = {1, 42, -15, -100, INT32_MIN, INT32_MAX};
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++)
        cr_assert_str_eq(fmem_strerror(odd[i]), unknown, "code %d", odd[i]);
}
