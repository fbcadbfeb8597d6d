/* test_service_cache.c - the applications' block caches in service mode:
 * cached blocks count against the quota, are nobody else's to free or
 * read, go back when the application is killed with a full cache, are
 * revoked when memory runs short for another application, and a double
 * free never puts one block in the cache twice. */
#include <criterion/criterion.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "service/client.h"
#include "service/proto.h"
#include "service/ring.h"
#include "test_service_env.h"

static struct svc_env E;

static void teardown(void) { env_stop(&E); }

TestSuite(cache, .fini = teardown, .timeout = 90);

/* A handle from a full entry of the client's cache (class k). */
static bool cached_handle(fmem_pool *p, unsigned k, fmem_handle *out)
{
    struct ring_hdr *r = service_ring(p);
    for (unsigned i = 0; i < RING_CACHE_ENTRIES; i++)
        if (atomic_load(&r->cache[k][i].state) & 1) {
            memcpy(out, (const void *)&r->cache[k][i].h, sizeof *out);
            return true;
        }
    return false;
}

static int raw_free(fmem_pool *p, const fmem_handle *h)
{
    struct ring_req req = {.op = RING_FREE, .h = *h, .cookie = 77};
    struct ring_rsp rsp;
    cr_assert_eq(ring_call(service_ring(p), &req, &rsp, NULL, NULL, 100000), 0);
    return rsp.rc;
}

Test(cache, counts_against_quota)
{
    env_start_or_fail(&E, 1, "--app-max-allocs 8");
    fmem_pool *p = env_app(&E, 0);
    fmem_handle h[9];
    /* the first 4 KiB allocation fills the cache up to the quota; blocks
     * of other sizes still come, from cached 4 KiB blocks given back */
    static const size_t sizes[8] = {4096, 4096, 4096, 8192, 8192, 16384, 32768, 65536};
    for (int i = 0; i < 8; i++)
        cr_assert_eq(fmem_alloc(p, sizes[i], &h[i]), 0, "block %d (%zu bytes)", i, sizes[i]);
    cr_assert_eq(fmem_alloc(p, 4096, &h[8]), FMEM_EQUOTA, "a ninth block");
    cr_assert_eq(fmem_alloc(p, 8192, &h[8]), FMEM_EQUOTA, "a ninth block");
    cr_assert_eq(env_pool_allocated(&E), 3 * 4096 + 2 * 8192 + 16384 + 32768 + 65536,
                 "blocks beyond the handed-out ones are held");
    cr_assert_eq(fmem_free(p, &h[0]), 0);
    cr_assert_eq(fmem_alloc(p, 4096, &h[0]), 0);
    fmem_close(p);
    cr_assert(env_wait_allocated(&E, 0, 10000));
    cr_assert_eq(env_verify_errors(&E), 0);
}

