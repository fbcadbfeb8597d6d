/* status_print.c - text and JSON renderings of status reports. */
#include "status_print.h"

#define U(x) ((unsigned long long)(x))

void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++)
        if (*c == '"' || *c == '\\')
            fprintf(f, "\\%c", *c);
        else if (*c < 0x20 || *c == 0x7f)
            fprintf(f, "\\u%04x", *c);
        else
            fputc(*c, f);
    fputc('"', f);
}

static void json_occ_fields(FILE *f, const struct occ_report *r)
{
    fprintf(f, "\"capacity_bytes\": %llu, \"used_bytes\": %llu, \"free_bytes\": %llu, "
               "\"metadata_bytes\": %llu, \"largest_free_bytes\": %llu, "
               "\"fragmentation\": %.6f, \"sections\": %llu, \"spans\": {\"total\": %llu, "
               "\"free\": %llu, \"chunk\": %llu, \"contended\": %llu, \"block\": %llu, "
               "\"moving\": %llu}, \"users\": {\"active\": %llu, \"slots\": %llu}, "
               "\"live_blocks\": {",
            U(r->capacity_bytes), U(r->used_bytes), U(r->free_bytes), U(r->metadata_bytes),
            U(r->largest_free_bytes), r->fragmentation, U(r->nsections), U(r->nspans),
            U(r->spans_free), U(r->spans_chunk), U(r->spans_contended), U(r->spans_block),
            U(r->spans_moving), U(r->users_active), U(r->nusers ? r->nusers - 1 : 0));
    const char *sep = "";
    for (int k = 0; k < FMEM_SIZE_CLASSES; k++) {
        if (!r->blocks[k])
            continue;
        fprintf(f, "%s\"%llu\": %llu", sep, U(FMEM_CHUNK_SIZE << k), U(r->blocks[k]));
        sep = ", ";
    }
    fputc('}', f);
}

void json_node(FILE *f, unsigned index, const char *pool, const char *path,
               const struct st_node *conn, const struct occ_report *r)
{
    fprintf(f, "{\"node\": %u", index);
    if (pool) {
        fputs(", \"pool\": ", f);
        json_string(f, pool);
    }
    if (path) {
        fputs(", \"path\": ", f);
        json_string(f, path);
    }
    if (conn)
        fprintf(f, ", \"user\": %llu, \"connected\": %s", U(conn->uid),
                conn->connected ? "true" : "false");
    fputs(", ", f);
    json_occ_fields(f, r);
    fputc('}', f);
}

/* ---- text ----------------------------------------------------------------- */

void status_human(char *b, size_t n, uint64_t v)
{
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double d = (double)v;
    int i = 0;
    while (d >= 1024 && i < 4) {
        d /= 1024;
        i++;
    }
    snprintf(b, n, i ? "%.1f %s" : "%.0f %s", d, u[i]);
}

void status_print_occ(const struct occ_report *r, FILE *f)
{
    char cap[32], used[32], fr[32], big[32], meta[32];
    status_human(cap, sizeof cap, r->capacity_bytes);
    status_human(used, sizeof used, r->used_bytes);
    status_human(fr, sizeof fr, r->free_bytes);
    status_human(big, sizeof big, r->largest_free_bytes);
    status_human(meta, sizeof meta, r->metadata_bytes);
    fprintf(f, "  capacity %s, used %s (%.1f%%), free %s, metadata %s\n", cap, used,
            r->capacity_bytes ? 100.0 * (double)r->used_bytes / (double)r->capacity_bytes : 0.0, fr,
            meta);
    fprintf(f, "  largest free block %s, fragmentation %.1f%%\n", big, 100 * r->fragmentation);
    fprintf(f, "  spans: %llu free, %llu chunk layer (%llu contended), %llu in span blocks, "
               "%llu moving\n",
            (unsigned long long)r->spans_free, (unsigned long long)r->spans_chunk,
            (unsigned long long)r->spans_contended, (unsigned long long)r->spans_block,
            (unsigned long long)r->spans_moving);
    fprintf(f, "  user ids in use %llu of %llu\n", (unsigned long long)r->users_active,
            (unsigned long long)(r->nusers - 1));
    fprintf(f, "  live blocks by size:");
    int any = 0;
    for (int k = 0; k < FMEM_SIZE_CLASSES; k++) {
        if (!r->blocks[k])
            continue;
        char sz[32];
        status_human(sz, sizeof sz, FMEM_CHUNK_SIZE << k);
        fprintf(f, " %s x%llu", sz, (unsigned long long)r->blocks[k]);
        any = 1;
    }
    fprintf(f, any ? "\n" : " none\n");
}


