/* uri.c - "mem:?size=1G&rtt_ns=2000&bw=1G", "shm:/NAME?size=...", "file:/PATH",
 * "ssd:/PATH?size=...", "zmem:?size=...&codec=lz4",
 * several joined by ';'. Every unknown key or malformed value is an error:
 * a typo must not silently open a different pool than the one asked for. */
#include "uri.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmem.h"
#include "size_parse.h"
#include "transport.h" /* enum tp_rtt_mode */

bool uri_parse_size(const char *s, uint64_t *out)
{
    return size_parse(s, out); /* the one size parser: size_parse.h */
}

/* why the last uri_parse of this thread failed (uri_last_error) */
static _Thread_local char last_error[160];

static int bad(const char *fmt, const char *a, const char *b)
{
    snprintf(last_error, sizeof last_error, fmt, a, b);
    return FMEM_EURI;
}

void uri_set_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
}

const char *uri_last_error(void)
{
    return last_error;
}

const char *fmem_uri_error(void)
{
    return last_error;
}

static bool parse_uint(const char *s, uint64_t max, uint64_t *out)
{
    uint64_t v;
    if (!uri_parse_size(s, &v) || v > max)
        return false;
    *out = v;
    return true;
}

/* Keys of the ssd: and zmem: backends: 0 taken, FMEM_EURI bad value, 1 not
 * a key of this backend. */
static int parse_backend_key(const char *k, const char *v, struct node_uri *u)
{
    uint64_t x;
    bool ssd = u->kind == URI_SSD;
    if (ssd && !strcmp(k, "io")) {
        if (strcmp(v, "uring") && strcmp(v, "sync"))
            return bad("bad value io='%.60s' (want uring or sync)%s", v, "");
        u->io = v[0] == 's';
    } else if (ssd && !strcmp(k, "direct")) {
        if (strcmp(v, "0") && strcmp(v, "1") && strcmp(v, "auto"))
            return bad("bad value direct='%.60s' (want 0, 1 or auto)%s", v, "");
        u->direct = v[0] == 'a' ? -1 : v[0] - '0';
    } else if (!ssd && !strcmp(k, "codec")) {
        if (strcmp(v, "lz4") && strcmp(v, "zstd"))
            return bad("bad value codec='%.60s' (want lz4 or zstd)%s", v, "");
        strcpy(u->codec, v);
    } else if (!ssd && !strcmp(k, "level")) {
        if (!parse_uint(v, 19, &x) || x == 0)
            return bad("bad value level='%.60s' (want 1..19)%s", v, "");
        u->level = (int)x;
    } else if (!ssd && !strcmp(k, "block")) {
        if (!uri_parse_size(v, &u->block) || u->block < 4096 || u->block > (1u << 20) ||
            (u->block & (u->block - 1)))
            return bad("bad value block='%.60s' (want a power of two, 4K..1M)%s", v, "");
    } else if (!ssd && !strcmp(k, "limit")) {
        if (!uri_parse_size(v, &u->limit) || u->limit == 0)
            return bad("bad value limit='%.60s'%s", v, "");
    } else {
        return 1;
    }
    return 0;
}

static int parse_query(char *q, struct node_uri *u)
{
    for (char *save = NULL, *kv = strtok_r(q, "&", &save); kv; kv = strtok_r(NULL, "&", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq)
            return bad("parameter '%.60s%s' has no value (want KEY=VALUE)", kv, "");
        *eq = 0;
        const char *k = kv, *v = eq + 1;
        uint64_t x;
        int r;
        if (!strcmp(k, "size")) {
            if (!uri_parse_size(v, &u->size) || u->size == 0)
                return bad("bad value %.60s='%.60s'", k, v);
        } else if (!strcmp(k, "nodes")) {
            if (!parse_uint(v, URI_MAX_NODES, &x) || x == 0)
                return bad("bad value %.60s='%.60s'", k, v);
            u->nodes = (unsigned)x;
        } else if (!strcmp(k, "rtt_ns")) {
            if (!parse_uint(v, 1000000000u, &u->rtt_ns))
                return bad("bad value %.60s='%.60s'", k, v);
        } else if (!strcmp(k, "bw")) {
            /* bytes per second, "1G" = 2^30 B/s (size_parse.h); at least
             * 4K/s so that one unit's transfer time stays below a second */
            bool linkless = u->kind == URI_RDMA || u->kind == URI_SSD || u->kind == URI_ZMEM;
            if (!uri_parse_size(v, &u->bw) || u->bw < 4096 || linkless)
                return bad(linkless ? "bad value %.60s='%.60s' (mem:, shm: and file: only)"
                                               : "bad value %.60s='%.60s' (want bytes per "
                                                 "second, at least 4K)",
                           k, v);
        } else if (!strcmp(k, "rtt_mode")) {
            if (!strcmp(v, "spin"))
                u->rtt_mode = TP_RTT_SPIN;
            else if (!strcmp(v, "nic"))
                u->rtt_mode = TP_RTT_NIC;
            else
                return bad("bad value %.60s='%.60s'", k, v);
        } else if (!strcmp(k, "user")) {
            if (!parse_uint(v, 16383, &x) || x == 0)
                return bad("bad value %.60s='%.60s'", k, v);
            u->user = (unsigned)x;
        } else if (!strcmp(k, "src") && u->kind == URI_RDMA) {
            if (!*v || strlen(v) >= sizeof u->src)
                return bad("bad value %.60s='%.60s'", k, v);
            strcpy(u->src, v);
        } else if (!strcmp(k, "token") && u->kind == URI_RDMA) {
            if (!*v || strlen(v) >= sizeof u->token)
                return bad("bad value %.60s='%.60s'", k, v);
            strcpy(u->token, v);
        } else if (!strcmp(k, "create")) {
            if (strcmp(v, "0") && strcmp(v, "1"))
                return bad("bad value %.60s='%.60s'", k, v);
            u->create = v[0] == '1';
        } else if ((u->kind == URI_SSD || u->kind == URI_ZMEM) &&
                   (r = parse_backend_key(k, v, u)) != 1) {
            if (r)
                return r;
        } else {
            return bad("unknown parameter '%.60s'%s", k, u->kind != URI_RDMA &&
                       (!strcmp(k, "src") || !strcmp(k, "token")) ? " (rdma:// only)" : "");
        }
    }
    return 0;
}

