/* test_pool_files.c - the files of a named pool: a filesystem without room
 * gives ENOSPC and leaves nothing (no SIGBUS, ever), symbolic links are
 * never followed, and a daemon refuses files of another user or that
 * others may write. The room and owner tests need root (mount, chown):
 * they are skipped without it. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fmem.h"
#include "pool_internal.h"
#include "transport.h"

/* a user other than ours (chown to it needs root: the tests skip without) */
static uid_t other_user(void)
{
    return geteuid() == 65534 ? 65533 : 65534;
}

static char dir[64];
static bool mounted;

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/fmem-files-XXXXXX");
    cr_assert(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
}

/* Remove every entry of dir (one level), then dir. */
static void remove_dir(void)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            char p[PATH_MAX];
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
    if (d)
        closedir(d);
    if (mounted)
        umount2(dir, MNT_DETACH);
    mounted = false;
    rmdir(dir);
}

/* Mount a filesystem at dir, seen by this test's process alone (its own
 * mount namespace: the mount goes away with the process even if the test
 * crashes), or skip the test. */
static void mount_here(const char *type, const char *opt)
{
    make_dir();
    if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
        mount(type, dir, type, 0, opt) < 0) {
        int e = errno;
        rmdir(dir);
        cr_skip_test("cannot mount a %s here (%s): needs root", type, strerror(e));
    }
    mounted = true;
}

/* A tmpfs of `size` bytes at dir, or skip the test. */
static void small_fs(const char *size)
{
    char opt[32];
    snprintf(opt, sizeof opt, "size=%s", size);
    mount_here("tmpfs", opt);
}

static int entries(void)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d)
        closedir(d);
    return n;
}

static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    while (d && readdir(d))
        n++;
    if (d)
        closedir(d);
    return n;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Open "file:DIR/NAME?QUERY"; *err: errno after a failure. */
static int open_in_dir(const char *name, const char *query, int *err, fmem_pool **out)
{
    char uri[256];
    snprintf(uri, sizeof uri, "file:%s/%s%s%s", dir, name, query ? "?" : "", query ? query : "");
    fmem_pool *p = NULL;
    errno = 0;
    int rc = fmem_open(uri, &p);
    if (err)
        *err = errno;
    if (out)
        *out = p;
    else if (p)
        fmem_close(p);
    return rc;
}

static void expect_no_room(const char *size)
{
    char q[32];
    snprintf(q, sizeof q, "size=%s", size);
    int fds = open_fds(), err;
    double t0 = now_s();
    int rc = open_in_dir("pool", q, &err, NULL);
    double took = now_s() - t0;
    cr_assert_eq(rc, FMEM_EIO, "size=%s on an 8M filesystem: %s", size, fmem_strerror(rc));
    cr_assert_eq(err, ENOSPC, "size=%s: errno %s, want ENOSPC", size, strerror(err));
    cr_assert_eq(entries(), 0, "size=%s: files left behind", size);
    cr_assert_eq(open_fds(), fds, "size=%s: descriptors leaked", size);
    cr_assert_lt(took, 2.0, "size=%s: refused only after %.1f s", size, took);
}

/* ---- a filesystem without room ------------------------------------------ */

TestSuite(room, .fini = remove_dir);

/* Data larger than the filesystem: used to open (sparse files) and then
 * SIGBUS in whoever touched the page the filesystem could not hold. */
Test(room, data_larger_than_the_filesystem)
{
    small_fs("8M");
    expect_no_room("64M");
}

/* Metadata larger than the filesystem: formatting used to SIGBUS. */
Test(room, metadata_larger_than_the_filesystem)
{
    small_fs("8M");
    expect_no_room("4G");
}

Test(room, huge_size_refused_at_once)
{
    small_fs("8M");
    expect_no_room("1T");
}

/* Room for the metadata and part of the data only (a 5 MB file already
 * there): refused, and the other file is untouched. */
