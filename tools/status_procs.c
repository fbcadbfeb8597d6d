/* status_procs.c - `fmem status --processes`: the live far-memory figures
 * processes of this user publish (libfmem/far/stats_page.h): per region
 * the bytes, bandwidth and transfers of each path and the parameters the
 * policy chose; per ssd:/zmem: node its bytes, bandwidth and latency.
 * Pages of processes that are gone are removed; other users' pages, and
 * files that are not valid pages, are named on stderr and left alone. */
#include "status_procs.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "far/stats_page.h"
#include "fmem_far.h"
#include "status_print.h"

#define U(x) ((unsigned long long)(x))

static const char *tier_name(uint32_t t)
{
    switch (t) {
    case FMEM_REGION_TIER_AUTO: return "auto";
    case FMEM_REGION_TIER_NONE: return "none";
    case FMEM_REGION_TIER_FAST: return "fast";
    case FMEM_REGION_TIER_SLOW: return "slow";
    default: return "?";
    }
}

static double age_s(const struct sp_header *h)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double now = (double)ts.tv_sec + ts.tv_nsec / 1e9, then = (double)h->updated_ns / 1e9;
    return now > then ? now - then : 0;
}

static double mb_s(uint64_t bytes, uint64_t ns)
{
    return ns ? (double)bytes * 1e3 / (double)ns : 0; /* bytes per us = MB/s */
}

/* ---- text ----------------------------------------------------------------- */

static void fixed_text(char *b, size_t n, uint32_t set)
{
    snprintf(b, n, "%s%s%s%s%s%s", set & FMEM_REGION_TUNE_PREFETCH ? " read-ahead" : "",
             set & FMEM_REGION_TUNE_STRIPE ? " stripe" : "",
             set & FMEM_REGION_TUNE_IO_WIDTH ? " io-width" : "",
             set & FMEM_REGION_TUNE_TIER ? " tier" : "",
             set & FMEM_REGION_TUNE_FETCH ? " fetch" : "", set ? "" : " none (all chosen)");
}

static void text_region(const struct sp_region *r, FILE *f)
{
    char sz[32], unit[32], cache[32], held[32], remote[32], fx[96], fetch[32];
    status_human(sz, sizeof sz, r->size);
    status_human(unit, sizeof unit, r->unit);
    status_human(cache, sizeof cache, r->cache_bytes);
    status_human(held, sizeof held, r->cached_bytes);
    status_human(remote, sizeof remote, r->remote_bytes);
    status_human(fetch, sizeof fetch, r->unit * (r->fetch_units ? r->fetch_units : 1));
    fixed_text(fx, sizeof fx, r->fixed);
    fprintf(f, "  region %llu: %s in %s units, cache %s (%s held), %s in far memory\n",
            U(r->serial), sz, unit, cache, held, remote);
    fprintf(f, "    faults %llu (%llu missing, %llu/s), fetches %llu, read ahead %llu, "
               "evictions %llu, write-backs %llu, tier moves %llu, allocation failures %llu\n",
            U(r->faults), U(r->missing_faults), U(r->fault_rate), U(r->fetches),
            U(r->prefetches), U(r->evictions), U(r->writebacks), U(r->tier_moves),
            U(r->alloc_failures));
    fprintf(f, "    parameters: unit %s, fetch %s (%u units, at most %u), read-ahead %u units, "
               "stripe %u of %u paths, I/O width %u, tier %s; fixed:%s\n",
            unit, fetch, r->fetch_units, r->fetch_max, r->prefetch_units, r->stripe_width, r->paths, r->io_width, tier_name(r->tier),
            fx);
    fprintf(f, "    seen: %u %% sequential, %u %% writes, %u %% re-faults\n", r->seq_pct,
            r->write_pct, r->refault_pct);
    for (unsigned k = 0; k < r->npaths; k++) {
        const struct sp_path *p = &r->path[k];
        char in[32], out[32];
        status_human(in, sizeof in, p->bytes_fetched);
        status_human(out, sizeof out, p->bytes_written);
        fprintf(f, "    path %u (%s)%s: %llu chunks, read %s, written %s, %llu transfers, "
                   "%.2f MB/s, %.1f us each\n",
                p->node, p->kind[0] ? p->kind : "?", p->placing ? " placing" : "",
                U(p->chunks), in, out, U(p->ops), p->bandwidth / 1e6,
                p->ops ? (double)p->busy_ns / 1e3 / (double)p->ops : 0.0);
    }
}

static void text_node(const struct sp_node *n, FILE *f)
{
    char cap[32], held[32], stored[32], rd[32], wr[32];
    status_human(cap, sizeof cap, n->capacity_bytes);
    status_human(held, sizeof held, n->held_bytes);
    status_human(stored, sizeof stored, n->stored_bytes);
    status_human(rd, sizeof rd, n->bytes_read);
    status_human(wr, sizeof wr, n->bytes_written);
    fprintf(f, "  node %s (%s): capacity %s, holds %s", n->kind, n->detail, cap, held);
    if (n->stored_bytes)
        fprintf(f, " for %s stored", stored);
    fprintf(f, "\n    read %s in %llu ops (%.2f MB/s, %.1f us each), written %s in %llu ops "
               "(%.2f MB/s, %.1f us each), %llu errors%s%s\n",
            rd, U(n->reads), mb_s(n->bytes_read, n->read_ns),
            n->reads ? (double)n->read_ns / 1e3 / (double)n->reads : 0.0, wr, U(n->writes),
            mb_s(n->bytes_written, n->write_ns),
            n->writes ? (double)n->write_ns / 1e3 / (double)n->writes : 0.0, U(n->errors),
            n->last_error[0] ? ", last: " : "", n->last_error);
}

