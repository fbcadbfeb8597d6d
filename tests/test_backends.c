/* test_backends.c - ssd: and zmem: memory nodes: data integrity of pools
 * and regions over mixed backends (checked against shadow copies through
 * evictions, releases and flushes), the allocation protocol's own checks
 * (fmem_verify) on them, backends that fail (file deleted or cut, file
 * size limit, store limit, io_uring forbidden) and bad backend URIs. */
#include <criterion/criterion.h>
#include <errno.h>
#include <linux/filter.h>
#include <pthread.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmem.h>
#include <fmem_admin.h>
#include <fmem_far.h>

/* files on a disk-backed directory (O_DIRECT where it can) named after the
 * branch and pid, so parallel runs cannot collide */
static char ssd_path[3][128];

static void make_paths(void)
{
    for (int i = 0; i < 3; i++)
        snprintf(ssd_path[i], sizeof ssd_path[i], "/var/tmp/fmem-backends-%d-%d.ssd", (int)getpid(), i);
}

static void drop_paths(void)
{
    for (int i = 0; i < 3; i++)
        unlink(ssd_path[i]);
}

TestSuite(backends, .init = make_paths, .fini = drop_paths, .timeout = 120);

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Bytes that compress somewhat (runs) or not at all (random), by seed. */
static void fill(char *p, size_t n, uint64_t seed)
{
    uint64_t s = seed | 1;
    if (seed & 1) {
        for (size_t i = 0; i < n; i++)
            p[i] = (char)rnd(&s);
    } else {
        for (size_t i = 0; i < n; i += 64)
            memset(p + i, (int)(rnd(&s) & 7), n - i < 64 ? n - i : 64);
    }
}

static fmem_pool *open_ok(const char *uri)
{
    fmem_pool *p;
    int rc = fmem_open(uri, &p);
    cr_assert_eq(rc, 0, "%s: %s: %s", uri, fmem_strerror(rc), fmem_uri_error());
    return p;
}

static fmem_node_stats_t node_stats(fmem_pool *p, unsigned i)
{
    fmem_node_stats_t st;
    cr_assert_eq(fmem_node_stats(p, i, &st), 0);
    return st;
}

#define NBLK 96

/* Random allocations, whole and partial writes, reads and frees on a pool,
 * each block mirrored in a shadow; every read is compared. */
static void churn(fmem_pool *p, uint64_t seed, int rounds)
{
    static fmem_handle h[NBLK];
    static char *shadow[NBLK];
    static size_t len[NBLK];
    char *buf = malloc(256 << 10);
    uint64_t s = seed;
    for (int r = 0; r < rounds; r++) {
        unsigned i = (unsigned)(rnd(&s) % NBLK);
        unsigned what = (unsigned)(rnd(&s) % 8);
        if (!shadow[i]) {
            len[i] = (size_t)4096 << (rnd(&s) % 7); /* 4K .. 256K */
            int rc = fmem_alloc(p, len[i], &h[i]);
            cr_assert_eq(rc, 0, "alloc: %s", fmem_strerror(rc));
            shadow[i] = malloc(len[i]);
            fill(shadow[i], len[i], rnd(&s));
            cr_assert_eq(fmem_write(p, &h[i], 0, shadow[i], len[i]), 0);
        } else if (what < 3) { /* a partial write at any offset */
            size_t off = rnd(&s) % len[i], n = 1 + rnd(&s) % (len[i] - off);
            fill(buf, n, rnd(&s));
            cr_assert_eq(fmem_write(p, &h[i], off, buf, n), 0);
            memcpy(shadow[i] + off, buf, n);
        } else if (what < 6) { /* a partial read */
            size_t off = rnd(&s) % len[i], n = 1 + rnd(&s) % (len[i] - off);
            cr_assert_eq(fmem_read(p, &h[i], off, buf, n), 0);
            cr_assert(!memcmp(buf, shadow[i] + off, n), "block %u [%zu, +%zu) differs", i, off, n);
        } else if (what < 7) { /* whole read */
            cr_assert_eq(fmem_read(p, &h[i], 0, buf, len[i]), 0);
            cr_assert(!memcmp(buf, shadow[i], len[i]), "block %u differs", i);
        } else {
            cr_assert_eq(fmem_free(p, &h[i]), 0);
            free(shadow[i]);
            shadow[i] = NULL;
        }
    }
    for (unsigned i = 0; i < NBLK; i++) {
        if (!shadow[i])
            continue;
        cr_assert_eq(fmem_read(p, &h[i], 0, buf, len[i]), 0);
        cr_assert(!memcmp(buf, shadow[i], len[i]), "block %u differs at the end", i);
        cr_assert_eq(fmem_free(p, &h[i]), 0);
        free(shadow[i]);
        shadow[i] = NULL;
    }
    free(buf);
}

