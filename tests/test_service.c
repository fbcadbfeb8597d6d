/* test_service.c - service mode end to end: fmem-mnode and fmemd as real
 * processes in a temporary directory, applications through the public API.
 * One client API in both modes; isolation between applications; quotas;
 * key regeneration by the memory node; restarts. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pool_internal.h"
#include "service/client.h"
#include "service/mnode.h"
#include "test_service_env.h"

static struct svc_env E;

static void teardown(void)
{
    env_stop(&E);
}

TestSuite(service, .fini = teardown, .timeout = 60);

static void start(unsigned n, const char *extra)
{
    env_start_or_fail(&E, n, extra);
}

static fmem_pool *app(unsigned i)
{
    return env_app(&E, i);
}

/* The same program runs unchanged on an embedded pool and on the service. */
static void exercise(fmem_pool *p)
{
    static const size_t sizes[] = {1, 4096, 5000, 65536, 128 << 10, 1 << 20, 4 << 20};
    fmem_handle h[7];
    for (int i = 0; i < 7; i++) {
        cr_assert_eq(fmem_alloc(p, sizes[i], &h[i]), 0, "alloc %zu", sizes[i]);
        cr_assert_geq(h[i].length, sizes[i]);
        uint64_t tag = 0xABC000 + (uint64_t)i;
        cr_assert_eq(fmem_write(p, &h[i], h[i].length - 8, &tag, 8), 0);
    }
    for (int i = 0; i < 7; i++) {
        uint64_t tag = 0;
        cr_assert_eq(fmem_read(p, &h[i], h[i].length - 8, &tag, 8), 0);
        cr_assert_eq(tag, 0xABC000 + (uint64_t)i);
        void *ptr;
        cr_assert_eq(fmem_map(p, &h[i], &ptr), 0);
        cr_assert_eq(*(uint64_t *)((char *)ptr + h[i].length - 8), tag);
        cr_assert_eq(fmem_read(p, &h[i], h[i].length - 4, &tag, 8), FMEM_ERANGE);
    }
    fmem_stats_t st;
    cr_assert_eq(fmem_stats(p, &st), 0);
    cr_assert_geq(st.allocated_bytes, (5u << 20) + (128u << 10));
    cr_assert_eq(st.allocs, 7);
    for (int i = 0; i < 7; i++)
        cr_assert_eq(fmem_free(p, &h[i]), 0);
    /* a freed handle gives no access and cannot be freed again */
    char b;
    cr_assert_neq(fmem_read(p, &h[0], 0, &b, 1), 0);
    cr_assert_neq(fmem_free(p, &h[0]), 0);
    cr_assert_eq(fmem_alloc(p, 0, &h[0]), FMEM_ESIZE);
    cr_assert_eq(fmem_alloc(p, (size_t)1 << 40, &h[0]), FMEM_ESIZE);
}

Test(service, same_api_both_modes)
{
    start(1, NULL);
    fmem_pool *emb;
    cr_assert_eq(fmem_open("mem:?size=64M", &emb), 0);
    exercise(emb);
    fmem_close(emb);
    fmem_pool *p = app(0);
    exercise(p);
    /* admin calls need the metadata, which applications never get */
    fmem_verify_report r;
    cr_assert_eq(fmem_verify(p, &r, NULL), FMEM_ENOTSUP);
    cr_assert_eq(fmem_recover(p, 5, NULL), FMEM_ENOTSUP);
    fmem_close(p);
    cr_assert(env_wait_allocated(&E, 0, 10000));
    cr_assert_eq(env_verify_errors(&E), 0);
}

Test(service, uris_and_default)
{
    start(1, NULL);
    fmem_pool *p;
    setenv("FMEM_URI", E.app_uri[0], 1);
    cr_assert_eq(fmem_open(NULL, &p), 0);
    fmem_close(p);
    unsetenv("FMEM_URI");
    char uri[256];
    snprintf(uri, sizeof uri, "fmem://localhost%s", E.fmemd_sock[0]);
    cr_assert_eq(fmem_open(uri, &p), 0);
    fmem_close(p);
    snprintf(uri, sizeof uri, "fmem://%s", E.fmemd_sock[0]);
    cr_assert_eq(fmem_open(uri, &p), 0);
    fmem_close(p);
    cr_assert_eq(fmem_open("fmem://elsewhere/x.sock", &p), FMEM_EURI);
    cr_assert_eq(fmem_open("unix:", &p), FMEM_EURI);
    snprintf(uri, sizeof uri, "unix:%s/nobody.sock", E.dir);
    cr_assert_eq(fmem_open(uri, &p), FMEM_EIO);
}