static void text_process(const struct sp_snapshot *s, FILE *f)
{
    const struct sp_header *h = &s->h;
    fprintf(f, "process %llu (%s): %u region%s, %u ssd:/zmem: node%s; figures %.1f s old "
               "(rewritten every %llu ms)\n",
            U(h->pid), h->program, h->nregions, h->nregions == 1 ? "" : "s", h->nnodes,
            h->nnodes == 1 ? "" : "s", age_s(h), U(h->interval_ms));
    for (unsigned i = 0; i < h->nregions; i++)
        text_region(&s->regions[i], f);
    for (unsigned i = 0; i < h->nnodes; i++)
        text_node(&s->nodes[i], f);
    if (h->regions_unlisted || h->nodes_unlisted)
        fprintf(f, "  (%u more regions and %u more nodes not listed)\n", h->regions_unlisted,
                h->nodes_unlisted);
}

/* ---- JSON ----------------------------------------------------------------- */

static void json_region(const struct sp_region *r, FILE *f)
{
    fprintf(f, "{\"region\": %llu, \"size\": %llu, \"unit\": %llu, \"cache_bytes\": %llu, "
               "\"cached_bytes\": %llu, \"remote_bytes\": %llu, \"faults\": %llu, "
               "\"missing_faults\": %llu, \"fault_rate\": %llu, \"fetches\": %llu, "
               "\"prefetches\": %llu, \"evictions\": %llu, \"writebacks\": %llu, "
               "\"bytes_fetched\": %llu, \"bytes_written\": %llu, \"tier_moves\": %llu, "
               "\"alloc_failures\": %llu, \"parameters\": {\"unit\": %llu, "
               "\"prefetch_units\": %u, \"stripe_width\": %u, \"paths\": %u, \"io_width\": %u, "
               "\"fetch_units\": %u, \"fetch_max\": %u, "
               "\"tier\": \"%s\", \"fixed\": {\"prefetch\": %s, \"stripe\": %s, "
               "\"io_width\": %s, \"tier\": %s, \"fetch\": %s}}, \"seq_pct\": %u, "
               "\"write_pct\": %u, "
               "\"refault_pct\": %u, \"paths\": [",
            U(r->serial), U(r->size), U(r->unit), U(r->cache_bytes), U(r->cached_bytes),
            U(r->remote_bytes), U(r->faults), U(r->missing_faults), U(r->fault_rate),
            U(r->fetches), U(r->prefetches), U(r->evictions), U(r->writebacks),
            U(r->bytes_fetched), U(r->bytes_written), U(r->tier_moves), U(r->alloc_failures),
            U(r->unit), r->prefetch_units, r->stripe_width, r->paths, r->io_width,
            r->fetch_units, r->fetch_max,
            tier_name(r->tier), r->fixed & FMEM_REGION_TUNE_PREFETCH ? "true" : "false",
            r->fixed & FMEM_REGION_TUNE_STRIPE ? "true" : "false",
            r->fixed & FMEM_REGION_TUNE_IO_WIDTH ? "true" : "false",
            r->fixed & FMEM_REGION_TUNE_TIER ? "true" : "false",
            r->fixed & FMEM_REGION_TUNE_FETCH ? "true" : "false", r->seq_pct, r->write_pct,
            r->refault_pct);
    for (unsigned k = 0; k < r->npaths; k++) {
        const struct sp_path *p = &r->path[k];
        fprintf(f, "%s{\"node\": %u, \"kind\": ", k ? ", " : "", p->node);
        json_string(f, p->kind);
        fprintf(f, ", \"placing\": %s, \"chunks\": %llu, \"bytes_fetched\": %llu, "
                   "\"bytes_written\": %llu, \"transfers\": %llu, \"busy_ns\": %llu, "
                   "\"bandwidth\": %llu}",
                p->placing ? "true" : "false", U(p->chunks), U(p->bytes_fetched),
                U(p->bytes_written), U(p->ops), U(p->busy_ns), U(p->bandwidth));
    }
    fputs("]}", f);
}

