/* pool_hostile.h - helpers of the pool-side attack programs in
 * tests/hostile/ (classes 3-6): checks that count failures and go on, the
 * fmem command run and its output kept, scratch shm pools, children that
 * hold a pool, and the pool file's metadata read and damaged directly.
 * Exit status of a program: 0 every check held, 1 one failed, 77 skipped. */
#ifndef FMEM_POOL_HOSTILE_H
#define FMEM_POOL_HOSTILE_H

#include <fcntl.h>
#include <fmem.h>
#include <fmem_admin.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "layout.h"

static int ph_failures;

#define PH_CHECK(cond, ...)                                                 \
    do {                                                                    \
        if (!(cond)) {                                                      \
            ph_failures++;                                                  \
            fprintf(stderr, "  FAILED (%s:%d): ", __FILE__, __LINE__);      \
            fprintf(stderr, __VA_ARGS__);                                   \
            fprintf(stderr, "\n");                                          \
        }                                                                   \
    } while (0)

#define PH_NOTE(...)                                                        \
    do {                                                                    \
        fprintf(stderr, "  ");                                              \
        fprintf(stderr, __VA_ARGS__);                                       \
        fprintf(stderr, "\n");                                              \
    } while (0)

static inline int ph_result(const char *name)
{
    fprintf(stderr, "%s: %s\n", name, ph_failures ? "FAILED" : "every check held");
    return ph_failures ? 1 : 0;
}

static inline const char *ph_builddir(void)
{
    const char *b = getenv("top_builddir");
    return b && *b ? b : ".";
}

static inline void ph_nap_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* Run `tools/fmem ARGS` (a format), its stdout and stderr into out[cap];
 * returns its exit status (-1: it did not exit). */
static inline int ph_fmem(char *out, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline int ph_fmem(char *out, size_t cap, const char *fmt, ...)
{
    char args[1024], cmd[1400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "'%s/tools/fmem' %s 2>&1", ph_builddir(), args);
    FILE *f = popen(cmd, "r");
    size_t n = 0;
    if (f) {
        n = fread(out, 1, cap - 1, f);
        int st = pclose(f);
        out[n] = 0;
        return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    }
    out[0] = 0;
    return -1;
}

/* A scratch pool in /dev/shm: its name, URI (with size) and bare URI. */
struct ph_pool {
    char path[96], uri[160], bare[128];
};

static inline void ph_pool_init(struct ph_pool *p, const char *tag, const char *size)
{
    snprintf(p->path, sizeof p->path, "/dev/shm/fmem-hostile-%s-%d", tag, (int)getpid());
    snprintf(p->bare, sizeof p->bare, "shm:%s", p->path + 8);
    snprintf(p->uri, sizeof p->uri, "%s?size=%s", p->bare, size);
    fmem_unlink(p->uri);
}

/* A child that opens `uri`, allocates n blocks of `bytes`, writes its user
 * id to *uid, and waits until *release is closed by the parent; then it
 * closes the pool and exits (or is killed before). */
struct ph_holder {
    pid_t pid;
    unsigned uid;
    int release; /* parent's end: close it to let the child go */
};

static inline bool ph_hold(struct ph_holder *h, const char *uri, size_t bytes, int n)
{
    int up[2], down[2];
    if (pipe(up) || pipe(down))
        return false;
    pid_t parent = getpid();
    h->pid = fork();
    if (h->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
        close(up[0]);
        close(down[1]);
        fmem_pool *p;
        fmem_handle x;
        unsigned uid = 0;
        if (fmem_open(uri, &p) == 0) {
            uid = fmem_user_id(p, 0);
            for (int i = 0; i < n; i++)
                if (fmem_alloc(p, bytes, &x))
                    uid = 0;
        }
        if (write(up[1], &uid, sizeof uid) != sizeof uid)
            _exit(2);
        char c;
        while (read(down[0], &c, 1) > 0)
            ;
        if (uid)
            fmem_close(p);
        _exit(0);
    }
    close(up[1]);
    close(down[0]);
    h->release = down[1];
    bool ok = h->pid > 0 && read(up[0], &h->uid, sizeof h->uid) == sizeof h->uid && h->uid;
    close(up[0]);
    return ok;
}

static inline void ph_release(struct ph_holder *h)
{
    if (h->release >= 0)
        close(h->release);
    h->release = -1;
    if (h->pid > 0)
        waitpid(h->pid, NULL, 0);
    h->pid = 0;
}

static inline void ph_kill(struct ph_holder *h)
{
    if (h->pid > 0) {
        kill(h->pid, SIGKILL);
        waitpid(h->pid, NULL, 0);
    }
    h->pid = 0;
    if (h->release >= 0)
        close(h->release);
    h->release = -1;
}

/* The pool file's header (geometry), read directly. */
static inline bool ph_header(const char *path, struct pool_hdr *h)
{
    int fd = open(path, O_RDONLY);
    bool ok = fd >= 0 && pread(fd, h, sizeof *h, 0) == (ssize_t)sizeof *h;
    if (fd >= 0)
        close(fd);
    return ok;
}

/* Read or write one 8- or 4-byte word of the metadata file at `off`. */
static inline bool ph_poke(const char *path, uint64_t off, void *word, size_t len, bool write_it)
{
    int fd = open(path, O_RDWR);
    bool ok = fd >= 0 && (write_it ? pwrite(fd, word, len, (off_t)off)
                                   : pread(fd, word, len, (off_t)off)) == (ssize_t)len;
    if (fd >= 0)
        close(fd);
    return ok;
}

/* The number after `key` in text, or -1. */
static inline long long ph_number_after(const char *text, const char *key)
{
    const char *k = strstr(text, key);
    return k ? strtoll(k + strlen(key), NULL, 10) : -1;
}

#endif