Test(cache, cached_blocks_are_nobody_elses)
{
    env_start_or_fail(&E, 1, NULL);
    fmem_pool *a = env_app(&E, 0), *b = env_app(&E, 0);
    fmem_handle h, c;
    cr_assert_eq(fmem_alloc(a, 4096, &h), 0);
    cr_assert(cached_handle(a, 0, &c), "a refill leaves blocks in the cache");
    char x = 0;
    /* not handed out: not readable, not freeable, by its owner either */
    cr_assert_eq(fmem_read(a, &c, 0, &x, 1), FMEM_EBADHANDLE);
    /* free as far as the application knows: a double free, as in-process */
    cr_assert_eq(fmem_free(a, &c), FMEM_EDOUBLEFREE);
    cr_assert_eq(raw_free(a, &c), FMEM_EBADHANDLE, "fmemd frees no cached block");
    /* another application reaches none of a's blocks */
    cr_assert_eq(fmem_read(b, &c, 0, &x, 1), FMEM_EBADHANDLE);
    cr_assert_eq(raw_free(b, &c), FMEM_EBADHANDLE);
    cr_assert_eq(raw_free(b, &h), FMEM_EBADHANDLE);
    /* a double free puts the block in the cache once: two later
     * allocations get two different blocks */
    cr_assert_eq(fmem_free(a, &h), 0);
    cr_assert_neq(fmem_free(a, &h), 0);
    fmem_handle g[40];
    for (int i = 0; i < 40; i++) {
        cr_assert_eq(fmem_alloc(a, 4096, &g[i]), 0);
        cr_assert_eq(fmem_write(a, &g[i], 0, &i, sizeof i), 0);
        for (int j = 0; j < i; j++)
            cr_assert(g[j].addr != g[i].addr || g[j].node != g[i].node, "block handed out twice");
    }
    for (int i = 0; i < 40; i++) {
        int v = -1;
        cr_assert_eq(fmem_read(a, &g[i], 0, &v, sizeof v), 0);
        cr_assert_eq(v, i);
    }
    fmem_close(b);
    fmem_close(a);
    cr_assert(env_wait_allocated(&E, 0, 10000));
    cr_assert_eq(env_verify_errors(&E), 0);
}

/* Killed with every class's cache full and blocks handed out: the reaper
 * gives all of them back. */
Test(cache, killed_with_full_cache)
{
    env_start_or_fail(&E, 1, NULL);
    int pfd[2];
    cr_assert_eq(pipe(pfd), 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(pfd[0]);
        fmem_pool *p;
        if (fmem_open(E.app_uri[0], &p))
            _exit(1);
        fmem_handle h[RING_CACHE_CLASSES][RING_CACHE_ENTRIES];
        for (unsigned k = 0; k < RING_CACHE_CLASSES; k++) {
            for (unsigned i = 0; i < RING_CACHE_ENTRIES; i++)
                if (fmem_alloc(p, 4096u << k, &h[k][i]))
                    _exit(2);
            for (unsigned i = 0; i + 1 < RING_CACHE_ENTRIES; i++) /* one stays handed out */
                if (fmem_free(p, &h[k][i]))
                    _exit(3);
        }
        struct ring_hdr *r = service_ring(p);
        unsigned full = 0;
        for (unsigned k = 0; k < RING_CACHE_CLASSES; k++)
            for (unsigned i = 0; i < RING_CACHE_ENTRIES; i++)
                full += atomic_load(&r->cache[k][i].state) & 1;
        if (write(pfd[1], &full, sizeof full) != sizeof full)
            _exit(4);
        pause();
        _exit(0);
    }
    close(pfd[1]);
    unsigned full = 0;
    cr_assert_eq(read(pfd[0], &full, sizeof full), (ssize_t)sizeof full);
    close(pfd[0]);
    cr_assert_geq(full, RING_CACHE_CLASSES * (RING_CACHE_ENTRIES - 1), "caches full: %u", full);
    cr_assert_gt(env_pool_allocated(&E), 0);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    cr_assert(env_wait_allocated(&E, 0, 30000), "the killed application's cache remains");
    cr_assert_eq(env_verify_errors(&E), 0);
}

/* Memory runs short for one application while another sits idle with a
 * full cache: the idle one's cached blocks are revoked and used. */