Test(backends, pool_integrity_over_mixed_backends)
{
    char uri[1024];
    snprintf(uri, sizeof uri,
             "mem:?size=32M;zmem:?size=32M;ssd:%s?size=32M;zmem:?size=32M&codec=zstd&block=16K;"
             "ssd:%s?size=32M&io=sync",
             ssd_path[0], ssd_path[1]);
    fmem_pool *p = open_ok(uri);
    churn(p, 0x1234567, 6000);
    fmem_stats_t st;
    cr_assert_eq(fmem_stats(p, &st), 0);
    cr_assert_eq(st.nodes, 5);
    cr_assert_eq(st.allocated_bytes, 0, "every block was freed");
    fmem_verify_report rep;
    cr_assert_eq(fmem_verify(p, &rep, stderr), 0);
    cr_assert_eq(rep.errors, 0, "the allocation protocol's metadata is consistent");
    const char *kinds[] = {"mem", "zmem", "ssd", "zmem", "ssd"};
    for (unsigned i = 0; i < 5; i++) {
        fmem_node_stats_t ns = node_stats(p, i);
        cr_assert_str_eq(ns.kind, kinds[i]);
        cr_assert_eq(ns.capacity_bytes, 32u << 20);
        if (i == 0)
            continue;
        cr_assert(ns.writes > 0 && ns.reads > 0, "node %u moved data", i);
        cr_assert(ns.read_mb_s > 0 && ns.write_lat_us > 0);
        cr_assert_eq(ns.errors, 0, "%s", ns.last_error);
    }
    cr_assert(strstr(node_stats(p, 3).detail, "zstd"));
    cr_assert(strstr(node_stats(p, 4).detail, "pread/pwrite"));
    fmem_close(p);
}

Test(backends, zmem_reports_compression)
{
    fmem_pool *p = open_ok("zmem:?size=16M");
    fmem_handle h;
    cr_assert_eq(fmem_alloc(p, 1 << 20, &h), 0);
    char *b = malloc(1 << 20);
    fill(b, 1 << 20, 2); /* runs of 64 bytes: compresses */
    cr_assert_eq(fmem_write(p, &h, 0, b, 1 << 20), 0);
    fmem_node_stats_t ns = node_stats(p, 0);
    cr_assert_eq(ns.stored_bytes, 1 << 20);
    cr_assert(ns.held_bytes > 0 && ns.held_bytes < (1 << 20) / 4, "held %llu",
              (unsigned long long)ns.held_bytes);
    cr_assert(ns.compression_ratio > 4.0, "ratio %.2f", ns.compression_ratio);
    /* zeros hold nothing */
    memset(b, 0, 1 << 20);
    cr_assert_eq(fmem_write(p, &h, 0, b, 1 << 20), 0);
    ns = node_stats(p, 0);
    cr_assert_eq(ns.held_bytes, 0);
    cr_assert_eq(ns.stored_bytes, 0);
    free(b);
    fmem_close(p);
}

/* A region whose cache holds a fraction of it, over mixed backends: random
 * writes through the mapping, releases and flushes; every byte checked
 * against a shadow copy. */
