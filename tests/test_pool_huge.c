/* test_pool_huge.c - what opening a pool costs: a huge pool costs what is
 * used (no key or log written per chunk up front), sizes no pool file can
 * describe are refused at once, and the keys a fresh pool gives out on
 * first use are as good as the ones it used to make up front. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "fmem.h"
#include "pool_internal.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Resident set size now, in bytes. */
static uint64_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long size = 0, res = 0;
    if (f) {
        if (fscanf(f, "%llu %llu", &size, &res) != 2)
            res = 0;
        fclose(f);
    }
    return (uint64_t)res * 4096;
}

/* 1 TiB used to take 25 s and 4.4 GB of memory just to open (a key pair
 * and a log entry written for each of its 256 Mi chunks). */
Test(huge, one_tebibyte_costs_what_is_used, .timeout = 120)
{
    uint64_t rss0 = rss_bytes();
    double t0 = now_s();
    fmem_pool *p;
    cr_assert_eq(fmem_open("mem:?size=1T", &p), 0);
    double opened = now_s() - t0;
    uint64_t grew = rss_bytes() - rss0;
    fmem_stats_t st;
    cr_assert_eq(fmem_stats(p, &st), 0);
    cr_assert_eq(st.capacity_bytes, UINT64_C(1) << 40);
    /* a small and a 1 GiB block work, far apart in the pool */
    fmem_handle a, b;
    cr_assert_eq(fmem_alloc(p, 4096, &a), 0);
    cr_assert_eq(fmem_alloc(p, 1 << 30, &b), 0);
    cr_assert_eq(fmem_write(p, &a, 0, "x", 1), 0);
    cr_assert_eq(fmem_write(p, &b, (1 << 30) - 1, "y", 1), 0);
    cr_assert_eq(fmem_free(p, &a), 0);
    cr_assert_eq(fmem_free(p, &b), 0);
    fmem_close(p);
    cr_log_info("mem:?size=1T opened in %.2f s, resident memory grew %.0f MB", opened,
                (double)grew / 1e6);
    cr_assert_lt(opened, 5.0, "opening 1 TiB took %.1f s", opened);
    /* what remains is 8 bytes per 128 KiB span in the file and as much in
     * the client's cache: 128 MB for 1 TiB */
    cr_assert_lt(grew, UINT64_C(400) << 20, "opening 1 TiB took %llu MB",
                 (unsigned long long)(grew >> 20));
}

Test(huge, beyond_what_a_pool_header_can_name)
{
    fmem_pool *p = NULL;
    double t0 = now_s();
    cr_assert_eq(fmem_open("mem:?size=33T", &p), FMEM_ESIZE);
    cr_assert_null(p);
    cr_assert_lt(now_s() - t0, 1.0);
}

/* A fresh pool's capability entries are empty: the first allocation of a
 * block gives it a key pair, freeing revokes it as before, and an entry
 * left without a key (an allocator that died between its commit and the
 * key) never lets key 0 in. */
Test(huge, keys_are_given_at_first_allocation)
{
    fmem_pool *p;
    cr_assert_eq(fmem_open("mem:?size=64M", &p), 0);
    struct node *n = p->nodes[0];
    uint64_t *caps = (uint64_t *)((char *)n->tp->base + n->g.cap_off);
    uint64_t keyed = 0;
    for (uint64_t c = 0; c < n->g.nchunks; c++)
        keyed += caps[c] != 0;
    cr_assert_eq(keyed, 0, "a fresh pool holds %llu keys", (unsigned long long)keyed);
    fmem_handle h;
    cr_assert_eq(fmem_alloc(p, 8192, &h), 0);
    uint64_t c = h.addr / FMEM_CHUNK_SIZE, cap = caps[c];
    cr_assert_neq((uint32_t)cap, 0);
    cr_assert_neq(cap >> 32, 0, "no backup key");
    cr_assert_eq(h.rkey, (uint32_t)cap);
    cr_assert_eq(fmem_write(p, &h, 0, "k", 1), 0);
    /* the key dies at free; the block's next owner gets the backup */
    cr_assert_eq(fmem_free(p, &h), 0);
    cr_assert_eq((uint32_t)caps[c], (uint32_t)(cap >> 32));
    fmem_handle old = h;
    cr_assert_eq(fmem_write(p, &old, 0, "k", 1), FMEM_EACCES);
    /* an allocated block whose entry has no key */
    fmem_handle g;
    cr_assert_eq(fmem_alloc(p, 4096, &g), 0);
    uint64_t gc = g.addr / FMEM_CHUNK_SIZE;
    __atomic_store_n(&caps[gc], 0, __ATOMIC_RELEASE);
    fmem_handle forged = g;
    forged.rkey = 0;
    char byte;
    cr_assert_eq(fmem_read(p, &forged, 0, &byte, 1), FMEM_EACCES);
    void *ptr;
    cr_assert_eq(fmem_map(p, &forged, &ptr), FMEM_EACCES);
    cr_assert_eq(fmem_free(p, &forged), FMEM_EACCES);
    fmem_close(p);
}

/* Keys given on first use differ between blocks and between pools. */
Test(huge, first_use_keys_differ)
{
    fmem_pool *p, *q;
    cr_assert_eq(fmem_open("mem:?size=16M", &p), 0);
    cr_assert_eq(fmem_open("mem:?size=16M", &q), 0);
    enum { N = 256 };
    uint32_t kp[N], kq[N];
    for (int i = 0; i < N; i++) {
        fmem_handle a, b;
        cr_assert_eq(fmem_alloc(p, 4096, &a), 0);
        cr_assert_eq(fmem_alloc(q, 4096, &b), 0);
        kp[i] = a.rkey;
        kq[i] = b.rkey;
        cr_assert_neq(a.rkey, 0);
    }
    int same = 0, dup = 0;
    for (int i = 0; i < N; i++) {
        same += kp[i] == kq[i];
        for (int j = 0; j < i; j++)
            dup += kp[i] == kp[j];
    }
    cr_assert_leq(same, 1, "two pools gave %d equal keys", same);
    cr_assert_leq(dup, 1, "one pool gave %d repeated keys", dup);
    fmem_close(p);
    fmem_close(q);
}