Test(room, partly_full_filesystem)
{
    small_fs("8M");
    char other[PATH_MAX];
    snprintf(other, sizeof other, "%s/other", dir);
    int fd = open(other, O_WRONLY | O_CREAT | O_EXCL, 0600);
    cr_assert(fd >= 0);
    cr_assert_eq(posix_fallocate(fd, 0, 5 << 20), 0);
    close(fd);
    int err;
    cr_assert_eq(open_in_dir("pool", "size=4M", &err, NULL), FMEM_EIO);
    cr_assert_eq(err, ENOSPC);
    cr_assert_eq(entries(), 1, "only the other file is left");
    struct stat st;
    cr_assert(stat(other, &st) == 0 && st.st_size == 5 << 20);
}

/* A pool that fits keeps its room: once created, a filesystem filled up by
 * someone else cannot make a write to the pool's blocks fault. */
Test(room, reserved_space_survives_a_full_filesystem)
{
    small_fs("8M");
    fmem_pool *p;
    int err;
    cr_assert_eq(open_in_dir("pool", "size=4M", &err, &p), 0, "errno %s", strerror(err));
    /* fill the rest of the filesystem */
    char other[PATH_MAX];
    snprintf(other, sizeof other, "%s/filler", dir);
    int fd = open(other, O_WRONLY | O_CREAT | O_EXCL, 0600);
    cr_assert(fd >= 0);
    static char buf[64 << 10];
    memset(buf, 7, sizeof buf);
    while (write(fd, buf, sizeof buf) > 0)
        ;
    close(fd);
    /* every byte of the pool's data is still writable */
    fmem_handle h;
    cr_assert_eq(fmem_alloc(p, 4 << 20, &h), 0);
    void *m;
    cr_assert_eq(fmem_map(p, &h, &m), 0);
    memset(m, 0x5A, 4 << 20);
    cr_assert_eq(((unsigned char *)m)[(4 << 20) - 1], 0x5A);
    cr_assert_eq(fmem_free(p, &h), 0);
    /* and the many small blocks of a fresh pool get their keys */
    fmem_handle s[64];
    for (int i = 0; i < 64; i++) {
        cr_assert_eq(fmem_alloc(p, 4096, &s[i]), 0);
        cr_assert_eq(fmem_write(p, &s[i], 0, buf, 4096), 0);
    }
    for (int i = 0; i < 64; i++)
        cr_assert_eq(fmem_free(p, &s[i]), 0);
    fmem_close(p);
}

/* On hugetlbfs the shared mapping reserves the huge pages: a pool larger
 * than the mount's limit fails there, and its files are removed. */
Test(room, hugetlbfs_without_pages)
{
    mount_here("hugetlbfs", "size=2M");
    int err, fds = open_fds();
    int rc = open_in_dir("pool", "size=8M", &err, NULL);
    cr_assert_eq(rc, FMEM_EIO, "%s", fmem_strerror(rc));
    cr_assert(err == ENOMEM || err == ENOSPC, "errno %s", strerror(err));
    cr_assert_eq(entries(), 0, "files left behind");
    cr_assert_eq(open_fds(), fds);
}

/* ---- symbolic links and foreign files ------------------------------------ */

TestSuite(links, .init = make_dir, .fini = remove_dir);

static const char precious[] = "precious bytes that are not a pool";

static void make_victim(const char *name)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    int fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0600);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, precious, sizeof precious), (ssize_t)sizeof precious);
    close(fd);
}

static void expect_victim_intact(const char *name)
{
    char p[PATH_MAX], buf[sizeof precious + 16];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    int fd = open(p, O_RDONLY);
    cr_assert(fd >= 0);
    ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    cr_assert(n == (ssize_t)sizeof precious && memcmp(buf, precious, sizeof precious) == 0,
              "%s was changed through a link", name);
}

static void link_in_dir(const char *target, const char *name)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    cr_assert_eq(symlink(target, p), 0);
}

static bool exists(const char *name)
{
    char p[PATH_MAX];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return lstat(p, &st) == 0;
}

Test(links, metadata_file_that_is_a_link)
{
    make_victim("victim");
    link_in_dir("victim", "pool");
    int err;
    cr_assert_eq(open_in_dir("pool", "size=4M", &err, NULL), FMEM_EIO);
    cr_assert_eq(err, ELOOP, "errno %s, want ELOOP", strerror(err));
    cr_assert_eq(open_in_dir("pool", NULL, &err, NULL), FMEM_EIO);
    cr_assert_eq(err, ELOOP);
    expect_victim_intact("victim");
    cr_assert(!exists("pool.data"));
}

