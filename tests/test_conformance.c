/* test_conformance.c - the same checks on every transport. The pool is
 * $FMEM_TEST_URI (the soft-RoCE harness sets an rdma:// URI) or, by default,
 * an embedded shared-memory pool. Data is only touched through fmem_read and
 * fmem_write, which every transport offers. */
#include <criterion/criterion.h>
#include <fmem.h>
#include <fmem_admin.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char default_uri[96];

static const char *pool_uri(void)
{
    const char *u = getenv("FMEM_TEST_URI");
    if (u && *u)
        return u;
    if (!default_uri[0])
        snprintf(default_uri, sizeof default_uri, "shm:/fmem-conf-%d?size=64M", getpid());
    return default_uri;
}

static fmem_pool *open_pool(void)
{
    fmem_pool *p;
    int rc = fmem_open(pool_uri(), &p);
    cr_assert_eq(rc, 0, "open %s: %s", pool_uri(), fmem_strerror(rc));
    return p;
}

static void cleanup(void)
{
    if (!getenv("FMEM_TEST_URI") && default_uri[0])
        fmem_unlink(default_uri);
}

TestSuite(conformance, .fini = cleanup, .timeout = 120);

Test(conformance, sizes_alignment_and_data)
{
    fmem_pool *p = open_pool();
    for (size_t sz = 4096; sz <= (8u << 20); sz <<= 1) {
        fmem_handle h;
        cr_assert_eq(fmem_alloc(p, sz, &h), 0, "alloc %zu", sz);
        cr_assert_eq(h.length, sz);
        cr_assert_eq(h.addr % sz, 0);
        uint64_t head = sz * 3 + 1, tail = ~sz, got;
        cr_assert_eq(fmem_write(p, &h, 0, &head, 8), 0);
        cr_assert_eq(fmem_write(p, &h, sz - 8, &tail, 8), 0);
        cr_assert_eq(fmem_read(p, &h, 0, &got, 8), 0);
        cr_assert_eq(got, head);
        cr_assert_eq(fmem_read(p, &h, sz - 8, &got, 8), 0);
        cr_assert_eq(got, tail);
        cr_assert_eq(fmem_read(p, &h, sz - 4, &got, 8), FMEM_ERANGE);
        cr_assert_eq(fmem_free(p, &h), 0);
    }
    fmem_close(p);
}

Test(conformance, bad_handles_and_double_free)
{
    fmem_pool *p = open_pool();
    fmem_handle h, forged;
    char b[8];
    cr_assert_eq(fmem_alloc(p, 0, &h), FMEM_ESIZE);
    cr_assert_eq(fmem_alloc(p, 8192, &h), 0);
    forged = h;
    forged.rkey ^= 1; /* a key one increment away */
    cr_assert_eq(fmem_read(p, &forged, 0, b, 8), FMEM_EACCES);
    cr_assert_eq(fmem_free(p, &forged), FMEM_EACCES);
    forged = h;
    forged.length = 4096; /* right key, wrong size */
    cr_assert_eq(fmem_free(p, &forged), FMEM_EBADHANDLE);
    forged = h;
    forged.addr += 4096; /* misaligned for its size */
    cr_assert_neq(fmem_free(p, &forged), 0);
    cr_assert_eq(fmem_free(p, &h), 0);
    cr_assert_eq(fmem_free(p, &h), FMEM_EDOUBLEFREE);
    cr_assert_eq(fmem_read(p, &h, 0, b, 8), FMEM_EACCES, "a freed key must not work");
    fmem_close(p);
}

struct stress_arg {
    fmem_pool *p;
    unsigned seed;
    _Atomic uint32_t *owner;
    uint64_t nchunks;
    _Atomic int *bad;
};

