/* test_service_env.c - daemons for the service tests: a memory node and one
 * or more fmemd in a fresh temporary directory, each a child process that
 * dies with the test (PR_SET_PDEATHSIG) even if the test crashes; stopped
 * and the directory removed at the end of each test. */
#include "test_service_env.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *builddir(void)
{
    const char *b = getenv("top_builddir");
    return b && *b ? b : ".";
}

static void nap_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

pid_t env_spawn(const char *log, char *const argv[])
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(1);
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
    }
    execv(argv[0], argv);
    _exit(127);
}

bool env_wait_file(const char *path, unsigned ms)
{
    struct stat st;
    for (unsigned t = 0; t < ms; t += 10) {
        if (stat(path, &st) == 0)
            return true;
        nap_ms(10);
    }
    return false;
}

bool env_start_mnode(struct svc_env *e)
{
    char prog[PATH_MAX], log[PATH_MAX + 16], hb[16];
    snprintf(prog, sizeof prog, "%s/tools/fmem-mnode", builddir());
    snprintf(log, sizeof log, "%s/mnode.log", e->dir);
    snprintf(hb, sizeof hb, "%u", e->heartbeat_ms ? e->heartbeat_ms : 1000);
    char *argv[32] = {prog, "--pool", e->pool_uri, "--socket", e->mnode_sock, "--heartbeat-ms", hb,
                      "--regen-ms", "20"};
    int n = 9;
    char buf[256];
    if (e->mnode_extra) {
        snprintf(buf, sizeof buf, "%s", e->mnode_extra);
        for (char *save = NULL, *t = strtok_r(buf, " ", &save); t && n < 30;
             t = strtok_r(NULL, " ", &save))
            argv[n++] = t;
    }
    argv[n] = NULL;
    unlink(e->mnode_sock);
    e->mnode = env_spawn(log, argv);
    return e->mnode > 0 && env_wait_file(e->mnode_sock, 5000);
}

bool env_start_fmemd(struct svc_env *e, unsigned i, const char *extra)
{
    char prog[PATH_MAX], log[PATH_MAX + 16], name[32];
    snprintf(prog, sizeof prog, "%s/tools/fmemd", builddir());
    snprintf(log, sizeof log, "%s/fmemd%u.log", e->dir, i);
    snprintf(name, sizeof name, "fmemd%u", i);
    char *argv[32] = {prog, "--mnode", e->mnode_sock, "--socket", e->fmemd_sock[i],
                      "--workers", "2", "--name", name};
    int n = 9;
    char buf[256];
    if (extra) {
        snprintf(buf, sizeof buf, "%s", extra);
        for (char *save = NULL, *t = strtok_r(buf, " ", &save); t && n < 30;
             t = strtok_r(NULL, " ", &save))
            argv[n++] = t;
    }
    argv[n] = NULL;
    unlink(e->fmemd_sock[i]);
    e->fmemd[i] = env_spawn(log, argv);
    return e->fmemd[i] > 0 && env_wait_file(e->fmemd_sock[i], 10000);
}

bool env_start(struct svc_env *e, unsigned nfmemd, const char *fmemd_extra)
{
    memset(e->dir, 0, sizeof e->dir);
    snprintf(e->dir, sizeof e->dir, "/tmp/fmem-svc-XXXXXX");
    if (!mkdtemp(e->dir))
        return false;
    snprintf(e->pool_path, sizeof e->pool_path, "%s/pool", e->dir);
    snprintf(e->pool_uri, sizeof e->pool_uri, "file:%s?size=%s", e->pool_path,
             e->pool_size ? e->pool_size : "64M");
    snprintf(e->mnode_sock, sizeof e->mnode_sock, "%s/mnode.sock", e->dir);
    e->nfmemd = nfmemd;
    for (unsigned i = 0; i < nfmemd; i++) {
        snprintf(e->fmemd_sock[i], sizeof e->fmemd_sock[i], "%s/fmemd%u.sock", e->dir, i);
        snprintf(e->app_uri[i], sizeof e->app_uri[i], "unix:%s", e->fmemd_sock[i]);
    }
    if (!env_start_mnode(e))
        return false;
    for (unsigned i = 0; i < nfmemd; i++)
        if (!env_start_fmemd(e, i, fmemd_extra))
            return false;
    return true;
}

int env_stop_pid(pid_t *pid, int sig)
{
    int status = -1;
    if (*pid <= 0)
        return status;
    kill(*pid, sig);
    for (int t = 0; t < 500; t++) {
        if (waitpid(*pid, &status, WNOHANG) == *pid) {
            *pid = 0;
            return status;
        }
        nap_ms(10);
    }
    kill(*pid, SIGKILL);
    waitpid(*pid, &status, 0);
    *pid = 0;
    return status;
}

void env_stop(struct svc_env *e)
{
    for (unsigned i = 0; i < e->nfmemd; i++)
        env_stop_pid(&e->fmemd[i], SIGTERM);
    env_stop_pid(&e->mnode, SIGTERM);
    if (e->dir[0] && !getenv("FMEM_TEST_KEEP")) {
        char cmd[PATH_MAX + 16];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", e->dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", e->dir);
    }
}

void env_dump_logs(const struct svc_env *e)
{
    char cmd[PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "tail -n 20 '%s'/*.log >&2", e->dir);
    if (system(cmd) != 0)
        return;
}

/* The pool as the memory node sees it, opened directly (a user of its own). */
int env_open_pool(const struct svc_env *e, fmem_pool **p)
{
    char uri[PATH_MAX + 32];
    snprintf(uri, sizeof uri, "file:%s?create=0", e->pool_path);
    return fmem_open(uri, p);
}

uint64_t env_pool_allocated(const struct svc_env *e)
{
    fmem_pool *p;
    if (env_open_pool(e, &p))
        return UINT64_MAX;
    fmem_stats_t st;
    fmem_stats(p, &st);
    fmem_close(p);
    return st.allocated_bytes;
}

bool env_wait_allocated(const struct svc_env *e, uint64_t want, unsigned ms)
{
    for (unsigned t = 0; t < ms; t += 20) {
        if (env_pool_allocated(e) == want)
            return true;
        nap_ms(20);
    }
    return false;
}

uint64_t env_verify_errors(const struct svc_env *e)
{
    fmem_pool *p;
    if (env_open_pool(e, &p))
        return UINT64_MAX;
    fmem_verify_report r;
    int rc = fmem_verify(p, &r, stderr);
    fmem_close(p);
    return rc ? UINT64_MAX : r.errors;
}

bool env_status_has(const char *sock, const char *needle)
{
    char cmd[PATH_MAX * 2];
    snprintf(cmd, sizeof cmd, "'%s/tools/fmem' status 'unix:%s' 2>&1 | grep -q -- '%s'",
             builddir(), sock, needle);
    return system(cmd) == 0;
}

bool env_wait_status(const char *sock, const char *needle, unsigned ms)
{
    for (unsigned t = 0; t < ms; t += 50) {
        if (env_status_has(sock, needle))
            return true;
        nap_ms(50);
    }
    return false;
}

unsigned env_count_fds(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    unsigned n = 0;
    if (!d)
        return 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

void env_nap_ms(unsigned ms)
{
    nap_ms(ms);
}
