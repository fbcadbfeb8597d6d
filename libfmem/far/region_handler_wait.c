/* region_handler_wait.c - how the fault handler waits for its next message.
 *
 * A fault costs the faulting thread two wake-ups: its fault wakes the
 * handler, and the handler's UFFDIO_COPY wakes it again. On a small
 * virtual machine the first one is a cross-CPU wake-up (8-25 us from the
 * fault to the handler's read were measured on a 2-vCPU VM), while the
 * next fault of a random gather comes a few microseconds after the last
 * one's answer. So after work the handler polls the userfaultfd and its
 * eventfd without sleeping for up to `spin_ns`, and sleeps in poll(2)
 * only when nothing came in that time. On a busy machine spinning costs
 * more than it saves (the spinner is preempted, its CPU time is taken
 * from the program and the writer, and a sleeper's wake-up preempts
 * other work sooner): a spin that finds itself preempted (a round longer
 * than SPIN_PREEMPTED_NS) stops, and the next SPIN_BACKOFF waits sleep
 * at once. The writer's removal events end a spin too (they
 * count in spin_wakes). It spins only while work comes in quick
 * succession: after a
 * sleep it spins again only if the sleep was short (less than
 * SPIN_AGAIN times the spin time), so an idle region costs one spin per
 * burst of faults and nothing in between.
 * FMEM_REGION_HANDLER_SPIN_US sets the spin time (0: never spin). */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <time.h>

#include "cpu_relax.h"
#include "region_internal.h"

#define SPIN_US_DEFAULT 50u
#define SPIN_US_MAX 10000u
#define SPIN_AGAIN 4 /* sleeps shorter than this many spins keep spinning */
#define SPIN_PREEMPTED_NS 20000u /* a spin round this long: we were preempted */
#define SPIN_BACKOFF 64u /* waits without a spin after that */

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

void region_handler_wait_init(struct fmem_region *r)
{
    unsigned us = SPIN_US_DEFAULT;
    const char *s = getenv("FMEM_REGION_HANDLER_SPIN_US");
    if (s && *s) {
        char *e;
        unsigned long v = strtoul(s, &e, 10);
        if (*e == '\0')
            us = v > SPIN_US_MAX ? SPIN_US_MAX : (unsigned)v;
    }
    r->spin_ns = (uint64_t)us * 1000u;
    r->spin_on = 0;
    r->spin_backoff = 0;
    s = getenv("FMEM_REGION_HOT_FIRST"); /* region_fault.c, install_hot_first */
    r->hot_first = !(s && s[0] == '0');
}

int region_handler_wait(struct fmem_region *r, struct pollfd *p, int timeout)
{
    if (timeout == 0 || r->spin_ns == 0)
        return poll(p, 2, timeout);
    uint64_t t0 = now_ns();
    if (r->spin_on && r->spin_backoff) {
        r->spin_backoff--;
    } else if (r->spin_on) {
        /* a poll that does not sleep registers no waiter, so the fault
         * that ends the spin wakes nobody */
        uint64_t end = t0 + r->spin_ns, last = t0;
        for (;;) {
            int ready = poll(p, 2, 0);
            if (ready != 0) {
                if (ready > 0 && (p[0].revents & POLLIN))
                    stat_add(&r->st.spin_wakes, 1);
                return ready;
            }
            cpu_relax();
            uint64_t t = now_ns();
            if (t - last > SPIN_PREEMPTED_NS) {
                /* the CPU went to another thread meanwhile: the machine
                 * is busy, and a spinning handler only takes CPU time
                 * from the program and the writer (and is preempted
                 * while it spins): sleep, and spin only after a while */
                r->spin_backoff = SPIN_BACKOFF;
                stat_add(&r->st.spin_preempted, 1);
                break;
            }
            if (t >= end)
                break;
            last = t;
        }
    }
    stat_add(&r->st.handler_sleeps, 1);
    int ready = poll(p, 2, timeout);
    int err = errno;
    r->spin_on = now_ns() - t0 < SPIN_AGAIN * r->spin_ns;
    errno = err;
    return ready;
}
