/* test_service_stats.c - what service mode reports like an in-process
 * pool: fmem_stats fills in the memory operations (CAS, reads, writes,
 * round trips, redo-log flushes) instead of zeros, and a double free gives
 * FMEM_EDOUBLEFREE on every transport (in-process mem: and shm:, the NIC
 * emulator, and through fmemd), for cached sizes and large blocks alike;
 * in-process pools count their redo-log flushes as well. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <unistd.h>

#include "test_service_env.h"

static struct svc_env E;

static void teardown(void) { env_stop(&E); }

TestSuite(svc_stats, .fini = teardown, .timeout = 90);

/* 4 KiB and 16 KiB go through the service's block cache; 1 MiB does not */
static const size_t sizes[] = {100, 4096, 16384, 200000, 1 << 20};

static void double_free_on(fmem_pool *p, const char *what)
{
    for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        fmem_handle h;
        cr_assert_eq(fmem_alloc(p, sizes[i], &h), 0, "%s: alloc %zu", what, sizes[i]);
        cr_assert_eq(fmem_free(p, &h), 0, "%s: free %zu", what, sizes[i]);
        int rc = fmem_free(p, &h);
        cr_assert_eq(rc, FMEM_EDOUBLEFREE, "%s: second free of %zu bytes: %d (%s)", what,
                     sizes[i], rc, fmem_strerror(rc));
    }
    /* a handle that never named a block stays a bad handle */
    fmem_handle h, forged;
    cr_assert_eq(fmem_alloc(p, 4096, &h), 0);
    forged = h;
    forged.addr += 2048;
    cr_assert_eq(fmem_free(p, &forged), FMEM_EBADHANDLE, "%s: forged handle", what);
    cr_assert_eq(fmem_free(p, &h), 0);
}

Test(svc_stats, double_free_in_process)
{
    char shm[96];
    snprintf(shm, sizeof shm, "shm:/fmem-pkg-df-%d?size=64M", (int)getpid());
    const char *uris[] = {"mem:?size=64M", shm, "mem:?size=64M&rtt_ns=200&rtt_mode=nic"};
    for (unsigned i = 0; i < 3; i++) {
        fmem_pool *p;
        cr_assert_eq(fmem_open(uris[i], &p), 0, "open %s", uris[i]);
        double_free_on(p, uris[i]);
        fmem_close(p);
    }
    fmem_unlink(shm);
}

Test(svc_stats, double_free_through_the_service)
{
    env_start_or_fail(&E, 1, "--workers 1");
    fmem_pool *p = env_app(&E, 0);
    double_free_on(p, "service");
    fmem_close(p);
}

Test(svc_stats, stats_are_filled_in)
{
    env_start_or_fail(&E, 1, "--workers 1");
    fmem_pool *p = env_app(&E, 0);
    fmem_handle h[8];
    for (unsigned i = 0; i < 8; i++)
        cr_assert_eq(fmem_alloc(p, i & 1 ? 1 << 20 : 4096, &h[i]), 0);
    char buf[64] = "figures";
    cr_assert_eq(fmem_write(p, &h[0], 0, buf, sizeof buf), 0);
    cr_assert_eq(fmem_read(p, &h[0], 0, buf, sizeof buf), 0);
    for (unsigned i = 0; i < 8; i++)
        cr_assert_eq(fmem_free(p, &h[i]), 0);
    fmem_stats_t st;
    cr_assert_eq(fmem_stats(p, &st), 0);
    cr_expect_eq(st.allocs, 8);
    cr_expect_eq(st.frees, 8);
    /* the 1 MiB blocks alone took an allocating and a freeing CAS each */
    cr_expect_geq(st.cas_ops, 8, "cas_ops %llu", (unsigned long long)st.cas_ops);
    cr_expect_geq(st.round_trips, 8, "round_trips %llu", (unsigned long long)st.round_trips);
    cr_expect_geq(st.reads, 1, "reads %llu", (unsigned long long)st.reads);
    cr_expect_geq(st.writes, 1, "writes %llu", (unsigned long long)st.writes);
    cr_expect_geq(st.log_flushes, 1, "log_flushes %llu", (unsigned long long)st.log_flushes);
    cr_expect_leq(st.cas_failures, st.cas_ops);
    fmem_close(p);
}

/* in-process, the redo-log flushes are counted too (they were left 0) */
Test(svc_stats, in_process_counts_log_flushes)
{
    fmem_pool *p;
    cr_assert_eq(fmem_open("mem:?size=64M", &p), 0);
    fmem_handle h[8];
    for (unsigned i = 0; i < 8; i++)
        cr_assert_eq(fmem_alloc(p, i & 1 ? 1 << 20 : 4096, &h[i]), 0);
    for (unsigned i = 0; i < 8; i++)
        cr_assert_eq(fmem_free(p, &h[i]), 0);
    fmem_stats_t st;
    cr_assert_eq(fmem_stats(p, &st), 0);
    cr_expect_geq(st.log_flushes, 1, "log_flushes %llu", (unsigned long long)st.log_flushes);
    cr_expect_leq(st.log_flushes, st.cas_ops);
    fmem_close(p);
}