/* A link planted where a new pool's data file goes used to be truncated
 * through (O_TRUNC) and then hold the pool's data. */
Test(links, data_file_that_is_a_link)
{
    make_victim("victim");
    link_in_dir("victim", "pool.data");
    int err, fds = open_fds();
    cr_assert_eq(open_in_dir("pool", "size=4M", &err, NULL), FMEM_EIO);
    cr_assert_eq(err, EEXIST, "errno %s, want EEXIST", strerror(err));
    expect_victim_intact("victim");
    cr_assert(!exists("pool"), "the metadata file made was left behind");
    cr_assert_eq(open_fds(), fds);
}

/* An existing pool whose data file was replaced by a link. */
Test(links, data_link_of_an_existing_pool)
{
    fmem_pool *p;
    cr_assert_eq(open_in_dir("pool", "size=4M", NULL, &p), 0);
    fmem_close(p);
    char data[PATH_MAX];
    snprintf(data, sizeof data, "%s/pool.data", dir);
    cr_assert_eq(unlink(data), 0);
    make_victim("victim");
    link_in_dir("victim", "pool.data");
    int err;
    cr_assert_eq(open_in_dir("pool", NULL, &err, NULL), FMEM_EIO);
    cr_assert_eq(err, ELOOP);
    expect_victim_intact("victim");
}

/* A data file of ours left over from a creator that died is replaced. */
Test(links, own_leftover_data_file_is_replaced)
{
    make_victim("pool.data");
    fmem_pool *p;
    int err;
    cr_assert_eq(open_in_dir("pool", "size=4M", &err, &p), 0, "errno %s", strerror(err));
    fmem_handle h;
    cr_assert_eq(fmem_alloc(p, 4096, &h), 0);
    fmem_close(p);
}

/* ... but not one of another user. */
Test(links, foreign_leftover_data_file_is_refused)
{
    make_victim("pool.data");
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/pool.data", dir);
    if (chown(p, other_user(), other_user()) < 0)
        cr_skip_test("cannot chown (%s): needs root", strerror(errno));
    int err;
    cr_assert_eq(open_in_dir("pool", "size=4M", &err, NULL), FMEM_EIO);
    cr_assert_eq(err, EEXIST);
    expect_victim_intact("pool.data");
    cr_assert(!exists("pool"));
}

Test(links, not_a_regular_file)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/pool", dir);
    cr_assert_eq(mkfifo(p, 0600), 0);
    double t0 = now_s();
    cr_assert_eq(open_in_dir("pool", "size=4M", NULL, NULL), FMEM_ECORRUPT);
    cr_assert_lt(now_s() - t0, 1.0);
}

/* ---- owners: what a daemon refuses -------------------------------------- */

TestSuite(owner, .init = make_dir, .fini = remove_dir);

static void make_pool(void)
{
    fmem_pool *p;
    cr_assert_eq(open_in_dir("pool", "size=4M", NULL, &p), 0);
    fmem_close(p);
}

static void chown_pool(uid_t uid)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/pool", dir);
    if (chown(p, uid, uid) < 0)
        cr_skip_test("cannot chown (%s): needs root", strerror(errno));
    snprintf(p, sizeof p, "%s/pool.data", dir);
    cr_assert_eq(chown(p, uid, uid), 0);
}

static void chmod_pool(const char *which, mode_t mode)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", dir, which);
    cr_assert_eq(chmod(p, mode), 0);
}

/* What a daemon gets opening the pool: 0 or FMEM_E*, errno in *err. */
static int daemon_open(int *err)
{
    char uri[128];
    snprintf(uri, sizeof uri, "file:%s/pool", dir);
    struct embedded_opts o = {.own_files = true};
    fmem_pool *p = NULL;
    errno = 0;
    int rc = embedded_open_opts(uri, &o, &p);
    *err = errno;
    if (p)
        fmem_close(p);
    return rc;
}

Test(owner, file_of_another_user)
{
    make_pool();
    chown_pool(other_user());
    int err;
    cr_assert_eq(daemon_open(&err), FMEM_EIO);
    cr_assert_eq(err, EPERM);
    /* an application may still open a pool shared with it */
    cr_assert_eq(open_in_dir("pool", NULL, NULL, NULL), 0);
}

