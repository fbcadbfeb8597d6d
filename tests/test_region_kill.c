/* test_region_kill.c - an application killed with SIGKILL while its far
 * memory is in use: its chunks return to the pool once its user id is
 * recovered (as the memory node or fmemd does for a dead client). Both a
 * region with dirty pages and an object heap are live in the child. Its
 * stats page, which it cannot remove, goes when this process publishes
 * its first one. */
#include <criterion/criterion.h>
#include <fmem.h>
#include <fmem_admin.h>
#include <fmem_far.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

Test(region_kill, chunks_return_after_sigkill, .timeout = 60)
{
    char uri[96];
    snprintf(uri, sizeof uri, "shm:/fmem-rkill-%d?size=64M", getpid());
    /* stats pages in a directory of this test's own: a process of another
     * test publishing its first page would remove the child's page too */
    char sdir[] = "/tmp/fmem-rkill-stats-XXXXXX";
    cr_assert_neq(mkdtemp(sdir), NULL);
    setenv("FMEM_STATS_DIR", sdir, 1);
    fmem_pool *p;
    cr_assert_eq(fmem_open(uri, &p), 0);
    fmem_stats_t st;
    cr_assert_eq(fmem_stats(p, &st), 0);
    uint64_t before = st.allocated_bytes;

    /* the child reports its user id, then how much it holds */
    volatile uint64_t *shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
                                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq((void *)shared, MAP_FAILED);
    shared[0] = shared[1] = 0;
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        fmem_pool *cp;
        if (fmem_open(uri, &cp))
            _exit(2);
        fmem_region_config cfg = {0};
        cfg.size = 16u << 20;
        cfg.cache_bytes = 2u << 20;
        fmem_region *r;
        int rc = fmem_region_create(cp, &cfg, &r);
        if (rc == FMEM_EACCES)
            _exit(77); /* no userfaultfd here */
        if (rc)
            _exit(3);
        memset(fmem_region_base(r), 0x5a, cfg.size); /* every unit dirty and backed */
        fmem_heap *h;
        if (fmem_heap_new(cp, &h))
            _exit(4);
        for (int i = 0; i < 1000; i++)
            if (!fmem_heap_malloc(h, 1000 + (size_t)i))
                _exit(5);
        fmem_stats_t cs;
        fmem_stats(cp, &cs);
        shared[1] = cs.allocated_bytes;
        __atomic_store_n(&shared[0], fmem_user_id(cp, 0), __ATOMIC_RELEASE);
        for (;;)
            pause(); /* killed here, with everything in use */
    }
    while (__atomic_load_n(&shared[0], __ATOMIC_ACQUIRE) == 0) {
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            if (WIFEXITED(status) && WEXITSTATUS(status) == 77)
                cr_skip_test("userfaultfd is not available");
            cr_assert_fail("child exited early (status %#x)", status);
        }
        usleep(1000);
    }
    cr_assert_gt(shared[1], before + (16u << 20) / 2, "the child held too little to test");
    kill(pid, SIGKILL);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFSIGNALED(status));

    fmem_recovery_stats rs;
    cr_assert_eq(fmem_recover(p, (unsigned)shared[0], &rs), 0);
    cr_assert_gt(rs.blocks_freed, 0);
    cr_assert_eq(fmem_stats(p, &st), 0);
    cr_expect_eq(st.allocated_bytes, before, "%llu bytes still allocated after recovery",
                 (unsigned long long)(st.allocated_bytes - before));
    fmem_verify_report vr;
    cr_assert_eq(fmem_verify(p, &vr, stderr), 0);
    cr_expect_eq(vr.errors, 0);

    /* the child's stats page stayed (SIGKILL); this process's first
     * region publishes a page and removes the stale one first */
    const char *son = getenv("FMEM_STATS");
    char page[512];
    snprintf(page, sizeof page, "%s/fmem-stats.%u.%d", sdir, (unsigned)geteuid(), (int)pid);
    struct stat sb;
    if (!(son && !strcmp(son, "0"))) {
        cr_expect_eq(lstat(page, &sb), 0, "the killed child left no stats page %s", page);
        fmem_region_config cfg = {.size = 1u << 20, .cache_bytes = 1u << 20};
        fmem_region *r;
        cr_assert_eq(fmem_region_create(p, &cfg, &r), 0);
        cr_expect_neq(lstat(page, &sb), 0, "the killed child's stats page %s was kept", page);
        fmem_region_destroy(r);
    }
    unlink(page); /* whatever happened above: nothing left behind */
    rmdir(sdir);
    fmem_close(p);
    fmem_unlink(uri);
}
