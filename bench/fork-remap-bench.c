/* fork-remap-bench.c - what the lazy fork of blocks in a named pool
 * (gc_hooks/preload/snap.c) costs, measured on the kernel mechanism alone
 * (no pool, no interposer).
 *
 * A block of a named pool is a MAP_SHARED mapping of the pool's data file.
 * A fork that gives the child a snapshot without copying remaps the
 * block MAP_PRIVATE from the same file range at the same address before
 * the fork: pages already in the page cache keep their content, each side's
 * later writes go to private copies, and neither writes the file. This
 * program holds N bytes (default 256 MiB, every page written) and prints,
 * side by side, medians of --reps fresh runs:
 *   plain        fork() pause with the bytes in malloc memory
 *   shared       fork() pause with the bytes in a MAP_SHARED file mapping
 *                (what the kernel does for a shared mapping; the
 *                interposer used to copy every block in the child while
 *                the parent waited - not measured here)
 *   remap        the MAP_PRIVATE remap of the whole range, alone (it tears
 *                the shared mapping's page table entries down one by one)
 *   remap+fork   the pause of the first fork (remap, then fork())
 *   move+fork    the same when the shared mapping's page tables are first
 *                moved aside whole (mremap MREMAP_DONTUNMAP to a reserved
 *                range, as the interposer does for pieces of 2 MiB and
 *                more), so the remap replaces a mapping without pages
 *   move zap     tearing the moved-aside mapping down later (when the
 *                interposer unmaps the block), outside the fork
 *   2nd fork     a later fork after the remap (nothing left to remap)
 *   rewrite      writing every page again after the child has exited:
 *                plain reuses its pages, the remapped range copies each
 *                page out of the page cache on its first write
 *   anon MiB     private memory after the rewrite (the page-cache copy stays
 *                in the file as well: the remapped side costs it twice)
 * and checks the snapshot: the child sees the bytes as of the fork, writes
 * of the parent after the fork are invisible to the child and the child's
 * to the parent.
 *
 *     bench/fork-remap-bench [--mib 256] [--reps 5]
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock_rng.h"

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* fork() pause in the parent; the child checks one byte and exits */
static double fork_pause(const char *p, size_t n, char want)
{
    double t0 = bench_now_s() * 1e3;
    pid_t c = fork();
    if (c == 0)
        _exit(p[0] == want && p[n - 1] == want ? 0 : 1);
    double t = bench_now_s() * 1e3 - t0;
    int st;
    if (c < 0 || waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st)) {
        fprintf(stderr, "fork-remap-bench: child saw wrong bytes\n");
        exit(1);
    }
    return t;
}

#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4
#endif

/* A MAP_SHARED mapping of n bytes of fd, every page written, 2 MiB
 * aligned, with as much reserved address space after it: *aside. */
static char *shared_map(int fd, size_t n, char **aside)
{
    size_t a = (size_t)2 << 20, len = 2 * n + a;
    char *r = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED)
        exit(1);
    char *s = (char *)(((uintptr_t)r + a - 1) & ~(uintptr_t)(a - 1));
    if (mmap(s, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) != s)
        exit(1);
    memset(s, 1, n);
    *aside = s + n;
    return s;
}

static double anon_mib(void)
{
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    char line[256];
    double kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Anonymous: %lf kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb / 1024;
}

static double rewrite(char *p, size_t n, char c)
{
    double t0 = bench_now_s() * 1e3;
    memset(p, c, n);
    return bench_now_s() * 1e3 - t0;
}

/* the snapshot semantics of the remapped range, with a child alive */
static int snapshot_ok(char *p, size_t n)
{
    int to_child[2], to_parent[2];
    if (pipe(to_child) || pipe(to_parent))
        return 0;
    char before = p[0];
    pid_t c = fork();
    if (c == 0) {
        char x;
        /* wait until the parent has written, then look, then write */
        if (read(to_child[0], &x, 1) != 1)
            _exit(2);
        int ok = p[0] == before && p[n / 2] == before && p[n - 1] == before;
        memset(p, 'c', n);
        _exit(ok && write(to_parent[1], "x", 1) == 1 ? 0 : 1);
    }
    memset(p, 'p', n); /* the parent's writes after the fork */
    char x;
    int ok = write(to_child[1], "x", 1) == 1 && read(to_parent[0], &x, 1) == 1;
    int st;
    ok = ok && waitpid(c, &st, 0) == c && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    ok = ok && p[0] == 'p' && p[n / 2] == 'p' && p[n - 1] == 'p'; /* not the child's */
    close(to_child[0]), close(to_child[1]), close(to_parent[0]), close(to_parent[1]);
    return ok;
}