Test(owner, data_file_of_another_user)
{
    make_pool();
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/pool.data", dir);
    if (chown(p, other_user(), other_user()) < 0)
        cr_skip_test("cannot chown (%s): needs root", strerror(errno));
    int err;
    cr_assert_eq(daemon_open(&err), FMEM_EIO);
    cr_assert_eq(err, EPERM);
}

Test(owner, writable_by_others_or_group)
{
    make_pool();
    int err;
    cr_assert_eq(daemon_open(&err), 0, "our own 0600 files: errno %s", strerror(err));
    chmod_pool("pool", 0606);
    cr_assert_eq(daemon_open(&err), FMEM_EIO);
    cr_assert_eq(err, EPERM);
    chmod_pool("pool", 0620);
    cr_assert_eq(daemon_open(&err), FMEM_EIO);
    chmod_pool("pool", 0644); /* readable is the owner's choice */
    cr_assert_eq(daemon_open(&err), 0);
    chmod_pool("pool.data", 0666);
    cr_assert_eq(daemon_open(&err), FMEM_EIO);
    cr_assert_eq(err, EPERM);
}

/* fmemd maps the files its memory node sends: checked the same way, and a
 * refused pair stays the caller's to close. */
Test(owner, descriptors_from_a_memory_node)
{
    make_pool();
    char m[PATH_MAX], d[PATH_MAX];
    snprintf(m, sizeof m, "%s/pool", dir);
    snprintf(d, sizeof d, "%s/pool.data", dir);
    int mfd = open(m, O_RDWR), dfd = open(d, O_RDWR);
    cr_assert(mfd >= 0 && dfd >= 0);
    struct shm_params sp = {.from_fds = true, .meta_fd = mfd, .data_fd = dfd,
                            .check_owner = true, .owner = geteuid()};
    struct transport *tp;
    cr_assert_eq(shm_transport_open(&sp, &tp, NULL), 0);
    tp_close(tp); /* closes both */
    mfd = open(m, O_RDWR);
    dfd = open(d, O_RDWR);
    chown_pool(other_user());
    sp.meta_fd = mfd;
    sp.data_fd = dfd;
    errno = 0;
    cr_assert_eq(shm_transport_open(&sp, &tp, NULL), FMEM_EIO);
    cr_assert_eq(errno, EPERM);
    cr_assert(fcntl(mfd, F_GETFD) >= 0 && fcntl(dfd, F_GETFD) >= 0, "the caller's fds were closed");
    sp.owner = other_user(); /* the memory node's user */
    cr_assert_eq(shm_transport_open(&sp, &tp, NULL), 0);
    tp_close(tp);
}

/* The memory node itself, on a pool file an unprivileged user made in
 * advance: it must stop with a clear message instead of serving it. */
Test(owner, memory_node_refuses_a_precreated_pool)
{
    make_pool();
    chown_pool(other_user());
    chmod_pool("pool", 0666);
    chmod_pool("pool.data", 0666);
    const char *b = getenv("top_builddir");
    char prog[PATH_MAX], uri[128], sock[128], log[128];
    snprintf(prog, sizeof prog, "%s/tools/fmem-mnode", b && *b ? b : ".");
    snprintf(uri, sizeof uri, "file:%s/pool", dir);
    snprintf(sock, sizeof sock, "%s/mnode.sock", dir);
    snprintf(log, sizeof log, "%s/mnode.log", dir);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT, 0600);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(prog, prog, "--pool", uri, "--socket", sock, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    pid_t r = 0;
    for (int t = 0; t < 500 && (r = waitpid(pid, &st, WNOHANG)) == 0; t++)
        usleep(10000);
    if (r == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
    }
    char text[1024] = "";
    int fd = open(log, O_RDONLY);
    ssize_t n = fd >= 0 ? read(fd, text, sizeof text - 1) : 0;
    text[n > 0 ? n : 0] = 0;
    if (fd >= 0)
        close(fd);
    cr_assert_neq(r, 0, "fmem-mnode serves a pool file owned by another user; its log:\n%s", text);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != 127,
              "status %d; log:\n%s", st, text);
    cr_assert(strstr(text, "refused"), "no clear message; log:\n%s", text);
}
