/* hostile.h - small helpers for the attack programs in tests/hostile/:
 * checks that report and count failures without stopping the attack, and
 * running a piece of the attack as another user. Exit status (run.sh):
 * 0 every check held, 77 skipped, anything else a failure. */
#ifndef FMEM_HOSTILE_H
#define FMEM_HOSTILE_H

#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define HOSTILE_SKIP 77
#define HOSTILE_UID 65534 /* nobody: the attacker when another user is needed */

static int hostile_failures;

#define CHECK(cond, ...)                                                    \
    do {                                                                    \
        if (!(cond)) {                                                      \
            hostile_failures++;                                             \
            fprintf(stderr, "  FAILED (%s:%d): ", __FILE__, __LINE__);      \
            fprintf(stderr, __VA_ARGS__);                                   \
            fprintf(stderr, "\n");                                          \
        }                                                                   \
    } while (0)

#define NOTE(...)                                                           \
    do {                                                                    \
        fprintf(stderr, "  ");                                              \
        fprintf(stderr, __VA_ARGS__);                                       \
        fprintf(stderr, "\n");                                              \
    } while (0)

/* A child of the attack dies with the program (also after it changed
 * its credentials, which clears that setting). */
static inline void hostile_die_with_parent(void)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
}

static const char *hostile_watchdog_what;

static void hostile_watchdog_fired(int sig)
{
    (void)sig;
    static const char head[] = "  FAILED: stalled: ";
    if (write(2, head, sizeof head - 1) < 0 ||
        write(2, hostile_watchdog_what, strlen(hostile_watchdog_what)) < 0 || write(2, "\n", 1) < 0)
        _exit(1);
    _exit(1); /* the daemons and the attack's children die with us */
}

/* An attack that stalls (a daemon that stops answering makes its clients
 * wait) is a failure, not a hang: give up after `seconds`. */
static inline void hostile_watchdog(unsigned seconds, const char *what)
{
    hostile_watchdog_what = what;
    signal(SIGALRM, hostile_watchdog_fired);
    alarm(seconds);
}

/* Become uid/gid for good (in a child). false: not allowed. */
static inline int hostile_become(unsigned uid)
{
    return setgroups(0, NULL) == 0 && setresgid(uid, uid, uid) == 0 &&
           setresuid(uid, uid, uid) == 0;
}

/* Run fn(arg) as another user in a child: its exit status, or -1. */
static inline int hostile_as_user(unsigned uid, int (*fn)(void *), void *arg)
{
    pid_t pid = fork();
    if (pid == 0) {
        if (!hostile_become(uid))
            _exit(99);
        hostile_die_with_parent();
        _exit(fn(arg));
    }
    int st;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
        return -1;
    return WEXITSTATUS(st);
}

static inline int hostile_result(void)
{
    return hostile_failures ? 1 : 0;
}

#endif