static void *stress_thread(void *arg)
{
    struct stress_arg *a = arg;
    fmem_handle live[16];
    int n = 0;
    for (int i = 0; i < 400; i++) {
        if (n < 16 && (n == 0 || rand_r(&a->seed) % 2)) {
            size_t sz = (size_t)4096 << (rand_r(&a->seed) % 7);
            fmem_handle h;
            if (fmem_alloc(a->p, sz, &h) != 0)
                continue;
            for (uint64_t c = h.addr / 4096; c < (h.addr + h.length) / 4096; c++) {
                uint32_t zero = 0;
                if (c >= a->nchunks || !atomic_compare_exchange_strong(&a->owner[c], &zero, a->seed | 1))
                    atomic_store(a->bad, 1); /* handed out twice */
            }
            uint64_t stamp = h.addr ^ 0x5a5a;
            fmem_write(a->p, &h, 0, &stamp, 8);
            live[n++] = h;
        } else if (n) {
            fmem_handle h = live[--n];
            uint64_t stamp;
            if (fmem_read(a->p, &h, 0, &stamp, 8) != 0 || stamp != (h.addr ^ 0x5a5a))
                atomic_store(a->bad, 2); /* data corrupted */
            for (uint64_t c = h.addr / 4096; c < (h.addr + h.length) / 4096; c++)
                atomic_store(&a->owner[c], 0);
            if (fmem_free(a->p, &h) != 0)
                atomic_store(a->bad, 3);
        }
    }
    while (n) {
        fmem_handle h = live[--n];
        for (uint64_t c = h.addr / 4096; c < (h.addr + h.length) / 4096; c++)
            atomic_store(&a->owner[c], 0);
        if (fmem_free(a->p, &h) != 0)
            atomic_store(a->bad, 3);
    }
    return NULL;
}

Test(conformance, threads_never_share_a_chunk)
{
    fmem_pool *p = open_pool();
    fmem_stats_t st;
    cr_assert_eq(fmem_stats(p, &st), 0);
    uint64_t nchunks = st.capacity_bytes / 4096, before = st.allocated_bytes;
    _Atomic uint32_t *owner = calloc(nchunks, sizeof *owner);
    _Atomic int bad = 0;
    enum { T = 8 };
    pthread_t t[T];
    struct stress_arg a[T];
    for (int i = 0; i < T; i++) {
        a[i] = (struct stress_arg){p, (unsigned)i * 7919u + 1, owner, nchunks, &bad};
        pthread_create(&t[i], NULL, stress_thread, &a[i]);
    }
    for (int i = 0; i < T; i++)
        pthread_join(t[i], NULL);
    cr_expect_eq(atomic_load(&bad), 0, "failure kind %d", atomic_load(&bad));
    /* over RDMA the last frees may still be quarantined (counted as
     * allocated) until the memory node has destroyed their old windows */
    for (int i = 0; i < 5000; i++) {
        cr_assert_eq(fmem_stats(p, &st), 0);
        if (st.allocated_bytes == before)
            break;
        usleep(1000);
    }
    cr_expect_eq(st.allocated_bytes, before);
    free(owner);
    fmem_close(p);
}

Test(conformance, recovery_of_another_user_and_verifier)
{
    fmem_pool *victim = open_pool(), *rescuer = open_pool();
    unsigned uid = fmem_user_id(victim, 0);
    cr_assert_neq(uid, fmem_user_id(rescuer, 0));
    fmem_stats_t st;
    fmem_stats(rescuer, &st);
    uint64_t before = st.allocated_bytes;
    fmem_handle h;
    for (int i = 0; i < 50; i++)
        cr_assert_eq(fmem_alloc(victim, (size_t)4096 << (i % 8), &h), 0);
    fmem_recovery_stats rs;
    cr_assert_eq(fmem_recover(rescuer, uid, &rs), 0);
    cr_expect_eq(rs.blocks_freed, 50);
    fmem_stats(rescuer, &st);
    cr_expect_eq(st.allocated_bytes, before);
    fmem_verify_report vr;
    cr_assert_eq(fmem_verify(rescuer, &vr, stderr), 0);
    cr_expect_eq(vr.errors, 0);
    fmem_close(rescuer);
    /* the victim's handle is gone: closing it must not touch the pool */
    fmem_close(victim);
}
