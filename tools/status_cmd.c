/* status_cmd.c - `fmem status`: ask a running fmem-mnode or fmemd over its
 * socket, or read a named pool's metadata file directly (read-only), print
 * space, fragmentation, services and applications, and optionally draw the
 * occupancy map as a PNG. Also `fmem mnode` / `fmem daemon`, which run the
 * daemons in the foreground. */
#include "status_cmd.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdbool.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "service/client.h"
#include "service/occupancy.h"
#include "pngmap.h"
#include "service/proto.h"
#include "service/sock.h"
#include "status_print.h"
#include "status_procs.h"
#include "uri.h"

#define DEFAULT_SERVICE "fmem://"

/* with --json, stdout has the JSON only; notes go to stderr */
static bool json_mode;

static int draw(const char *png, const uint8_t *states, uint64_t nspans, const char *name)
{
    uint64_t used = 0, chunks = 0;
    for (uint64_t s = 0; s < nspans; s++)
        used += occ_used_chunks(states[s]);
    chunks = nspans * 32;
    char title[160], sub[160];
    snprintf(title, sizeof title, "fmem pool %s", name);
    snprintf(sub, sizeof sub, "%llu spans of 128K (%llu MiB), %.1f%% used; one cell = one span",
             (unsigned long long)nspans, (unsigned long long)(nspans >> 3),
             chunks ? 100.0 * (double)used / (double)chunks : 0.0);
    int files = pngmap_write(png, states, nspans, title, sub);
    if (files < 0) {
        fprintf(stderr, "fmem: %s: %s\n", png, strerror(errno));
        return 1;
    }
    fprintf(json_mode ? stderr : stdout, "map: %s (%llu spans%s)\n", png, (unsigned long long)nspans,
           files > 1 ? ", in several tiles: the next ones are named NAME-2.png, ..." : "");
    return 0;
}

/* A daemon's socket: its status records as text or JSON, and the map of
 * one node. */
static int status_socket(const char *uri, const char *png, unsigned node, bool json)
{
    char path[PATH_MAX];
    const char *p = !strncmp(uri, "unix:", 5) ? uri + 5 : NULL;
    if (!p) { /* fmem://[localhost]/PATH */
        const char *slash = strchr(uri + 7, '/');
        p = slash && slash[1] ? slash : "/run/fmem/fmemd.sock";
    }
    snprintf(path, sizeof path, "%s", p);
    int fd = sock_connect(path);
    if (fd < 0) {
        fprintf(stderr, "fmem: %s: %s\n", path, strerror(errno));
        return 1;
    }
    uint8_t *buf = malloc(MSG_MAX_BYTES);
    struct msg m;
    struct msg_status_req q = {.node = node};
    int status = 1;
    if (!buf)
        goto out;
    /* a refusal is answered too, even if it came before our request */
    ssize_t n = sock_ask(fd, MSG_STATUS_REQ, 1, &q, sizeof q, buf, MSG_MAX_BYTES, NULL, 0, NULL,
                         10000);
    if (n <= 0 || msg_decode(buf, (size_t)n, &m)) {
        fprintf(stderr, "fmem: %s: no answer%s%s\n", path, n == -1 ? ": " : "",
                n == -1 ? strerror(errno) : "");
        goto out;
    }
    if (m.type == MSG_ERROR) {
        fprintf(stderr, "fmem: %s: %s\n", path, m.u.error.text);
        goto out;
    }
    if (m.type != MSG_STATUS_REPORT) {
        fprintf(stderr, "fmem: %s: unexpected answer (%s)\n", path, msg_type_name(m.type));
        goto out;
    }
    struct st_report rep;
    if (st_parse(m.report, m.report_len, &rep)) {
        st_free(&rep);
        fprintf(stderr, "fmem: %s: %s\n", path, fmem_strerror(FMEM_ENOMEM));
        goto out;
    }
    if (json)
        status_print_json(&rep, stdout);
    else
        status_print_text(&rep, stdout);
    st_free(&rep);
    status = 0;
    if (!png)
        goto out;
    status = 1;
    if (sock_send_msg(fd, MSG_MAP_REQ, 2, &q, sizeof q, NULL, 0) < 0)
        goto out;
    uint8_t *states = NULL;
    uint64_t total = 0, got = 0;
    while (!states || got < total) {
        n = sock_recv_timeout(fd, buf, MSG_MAX_BYTES, NULL, 0, NULL, 10000);
        if (n <= 0 || msg_decode(buf, (size_t)n, &m) || m.type != MSG_MAP_CHUNK) {
            if (n > 0 && m.type == MSG_ERROR)
                fprintf(stderr, "fmem: map: %s\n", m.u.error.text);
            else
                fprintf(stderr, "fmem: map: bad answer\n");
            free(states);
            goto out;
        }
        if (!states) {
            total = m.u.map.nspans;
            if (total == 0 || total > (UINT64_C(1) << 32) || !(states = calloc(total, 1)))
                goto out;
        }
        if (m.u.map.nspans != total || m.u.map.first != got) {
            free(states);
            goto out;
        }
        memcpy(states + got, m.states, m.u.map.count);
        got += m.u.map.count;
    }
    char name[PATH_MAX + 16];
    snprintf(name, sizeof name, "%s, node %u", path, node);
    status = draw(png, states, total, name);
    free(states);
out:
    free(buf);
    close(fd);
    return status;
}