Test(backends, region_integrity_over_mixed_backends)
{
    char uri[1024];
    snprintf(uri, sizeof uri, "zmem:?size=32M;ssd:%s?size=32M;mem:?size=32M;zmem:?size=32M&codec=zstd",
             ssd_path[0]);
    fmem_pool *p = open_ok(uri);
    const size_t size = 8 << 20, unit = 16 << 10;
    fmem_region_config c = {.size = size, .cache_bytes = 1 << 20, .fetch_unit = unit};
    fmem_region *r;
    int rc = fmem_region_create(p, &c, &r);
    if (rc == FMEM_EACCES || rc == FMEM_ENOTSUP)
        cr_skip_test("userfaultfd is not available here: %s", fmem_strerror(rc));
    cr_assert_eq(rc, 0, "%s", fmem_strerror(rc));
    char *base = fmem_region_base(r);
    char *shadow = calloc(1, size);
    uint64_t s = 99;
    for (int round = 0; round < 3000; round++) {
        size_t off = rnd(&s) % size;
        unsigned what = (unsigned)(rnd(&s) % 100);
        if (what < 55) {
            size_t n = 1 + rnd(&s) % 8192;
            if (off + n > size)
                n = size - off;
            char tmp[8192];
            fill(tmp, n, rnd(&s));
            memcpy(base + off, tmp, n);
            memcpy(shadow + off, tmp, n);
        } else if (what < 90) {
            size_t n = 1 + rnd(&s) % 8192;
            if (off + n > size)
                n = size - off;
            cr_assert(!memcmp(base + off, shadow + off, n), "round %d: [%zu, +%zu) differs",
                      round, off, n);
        } else if (what < 96) {
            size_t at = off / 4096 * 4096, n = 4096 * (1 + rnd(&s) % 32);
            if (at + n > size)
                n = size - at;
            cr_assert_eq(fmem_region_release(r, at, n), 0);
            memset(shadow + at, 0, n);
        } else {
            cr_assert_eq(fmem_region_flush(r), 0);
        }
    }
    cr_assert_eq(fmem_region_flush(r), 0);
    cr_assert(!memcmp(base, shadow, size), "the region differs from its shadow");
    fmem_region_stats_t rs;
    cr_assert_eq(fmem_region_stats(r, &rs), 0);
    cr_assert(rs.evictions > 0 && rs.fetches > 0, "the cache was too small to hold it all");
    uint64_t moved[4];
    for (unsigned i = 0; i < 4; i++) {
        fmem_node_stats_t ns = node_stats(p, i);
        moved[i] = ns.bytes_read + ns.bytes_written;
        cr_assert_eq(ns.errors, 0, "node %u: %s", i, ns.last_error);
    }
    cr_assert(moved[0] > 0 && moved[1] > 0 && moved[3] > 0, "units went to every backend");
    cr_assert_eq(fmem_region_destroy(r), 0);
    fmem_verify_report rep;
    cr_assert_eq(fmem_verify(p, &rep, stderr), 0);
    cr_assert_eq(rep.errors, 0);
    free(shadow);
    fmem_close(p);
}

/* The ssd: file may not grow past 1 MiB, half the node: writes beyond fail
 * with a clear error while the other node and what was written before stay
 * intact. The blocks fill the ssd: node whole, so both halves are used. */
