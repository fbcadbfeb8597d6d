/* recovery-bench - how fast a dead user is reclaimed.
 * A "victim" handle on a shared pool makes N allocations (4 KiB, or mixed
 * 4 KiB..1 MiB) and is abandoned; a second handle recovers its user id and
 * reports entries scanned per second and the time to reclaim everything.
 *   recovery-bench [--allocs N] [--pool-size BYTES] [--mixed] */
#include <fmem.h>
#include <fmem_admin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void die(const char *what, int rc)
{
    fprintf(stderr, "recovery-bench: %s: %s\n", what, fmem_strerror(rc));
    exit(1);
}

int main(int argc, char **argv)
{
    long allocs = 100000;
    const char *pool_size = "1G";
    int mixed = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--allocs") && i + 1 < argc)
            allocs = atol(argv[++i]);
        else if (!strcmp(argv[i], "--pool-size") && i + 1 < argc)
            pool_size = argv[++i];
        else if (!strcmp(argv[i], "--mixed"))
            mixed = 1;
        else {
            fprintf(stderr, "usage: recovery-bench [--allocs N] [--pool-size BYTES] [--mixed]\n");
            return 2;
        }
    }
    if (allocs < 0) {
        fprintf(stderr, "recovery-bench: --allocs must be >= 0\n");
        return 2;
    }
    char uri[128];
    snprintf(uri, sizeof uri, "shm:/fmem-recbench-%d?size=%s", getpid(), pool_size);
    fmem_pool *victim, *rescuer;
    int rc = fmem_open(uri, &victim);
    if (rc)
        die("open", rc);
    if ((rc = fmem_open(uri, &rescuer)))
        die("open", rc);
    unsigned uid = fmem_user_id(victim, 0);

    /* baseline: a user with no allocations (pure scan of headers and log) */
    fmem_pool *idle;
    if ((rc = fmem_open(uri, &idle)))
        die("open", rc);
    unsigned idle_uid = fmem_user_id(idle, 0);
    fmem_recovery_stats scan;
    if ((rc = fmem_recover(rescuer, idle_uid, &scan)))
        die("recover", rc);

    unsigned seed = 1;
    long made = 0;
    for (; made < allocs; made++) {
        size_t sz = 4096;
        if (mixed)
            sz = (size_t)4096 << (rand_r(&seed) % 9);
        fmem_handle h;
        if ((rc = fmem_alloc(victim, sz, &h))) {
            if (rc == FMEM_ENOMEM)
                break;
            die("alloc", rc);
        }
    }
    fmem_stats_t st;
    fmem_stats(rescuer, &st);
    uint64_t held = st.allocated_bytes;
    fmem_recovery_stats rs;
    if ((rc = fmem_recover(rescuer, uid, &rs)))
        die("recover", rc);
    fmem_stats(rescuer, &st);
    printf("pool %s, %llu log entries\n", pool_size, (unsigned long long)rs.entries_scanned);
    printf("scan only (user with no allocations): %.2f ms, %.2f M entries/s\n",
           scan.elapsed_ns / 1e6, scan.entries_scanned / (scan.elapsed_ns / 1e3));
    printf("reclaim %ld %s allocations (%.1f MiB): %.2f ms, %llu blocks freed, "
           "%.2f M entries/s, %.0f ns per block, %.1f MiB left allocated\n",
           made, mixed ? "mixed-size" : "4 KiB", held / 1048576.0, rs.elapsed_ns / 1e6,
           (unsigned long long)rs.blocks_freed, rs.entries_scanned / (rs.elapsed_ns / 1e3),
           rs.blocks_freed ? (double)rs.elapsed_ns / rs.blocks_freed : 0.0,
           st.allocated_bytes / 1048576.0);
    fmem_close(idle);
    fmem_close(victim);
    fmem_close(rescuer);
    fmem_unlink(uri);
    return rs.blocks_freed == (uint64_t)made && st.allocated_bytes == 0 ? 0 : 1;
}