static void text_service(const struct st_report *r, FILE *f)
{
    const struct st_service *s = &r->service;
    fprintf(f, "allocation service %s (pid %llu, up %.0f s): %llu workers, %llu applications\n",
            s->socket, U(s->pid), s->uptime_ns / 1e9, U(s->workers), U(s->apps));
    fprintf(f, "  per-application limits: %llu bytes, %llu allocations (0: none)\n",
            U(s->app_max_bytes), U(s->app_max_allocs));
    fprintf(f, "  departed applications %llu (blocks given back %llu, %llu being torn down), "
               "rejected messages %llu\n",
            U(s->apps_departed), U(s->blocks_reaped), U(s->apps_reaping), U(s->bad_messages));
    fprintf(f, "  connections: %llu applications (at most %llu, %llu per user), %llu opening "
               "(at most %llu, %llu per user)\n",
            U(s->apps), U(s->max_apps), U(s->max_apps_per_user), U(s->opening),
            U(s->max_opening), U(s->max_opening_per_user));
    for (unsigned i = 0; i < r->nnodes; i++) {
        const struct st_node *n = &r->nodes[i];
        fprintf(f, "memory node %llu: %s via %s, user %llu, %s\n", U(n->index), n->pool, n->path,
                U(n->uid), n->connected ? "connected" : "reconnecting");
        status_print_occ(&n->occ, f);
    }
    fprintf(f, "applications:\n");
    for (unsigned i = 0; i < r->napps; i++) {
        const struct st_app *a = &r->apps[i];
        fprintf(f, "  app %llu: %s pid %llu uid %llu, holds %llu blocks (%llu bytes); %llu "
                   "allocs, %llu frees, %llu pings, %llu errors, %llu over quota\n",
                U(a->id), a->name, U(a->pid), U(a->uid), U(a->blocks), U(a->bytes), U(a->allocs),
                U(a->frees), U(a->pings), U(a->errors), U(a->over_quota));
        fprintf(f, "    block cache: %llu refills, %llu trims, %llu blocks revoked\n",
                U(a->refills), U(a->trims), U(a->revoked));
    }
    if (s->apps_unlisted)
        fprintf(f, "  (%llu more applications not listed)\n", U(s->apps_unlisted));
    for (unsigned i = 0; i < r->nworkers; i++) {
        const struct st_worker *w = &r->workers[i];
        fprintf(f, "worker %llu: %llu applications, %llu requests served, %llu sleeps, idle spin "
                   "%llu us\n",
                U(w->index), U(w->apps), U(w->served), U(w->sleeps), U(w->spin_ns / 1000));
    }
}

static void text_mnode(const struct st_report *r, FILE *f)
{
    const struct st_mnode *s = &r->mnode;
    fprintf(f, "memory node %s (pid %llu, up %.0f s)\n", s->pool, U(s->pid), s->uptime_ns / 1e9);
    for (unsigned i = 0; i < r->nnodes; i++)
        status_print_occ(&r->nodes[i].occ, f);
    fprintf(f, "  key regenerator: %llu keys issued in %llu passes, %.0f keys/s while working, "
               "last pass %llu\n",
            U(s->keys), U(s->key_passes),
            s->key_work_ns ? (double)s->keys / (s->key_work_ns / 1e9) : 0.0, U(s->key_last_pass));
    fprintf(f, "services: %llu\n", U(s->services));
    for (unsigned i = 0; i < r->npeers; i++) {
        const struct st_peer *p = &r->peers[i];
        fprintf(f, "  user %llu: %s pid %llu, %llu applications holding %llu bytes, last "
                   "heartbeat %.0f ms ago\n",
                U(p->uid), p->name, U(p->pid), U(p->apps), U(p->app_bytes),
                p->heartbeat_age_ns / 1e6);
    }
    fprintf(f, "recoveries: %llu (%llu queued)\n", U(s->recoveries), U(s->recoveries_queued));
    for (unsigned i = 0; i < r->nrecoveries; i++) {
        const struct st_recovery *h = &r->recoveries[i];
        fprintf(f, "  user %llu (%s): %s, %llu blocks, %llu bytes, %.3f ms\n", U(h->uid), h->name,
                h->why, U(h->blocks), U(h->bytes), h->elapsed_ns / 1e6);
    }
}

void status_print_text(const struct st_report *r, FILE *f)
{
    if (r->has_service)
        text_service(r, f);
    else if (r->has_mnode)
        text_mnode(r, f);
}

/* ---- JSON ----------------------------------------------------------------- */

static void json_nodes(const struct st_report *r, FILE *f, bool service)
{
    fputs("\"nodes\": [", f);
    for (unsigned i = 0; i < r->nnodes; i++) {
        const struct st_node *n = &r->nodes[i];
        fputs(i ? ", " : "", f);
        json_node(f, (unsigned)n->index, n->pool, service ? n->path : NULL, service ? n : NULL,
                  &n->occ);
    }
    fputc(']', f);
}