Test(backends, ssd_file_size_limit)
{
    signal(SIGXFSZ, SIG_IGN); /* EFBIG instead of the signal's death */
    struct rlimit rl = {.rlim_cur = 1 << 20, .rlim_max = RLIM_INFINITY};
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
    char uri[512];
    snprintf(uri, sizeof uri, "mem:?size=16M;ssd:%s?size=2M", ssd_path[0]);
    fmem_pool *p = open_ok(uri);
    enum { N = 256, LEN = 16 << 10 };
    fmem_handle h[N];
    static char data[N][LEN], back[LEN];
    int failed = 0, ok_ssd = 0;
    bool ok[N];
    for (int i = 0; i < N; i++) {
        cr_assert_eq(fmem_alloc(p, LEN, &h[i]), 0);
        fill(data[i], LEN, (uint64_t)i * 2 + 1);
        int rc = fmem_write(p, &h[i], 0, data[i], LEN);
        ok[i] = rc == 0;
        if (rc) {
            cr_assert_eq(h[i].node, 1, "only the ssd: node fails");
            cr_assert_eq(rc, FMEM_EIO);
            failed++;
        } else if (h[i].node == 1) {
            ok_ssd++;
        }
    }
    cr_assert(failed > 0 && ok_ssd > 0, "some writes fit under the limit, some did not (%d, %d)",
              ok_ssd, failed);
    fmem_node_stats_t ns = node_stats(p, 1);
    cr_assert(strstr(ns.last_error, "File too large"), "error: '%s'", ns.last_error);
    cr_assert(strstr(ns.last_error, ssd_path[0]), "the error names the file: '%s'", ns.last_error);
    cr_assert_eq(ns.errors, (uint64_t)failed);
    for (int i = 0; i < N; i++) {
        if (!ok[i])
            continue;
        cr_assert_eq(fmem_read(p, &h[i], 0, back, LEN), 0);
        cr_assert(!memcmp(back, data[i], LEN), "block %d, written before the failures, is intact", i);
    }
    fmem_close(p);
}

/* A region over a pool whose ssd: node runs out of room: flush reports the
 * failure, nothing in the region is lost, and units on the other node were
 * written back. */
Test(backends, region_survives_full_ssd)
{
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {.rlim_cur = 512 << 10, .rlim_max = RLIM_INFINITY};
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
    char uri[512];
    snprintf(uri, sizeof uri, "zmem:?size=16M;ssd:%s?size=16M", ssd_path[0]);
    fmem_pool *p = open_ok(uri);
    const size_t size = 4 << 20;
    fmem_region_config c = {.size = size, .cache_bytes = size, .fetch_unit = 64 << 10};
    fmem_region *r;
    int rc = fmem_region_create(p, &c, &r);
    if (rc == FMEM_EACCES || rc == FMEM_ENOTSUP)
        cr_skip_test("userfaultfd is not available here: %s", fmem_strerror(rc));
    cr_assert_eq(rc, 0);
    char *base = fmem_region_base(r), *shadow = malloc(size);
    fill(shadow, size, 7);
    memcpy(base, shadow, size);
    rc = fmem_region_flush(r);
    cr_assert_neq(rc, 0, "some units could not be written back");
    cr_assert(!memcmp(base, shadow, size), "nothing in the region is lost");
    fmem_node_stats_t z = node_stats(p, 0), d = node_stats(p, 1);
    cr_assert(z.bytes_written >= size / 2, "the zmem: node took its half (%llu bytes)",
              (unsigned long long)z.bytes_written);
    cr_assert(d.errors > 0 && strstr(d.last_error, "File too large"), "%s", d.last_error);
    cr_assert_eq(fmem_region_destroy(r), 0);
    free(shadow);
    fmem_close(p);
}

Test(backends, zmem_limit_is_a_full_store)
{
    fmem_pool *p = open_ok("mem:?size=8M;zmem:?size=8M&limit=128K");
    enum { N = 32, LEN = 32 << 10 };
    static char data[N][LEN], back[LEN];
    fmem_handle h[N];
    bool ok[N];
    int failed = 0;
    for (int i = 0; i < N; i++) {
        cr_assert_eq(fmem_alloc(p, LEN, &h[i]), 0);
        fill(data[i], LEN, (uint64_t)i * 2 + 1); /* random: does not compress */
        int rc = fmem_write(p, &h[i], 0, data[i], LEN);
        ok[i] = rc == 0;
        failed += rc != 0;
        cr_assert(rc == 0 || (rc == FMEM_EIO && h[i].node == 1));
    }
    cr_assert(failed > 0);
    fmem_node_stats_t ns = node_stats(p, 1);
    cr_assert(strstr(ns.last_error, "limit=131072"), "'%s'", ns.last_error);
    cr_assert(ns.held_bytes <= 128 << 10);
    for (int i = 0; i < N; i++)
        if (ok[i]) {
            cr_assert_eq(fmem_read(p, &h[i], 0, back, LEN), 0);
            cr_assert(!memcmp(back, data[i], LEN), "block %d intact", i);
        }
    fmem_close(p);
}