Test(service, applications_are_isolated)
{
    start(1, NULL);
    fmem_pool *a = app(0);
    fmem_handle h;
    cr_assert_eq(fmem_alloc(a, 8192, &h), 0);
    cr_assert_eq(fmem_write(a, &h, 0, "mine", 5), 0);
    /* the handle is plain data: another application gets it, and it must
     * not give that application anything */
    pid_t pid = fork();
    if (pid == 0) {
        fmem_pool *b;
        if (fmem_open(E.app_uri[0], &b))
            _exit(10);
        char buf[8];
        void *ptr;
        if (fmem_read(b, &h, 0, buf, 5) != FMEM_EBADHANDLE)
            _exit(11);
        if (fmem_map(b, &h, &ptr) != FMEM_EBADHANDLE)
            _exit(12);
        if (fmem_write(b, &h, 0, "evil", 5) != FMEM_EBADHANDLE)
            _exit(13);
        if (fmem_free(b, &h) != FMEM_EBADHANDLE)
            _exit(14);
        fmem_close(b);
        _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child check %d failed", WEXITSTATUS(st));
    char buf[8];
    cr_assert_eq(fmem_read(a, &h, 0, buf, 5), 0);
    cr_assert_str_eq(buf, "mine");
    /* a forged key is refused locally and by fmemd */
    fmem_handle forged = h;
    forged.rkey ^= 1;
    cr_assert_eq(fmem_read(a, &forged, 0, buf, 1), FMEM_EACCES);
    cr_assert_eq(fmem_free(a, &forged), FMEM_EACCES);
    cr_assert_eq(fmem_free(a, &h), 0);
    fmem_close(a);
    cr_assert(env_wait_allocated(&E, 0, 10000));
}

Test(service, quotas)
{
    start(1, "--app-max-allocs 8 --app-max-bytes 256K");
    fmem_pool *p = app(0);
    fmem_handle h[9];
    for (int i = 0; i < 8; i++)
        cr_assert_eq(fmem_alloc(p, 4096, &h[i]), 0);
    cr_assert_eq(fmem_alloc(p, 4096, &h[8]), FMEM_EQUOTA, "over the allocation quota");
    cr_assert_eq(fmem_free(p, &h[0]), 0);
    cr_assert_eq(fmem_alloc(p, 512 << 10, &h[0]), FMEM_EQUOTA, "over the byte quota");
    cr_assert_eq(fmem_alloc(p, 4096, &h[0]), 0);
    /* another application has its own quota */
    fmem_pool *q = app(0);
    fmem_handle g;
    cr_assert_eq(fmem_alloc(q, 4096, &g), 0);
    cr_assert(env_status_has(E.fmemd_sock[0], "over quota"));
    fmem_close(q);
    fmem_close(p);
    cr_assert(env_wait_allocated(&E, 0, 10000));
}

/* Frees in service mode leave the backup key empty; the memory node's
 * regenerator refills it. */
Test(service, keys_regenerated_by_memory_node)
{
    start(1, NULL);
    fmem_pool *p = app(0);
    fmem_handle h[256];
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < 256; i++)
            cr_assert_eq(fmem_alloc(p, 4096, &h[i]), 0);
        for (int i = 0; i < 256; i++)
            cr_assert_eq(fmem_free(p, &h[i]), 0);
    }
    fmem_close(p);
    fmem_pool *pool;
    cr_assert_eq(env_open_pool(&E, &pool), 0);
    struct node *n = pool->nodes[0];
    /* entries never allocated have no key at all (main 0): not empty */
    uint64_t empty = 1, keyed = 0;
    for (int t = 0; t < 1000 && empty; t++) {
        empty = keyed = 0;
        const uint64_t *caps = (const uint64_t *)((char *)n->tp->base + n->g.cap_off);
        for (uint64_t c = 0; c < n->g.nchunks; c++) {
            uint64_t v = __atomic_load_n(&caps[c], __ATOMIC_RELAXED);
            keyed += (uint32_t)v != 0;
            empty += (uint32_t)v != 0 && (v >> 32) == 0;
        }
        if (empty)
            env_nap_ms(10);
    }
    fmem_close(pool);
    cr_assert_geq(keyed, 256, "only %llu entries got keys", (unsigned long long)keyed);
    cr_assert_eq(empty, 0, "%llu backup keys still empty", (unsigned long long)empty);
    cr_assert(env_status_has(E.mnode_sock, "keys issued"));
}