int main(int argc, char **argv)
{
    size_t mib = 256;
    int reps = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--mib"))
            mib = strtoul(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
    }
    if (mib == 0 || reps < 1 || reps > 100) {
        fprintf(stderr, "usage: fork-remap-bench [--mib N] [--reps R]\n");
        return 2;
    }
    size_t n = mib << 20;
    double plain[100], shared[100], remap[100], first[100], second[100], rw_plain[100],
        rw_remap[100], moved[100], zap[100], an_plain = 0, an_remap = 0;
    int snap = 1;
    char name[64];
    snprintf(name, sizeof name, "/fmem-fork-remap-bench-%d", (int)getpid());
    for (int r = 0; r < reps; r++) {
        char *m = malloc(n);
        if (!m)
            return 1;
        memset(m, 1, n);
        plain[r] = fork_pause(m, n, 1);
        rw_plain[r] = rewrite(m, n, 2);
        an_plain = anon_mib();
        free(m);

        int fd = shm_open(name, O_CREAT | O_RDWR | O_EXCL, 0600);
        if (fd < 0 || shm_unlink(name) || ftruncate(fd, (off_t)n))
            return 1;
        char *s = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (s == MAP_FAILED)
            return 1;
        memset(s, 1, n);
        shared[r] = fork_pause(s, n, 1);
        double t0 = bench_now_s() * 1e3;
        if (mmap(s, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, fd, 0) != s)
            return 1;
        remap[r] = bench_now_s() * 1e3 - t0;
        first[r] = remap[r] + fork_pause(s, n, 1);
        second[r] = fork_pause(s, n, 1);
        rw_remap[r] = rewrite(s, n, 2);
        an_remap = anon_mib();
        snap = snap && snapshot_ok(s, n);
        munmap(s, n);

        /* the same, page tables moved aside first */
        char *aside;
        s = shared_map(fd, n, &aside);
        t0 = bench_now_s() * 1e3;
        if (mremap(s, n, n, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP, aside) != aside ||
            mmap(s, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, fd, 0) != s) {
            perror("fork-remap-bench: mremap");
            return 1;
        }
        moved[r] = bench_now_s() * 1e3 - t0 + fork_pause(s, n, 1);
        snap = snap && snapshot_ok(s, n);
        t0 = bench_now_s() * 1e3;
        munmap(aside, n);
        zap[r] = bench_now_s() * 1e3 - t0;
        munmap(s, n);
        close(fd);
    }
    double p = median(plain, reps), rw = median(rw_plain, reps);
    printf("%zu MiB, median of %d (ms; ratio to plain fork pause, or to plain rewrite)\n", mib,
           reps);
    printf("%-12s %9.3f\n", "plain", p);
    printf("%-12s %9.3f %7.2f\n", "shared", median(shared, reps), median(shared, reps) / p);
    printf("%-12s %9.3f %7.2f\n", "remap", median(remap, reps), median(remap, reps) / p);
    printf("%-12s %9.3f %7.2f\n", "remap+fork", median(first, reps), median(first, reps) / p);
    printf("%-12s %9.3f %7.2f\n", "2nd fork", median(second, reps), median(second, reps) / p);
    printf("%-12s %9.3f %7.2f\n", "move+fork", median(moved, reps), median(moved, reps) / p);
    printf("%-12s %9.3f %7.2f\n", "move zap", median(zap, reps), median(zap, reps) / p);
    printf("%-12s %9.3f %9.3f %7.2f  (plain, remapped, ratio)\n", "rewrite", rw,
           median(rw_remap, reps), median(rw_remap, reps) / rw);
    printf("%-12s %9.1f %9.1f  (plain, remapped; the file keeps %zu MiB too)\n", "anon MiB",
           an_plain, an_remap, mib);
    printf("snapshot     %s\n", snap ? "ok" : "WRONG");
    return snap ? 0 : 1;
}