/* The file is deleted while the pool uses it: the open file keeps every
 * byte, and the stats say it is gone. */
Test(backends, ssd_file_deleted)
{
    char uri[512];
    snprintf(uri, sizeof uri, "ssd:%s?size=8M", ssd_path[0]);
    fmem_pool *p = open_ok(uri);
    static char data[8][64 << 10], back[64 << 10];
    fmem_handle h[8];
    for (int i = 0; i < 8; i++) {
        cr_assert_eq(fmem_alloc(p, sizeof data[i], &h[i]), 0);
        fill(data[i], sizeof data[i], (uint64_t)i + 10);
        cr_assert_eq(fmem_write(p, &h[i], 0, data[i], sizeof data[i]), 0);
    }
    cr_assert_eq(unlink(ssd_path[0]), 0);
    for (int i = 0; i < 8; i++) {
        cr_assert_eq(fmem_read(p, &h[i], 0, back, sizeof back), 0);
        cr_assert(!memcmp(back, data[i], sizeof back));
    }
    cr_assert(strstr(node_stats(p, 0).detail, "file deleted"), "%s", node_stats(p, 0).detail);
    fmem_close(p);
}

/* The file is cut behind the pool's back: reading what was written gives
 * an error naming the problem, never zeros posing as data. */
Test(backends, ssd_file_cut)
{
    char uri[512];
    snprintf(uri, sizeof uri, "ssd:%s?size=8M", ssd_path[0]);
    fmem_pool *p = open_ok(uri);
    static char data[256 << 10], back[256 << 10];
    fmem_handle h;
    cr_assert_eq(fmem_alloc(p, sizeof data, &h), 0);
    fill(data, sizeof data, 3);
    cr_assert_eq(fmem_write(p, &h, 0, data, sizeof data), 0);
    cr_assert_eq(truncate(ssd_path[0], 0), 0);
    cr_assert_eq(fmem_read(p, &h, 0, back, sizeof back), FMEM_EIO);
    fmem_node_stats_t ns = node_stats(p, 0);
    cr_assert(strstr(ns.last_error, "file cut: read at offset"), "'%s'", ns.last_error);
    fmem_close(p);
}

/* io_uring forbidden (as a seccomp policy or kernel.io_uring_disabled
 * does): the node works through pread/pwrite and says so. */
Test(backends, ssd_without_io_uring)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof f / sizeof f[0], .filter = f};
    cr_assert_eq(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
    cr_assert_eq(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog), 0);
    char uri[512];
    snprintf(uri, sizeof uri, "ssd:%s?size=16M", ssd_path[0]);
    fmem_pool *p = open_ok(uri);
    if (strstr(node_stats(p, 0).detail, "built without liburing"))
        cr_skip_test("built without liburing");
    churn(p, 77, 1500);
    fmem_node_stats_t ns = node_stats(p, 0);
    cr_assert(strstr(ns.detail, "pread/pwrite (io_uring: Operation not permitted)"), "%s", ns.detail);
    cr_assert(ns.writes > 0 && ns.errors == 0);
    fmem_close(p);
}