static void json_service(const struct st_report *r, FILE *f)
{
    const struct st_service *s = &r->service;
    fputs("{\"kind\": \"service\", \"socket\": ", f);
    json_string(f, s->socket);
    fprintf(f, ", \"pid\": %llu, \"uptime_s\": %.3f, \"application_count\": %llu, "
               "\"limits\": {\"app_max_bytes\": %llu, \"app_max_allocs\": %llu, "
               "\"max_applications\": %llu, \"max_applications_per_user\": %llu, "
               "\"max_opening\": %llu, \"max_opening_per_user\": %llu}, "
               "\"opening\": %llu, \"departed_applications\": %llu, \"blocks_reaped\": %llu, "
               "\"being_torn_down\": %llu, \"rejected_messages\": %llu, "
               "\"applications_unlisted\": %llu, ",
            U(s->pid), s->uptime_ns / 1e9, U(s->apps), U(s->app_max_bytes),
            U(s->app_max_allocs), U(s->max_apps), U(s->max_apps_per_user), U(s->max_opening),
            U(s->max_opening_per_user), U(s->opening), U(s->apps_departed), U(s->blocks_reaped),
            U(s->apps_reaping), U(s->bad_messages), U(s->apps_unlisted));
    json_nodes(r, f, true);
    fputs(", \"applications\": [", f);
    for (unsigned i = 0; i < r->napps; i++) {
        const struct st_app *a = &r->apps[i];
        fprintf(f, "%s{\"id\": %llu, \"name\": ", i ? ", " : "", U(a->id));
        json_string(f, a->name);
        fprintf(f, ", \"pid\": %llu, \"uid\": %llu, \"blocks\": %llu, \"bytes\": %llu, "
                   "\"allocs\": %llu, \"frees\": %llu, \"pings\": %llu, \"errors\": %llu, "
                   "\"over_quota\": %llu, \"cache\": {\"refills\": %llu, \"trims\": %llu, "
                   "\"revoked\": %llu}}",
                U(a->pid), U(a->uid), U(a->blocks), U(a->bytes), U(a->allocs), U(a->frees),
                U(a->pings), U(a->errors), U(a->over_quota), U(a->refills), U(a->trims),
                U(a->revoked));
    }
    fputs("], \"workers\": [", f);
    for (unsigned i = 0; i < r->nworkers; i++) {
        const struct st_worker *w = &r->workers[i];
        fprintf(f, "%s{\"worker\": %llu, \"applications\": %llu, \"served\": %llu, "
                   "\"sleeps\": %llu, \"idle_spin_ns\": %llu}",
                i ? ", " : "", U(w->index), U(w->apps), U(w->served), U(w->sleeps),
                U(w->spin_ns));
    }
    fputs("]}\n", f);
}

static void json_mnode(const struct st_report *r, FILE *f)
{
    const struct st_mnode *s = &r->mnode;
    fputs("{\"kind\": \"memory_node\", \"pool\": ", f);
    json_string(f, s->pool);
    fprintf(f, ", \"pid\": %llu, \"uptime_s\": %.3f, \"key_regenerator\": {\"keys\": %llu, "
               "\"passes\": %llu, \"work_ns\": %llu, \"last_pass\": %llu}, "
               "\"recoveries\": %llu, \"recoveries_queued\": %llu, ",
            U(s->pid), s->uptime_ns / 1e9, U(s->keys), U(s->key_passes), U(s->key_work_ns),
            U(s->key_last_pass), U(s->recoveries), U(s->recoveries_queued));
    json_nodes(r, f, false);
    fputs(", \"services\": [", f);
    for (unsigned i = 0; i < r->npeers; i++) {
        const struct st_peer *p = &r->peers[i];
        fprintf(f, "%s{\"user\": %llu, \"name\": ", i ? ", " : "", U(p->uid));
        json_string(f, p->name);
        fprintf(f, ", \"pid\": %llu, \"applications\": %llu, \"app_bytes\": %llu, "
                   "\"heartbeat_age_ms\": %.3f}",
                U(p->pid), U(p->apps), U(p->app_bytes), p->heartbeat_age_ns / 1e6);
    }
    fputs("], \"recent_recoveries\": [", f);
    for (unsigned i = 0; i < r->nrecoveries; i++) {
        const struct st_recovery *h = &r->recoveries[i];
        fprintf(f, "%s{\"user\": %llu, \"name\": ", i ? ", " : "", U(h->uid));
        json_string(f, h->name);
        fputs(", \"why\": ", f);
        json_string(f, h->why);
        fprintf(f, ", \"blocks\": %llu, \"bytes\": %llu, \"elapsed_ms\": %.3f}", U(h->blocks),
                U(h->bytes), h->elapsed_ns / 1e6);
    }
    fputs("]}\n", f);
}

void status_print_json(const struct st_report *r, FILE *f)
{
    if (r->has_service)
        json_service(r, f);
    else if (r->has_mnode)
        json_mnode(r, f);
    else
        fputs("{}\n", f);
}
