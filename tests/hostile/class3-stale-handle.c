/* class3-stale-handle.test - application A keeps writing into its block
 * while the fmemd that gave it the block goes away (SIGKILL, SIGSTOP until
 * the memory node fences it, or a clean shutdown); the memory node
 * reclaims the block and another fmemd hands it to application B. From the
 * fence on, every use of A's handle must fail (FMEM_ESTALE), and nothing A
 * does through the library may reach B's data.
 *
 * Not an assertion but a documented limit (docs/service.md, threat model):
 * a pointer A obtained with fmem_map before the fence is plain shared
 * memory; it still reaches the block, and so does any program that maps
 * the data file itself. Shared memory cannot revoke a mapping; the
 * hardware check needs the verbs transport. */
#include <pthread.h>
#include <stdatomic.h>

#include "pool_hostile.h"
#include "test_service_env.h"

#define BLOCK (4u << 20)

struct writer {
    fmem_pool *p;
    fmem_handle h;
    atomic_int rc;
    atomic_long writes;
    atomic_int stop; /* the checks are done (the writer never failed) */
};

static void *keep_writing(void *arg)
{
    struct writer *w = arg;
    while (!atomic_load(&w->stop)) {
        int rc = fmem_write(w->p, &w->h, 0, "AAAAAAAA", 8);
        if (rc) {
            atomic_store(&w->rc, rc);
            return NULL;
        }
        atomic_fetch_add(&w->writes, 1);
    }
    return NULL;
}

static void play(const char *how, int sig)
{
    struct svc_env e = {0};
    e.pool_size = "16M";
    e.heartbeat_ms = 200;
    if (!env_start(&e, 2, NULL)) {
        env_dump_logs(&e);
        PH_CHECK(false, "%s: daemons did not start", how);
        env_stop(&e);
        return;
    }
    fmem_pool *a = NULL, *b = NULL;
    PH_CHECK(fmem_open(e.app_uri[0], &a) == 0 && fmem_open(e.app_uri[1], &b) == 0,
             "%s: applications", how);
    struct writer w = {.p = a};
    void *mapped = NULL;
    PH_CHECK(fmem_alloc(a, BLOCK, &w.h) == 0 && fmem_map(a, &w.h, &mapped) == 0, "%s: A's block",
             how);
    pthread_t t;
    pthread_create(&t, NULL, keep_writing, &w);
    ph_nap_ms(50);
    if (sig == SIGTERM) {
        int st = env_stop_pid(&e.fmemd[0], SIGTERM);
        PH_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: fmemd exit %#x", how, st);
    } else {
        kill(e.fmemd[0], sig);
    }
    PH_CHECK(env_wait_allocated(&e, 0, 15000), "%s: A's block was not reclaimed", how);
    /* B takes the block */
    fmem_handle hb, others[8];
    int n = 0;
    bool got = false;
    while (n < 8 && fmem_alloc(b, BLOCK, &hb) == 0) {
        if (hb.addr == w.h.addr) {
            got = true;
            break;
        }
        others[n++] = hb;
    }
    while (n > 0)
        fmem_free(b, &others[--n]);
    PH_CHECK(got, "%s: B did not get the block", how);
    if (got) {
        PH_CHECK(fmem_write(b, &hb, 0, "BBBBBBBB", 8) == 0, "%s: B writes", how);
        ph_nap_ms(300); /* A's writer, if it still ran, would overwrite it now */
        char buf[9] = {0};
        PH_CHECK(fmem_read(b, &hb, 0, buf, 8) == 0 && !strcmp(buf, "BBBBBBBB"),
                 "%s: B's data was overwritten: \"%s\"", how, buf);
    }
    atomic_store(&w.stop, 1);
    pthread_join(t, NULL);
    PH_CHECK(atomic_load(&w.rc) == FMEM_ESTALE, "%s: A's writer stopped with %d (%s)", how,
             atomic_load(&w.rc), fmem_strerror(atomic_load(&w.rc)));
    char buf[8];
    void *again = NULL;
    PH_CHECK(fmem_read(a, &w.h, 0, buf, 8) == FMEM_ESTALE, "%s: A reads", how);
    PH_CHECK(fmem_map(a, &w.h, &again) == FMEM_ESTALE && !again, "%s: A maps", how);
    PH_CHECK(fmem_free(a, &w.h) == FMEM_ESTALE, "%s: A frees", how);
    PH_NOTE("%s: A's writer made %ld writes, then: %s", how, atomic_load(&w.writes),
            atomic_load(&w.rc) ? fmem_strerror(atomic_load(&w.rc)) : "never refused");
    if (got) {
        /* the limit: the old mapping is still the same shared memory */
        bool reaches = mapped && !memcmp(mapped, "BBBBBBBB", 8);
        PH_NOTE("%s: limit: A's pointer from fmem_map before the fence %s B's data (shared "
                "memory cannot revoke a mapping)", how, reaches ? "still reaches" : "no longer shows");
        fmem_free(b, &hb);
    }
    fmem_close(a);
    fmem_close(b);
    if (sig == SIGSTOP)
        env_stop_pid(&e.fmemd[0], SIGKILL);
    env_stop(&e);
}

int main(void)
{
    play("fmemd killed", SIGKILL);
    play("fmemd stopped", SIGSTOP);
    play("fmemd shut down", SIGTERM);
    return ph_result("class3-stale-handle");
}
