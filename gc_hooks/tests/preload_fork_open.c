/* preload_fork_open.c - run under libfmem-preload.so: one thread makes the
 * process's first large request (the interposer opens its pool) while
 * another thread forks again and again. Every child must be able to make a
 * large request of its own and exit; a child that hangs (a lock inherited
 * in the middle of the open) fails the test.
 *
 * Each round runs in a fresh process forked from the main thread, which
 * never makes a large request, so every round meets the first open. Each
 * child checks that its block came from a pool.
 * Usage: preload_fork_open [ROUNDS]   exit 0 pass, 1 fail */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BIG ((size_t)1 << 20)
#define CHILD_TIMEOUT_MS 10000

static _Atomic int opener_started, opener_done;
/* blocks go through here so the compiler cannot drop malloc/free pairs */
static void *volatile sink;

static void touch_big(int v)
{
    char *p = malloc(BIG);
    sink = p;
    if (p)
        memset(p, v, BIG);
    free(sink);
}

static void *opener(void *arg)
{
    (void)arg;
    atomic_store(&opener_started, 1);
    touch_big(1); /* the first large request: opens the pool */
    atomic_store(&opener_done, 1);
    return NULL;
}

/* Is p in a pool's blocks? In a named pool that is a mapping of its
 * NAME.data file; the blocks of the default private pool (mem:) are in
 * one anonymous mapping of twice the pool's size (1 GiB) and more, far
 * larger than any mapping glibc makes for these blocks or its arenas. A
 * block of the system allocator would make the test void. */
static int in_pool(const void *p)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int found = 0;
    while (f && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && (uintptr_t)p >= lo && (uintptr_t)p < hi) {
            found = strstr(line, ".data") != NULL || hi - lo >= (1ul << 31);
            break;
        }
    }
    if (f)
        fclose(f);
    return found;
}

/* Wait for pid up to ms milliseconds: its status, or -1 if it hung (then
 * it is killed). */
static int wait_bounded(pid_t pid, int ms)
{
    int st;
    for (int t = 0; t < ms; t++) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (r < 0)
            return -2;
        usleep(1000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
}

/* One round: fork children from this thread as fast as it can until the
 * opener is done, then wait for all of them. */
#define MAX_CHILDREN 64
static int round_worker(unsigned delay_us)
{
    pthread_t t;
    if (pthread_create(&t, NULL, opener, NULL))
        return 3;
    while (!atomic_load(&opener_started))
        ;
    if (delay_us)
        usleep(delay_us);
    pid_t kids[MAX_CHILDREN];
    int n = 0, bad = 0;
    do {
        pid_t pid = fork();
        if (pid < 0)
            break;
        if (pid == 0) {
            char *q = malloc(BIG);
            sink = q;
            if (!q)
                _exit(4);
            memset(q, 2, BIG);
            int pooled = in_pool(q);
            free(sink);
            _exit(pooled ? 0 : 5);
        }
        kids[n++] = pid;
    } while (!atomic_load(&opener_done) && n < MAX_CHILDREN);
    pthread_join(t, NULL);
    for (int i = 0; i < n; i++) {
        int rc = wait_bounded(kids[i], bad ? 1 : CHILD_TIMEOUT_MS);
        if (rc != 0 && !bad) {
            fprintf(stderr, "preload_fork_open: child %d of %d forked during the first open %s "
                            "(status %d)\n", i + 1, n,
                    rc == -1 ? "hung" : rc == 5 ? "got no block from a pool" : "failed", rc);
            bad = 1;
        }
    }
    return bad;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 40;
    srand((unsigned)time(NULL) ^ (unsigned)getpid());
    int failed = 0;
    for (int r = 0; r < rounds && !failed; r++) {
        /* most rounds fork at once, the rest after up to 3 ms */
        unsigned delay = r % 4 == 0 ? 0 : (unsigned)(rand() % 3000);
        pid_t w = fork();
        if (w < 0) {
            perror("fork");
            return 1;
        }
        if (w == 0)
            _exit(round_worker(delay));
        int rc = wait_bounded(w, 2 * CHILD_TIMEOUT_MS + 5000);
        if (rc != 0) {
            fprintf(stderr, "preload_fork_open: round %d: %s (status %d)\n", r,
                    rc == -1 ? "the round hung" : "failed", rc);
            failed = 1;
        }
    }
    printf("preload_fork_open: %d rounds, %s\n", rounds, failed ? "FAILED" : "no child hung");
    return failed;
}
