/* config.c - the environment of libfmem-preload.so.
 *
 *   FMEM_PRELOAD_THRESHOLD  bytes (K, M, G, T, KiB, ... suffixes: powers of 1024) at and
 *                           above which a request is large; default 128K,
 *                           glibc's default mmap threshold
 *   FMEM_PRELOAD_URI        pool for large blocks (see fmem_open); default
 *                           $FMEM_URI, else a private in-process pool
 *   FMEM_PRELOAD_STATS      1: print counters on stderr at exit (a copy of
 *                           fd 2 taken at start: some programs close
 *                           stderr before exit); /PATH: append them to
 *                           that file, one line per process
 *
 * A bad value prints one line on stderr and leaves every allocation to the
 * system allocator. Nothing here allocates: it runs inside malloc. The
 * values are copied when the library loads (its constructor, or an earlier
 * first allocation): programs that rewrite their environment or argv in
 * place (setproctitle, redis) keep their pool and stats. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "preload.h"
#include "size_parse.h"

#define DEFAULT_THRESHOLD ((size_t)128 * 1024)

struct fp_config fp_cfg = {.threshold = DEFAULT_THRESHOLD, .stats_fd = -1, .lazy_fork = 1,
                         .early_protect = 1};
static _Atomic int state; /* 0 unread, 1 being read, 2 ready */

static void say(int fd, const char *fmt, va_list ap)
{
    char line[512];
    int n = snprintf(line, sizeof line, "fmem-preload: ");
    n += vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    if (n > (int)sizeof line - 2)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    ssize_t w = write(fd, line, (size_t)n);
    (void)w;
}

void fp_say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    say(STDERR_FILENO, fmt, ap);
    va_end(ap);
}

void fp_say_fd(int fd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    say(fd, fmt, ap);
    va_end(ap);
}

/* "131072", "128K", "2M", "1G" (also lower case); 0 on error. */
static size_t parse_size(const char *s)
{
    uint64_t v; /* the one size parser: size_parse.h */
    return size_parse(s, &v) && v <= SIZE_MAX ? (size_t)v : 0;
}

/* The strings kept from the environment: copies, never getenv's pointers. */
static char stats_path_buf[4096], uri_buf[4096];

static const char *keep(char *buf, size_t cap, const char *s, const char *name)
{
    size_t n = strlen(s);
    if (n >= cap) {
        fp_say("%s is longer than %zu bytes; using the system allocator only", name, cap - 1);
        return NULL;
    }
    memcpy(buf, s, n + 1);
    return buf;
}

static int read_env(void)
{
    const char *t = getenv("FMEM_PRELOAD_THRESHOLD");
    if (t && *t) {
        size_t v = parse_size(t);
        if (!v) {
            fp_say("FMEM_PRELOAD_THRESHOLD='%.64s' is not a size in bytes (a positive number, "
                   "optionally with K, M, G or T, as in 64K or 64KiB); using the system "
                   "allocator only", t);
            return -1;
        }
        fp_cfg.threshold = v;
    }
    const char *s = getenv("FMEM_PRELOAD_STATS");
    if (s && *s) {
        if (strcmp(s, "0") && strcmp(s, "1") && *s != '/') {
            fp_say("FMEM_PRELOAD_STATS='%.64s' must be 0, 1 or an absolute file name; "
                   "using the system allocator only", s);
            return -1;
        }
        if (*s == '/') {
            fp_cfg.stats = 1;
            fp_cfg.stats_path = keep(stats_path_buf, sizeof stats_path_buf, s, "FMEM_PRELOAD_STATS");
            if (!fp_cfg.stats_path)
                return -1;
        } else if (*s == '1') {
            fp_cfg.stats = 1;
            fp_cfg.stats_fd = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 64);
        }
    }
    const char *l = getenv("FMEM_PRELOAD_LAZY_FORK");
    if (l && strcmp(l, "0") == 0)
        fp_cfg.lazy_fork = 0; /* fork remaps every block at once (lazy.c) */
    const char *e = getenv("FMEM_PRELOAD_EARLY_PROTECT");
    if (e && strcmp(e, "0") == 0)
        fp_cfg.early_protect = 0; /* only the fork write-protects (snap.c) */
    /* A fork child remaps the blocks write-protected in its parent at
     * its first access to each (childmap.c); "eager": all of them in its
     * fork handler. */
    const char *c = getenv("FMEM_PRELOAD_CHILD_REMAP");
    fp_cfg.child_remap_eager = c && strcmp(c, "eager") == 0;
    if (c && *c && !fp_cfg.child_remap_eager && strcmp(c, "lazy") != 0)
        fp_say("FMEM_PRELOAD_CHILD_REMAP='%.64s' must be eager or lazy (the default); "
               "using the default", c);
    const char *u = getenv("FMEM_PRELOAD_URI");
    if (!u) { /* fmem_open would read it only at the first large request */
        const char *d = getenv("FMEM_URI");
        if (d && *d && !(fp_cfg.uri = keep(uri_buf, sizeof uri_buf, d, "FMEM_URI")))
            return -1;
    } else {
        if (!*u) {
            fp_say("FMEM_PRELOAD_URI is empty (unset it for the default pool); using the "
                   "system allocator only");
            return -1;
        }
        fp_cfg.uri = keep(uri_buf, sizeof uri_buf, u, "FMEM_PRELOAD_URI");
        if (!fp_cfg.uri)
            return -1;
    }
    return 0;
}

int fp_config_init(void)
{
    int st = atomic_load_explicit(&state, memory_order_acquire);
    if (st == 2)
        return 0;
    int expected = 0;
    if (!atomic_compare_exchange_strong(&state, &expected, 1))
        return expected == 2 ? 0 : -1;
    fp_cfg.enabled = read_env() == 0;
    atomic_store_explicit(&state, 2, memory_order_release);
    return 0;
}