Test(backends, fork_child_cannot_write_parents_ssd)
{
    char uri[512];
    snprintf(uri, sizeof uri, "ssd:%s?size=8M", ssd_path[0]);
    fmem_pool *p = open_ok(uri);
    fmem_handle h;
    char data[4096], back[4096];
    fill(data, sizeof data, 5);
    cr_assert_eq(fmem_alloc(p, sizeof data, &h), 0);
    cr_assert_eq(fmem_write(p, &h, 0, data, sizeof data), 0);
    pid_t pid = fork();
    if (pid == 0) {
        char junk[4096] = {1};
        _exit(fmem_write(p, &h, 0, junk, sizeof junk) == FMEM_EIO ? 0 : 1);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child's write is refused");
    cr_assert_eq(fmem_read(p, &h, 0, back, sizeof back), 0);
    cr_assert(!memcmp(back, data, sizeof back), "the parent's data is untouched");
    fmem_close(p);
}

struct bad_uri {
    const char *uri; /* %s: a path of this test */
    const char *says;
};

Test(backends, bad_uris_name_the_problem)
{
    static const struct bad_uri bad[] = {
        {"ssd:", "want ssd:/ABSOLUTE/PATH"},
        {"ssd:relative?size=1M", "want ssd:/ABSOLUTE/PATH"},
        {"ssd:/var/tmp/?size=1M", "want ssd:/ABSOLUTE/PATH"},
        {"ssd:%s", "needs size="},
        {"ssd:%s?size=1M&codec=lz4", "unknown parameter 'codec'"},
        {"ssd:%s?size=1M&io=aio", "bad value io='aio'"},
        {"ssd:%s?size=1M&direct=2", "bad value direct='2'"},
        {"ssd:%s?size=1M&nodes=2", "nodes= is for mem: pools only"},
        {"ssd:/nonexistent-dir-backends/f?size=1M", "cannot open: No such file or directory"},
        {"ssd:%s?size=1M&create=0", "no such file (create=0)"},
        {"ssd:/dev/null?size=1M", "neither a regular file nor a block device"},
        {"ssd:/var/tmp?size=1M", "Is a directory"},
        {"zmem:/path", "zmem: takes no path"},
        {"zmem:?codec=brotli", "bad value codec='brotli' (want lz4 or zstd)"},
        {"zmem:?level=0", "bad value level='0'"},
        {"zmem:?level=20", "bad value level='20'"},
        {"zmem:?block=2K", "bad value block='2K'"},
        {"zmem:?block=12K", "bad value block='12K'"},
        {"zmem:?limit=0", "bad value limit='0'"},
        {"zmem:?io=sync", "unknown parameter 'io'"},
        {"zram:?size=1M", "unknown scheme"},
        {"mem:?size=1M;zmem:?codec=", "bad value codec=''"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char uri[512];
        snprintf(uri, sizeof uri, bad[i].uri, ssd_path[2]);
        fmem_pool *p = NULL;
        int rc = fmem_open(uri, &p);
        cr_assert_neq(rc, 0, "%s was accepted", uri);
        cr_assert_null(p);
        cr_assert(strstr(fmem_uri_error(), bad[i].says), "%s: '%s' does not say '%s'", uri,
                  fmem_uri_error(), bad[i].says);
    }
    /* not made by a refused open */
    cr_assert_eq(access(ssd_path[2], F_OK), -1);
}

Test(backends, node_stats_arguments)
{
    fmem_pool *p = open_ok("mem:?size=4M;zmem:?size=4M");
    fmem_node_stats_t st;
    cr_assert_eq(fmem_node_stats(p, 2, &st), FMEM_EINVAL);
    cr_assert_eq(fmem_node_stats(NULL, 0, &st), FMEM_EINVAL);
    cr_assert_eq(fmem_node_stats(p, 0, NULL), FMEM_EINVAL);
    cr_assert_eq(fmem_node_stats(p, 0, &st), 0);
    cr_assert_str_eq(st.kind, "mem");
    void *ptr;
    fmem_handle h;
    do /* a block on the zmem: node */
        cr_assert_eq(fmem_alloc(p, 4096, &h), 0);
    while (h.node != 1);
    cr_assert_eq(fmem_map(p, &h, &ptr), FMEM_ENOTSUP, "a zmem: block is not mapped");
    fmem_close(p);
}

/* Threads write their own slices of the same blocks at once (slices that
 * share 4 KiB pages and compression blocks): a partial write patches its
 * block under a lock, so no thread's bytes are undone by another's. */
struct slicer {
    fmem_pool *p;
    fmem_handle *h;
    unsigned nblk, me, nthreads;
    size_t blk, slice;
    char *last; /* [nblk][slice]: what this thread wrote last */
};

static void *slice_writer(void *arg)
{
    struct slicer *w = arg;
    uint64_t s = 1000 + w->me;
    char buf[1500];
    for (int round = 0; round < 400; round++) {
        unsigned b = (unsigned)(rnd(&s) % w->nblk);
        for (size_t at = w->me * w->slice; at + w->slice <= w->blk; at += w->nthreads * w->slice) {
            fill(buf, w->slice, rnd(&s));
            if (fmem_write(w->p, &w->h[b], at, buf, w->slice))
                return "write failed";
            memcpy(w->last + ((size_t)b * w->blk + at), buf, w->slice);
        }
    }
    return NULL;
}

Test(backends, concurrent_partial_writes)
{
    char uri[512];
    snprintf(uri, sizeof uri, "zmem:?size=8M;ssd:%s?size=8M;zmem:?size=8M&codec=zstd&block=64K",
             ssd_path[0]);
    fmem_pool *p = open_ok(uri);
    enum { NB = 6, NT = 4, BLK = 64 << 10, SLICE = 1000 };
    fmem_handle h[NB];
    for (unsigned i = 0; i < NB; i++)
        cr_assert_eq(fmem_alloc(p, BLK, &h[i]), 0);
    char *last = calloc(NB, BLK);
    for (unsigned i = 0; i < NB; i++)
        cr_assert_eq(fmem_write(p, &h[i], 0, last, BLK), 0);
    struct slicer w[NT];
    pthread_t t[NT];
    for (unsigned i = 0; i < NT; i++) {
        w[i] = (struct slicer){.p = p, .h = h, .nblk = NB, .me = i, .nthreads = NT, .blk = BLK,
                               .slice = SLICE, .last = last};
        cr_assert_eq(pthread_create(&t[i], NULL, slice_writer, &w[i]), 0);
    }
    for (unsigned i = 0; i < NT; i++) {
        void *err;
        pthread_join(t[i], &err);
        cr_assert_null(err, "thread %u: %s", i, (char *)err);
    }
    char *back = malloc(BLK);
    for (unsigned i = 0; i < NB; i++) {
        cr_assert_eq(fmem_read(p, &h[i], 0, back, BLK), 0);
        cr_assert(!memcmp(back, last + (size_t)i * BLK, BLK), "block %u (node %u) lost a write", i,
                  h[i].node);
    }
    free(back);
    free(last);
    fmem_close(p);
}

/* A heap maps its slabs: on a pool that mixes mapped nodes with ssd: and
 * zmem: ones it takes its slabs from the mapped nodes. */
Test(backends, heap_on_mixed_pool_uses_mapped_nodes)
{
    char uri[512];
    snprintf(uri, sizeof uri, "zmem:?size=16M;mem:?size=32M;ssd:%s?size=16M", ssd_path[0]);
    for (int round = 0; round < 3; round++) { /* the round robin starts anywhere */
        fmem_pool *p = open_ok(uri);
        for (int k = 0; k < round; k++) {
            fmem_handle t;
            cr_assert_eq(fmem_alloc(p, 4096, &t), 0);
        }
        fmem_heap *h;
        int rc = fmem_heap_new(p, &h);
        cr_assert_eq(rc, 0, "%s", fmem_strerror(rc));
        enum { N = 3000 };
        static char *obj[N];
        for (int i = 0; i < N; i++) {
            obj[i] = fmem_heap_malloc(h, 500 + (size_t)(i % 7) * 300);
            cr_assert_not_null(obj[i], "allocation %d of round %d", i, round);
            memset(obj[i], i & 0xff, 500);
        }
        for (int i = 0; i < N; i++) {
            for (int j = 0; j < 500; j++)
                cr_assert_eq((unsigned char)obj[i][j], i & 0xff);
            cr_assert_eq(fmem_heap_free(h, obj[i]), 0);
        }
        /* large objects too: one block, or several */
        for (int i = 0; i < 12; i++) {
            size_t len = (size_t)(100 << 10) + (size_t)i * (300 << 10);
            char *big = fmem_heap_malloc(h, len);
            cr_assert_not_null(big, "large object %d (%zu bytes) of round %d", i, len, round);
            memset(big, 0x5a, len);
            cr_assert_eq(big[len - 1], 0x5a);
            cr_assert_eq(fmem_heap_free(h, big), 0);
        }
        fmem_heap_destroy(h);
        fmem_close(p);
    }
}
