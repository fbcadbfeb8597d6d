/* wl_swap.c - the kernel-swap anchor of the region benchmark (--vs-swap).
 *
 * The same scans over plain anonymous memory (no huge pages, like the
 * region) in a child process placed in a memory cgroup whose limit is the
 * region's cache size, so that Linux pages the rest out to zram
 * (compressed in memory, lz4) and back in on faults. Root only. zram0 is
 * set up here if it is unused and taken down at the end; a loop device on
 * tmpfs is never used (it deadlocks under memory pressure).
 * Only cgroup v1's memory controller or cgroup v2 are handled: v1 when
 * /sys/fs/cgroup/memory exists, else the unified hierarchy. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/swap.h>
#include <sys/wait.h>
#include <unistd.h>

#include "wl_region.h"

#define ZRAM "/sys/block/zram0"
#define ZDEV "/dev/zram0"
#define BLOCK 4096

static int swap_ours, swap_state; /* 0 untried, 1 ready, -1 unusable */

static int put(const char *path, const char *val)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    int rc = fputs(val, f) < 0;
    rc |= fclose(f) != 0;
    return rc ? -1 : 0;
}

static int swap_active(void)
{
    FILE *f = fopen("/proc/swaps", "r");
    char line[256];
    int found = 0;
    while (f && fgets(line, sizeof line, f))
        found |= strncmp(line, ZDEV, strlen(ZDEV)) == 0;
    if (f)
        fclose(f);
    return found;
}

static int swap_setup(size_t disk)
{
    if (swap_state)
        return swap_state > 0;
    swap_state = -1;
    if (geteuid() != 0) {
        fprintf(stderr, "--vs-swap: needs root (a memory cgroup and zram swap); skipped\n");
        return 0;
    }
    if (swap_active()) { /* someone's zram swap: use it as it is */
        swap_state = 1;
        return 1;
    }
    char v[64];
    FILE *f = fopen(ZRAM "/disksize", "r");
    if (!f && system("modprobe zram num_devices=1 >/dev/null 2>&1") == 0)
        f = fopen(ZRAM "/disksize", "r");
    if (!f || !fgets(v, sizeof v, f) || strtoull(v, NULL, 10) != 0) {
        fprintf(stderr, "--vs-swap: %s is missing or in use; skipped\n", ZRAM);
        if (f)
            fclose(f);
        return 0;
    }
    fclose(f);
    snprintf(v, sizeof v, "%zu", disk);
    if (put(ZRAM "/comp_algorithm", "lz4") || put(ZRAM "/disksize", v) ||
        system("mkswap " ZDEV " >/dev/null") != 0 || swapon(ZDEV, 0) != 0) {
        fprintf(stderr, "--vs-swap: setting up zram swap failed (%s); skipped\n", strerror(errno));
        put(ZRAM "/reset", "1");
        return 0;
    }
    swap_ours = 1;
    swap_state = 1;
    return 1;
}

void rb_swap_done(void)
{
    if (!swap_ours)
        return;
    if (swapoff(ZDEV) != 0)
        fprintf(stderr, "--vs-swap: swapoff %s: %s\n", ZDEV, strerror(errno));
    put(ZRAM "/reset", "1");
    swap_ours = 0;
    swap_state = 0;
}

/* A memory cgroup of our own under the one we are in; "" if none. */
static int make_cgroup(char *dir, size_t cap, size_t limit)
{
    char own[512] = "", line[600];
    FILE *f = fopen("/proc/self/cgroup", "r");
    int v1 = access("/sys/fs/cgroup/memory", F_OK) == 0;
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (v1 ? strstr(line, ":memory:") != NULL : strncmp(line, "0::", 3) == 0)
            snprintf(own, sizeof own, "%s", strrchr(line, ':') + 1);
    }
    if (f)
        fclose(f);
    snprintf(dir, cap, "%s%s/fmem-regionbench-%d", v1 ? "/sys/fs/cgroup/memory" : "/sys/fs/cgroup",
             strcmp(own, "/") ? own : "", (int)getpid());
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return -1;
    char path[700], val[32];
    snprintf(val, sizeof val, "%zu", limit);
    snprintf(path, sizeof path, "%s/%s", dir, v1 ? "memory.limit_in_bytes" : "memory.max");
    return put(path, val);
}

/* The child: join the cgroup, fill plain memory, scan it. */
static void child(const struct rb_opts *o, const char *dir, const uint32_t *order, int fd)
{
    char path[700], pid[32];
    snprintf(path, sizeof path, "%s/cgroup.procs", dir);
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    double g[2] = {0, 0};
    if (put(path, pid) == 0) {
        char *mem = mmap(NULL, o->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (mem != MAP_FAILED) {
            madvise(mem, o->size, MADV_NOHUGEPAGE);
            rb_fill(mem, o->size);
            if (o->seq)
                g[0] = rb_scan(mem, o->size / BLOCK, NULL, o->seconds);
            if (o->rand)
                g[1] = rb_scan(mem, o->size / BLOCK, order, o->seconds);
        }
    }
    (void)!write(fd, g, sizeof g);
    _exit(0);
}

int rb_swap_run(const struct rb_opts *o, int pct, const uint32_t *order, const double local[2],
                const double fmem[2])
{
    if (!swap_setup(2 * o->size))
        return 0;
    /* the region's cache, plus what the child holds besides the data: its
     * page tables (8 B per 4 KiB) and a little stack and libc */
    size_t limit = o->size / 100 * (size_t)pct + o->size / 512 + ((size_t)1 << 20);
    char dir[600];
    if (make_cgroup(dir, sizeof dir, limit) != 0) {
        fprintf(stderr, "--vs-swap: no memory cgroup (%s); skipped\n", strerror(errno));
        rmdir(dir);
        return 0;
    }
    int fds[2];
    if (pipe(fds) != 0)
        return 1;
    fflush(stdout);
    pid_t p = fork();
    if (p == 0) {
        close(fds[0]);
        child(o, dir, order, fds[1]);
    }
    close(fds[1]);
    double g[2] = {0, 0};
    ssize_t got = p > 0 ? read(fds[0], g, sizeof g) : -1;
    close(fds[0]);
    if (p > 0)
        waitpid(p, NULL, 0);
    rmdir(dir);
    if (got != (ssize_t)sizeof g) {
        fprintf(stderr, "--vs-swap: the swapping child failed\n");
        return 1;
    }
    for (int k = 0; k < 2; k++) {
        if (!(k ? o->rand : o->seq))
            continue;
        const char *name = k ? "rand" : "seq";
        double vs = g[k] > 0 ? fmem[k] / g[k] : 0;
        if (o->json)
            printf("{\"workload\":\"region-swap\",\"pattern\":\"%s\",\"cache_pct\":%d,"
                   "\"gbytes_per_s\":%.4g,\"ratio_vs_local\":%.4g,\"fmem_vs_swap\":%.4g,"
                   "\"size\":%zu,\"limit\":%zu,\"swap\":\"zram lz4\"}\n",
                   name, pct, g[k], g[k] / local[k], vs, o->size, limit);
        fprintf(o->json ? stderr : stdout,
                "%-5s swap  %3d%%  %8.3f GB/s  %7.4f x local  (fmem region %.2f x kernel swap)\n",
                name, pct, g[k], g[k] / local[k], vs);
    }
    return 0;
}
