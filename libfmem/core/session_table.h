/* session_table.h - the memory node's table of live service sessions on a
 * shared-memory pool: one 64-bit word per user id, the random session of
 * the allocation service (fmemd) that holds that id, 0 when none does.
 *
 * The memory node writes a word when a service registers and clears it
 * (fences the session) before that user id is recovered. Applications map
 * the table read-only (fmemd hands them its file) and check their
 * service's word on every use of a handle: once it no longer holds their
 * session, the service that issued the handle is gone and its blocks may
 * belong to someone else soon, so every use fails with FMEM_ESTALE.
 * Recovery waits SESSION_GRACE_MS after a fence before freeing anything, so
 * that a use that passed the check just before has finished.
 *
 * A named pool keeps its table next to the metadata file, PATH.sessions
 * (owned by the memory node, mode 0600), so that a restarted memory node
 * and `fmem recover` fence the same words the applications read; an
 * unnamed (mem:) pool's table is a sealed memfd. */
#ifndef FMEM_SESSION_TABLE_H
#define FMEM_SESSION_TABLE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SESSION_GRACE_MS 250
#define SESSION_SUFFIX ".sessions"

struct session_table {
    int fd;       /* read-write: the memory node's */
    int ro_fd;    /* to hand out: read-only (a sealed memfd: the same fd) */
    void *map;
    size_t map_len;
    uint64_t nusers;
    _Atomic uint64_t *words; /* per user id */
};

/* Memory node: open pool_path's table (creating it), or make a memfd one
 * (pool_path NULL), for nusers user ids. A table of another size or
 * format is reset. 0 or FMEM_E* (FMEM_EACCES: the file is a link, or
 * belongs to another user, or others may write it). */
int session_table_open(const char *pool_path, uint64_t nusers, struct session_table **out);
void session_table_close(struct session_table *t);
/* A fresh random session for uid, stored in the table. */
uint64_t session_begin(struct session_table *t, unsigned uid);
uint64_t session_get(const struct session_table *t, unsigned uid);
/* Fence uid's session: true if one was live. */
bool session_end(struct session_table *t, unsigned uid);

/* Anyone holding a table's descriptor: map it read-only; *words points at
 * the per-user words, *nusers says how many. 0 or FMEM_ECORRUPT/FMEM_EIO. */
int session_map(int fd, const _Atomic uint64_t **words, uint64_t *nusers, void **map,
                size_t *len);

/* Fence uid in the table next to the named pool at pool_path, if that pool
 * has one (recovery by any process, e.g. `fmem recover` while the memory
 * node is down). true if a live session was fenced. */
bool session_fence_path(const char *pool_path, unsigned uid);
/* uid's word in that table, 0 if none. */
uint64_t session_read_path(const char *pool_path, unsigned uid);

/* Sleep the grace period (after a fence, before recovery frees blocks). */
void session_grace(void);

#endif
