/* test_link_wait.c - the emulated links' waits (transport.c tp_wait_until):
 * they sleep with a timer slack of 1 ns (a normal thread's default 50 us
 * would be added to every transfer), never return before the deadline,
 * and count how late they returned (tp_wait_stats). */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>

#include "transport.h"

Test(link_wait, sleeps_with_a_timer_slack_of_one_ns)
{
    cr_assert_eq(prctl(PR_SET_TIMERSLACK, 50000UL, 0UL, 0UL, 0UL), 0);
    uint64_t when = tp_now_ns() + 2000000;
    tp_wait_until(when);
    cr_assert_geq(tp_now_ns(), when);
    cr_assert_eq(prctl(PR_GET_TIMERSLACK, 0UL, 0UL, 0UL, 0UL), 1,
                 "a link wait leaves the thread's timer slack at %d ns",
                 prctl(PR_GET_TIMERSLACK, 0UL, 0UL, 0UL, 0UL));
}

Test(link_wait, counts_waits_and_lateness)
{
    uint64_t w0, l0, w1, l1;
    tp_wait_stats(&w0, &l0);
    uint64_t late = 0;
    for (int i = 0; i < 20; i++) {
        uint64_t when = tp_now_ns() + (i % 2 ? 5000 : 300000); /* short and long waits */
        tp_wait_until(when);
        uint64_t now = tp_now_ns();
        cr_assert_geq(now, when, "returned %llu ns early", (unsigned long long)(when - now));
        late += now - when;
    }
    tp_wait_stats(&w1, &l1);
    cr_assert_geq(w1 - w0, 20); /* other threads of this test may wait too: at least ours */
    cr_assert_gt(l1 - l0, 0);
    (void)late;
}

/* Another thread on the same core: a wait that yields lets it run its
 * whole slice before coming back; one that does not yield is only
 * preempted when the scheduler takes the core. Not a timing assertion
 * (the machine may be loaded): the wait must still end, and no earlier
 * than its deadline. */
static volatile int stop_spin;
static void *spinner(void *arg)
{
    (void)arg;
    while (!stop_spin)
        ;
    return NULL;
}

Test(link_wait, ends_beside_a_busy_thread)
{
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(0, &one);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, spinner, NULL), 0);
    pthread_setaffinity_np(t, sizeof one, &one);
    pthread_setaffinity_np(pthread_self(), sizeof one, &one);
    for (int i = 0; i < 50; i++) {
        uint64_t when = tp_now_ns() + 20000 + (uint64_t)i * 1000;
        tp_wait_until(when);
        cr_assert_geq(tp_now_ns(), when);
    }
    stop_spin = 1;
    pthread_join(t, NULL);
}