Test(cache, revoked_when_memory_is_short)
{
    E.pool_size = "16M";
    env_start_or_fail(&E, 1, NULL);
    fmem_pool *idle = env_app(&E, 0), *hungry = env_app(&E, 0);
    fmem_handle h[RING_CACHE_ENTRIES];
    for (unsigned i = 0; i < RING_CACHE_ENTRIES; i++)
        cr_assert_eq(fmem_alloc(idle, 32768, &h[i]), 0);
    for (unsigned i = 0; i < RING_CACHE_ENTRIES; i++)
        cr_assert_eq(fmem_free(idle, &h[i]), 0);
    uint64_t cached = env_pool_allocated(&E);
    cr_assert_geq(cached, 16 * 32768, "the idle application's cache holds blocks");
    /* the hungry one takes 32 KiB blocks (its own cache refills too) until
     * nothing is left */
    static fmem_handle g[1024];
    unsigned n = 0;
    int rc = 0;
    while (n < 1024 && (rc = fmem_alloc(hungry, 32768, &g[n])) == 0)
        n++;
    cr_assert_eq(rc, FMEM_ENOMEM);
    cr_assert_eq((uint64_t)n * 32768, env_pool_allocated(&E),
                 "blocks stayed cached while another application ran out of memory");
    cr_assert(env_status_has(E.fmemd_sock[0], "blocks revoked"));
    /* the idle application still allocates once memory is back */
    for (unsigned i = 0; i < n; i++)
        cr_assert_eq(fmem_free(hungry, &g[i]), 0);
    cr_assert_eq(service_cache_drain(hungry), 0);
    cr_assert_eq(fmem_alloc(idle, 32768, &h[0]), 0);
    cr_assert_eq(fmem_free(idle, &h[0]), 0);
    fmem_close(hungry);
    fmem_close(idle);
    cr_assert(env_wait_allocated(&E, 0, 10000));
    cr_assert_eq(env_verify_errors(&E), 0);
}

/* Blocks cached before a fork stay the parent's: the child allocates its
 * own (a connection of its own), and neither sees the other's data. */
Test(cache, fork_child_gets_no_cached_block)
{
    env_start_or_fail(&E, 1, NULL);
    fmem_pool *p = env_app(&E, 0);
    fmem_handle h, c;
    cr_assert_eq(fmem_alloc(p, 4096, &h), 0);
    cr_assert(cached_handle(p, 0, &c));
    int pfd[2];
    cr_assert_eq(pipe(pfd), 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(pfd[0]);
        fmem_handle k[RING_CACHE_ENTRIES + 1];
        int bad = 0;
        for (unsigned i = 0; i <= RING_CACHE_ENTRIES && !bad; i++) {
            bad |= fmem_alloc(p, 4096, &k[i]) != 0;
            bad |= !bad && k[i].addr == c.addr && k[i].node == c.node;
            bad |= !bad && fmem_write(p, &k[i], 0, "child", 6) != 0;
        }
        if (write(pfd[1], &bad, sizeof bad) != sizeof bad)
            _exit(2);
        _exit(0);
    }
    close(pfd[1]);
    int bad = -1;
    cr_assert_eq(read(pfd[0], &bad, sizeof bad), (ssize_t)sizeof bad);
    close(pfd[0]);
    waitpid(pid, NULL, 0);
    cr_assert_eq(bad, 0, "the child was handed a block of the parent's cache");
    fmem_handle q;
    cr_assert_eq(fmem_alloc(p, 4096, &q), 0);
    cr_assert_eq(fmem_write(p, &q, 0, "parent", 7), 0);
    char buf[8];
    cr_assert_eq(fmem_read(p, &q, 0, buf, 7), 0);
    cr_assert_str_eq(buf, "parent");
    cr_assert_eq(fmem_free(p, &q), 0);
    cr_assert_eq(fmem_free(p, &h), 0);
    fmem_close(p);
    cr_assert(env_wait_allocated(&E, 0, 10000));
    cr_assert_eq(env_verify_errors(&E), 0);
}

/* Requests further apart than a worker's spin: its idle spin shrinks to
 * nothing instead of burning the spin before every sleep. */
Test(cache, idle_worker_stops_spinning)
{
    env_start_or_fail(&E, 1, "--workers 1 --spin-us 50");
    fmem_pool *p = env_app(&E, 0);
    for (int i = 0; i < 40; i++) {
        cr_assert_eq(service_ping(p), 0);
        env_nap_ms(2);
    }
    cr_assert(env_status_has(E.fmemd_sock[0], "idle spin 0 us"), "the idle spin did not shrink");
    fmem_close(p);
}