bool uri_split_host_port(const char *s, char *host, size_t hcap, char *port, size_t pcap)
{
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s || !colon[1] || (size_t)(colon - s) >= hcap ||
        strlen(colon + 1) >= pcap)
        return false;
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = 0;
    strcpy(port, colon + 1);
    return true;
}

static int parse_one(char *s, struct node_uri *u)
{
    memset(u, 0, sizeof *u);
    u->nodes = 1;
    u->create = true;
    char *q = strchr(s, '?');
    if (q)
        *q++ = 0;
    if (!strncmp(s, "mem:", 4)) {
        u->kind = URI_MEM;
        if (s[4])
            return bad("'%.60s': mem: takes no path%s", s, "");
    } else if (!strncmp(s, "shm:", 4)) {
        const char *name = s + 4;
        while (*name == '/')
            name++;
        if (!*name || strchr(name, '/') || strlen(name) > NAME_MAX)
            return bad("'%.60s': want shm:/NAME (one name, no further '/')%s", s, "");
        u->kind = URI_SHM;
        snprintf(u->path, sizeof u->path, "/dev/shm/%s", name);
    } else if (!strncmp(s, "file:", 5)) {
        if (s[5] != '/' || strlen(s + 5) >= sizeof u->path)
            return bad("'%.60s': want file:/ABSOLUTE/PATH%s", s, "");
        u->kind = URI_FILE;
        strcpy(u->path, s + 5);
    } else if (!strncmp(s, "rdma://", 7)) {
        /* rdma://HOST:PORT?token=FILE */
        if (!uri_split_host_port(s + 7, u->path, sizeof u->path, u->port, sizeof u->port))
            return bad("'%.60s': want rdma://HOST:PORT%s", s, "");
        for (const char *c = u->port; *c; c++)
            if (*c < '0' || *c > '9')
                return bad("'%.60s': bad port '%.10s'", s, u->port);
        u->kind = URI_RDMA;
    } else if (!strncmp(s, "ssd:", 4)) {
        /* ssd:/PATH: a file or block device holding the data area */
        if (s[4] != '/' || s[5] == 0 || s[strlen(s) - 1] == '/' || strlen(s + 4) >= sizeof u->path)
            return bad("'%.60s': want ssd:/ABSOLUTE/PATH (a file or a block device)%s", s, "");
        u->kind = URI_SSD;
        u->direct = -1;
        strcpy(u->path, s + 4);
    } else if (!strncmp(s, "zmem:", 5)) {
        u->kind = URI_ZMEM;
        strcpy(u->codec, "lz4");
        if (s[5])
            return bad("'%.60s': zmem: takes no path%s", s, "");
    } else {
        return bad("'%.60s': unknown scheme (want mem:, shm:, file:, rdma://, ssd: or zmem:)%s",
                   s, "");
    }
    if (q && parse_query(q, u))
        return FMEM_EURI;
    if (u->kind != URI_MEM && u->nodes != 1)
        return bad("'%.60s': nodes= is for mem: pools only%s", s, "");
    return 0;
}

int uri_parse(const char *uri, struct node_uri *out, int max)
{
    last_error[0] = 0;
    if (!uri || strlen(uri) > 16 * PATH_MAX)
        return bad("the URI is missing or too long%s%s", "", "");
    char *dup = strdup(uri), *save = NULL;
    if (!dup)
        return FMEM_ENOMEM;
    int n = 0, rc = 0;
    for (char *part = strtok_r(dup, ";", &save); part; part = strtok_r(NULL, ";", &save)) {
        while (*part == ' ')
            part++;
        char most[16];
        snprintf(most, sizeof most, "%d", max);
        if (n >= max) {
            rc = bad("too many nodes (at most %s)%s", most, "");
            break;
        }
        if ((rc = parse_one(part, &out[n])) != 0)
            break;
        n++;
    }
    free(dup);
    if (rc)
        return rc;
    return n ? n : bad("the URI names no pool%s%s", "", "");
}
