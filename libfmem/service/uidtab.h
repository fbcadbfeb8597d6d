/* uidtab.h - what each user (SO_PEERCRED uid) holds of a daemon: its
 * connections that have not said hello yet, its live sessions, and a token
 * bucket for the requests that scan the whole pool (status, map). The
 * daemons cap each per user, so that one user cannot take every slot or
 * keep the control thread busy for everyone else.
 *
 * An entry exists while its user holds a connection or its bucket is
 * refilling: the table is bounded by the connections plus the users that
 * asked for a scan within the last UID_SCAN_BURST / UID_SCAN_RATE seconds,
 * and it grows as needed. */
#ifndef FMEM_SVC_UIDTAB_H
#define FMEM_SVC_UIDTAB_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define UID_SCAN_RATE 20  /* whole-pool scans per second and user */
#define UID_SCAN_BURST 20

struct uid_use {
    uid_t uid;
    unsigned pending, live;
    uint64_t scans_at; /* when `tokens` was last brought up to date */
    double tokens;
};

struct uidtab {
    struct uid_use *v;
    unsigned n, cap;
};

/* The user's entry, made when absent (NULL: out of memory). The pointer is
 * good until the next uidtab_* call. */
struct uid_use *uidtab_get(struct uidtab *t, uid_t uid, uint64_t now);
/* How much uid holds: its entry or, when it has none, zeros. */
struct uid_use uidtab_peek(const struct uidtab *t, uid_t uid);
/* Count a connection of uid in or out (pending: before hello). */
bool uidtab_add(struct uidtab *t, uid_t uid, bool pending, uint64_t now);
void uidtab_sub(struct uidtab *t, uid_t uid, bool pending, uint64_t now);
/* May uid run one more whole-pool scan now? Takes a token if so. */
bool uidtab_scan_allowed(struct uidtab *t, uid_t uid, uint64_t now);
/* The user holding the most pending connections (-1: nobody). */
uid_t uidtab_most_pending(const struct uidtab *t);
/* Drop entries that hold nothing and whose bucket is full again. */
void uidtab_trim(struct uidtab *t, uint64_t now);
void uidtab_free(struct uidtab *t);

#endif
