/* daemon_signals.h - how the daemons (fmemd, fmem-mnode) are stopped:
 * SIGTERM and SIGINT set daemon_stop, the flag their run loop watches;
 * SIGPIPE is ignored (a peer that went away shows as a failed write).
 * Header-only, for the one source file of each daemon. */
#ifndef FMEM_TOOLS_DAEMON_SIGNALS_H
#define FMEM_TOOLS_DAEMON_SIGNALS_H

#include <signal.h>
#include <stdatomic.h>

static _Atomic int daemon_stop;

static void daemon_on_signal(int sig)
{
    (void)sig;
    atomic_store(&daemon_stop, 1);
}

static void daemon_signals_install(void)
{
    struct sigaction sa = {.sa_handler = daemon_on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

#endif
