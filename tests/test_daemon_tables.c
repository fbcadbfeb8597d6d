/* test_daemon_tables.c - the daemons' tables hold whatever can queue up:
 * fmemd's queue of departed applications while the reaper is busy with a
 * large teardown, and the memory node's recovery queue when more users die
 * at once than it has connections. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pool_internal.h"
#include "service/daemon_internal.h"
#include "test_service_env.h"

static struct svc_env E;

static void teardown(void)
{
    env_stop(&E);
}

TestSuite(tables, .fini = teardown, .timeout = 120);

static struct app *empty_app(unsigned id)
{
    struct app *a = calloc(1, sizeof *a);
    cr_assert_not_null(a);
    a->peer.fd = -1;
    a->id = id;
    pthread_mutex_init(&a->mu, NULL);
    return a;
}

/* The reaper is held up by one application (as by one holding 1.5 M
 * blocks) while thousands of others connect and hang up: every one of
 * them is queued and torn down, however many there are. */
Test(tables, departed_applications_queue_while_reaper_is_busy, .timeout = 30)
{
    static _Atomic int stop;
    struct fmemd_config cfg = {.stop = &stop};
    struct fmemd *d = calloc(1, sizeof *d);
    cr_assert_not_null(d);
    d->cfg = &cfg;
    cr_assert_eq(reaper_start(d), 0);
    struct app *big = empty_app(1);
    pthread_mutex_lock(&big->mu); /* its teardown cannot finish yet */
    reaper_queue(d, big);
    enum { CHURN = 3 * 4096 };
    for (unsigned i = 0; i < CHURN; i++)
        reaper_queue(d, empty_app(2 + i));
    pthread_mutex_unlock(&big->mu);
    reaper_stop(d); /* drains the queue */
    cr_assert_eq(atomic_load(&d->apps_reaped), CHURN + 1);
    free(d);
}

/* The pool's user table as a plain pool opened beside the memory node. */
static unsigned claimed_by(fmem_pool *p, uint32_t pid)
{
    struct node *n = p->nodes[0];
    unsigned count = 0;
    for (unsigned u = 1; u < n->g.nusers; u++)
        count += node_uid_pid(n, u) == pid;
    return count;
}

/* A pid that names no process (and is not about to). */
static uint32_t dead_pid(void)
{
    for (uint32_t pid = 4000000; pid > 300000; pid -= 7)
        if (kill((pid_t)pid, 0) < 0)
            return pid;
    cr_assert_fail("no free pid");
    return 0;
}

/* More users die than the memory node has connection slots (256): one
 * sweep finds them all, and all are recovered before the next sweep. */
Test(tables, every_dead_user_of_one_sweep_is_recovered)
{
    E.pool_size = "128M"; /* 512 user slots */
    env_start_or_fail(&E, 0, NULL);
    cr_assert_eq(env_stop_pid(&E.mnode, SIGTERM) & 0x7f, 0);
    fmem_pool *p;
    cr_assert_eq(env_open_pool(&E, &p), 0);
    uint32_t pid = dead_pid();
    enum { DEAD = 400 };
    for (unsigned i = 0; i < DEAD; i++) {
        unsigned uid;
        cr_assert_eq(node_claim_uid_for(p->nodes[0], pid, &uid), 0, "slot %u", i);
    }
    cr_assert_eq(claimed_by(p, pid), DEAD);
    uint64_t t0 = ring_now_ns();
    cr_assert(env_start_mnode(&E)); /* sweeps the user table at start */
    unsigned left = DEAD;
    while ((left = claimed_by(p, pid)) && ring_now_ns() - t0 < 3500000000u)
        env_nap_ms(50);
    /* the next sweep is 5 s after the first: none may wait for it */
    cr_assert_eq(left, 0, "%u of %u dead users not recovered by the first sweep", left, DEAD);
    fmem_close(p);
}
