/* class4-recover-live.test - an operator (or a script) runs `fmem recover`
 * on user ids that are in use: a live embedded process, a live fmemd
 * registered with a real memory node, ids nobody uses, and bad ids. A live
 * user must never lose its blocks (two owners of the same memory), unless
 * --force; an id not in use is said to be; a dead user is recovered. */
#include "pool_hostile.h"
#include "test_service_env.h"

static char out[8192];

/* Allocated chunks of the pool as `fmem verify` counts them, or -1. */
static long long chunks(const char *uri)
{
    ph_fmem(out, sizeof out, "verify '%s'", uri);
    return ph_number_after(out, "chunks allocated ");
}

static void embedded_users(void)
{
    struct ph_pool pool;
    ph_pool_init(&pool, "rec", "16M");
    struct ph_holder live = {0}, dead = {0};
    PH_CHECK(ph_hold(&live, pool.uri, 8192, 5), "a live holder");
    PH_CHECK(ph_hold(&dead, pool.uri, 4096, 3), "a holder to kill");
    ph_kill(&dead);
    long long before = chunks(pool.bare);
    PH_CHECK(before == 5 * 2 + 3, "allocated chunks: %lld", before);

    int rc = ph_fmem(out, sizeof out, "recover '%s' %u", pool.bare, live.uid);
    PH_CHECK(rc == 1 && strstr(out, "running") && strstr(out, "not recovered"),
             "recovering a live user: exit %d: %s", rc, out);
    PH_CHECK(chunks(pool.bare) == before, "the live user's blocks were freed");

    rc = ph_fmem(out, sizeof out, "recover '%s' %u", pool.bare, dead.uid);
    PH_CHECK(rc == 0 && strstr(out, "freed 3 blocks"), "recovering a dead user: exit %d: %s", rc,
             out);
    PH_CHECK(chunks(pool.bare) == 5 * 2, "after the dead user's recovery");

    rc = ph_fmem(out, sizeof out, "recover '%s' %u", pool.bare, dead.uid);
    PH_CHECK(rc == 1 && strstr(out, "not in use"), "recovering it again: exit %d: %s", rc, out);
    rc = ph_fmem(out, sizeof out, "recover '%s' 40", pool.bare);
    PH_CHECK(rc == 1 && strstr(out, "not in use"), "an id never used: exit %d: %s", rc, out);
    rc = ph_fmem(out, sizeof out, "recover '%s' 5000", pool.bare);
    PH_CHECK(rc == 1 && strstr(out, "not in use"), "an id beyond the table: exit %d: %s", rc, out);
    const char *bad[] = {"0", "16384", "-1", "abc", "7x", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rc = ph_fmem(out, sizeof out, "recover '%s' '%s'", pool.bare, bad[i]);
        PH_CHECK(rc == 2 && strstr(out, "bad user id"), "user id '%s': exit %d: %s", bad[i], rc,
                 out);
    }
    PH_CHECK(chunks(pool.bare) == 5 * 2, "refusals changed the pool");

    /* --force: the operator knows better */
    rc = ph_fmem(out, sizeof out, "recover '%s' %u --force", pool.bare, live.uid);
    PH_CHECK(rc == 0 && strstr(out, "--force") && strstr(out, "freed 5 blocks"),
             "--force: exit %d: %s", rc, out);
    PH_CHECK(chunks(pool.bare) == 0, "after --force");
    ph_release(&live);
    rc = ph_fmem(out, sizeof out, "verify '%s'", pool.bare);
    PH_CHECK(rc == 0, "verify at the end: exit %d: %s", rc, out);
    fmem_unlink(pool.uri);
}

/* fmemd holds a user id of a real memory node's pool for its
 * applications: recovering that id while fmemd runs must be refused. */
static void live_service(void)
{
    struct svc_env e = {0};
    e.pool_size = "32M";
    if (!env_start(&e, 1, NULL)) {
        env_dump_logs(&e);
        PH_CHECK(false, "daemons did not start");
        env_stop(&e);
        return;
    }
    fmem_pool *app;
    fmem_handle h;
    PH_CHECK(fmem_open(e.app_uri[0], &app) == 0, "application");
    PH_CHECK(fmem_alloc(app, 65536, &h) == 0 && fmem_write(app, &h, 0, "kept", 5) == 0, "alloc");
    fmem_stats_t st;
    PH_CHECK(fmem_stats(app, &st) == 0, "stats");
    char pool_uri[200];
    snprintf(pool_uri, sizeof pool_uri, "file:%s", e.pool_path);
    int rc = ph_fmem(out, sizeof out, "recover '%s' %u", pool_uri, st.user_id);
    PH_CHECK(rc == 1 && strstr(out, "fmemd") && strstr(out, "running"),
             "recovering a live fmemd's user id: exit %d: %s", rc, out);
    char buf[8] = {0};
    PH_CHECK(fmem_read(app, &h, 0, buf, 5) == 0 && !strcmp(buf, "kept"),
             "the application's block after the refused recovery");
    PH_CHECK(chunks(pool_uri) == 16, "fmemd's blocks are still allocated");

    /* the memory node is killed, then fmemd: nobody fences or recovers,
     * and the table still shows the service's session */
    env_stop_pid(&e.mnode, SIGKILL);
    env_stop_pid(&e.fmemd[0], SIGKILL);
    rc = ph_fmem(out, sizeof out, "recover '%s' %u", pool_uri, st.user_id);
    PH_CHECK(rc == 1 && strstr(out, "live session") && strstr(out, "not recovered"),
             "a service whose session was never ended: exit %d: %s", rc, out);
    PH_CHECK(chunks(pool_uri) == 16, "refused, yet changed");
    rc = ph_fmem(out, sizeof out, "recover '%s' %u --force", pool_uri, st.user_id);
    PH_CHECK(rc == 0 && strstr(out, "freed 1 blocks"), "--force: exit %d: %s", rc, out);
    /* the recovery fenced the session through the table file */
    PH_CHECK(fmem_read(app, &h, 0, buf, 5) == FMEM_ESTALE, "the application's handle after it");
    fmem_close(app);
    env_stop(&e);
}

int main(void)
{
    embedded_users();
    live_service();
    return ph_result("class4-recover-live");
}
