/* test_sock.c - the daemons' listening sockets: the path appears only once
 * it accepts connections, a live daemon's path is never taken over, a stale
 * socket file is replaced, and nothing but a socket file is ever removed. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "service/sock.h"

static char dir[64], path[128];

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/fmem-sock-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/d.sock", dir);
}

static void teardown(void)
{
    unlink(path);
    rmdir(dir);
}

TestSuite(sock, .init = setup, .fini = teardown, .timeout = 60);

struct watcher {
    atomic_int go, done, refused;
};

/* Waits for the path as a client script would, then connects at once. */
static void *watch(void *arg)
{
    struct watcher *w = arg;
    struct stat st;
    while (!atomic_load(&w->go))
        ;
    while (stat(path, &st) != 0)
        ;
    int fd = sock_connect(path);
    if (fd < 0)
        atomic_fetch_add(&w->refused, 1);
    else
        close(fd);
    atomic_store(&w->done, 1);
    return NULL;
}

Test(sock, path_appears_only_when_listening)
{
    for (int round = 0; round < 300; round++) {
        struct watcher w = {0};
        pthread_t t;
        cr_assert_eq(pthread_create(&t, NULL, watch, &w), 0);
        atomic_store(&w.go, 1);
        int fd = sock_listen(path, 0600);
        cr_assert_geq(fd, 0, "listen: %s", strerror(errno));
        pthread_join(t, NULL);
        close(fd);
        unlink(path);
        cr_assert_eq(atomic_load(&w.refused), 0, "round %d: path existed before listen", round);
    }
}

Test(sock, mode_and_no_leftovers)
{
    int fd = sock_listen(path, 0660);
    cr_assert_geq(fd, 0);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert(S_ISSOCK(st.st_mode));
    cr_assert_eq(st.st_mode & 0777, 0660);
    close(fd);
    unlink(path);
    /* the private name was renamed away: the directory is empty */
    cr_assert_eq(rmdir(dir), 0, "leftover in %s: %s", dir, strerror(errno));
    cr_assert_eq(mkdir(dir, 0700), 0);
}

Test(sock, live_path_refused_stale_replaced)
{
    int a = sock_listen(path, 0600);
    cr_assert_geq(a, 0);
    cr_assert_eq(sock_listen(path, 0600), -1);
    cr_assert_eq(errno, EADDRINUSE);
    int c = sock_connect(path);
    cr_assert_geq(c, 0, "the live daemon's socket was disturbed");
    close(c);
    close(a); /* the file stays behind, as after a crash */
    int b = sock_listen(path, 0600);
    cr_assert_geq(b, 0, "stale socket not replaced: %s", strerror(errno));
    c = sock_connect(path);
    cr_assert_geq(c, 0);
    close(c);
    close(b);
}

Test(sock, never_removes_a_regular_file)
{
    int f = open(path, O_CREAT | O_WRONLY, 0600);
    cr_assert_geq(f, 0);
    close(f);
    cr_assert_eq(sock_listen(path, 0600), -1);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert(S_ISREG(st.st_mode), "a regular file was replaced by the socket");
}

Test(sock, bad_paths)
{
    char longp[200];
    memset(longp, 'x', sizeof longp - 1);
    longp[0] = '/';
    longp[sizeof longp - 1] = 0;
    cr_assert_eq(sock_listen(longp, 0600), -1);
    cr_assert_eq(errno, ENAMETOOLONG);
    cr_assert_eq(sock_listen(NULL, 0600), -1);
    cr_assert_eq(sock_listen("/nonexistent-dir/x.sock", 0600), -1);
    cr_assert_eq(sock_connect(path), -1);
}
