/* pool_open.c - the victim side of the hostile pool-file tests
 * (tests/hostile/files-*.test): open (or create) a pool as an application
 * or as a daemon would, use it, and say what happened.
 *
 *   pool_open [--daemon] [--fill] URI
 *       open URI (a daemon refuses files of another user or that others
 *       may write), allocate one block and write it, or with --fill every
 *       byte of the pool in 2 MiB blocks; print "ok open_ms=T maxrss_kb=K"
 *       and exit 0, or "refused: WHY" and exit 1
 *   pool_open --mutate N SEED URI
 *       URI names an existing file: pool. N times: corrupt a few bytes of
 *       its metadata (mostly the header), open it in a child that uses
 *       the pool and verifies it, restore the file. Exit 0 unless a child
 *       died of a signal or hung (each is reported). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fmem.h"
#include "fmem_admin.h"
#include "pool_internal.h"

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int open_as(const char *uri, int daemon, fmem_pool **p)
{
    if (!daemon)
        return fmem_open(uri, p);
    struct embedded_opts o = {.own_files = true};
    return embedded_open_opts(uri, &o, p);
}

static int use(fmem_pool *p, int fill)
{
    fmem_stats_t st;
    if (fmem_stats(p, &st))
        return 1;
    uint64_t step = fill ? FMEM_SECTION_SIZE : FMEM_CHUNK_SIZE;
    uint64_t n = fill ? st.capacity_bytes / step : 1;
    for (uint64_t i = 0; i < n; i++) {
        fmem_handle h;
        void *m;
        if (fmem_alloc(p, step, &h) || fmem_map(p, &h, &m))
            return 1;
        memset(m, 0xA5, step); /* a SIGBUS here is what the test looks for */
        if (fmem_free(p, &h))
            return 1;
    }
    return 0;
}

static int open_and_use(const char *uri, int daemon, int fill)
{
    double t0 = now_ms();
    fmem_pool *p = NULL;
    errno = 0;
    int rc = open_as(uri, daemon, &p);
    double took = now_ms() - t0;
    if (rc) {
        int e = errno;
        printf("refused: %s (%s)\n", fmem_strerror(rc), e ? strerror(e) : "-");
        return 1;
    }
    if (use(p, fill)) {
        printf("failed: the pool cannot be used\n");
        fmem_close(p);
        return 2;
    }
    fmem_close(p);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("ok open_ms=%.0f maxrss_kb=%ld\n", took, ru.ru_maxrss);
    return 0;
}

/* ---- --mutate ------------------------------------------------------------ */

static int read_file(const char *path, char **buf, size_t *len)
{
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0)
        return -1;
    *len = (size_t)st.st_size;
    *buf = malloc(*len);
    ssize_t n = *buf ? pread(fd, *buf, *len, 0) : -1;
    close(fd);
    return n == (ssize_t)*len ? 0 : -1;
}

static int write_file(const char *path, const char *buf, size_t len)
{
    int fd = open(path, O_WRONLY);
    ssize_t n = fd >= 0 ? pwrite(fd, buf, len, 0) : -1;
    if (fd >= 0)
        close(fd);
    return n == (ssize_t)len ? 0 : -1;
}

/* In the child: whatever the file says, open, allocate, free, verify. */
static int child_use(const char *uri)
{
    alarm(20);
    fmem_pool *p;
    if (fmem_open(uri, &p))
        return 0; /* refused: fine */
    fmem_handle h[16];
    int n = 0;
    for (int i = 0; i < 16; i++)
        if (fmem_alloc(p, (size_t)FMEM_CHUNK_SIZE << (i % 11), &h[n]) == 0)
            n++;
    for (int i = 0; i < n; i++) {
        char b[8] = "hostile";
        fmem_write(p, &h[i], 0, b, sizeof b);
        fmem_free(p, &h[i]);
    }
    fmem_verify_report r;
    fmem_verify(p, &r, NULL);
    fmem_close(p);
    return 0;
}

static int mutate(int rounds, unsigned seed, const char *uri)
{
    if (strncmp(uri, "file:", 5)) {
        fprintf(stderr, "pool_open --mutate: want a file: URI\n");
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s", uri + 5);
    char *q = strchr(path, '?');
    if (q)
        *q = 0;
    char *orig, *work;
    size_t len;
    if (read_file(path, &orig, &len) || !(work = malloc(len))) {
        fprintf(stderr, "pool_open --mutate: cannot read %s\n", path);
        return 2;
    }
    srand(seed);
    int crashes = 0;
    for (int r = 0; r < rounds; r++) {
        memcpy(work, orig, len);
        int flips = 1 + rand() % 8;
        for (int f = 0; f < flips; f++) {
            /* mostly the header and user table, sometimes anywhere */
            size_t at = rand() % 4 ? (size_t)rand() % (len < 512 ? len : 512) : (size_t)rand() % len;
            work[at] = rand() % 3 ? (char)(work[at] ^ (1 << (rand() % 8))) : (char)rand();
        }
        if (write_file(path, work, len))
            return 2;
        pid_t pid = fork();
        if (pid == 0)
            _exit(child_use(uri));
        int st;
        waitpid(pid, &st, 0);
        if (WIFSIGNALED(st)) {
            crashes++;
            fprintf(stderr, "pool_open --mutate: round %d (seed %u): child died of signal %d%s\n", r,
                    seed, WTERMSIG(st), WTERMSIG(st) == SIGALRM ? " (hung)" : "");
        }
        if (write_file(path, orig, len))
            return 2;
    }
    free(orig);
    free(work);
    printf("%d mutated pools opened, %d crashes\n", rounds, crashes);
    return crashes ? 1 : 0;
}

int main(int argc, char **argv)
{
    int daemon = 0, fill = 0, i = 1;
    if (argc == 5 && !strcmp(argv[1], "--mutate"))
        return mutate(atoi(argv[2]), (unsigned)strtoul(argv[3], NULL, 10), argv[4]);
    for (; i < argc - 1; i++) {
        if (!strcmp(argv[i], "--daemon"))
            daemon = 1;
        else if (!strcmp(argv[i], "--fill"))
            fill = 1;
        else
            break;
    }
    if (i != argc - 1) {
        fprintf(stderr, "usage: pool_open [--daemon] [--fill] URI | --mutate N SEED URI\n");
        return 2;
    }
    return open_and_use(argv[i], daemon, fill);
}