/* A named pool read straight from its metadata file. */
static int status_pool(const char *uri, const char *png, unsigned want_node, bool node_given,
                       bool json)
{
    struct node_uri *us = calloc(URI_MAX_NODES, sizeof *us);
    int n = us ? uri_parse(uri, us, URI_MAX_NODES) : FMEM_ENOMEM, status = 0;
    if (n < 0) {
        if (*uri_last_error())
            fprintf(stderr, "fmem: %s: %s\n", uri, uri_last_error());
        else
            fprintf(stderr, "fmem: %s: %s (want shm:/NAME, file:/PATH, a daemon's socket path, "
                            "unix:/PATH or fmem://[localhost]/PATH)\n", uri, fmem_strerror(n));
        free(us);
        return 2;
    }
    if (node_given && want_node >= (unsigned)n) {
        fprintf(stderr, "fmem: --node %u: the pool has %d node%s (0..%d)\n", want_node, n,
                n == 1 ? "" : "s", n - 1);
        free(us);
        return 2;
    }
    if (json) {
        fputs("{\"kind\": \"pool\", \"pool\": ", stdout);
        json_string(stdout, uri);
        fputs(", \"nodes\": [", stdout);
    }
    int printed = 0;
    for (int i = 0; i < n; i++) {
        if (us[i].kind == URI_MEM) {
            fprintf(stderr, "fmem: mem: pools are private to their process\n");
            status = 2;
            continue;
        }
        if (us[i].kind == URI_SSD || us[i].kind == URI_ZMEM) {
            /* metadata in the opener's memory: only it can report (docs/backends.md) */
            struct stat st;
            bool ssd = us[i].kind == URI_SSD;
            fprintf(stderr, "fmem: %s%s%s a node private to the process that opens it; its "
                            "figures come from fmem_node_stats() in that process, and while it "
                            "is open from fmem status --processes",
                    ssd ? "ssd:" : "zmem:", ssd ? us[i].path : "", ssd ? ":" : "");
            if (ssd && stat(us[i].path, &st) == 0)
                fprintf(stderr, " (the file holds %llu bytes on disk now)",
                        (unsigned long long)st.st_blocks * 512);
            fprintf(stderr, "\n");
            status = 2;
            continue;
        }
        struct geometry g;
        const void *meta;
        size_t len;
        int rc = occ_map_file(us[i].path, &g, &meta, &len);
        if (rc) {
            fprintf(stderr, "fmem: %s: %s\n", us[i].path, fmem_strerror(rc));
            status = 1;
            continue;
        }
        uint8_t *states = png && (unsigned)i == want_node ? malloc(g.nspans) : NULL;
        struct occ_report r;
        occ_scan(&g, meta, &r, states);
        if (json) {
            printf(printed++ ? ", " : "");
            json_node(stdout, (unsigned)i, NULL, us[i].path, NULL, &r);
        } else {
            printf("pool %s (node %d)\n", us[i].path, i);
            if (us[i].bw || us[i].rtt_ns) /* what regions over this URI get per path */
                printf("  path: emulated link %llu bytes/s%s, round trip %llu ns (from the URI)\n",
                       (unsigned long long)us[i].bw, us[i].bw ? "" : " (unlimited)",
                       (unsigned long long)us[i].rtt_ns);
            status_print_occ(&r, stdout);
        }
        if (states && draw(png, states, g.nspans, us[i].path))
            status = 1;
        free(states);
        munmap((void *)meta, len);
    }
    if (json)
        printf("]}\n");
    free(us);
    return status;
}