/* Frees race the memory node's regenerator, which turns a revoked entry
 * (main, 0) into (main, new backup) at any moment: a free that finds its
 * revoking CAS beaten by that must retry, not report a double free. */
struct regen_race {
    fmem_pool *p;
    struct node *n;
    _Atomic int stop;
    _Atomic int errors;
};

static void *regen_loop(void *arg)
{
    struct regen_race *r = arg;
    while (!atomic_load(&r->stop))
        regen_pass(r->n, NULL);
    return NULL;
}

static void *free_loop(void *arg)
{
    struct regen_race *r = arg;
    for (int i = 0; i < 20000; i++) {
        fmem_handle h;
        int rc = fmem_alloc(r->p, 4096, &h);
        if (rc == 0)
            rc = fmem_free(r->p, &h);
        if (rc)
            atomic_fetch_add(&r->errors, 1);
    }
    return NULL;
}

Test(service, frees_race_the_regenerator)
{
    struct regen_race r = {0};
    cr_assert_eq(fmem_open("mem:?size=16M", &r.p), 0);
    r.n = r.p->nodes[0];
    r.n->remote_regen = true; /* as in fmemd: backups are left to the regenerator */
    pthread_t g, t[3];
    pthread_create(&g, NULL, regen_loop, &r);
    for (int i = 0; i < 3; i++)
        pthread_create(&t[i], NULL, free_loop, &r);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    atomic_store(&r.stop, 1);
    pthread_join(g, NULL);
    cr_assert_eq(atomic_load(&r.errors), 0, "%d allocations or frees failed",
                 atomic_load(&r.errors));
    fmem_close(r.p);
}

struct stress_arg {
    fmem_pool *p;
    unsigned seed;
    int errors;
    char first[128]; /* what went wrong first */
};

static void stress_error(struct stress_arg *a, const char *op, int rc, const fmem_handle *h)
{
    if (a->errors++ == 0)
        snprintf(a->first, sizeof a->first, "%s: %s (node %u addr %#llx len %llu key %#x)", op,
                 rc ? fmem_strerror(rc) : "wrong data", h->node, (unsigned long long)h->addr,
                 (unsigned long long)h->length, h->rkey);
}

static void *stress_thread(void *arg)
{
    struct stress_arg *a = arg;
    fmem_handle h[32];
    uint64_t tags[32];
    int live = 0, rc;
    for (int it = 0; it < 3000; it++) {
        unsigned r = rand_r(&a->seed);
        if (live < 32 && (r & 1)) {
            if (fmem_alloc(a->p, 4096u << (r % 5), &h[live]) == 0) {
                tags[live] = ((uint64_t)r << 20) ^ (uint64_t)it;
                if ((rc = fmem_write(a->p, &h[live], 0, &tags[live], 8)))
                    stress_error(a, "write", rc, &h[live]);
                live++;
            }
        } else if (live) {
            int k = (int)(r % (unsigned)live);
            uint64_t t = 0;
            if ((rc = fmem_read(a->p, &h[k], 0, &t, 8)) || t != tags[k])
                stress_error(a, "read", rc, &h[k]);
            if ((rc = fmem_free(a->p, &h[k])))
                stress_error(a, "free", rc, &h[k]);
            h[k] = h[--live];
            tags[k] = tags[live];
        }
    }
    while (live) {
        live--;
        if ((rc = fmem_free(a->p, &h[live])))
            stress_error(a, "free", rc, &h[live]);
    }
    return NULL;
}

/* Threads of two applications on two services share one memory node. */
Test(service, concurrent_apps_two_services)
{
    start(2, NULL);
    fmem_pool *p[2] = {app(0), app(1)};
    pthread_t t[8];
    struct stress_arg a[8];
    for (int i = 0; i < 8; i++) {
        a[i] = (struct stress_arg){.p = p[i % 2], .seed = 77u + (unsigned)i};
        pthread_create(&t[i], NULL, stress_thread, &a[i]);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(t[i], NULL);
        cr_assert_eq(a[i].errors, 0, "thread %d: %d errors, first: %s", i, a[i].errors,
                     a[i].first);
    }
    fmem_close(p[0]);
    fmem_close(p[1]);
    cr_assert(env_wait_allocated(&E, 0, 10000));
    cr_assert_eq(env_verify_errors(&E), 0);
}

Test(service, ping_round_trip)
{
    start(1, NULL);
    fmem_pool *p = app(0);
    for (int i = 0; i < 10000; i++)
        cr_assert_eq(service_ping(p), 0);
    fmem_close(p);
}
