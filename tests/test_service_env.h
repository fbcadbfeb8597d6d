/* test_service_env.h - daemons for the service tests (test_service_env.c). */
#ifndef FMEM_TEST_SERVICE_ENV_H
#define FMEM_TEST_SERVICE_ENV_H

#include <fmem.h>
#include <fmem_admin.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define ENV_MAX_FMEMD 4

struct svc_env {
    char dir[64];
    char pool_path[128], pool_uri[192], mnode_sock[128];
    char fmemd_sock[ENV_MAX_FMEMD][128], app_uri[ENV_MAX_FMEMD][136];
    const char *pool_size;  /* default 64M */
    unsigned heartbeat_ms;  /* default 1000 */
    const char *mnode_extra; /* more fmem-mnode options, space-separated */
    unsigned nfmemd;
    pid_t mnode, fmemd[ENV_MAX_FMEMD];
};

/* Start a memory node and n fmemd (extra: more fmemd options). */
bool env_start(struct svc_env *e, unsigned nfmemd, const char *fmemd_extra);
bool env_start_mnode(struct svc_env *e);
bool env_start_fmemd(struct svc_env *e, unsigned i, const char *extra);
/* Stop everything (SIGTERM, then SIGKILL) and remove the directory. */
void env_stop(struct svc_env *e);
/* Signal a child and reap it; returns its wait status. */
int env_stop_pid(pid_t *pid, int sig);
pid_t env_spawn(const char *log, char *const argv[]);
bool env_wait_file(const char *path, unsigned ms);
void env_dump_logs(const struct svc_env *e);
void env_nap_ms(unsigned ms);
/* Open descriptors of a process (entries of /proc/PID/fd; 0: unreadable). */
unsigned env_count_fds(pid_t pid);

int env_open_pool(const struct svc_env *e, fmem_pool **p);
/* Bytes allocated in the pool by anyone (UINT64_MAX: cannot open it). */
uint64_t env_pool_allocated(const struct svc_env *e);
bool env_wait_allocated(const struct svc_env *e, uint64_t want, unsigned ms);
uint64_t env_verify_errors(const struct svc_env *e);
/* Does `fmem status unix:SOCK` print `needle`? */
bool env_status_has(const char *sock, const char *needle);
/* Poll env_status_has every 50 ms for up to ms milliseconds. */
bool env_wait_status(const char *sock, const char *needle, unsigned ms);

/* For Criterion tests: start the daemons or fail with their logs; open
 * application i's connection or fail. */
#ifdef CRITERION_H_
static inline void env_start_or_fail(struct svc_env *e, unsigned n, const char *extra)
{
    if (!env_start(e, n, extra)) {
        env_dump_logs(e);
        cr_assert_fail("daemons did not start");
    }
}

static inline fmem_pool *env_app(const struct svc_env *e, unsigned i)
{
    fmem_pool *p;
    int rc = fmem_open(e->app_uri[i], &p);
    cr_assert_eq(rc, 0, "open %s: %s", e->app_uri[i], fmem_strerror(rc));
    return p;
}
#endif

#endif