static void json_sp_node(const struct sp_node *n, FILE *f)
{
    fputs("{\"kind\": ", f);
    json_string(f, n->kind);
    fputs(", \"detail\": ", f);
    json_string(f, n->detail);
    fprintf(f, ", \"capacity_bytes\": %llu, \"held_bytes\": %llu, \"stored_bytes\": %llu, "
               "\"reads\": %llu, \"writes\": %llu, \"bytes_read\": %llu, "
               "\"bytes_written\": %llu, \"read_ns\": %llu, \"write_ns\": %llu, "
               "\"read_mb_s\": %.3f, \"write_mb_s\": %.3f, \"errors\": %llu, \"last_error\": ",
            U(n->capacity_bytes), U(n->held_bytes), U(n->stored_bytes), U(n->reads),
            U(n->writes), U(n->bytes_read), U(n->bytes_written), U(n->read_ns), U(n->write_ns),
            mb_s(n->bytes_read, n->read_ns), mb_s(n->bytes_written, n->write_ns), U(n->errors));
    json_string(f, n->last_error);
    fputc('}', f);
}

static void json_process(const struct sp_snapshot *s, FILE *f)
{
    const struct sp_header *h = &s->h;
    fprintf(f, "{\"pid\": %llu, \"program\": ", U(h->pid));
    json_string(f, h->program);
    fprintf(f, ", \"age_s\": %.3f, \"interval_ms\": %llu, \"regions_unlisted\": %u, "
               "\"nodes_unlisted\": %u, \"regions\": [",
            age_s(h), U(h->interval_ms), h->regions_unlisted, h->nodes_unlisted);
    for (unsigned i = 0; i < h->nregions; i++) {
        fputs(i ? ", " : "", f);
        json_region(&s->regions[i], f);
    }
    fputs("], \"nodes\": [", f);
    for (unsigned i = 0; i < h->nnodes; i++) {
        fputs(i ? ", " : "", f);
        json_sp_node(&s->nodes[i], f);
    }
    fputs("]}", f);
}

/* ---- the directory -------------------------------------------------------- */

/* Remove dir/name if it is ours (never another user's, never through a
 * symbolic link: unlink removes the link itself). */
static int unlink_page(const char *dir, const char *name)
{
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (lstat(path, &st) || st.st_uid != geteuid())
        return -1;
    return unlink(path);
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

static int is_page_name(const struct dirent *d)
{
    return !strncmp(d->d_name, SP_PREFIX, strlen(SP_PREFIX));
}

int status_processes(bool json, FILE *out)
{
    const char *dir = sp_dir();
    struct dirent **ents;
    int n = scandir(dir, &ents, is_page_name, by_name);
    if (n < 0) {
        fprintf(stderr, "fmem: %s: %s\n", dir, strerror(errno));
        return 1;
    }
    struct sp_snapshot *s = malloc(sizeof *s);
    if (!s) {
        fprintf(stderr, "fmem: %s\n", strerror(ENOMEM));
        for (int i = 0; i < n; i++)
            free(ents[i]);
        free(ents);
        return 1;
    }
    uint64_t me = geteuid();
    unsigned shown = 0, others = 0, stale = 0;
    if (json) {
        fputs("{\"kind\": \"processes\", \"directory\": ", out);
        json_string(out, dir);
        fputs(", \"processes\": [", out);
    }
    for (int i = 0; i < n; i++) {
        const char *name = ents[i]->d_name, *why;
        uint64_t uid, pid;
        int err;
        if (!sp_parse_name(name, &uid, &pid)) {
            fprintf(stderr, "fmem: %s/%s: not a stats page's name, skipped\n", dir, name);
            continue;
        }
        if (uid != me) {
            others++; /* not ours to read or remove */
            continue;
        }
        switch (sp_read(dir, name, s, &why, &err)) {
        case SP_LIVE:
            if (json) {
                fputs(shown ? ", " : "", out);
                json_process(s, out);
            } else {
                text_process(s, out);
            }
            shown++;
            break;
        case SP_STALE:
            /* its process is gone, or its pid runs a process started at
             * another time (sp_read compared the start times) */
            stale++;
            if (unlink_page(dir, name) == 0)
                fprintf(stderr, "fmem: %s/%s: process %llu is gone; removed its page\n", dir,
                        name, U(pid));
            break;
        case SP_BAD:
            fprintf(stderr, "fmem: %s/%s: %s; skipped\n", dir, name, why);
            /* a page whose process is gone goes, whatever is in it */
            if (!sp_proc_start(pid) || pid == (uint64_t)getpid()) {
                if (unlink_page(dir, name) == 0)
                    fprintf(stderr, "fmem: %s/%s: process %llu is gone; removed its page\n",
                            dir, name, U(pid));
            }
            break;
        case SP_FOREIGN:
            fprintf(stderr, "fmem: %s/%s: owned by another user; skipped\n", dir, name);
            break;
        case SP_UNREADABLE:
            fprintf(stderr, "fmem: %s/%s: %s; skipped\n", dir, name, strerror(err));
            break;
        }
    }
    if (json)
        fprintf(out, "], \"other_users_pages\": %u, \"stale_removed\": %u}\n", others, stale);
    else if (!shown)
        fprintf(out, "no process of this user publishes far-memory figures in %s\n", dir);
    if (others && !json)
        fprintf(stderr, "fmem: %u page%s of other users in %s not shown\n", others,
                others == 1 ? "" : "s", dir);
    for (int i = 0; i < n; i++)
        free(ents[i]);
    free(ents);
    free(s);
    return 0;
}