static int status_help(void)
{
    printf("usage: fmem status [URI] [--json] [--map FILE.png] [--node N]\n"
           "       fmem status --processes [--json]\n"
           "Space, fragmentation, services and applications of a pool or a daemon.\n"
           "URI: shm:/NAME or file:/PATH (read from the pool's metadata, read-only), or a\n"
           "daemon's socket: a socket's path, unix:/PATH or fmem://[localhost]/PATH.\n"
           "Without URI: $FMEM_URI, else the default service socket (%s).\n"
           "  --json        the report as one JSON object\n"
           "  --map F.png   draw the occupancy map of one node as a PNG\n"
           "  --node N      the node whose map is drawn (default 0)\n"
           "  --processes   the live figures of this user's processes: per far-memory region\n"
           "                the bytes, bandwidth and transfers of each path and the chosen\n"
           "                unit, read-ahead, stripe, I/O width and tier; per ssd:/zmem: node\n"
           "                its bytes, bandwidth and latency (pages in $FMEM_STATS_DIR, else\n"
           "                /dev/shm; those of processes that are gone are removed)\n",
           "/run/fmem/fmemd.sock");
    return 0;
}

static int status_usage_error(const char *what, const char *arg)
{
    fprintf(stderr, "fmem status: %s '%s' (see fmem status --help)\n", what, arg);
    return 2;
}

int cmd_status(int argc, char **argv)
{
    const char *uri = NULL, *png = NULL;
    unsigned node = 0;
    bool node_given = false, json = false, procs = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return status_help();
        if ((!strcmp(a, "--map") || !strcmp(a, "--node")) && i + 1 >= argc)
            return status_usage_error("option needs a value:", a);
        if (!strcmp(a, "--json")) {
            json = json_mode = true;
        } else if (!strcmp(a, "--processes")) {
            procs = true;
        } else if (!strcmp(a, "--map")) {
            png = argv[++i];
            size_t len = strlen(png);
            if (len < 5 || strcasecmp(png + len - 4, ".png"))
                return status_usage_error("--map writes a PNG; its name must end in .png, not",
                                          png);
        } else if (!strcmp(a, "--node")) {
            const char *v = argv[++i];
            char *end;
            errno = 0;
            unsigned long nv = strtoul(v, &end, 10);
            if (errno || *end || *v < '0' || *v > '9' || nv >= SVC_MAX_NODES) {
                char what[64];
                snprintf(what, sizeof what, "--node wants 0..%d, not", SVC_MAX_NODES - 1);
                return status_usage_error(what, v);
            }
            node = (unsigned)nv;
            node_given = true;
        } else if (a[0] == '-') {
            return status_usage_error("unknown option", a);
        } else if (uri) {
            return status_usage_error("one URI only; unexpected", a);
        } else {
            uri = a;
        }
    }
    if (procs) {
        if (uri || png || node_given)
            return status_usage_error("--processes takes no URI, --map or --node; got",
                                      uri ? uri : png ? png : "--node");
        return status_processes(json, stdout);
    }
    if (!uri || !*uri)
        uri = getenv("FMEM_URI");
    if (!uri || !*uri)
        uri = DEFAULT_SERVICE;
    /* a bare path: a daemon's socket, or say what was expected */
    char unix_uri[PATH_MAX + 8];
    if (uri[0] == '/') {
        struct stat st;
        errno = 0;
        if (stat(uri, &st) == 0 && S_ISSOCK(st.st_mode)) {
            snprintf(unix_uri, sizeof unix_uri, "unix:%s", uri);
            uri = unix_uri;
        } else {
            fprintf(stderr, "fmem status: %s: %s (a path must be a daemon's socket; a pool "
                            "file is file:%s)\n", uri,
                    errno ? strerror(errno) : "not a socket", uri);
            return 2;
        }
    }
    if (service_uri(uri))
        return status_socket(uri, png, node, json);
    return status_pool(uri, png, node, node_given, json);
}

int cmd_exec_daemon(const char *prog, int argc, char **argv)
{
    (void)argc;
    char self[PATH_MAX], cand[PATH_MAX + 64];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = 0;
        char *dir = dirname(self);
        /* installed side by side; in a build tree, libtool's .libs/ too */
        const char *fmt[] = {"%s/%s", "%s/../%s"};
        for (int i = 0; i < 2; i++) {
            snprintf(cand, sizeof cand, fmt[i], dir, prog);
            if (access(cand, X_OK) == 0) {
                argv[0] = cand;
                execv(cand, argv);
            }
        }
    }
    argv[0] = (char *)prog;
    execvp(prog, argv);
    fprintf(stderr, "fmem: cannot run %s: %s\n", prog, strerror(errno));
    return 127;
}
