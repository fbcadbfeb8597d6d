/* uidtab.c - per-user counts of a daemon's connections (uidtab.h). A plain
 * array: a daemon sees few distinct users, and a lookup happens once per
 * connection or scan request, never per allocation. */
#include "service/uidtab.h"

#include <stdlib.h>

static struct uid_use *find(const struct uidtab *t, uid_t uid)
{
    for (unsigned i = 0; i < t->n; i++)
        if (t->v[i].uid == uid)
            return &t->v[i];
    return NULL;
}

/* Bring the bucket up to date. */
static void refill(struct uid_use *u, uint64_t now)
{
    if (now > u->scans_at) {
        u->tokens += (double)(now - u->scans_at) * UID_SCAN_RATE / 1e9;
        if (u->tokens > UID_SCAN_BURST)
            u->tokens = UID_SCAN_BURST;
    }
    u->scans_at = now;
}

struct uid_use *uidtab_get(struct uidtab *t, uid_t uid, uint64_t now)
{
    struct uid_use *u = find(t, uid);
    if (u)
        return u;
    if (t->n == t->cap) {
        unsigned ncap = t->cap ? 2 * t->cap : 16;
        struct uid_use *nv = realloc(t->v, ncap * sizeof *nv);
        if (!nv)
            return NULL;
        t->v = nv;
        t->cap = ncap;
    }
    u = &t->v[t->n++];
    *u = (struct uid_use){.uid = uid, .scans_at = now, .tokens = UID_SCAN_BURST};
    return u;
}

struct uid_use uidtab_peek(const struct uidtab *t, uid_t uid)
{
    struct uid_use *u = find(t, uid);
    return u ? *u : (struct uid_use){.uid = uid, .tokens = UID_SCAN_BURST};
}

bool uidtab_add(struct uidtab *t, uid_t uid, bool pending, uint64_t now)
{
    struct uid_use *u = uidtab_get(t, uid, now);
    if (!u)
        return false;
    if (pending)
        u->pending++;
    else
        u->live++;
    return true;
}

void uidtab_sub(struct uidtab *t, uid_t uid, bool pending, uint64_t now)
{
    struct uid_use *u = find(t, uid);
    if (!u)
        return;
    unsigned *c = pending ? &u->pending : &u->live;
    if (*c)
        (*c)--;
    uidtab_trim(t, now);
}

bool uidtab_scan_allowed(struct uidtab *t, uid_t uid, uint64_t now)
{
    struct uid_use *u = uidtab_get(t, uid, now);
    if (!u)
        return false;
    refill(u, now);
    if (u->tokens < 1)
        return false;
    u->tokens -= 1;
    return true;
}

uid_t uidtab_most_pending(const struct uidtab *t)
{
    const struct uid_use *best = NULL;
    for (unsigned i = 0; i < t->n; i++)
        if (t->v[i].pending && (!best || t->v[i].pending > best->pending))
            best = &t->v[i];
    return best ? best->uid : (uid_t)-1;
}

void uidtab_trim(struct uidtab *t, uint64_t now)
{
    for (unsigned i = t->n; i-- > 0;) {
        struct uid_use *u = &t->v[i];
        refill(u, now);
        if (!u->pending && !u->live && u->tokens >= UID_SCAN_BURST)
            t->v[i] = t->v[--t->n];
    }
}

void uidtab_free(struct uidtab *t)
{
    free(t->v);
    *t = (struct uidtab){0};
}
