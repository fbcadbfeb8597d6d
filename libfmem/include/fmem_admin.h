/* fmem_admin.h - privileged operations on a pool: recovery of a dead user
 * and the consistency verifier. In a deployment only the memory node and the
 * allocation service call these; embedded programs and tests may too. */
#ifndef FMEM_ADMIN_H
#define FMEM_ADMIN_H

#include <stdint.h>
#include <stdio.h>

#include "fmem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Open a pool for the calls below without claiming a user slot, so that
 * they work on a pool whose user table is full. shm:, file: and rdma://
 * pools only; it never creates one. Such a pool cannot allocate or free
 * (FMEM_ENOTSUP); fmem_map/read/write with a valid handle work. Close it
 * with fmem_close. */
FMEM_API int fmem_open_admin(const char *uri, fmem_pool **out);

typedef struct fmem_recovery_stats {
    uint64_t headers_scanned; /* section and span headers read */
    uint64_t logs_flushed;    /* pending temporary logs written out */
    uint64_t entries_scanned; /* full redo log entries walked */
    uint64_t blocks_freed;    /* allocations of the dead user given back */
    uint64_t bytes_freed;
    uint64_t claims_cleared;  /* half-done span moves finished */
    uint64_t elapsed_ns;
    uint64_t quarantined_finished; /* its frees that were committed but whose
                                    * blocks were still quarantined, finished */
    uint64_t reserved[7];
} fmem_recovery_stats;

/* Reclaim everything user `uid` owns on every node of the pool: flush all
 * pending temporary logs, then walk the full redo log and free each block
 * whose latest entry is an allocation by `uid`; finally free the user id.
 * The caller must know the user is dead (fmem_user_info tells what the pool
 * knows; `fmem recover` refuses a live one). A user id that holds no slot
 * (its blocks leaked) is claimed by the caller while it is recovered, so no
 * one can take it meanwhile; FMEM_EBUSY if someone claims it first. Runs
 * while other users keep allocating and freeing: no lock, no pause. `st`
 * may be NULL. */
FMEM_API int fmem_recover(fmem_pool *pool, unsigned uid, fmem_recovery_stats *st);
/* Recover every user id whose blocks the log records but which holds no
 * user slot (what fmem_verify reports as leaked). */
FMEM_API int fmem_recover_leaked(fmem_pool *pool, fmem_recovery_stats *st);

/* What a pool knows about user id `uid` on node `node`. */
typedef struct fmem_user_info {
    uint32_t pid;       /* holder in the user table (0: the slot is free),
                         * without the remote flag */
    uint32_t remote;    /* 1: claimed over RDMA: a process on another machine */
    int32_t alive;      /* holder: 1 runs (on this machine), 0 gone,
                         * -1 cannot tell (another machine), also 0 if none */
    uint32_t in_table;  /* 0: uid is beyond the pool's user table */
    uint64_t heartbeat; /* over RDMA: the holder's heartbeat word (fmemd
                         * writes its slot's pid << 32 | a counter each
                         * period), 0: the holder writes none */
    uint64_t session;   /* the live service session of that user id (over
                         * RDMA its session word, on shm the memory node's
                         * session table), 0: none */
    uint64_t blocks;    /* allocations the full log records for uid (a block
                         * of several sections counts once per section) */
    uint64_t bytes;
    uint64_t reserved[8];
} fmem_user_info_t;
/* Fill *out with what the pool knows about user id `uid` on node `node`
 * (above): who holds its slot, whether that process lives, and the blocks
 * the pool's logs record for it. FMEM_EINVAL for a node or uid out of
 * range. */
FMEM_API int fmem_user_info(fmem_pool *pool, unsigned node, unsigned uid, fmem_user_info_t *out);

typedef struct fmem_verify_report {
    uint64_t chunks_allocated;    /* allocated according to the headers */
    uint64_t chunks_owned;        /* covered by an allocation entry of the log */
    /* inconsistencies */
    uint64_t alloc_without_owner; /* allocated chunk no log entry owns */
    uint64_t owner_of_free;       /* log entry owning a chunk that is free */
    uint64_t owned_twice;         /* chunk covered by two allocation entries */
    uint64_t state_mismatch;      /* span state disagrees with its free map */
    uint64_t bad_entries;         /* malformed or misaligned log entries */
    /* transient states (normal while users are active; errors at rest) */
    uint64_t claims_in_progress;  /* span moves between layers under way */
    uint64_t errors;              /* sum of the inconsistencies and leaks */
    /* blocks nobody will free: allocated by a user id that holds no slot in
     * the user table (counted in errors; fmem_recover of that id, or
     * fmem_recover_leaked, takes them back). A block of several sections
     * counts once per section, as in fmem_recovery_stats. */
    uint64_t leaked_blocks;
    uint64_t leaked_bytes;
    /* not errors: blocks of users whose slot holds a process of this
     * machine that is gone (the memory node's sweep or fmem_recover frees
     * them), and such slots with or without blocks */
    uint64_t dead_owner_blocks;
    uint64_t dead_owner_bytes;
    uint64_t dead_slots;
    /* sections that changed during every snapshot (a very busy pool) and
     * so were not checked: the report covers the others only */
    uint64_t busy_sections;
    uint64_t reserved[2];
} fmem_verify_report;

/* Check headers against the full redo log on every node, and find leaked
 * blocks. Safe and exact while other users allocate and free: each 2 MiB
 * section is checked on a snapshot taken when its headers held still
 * (pending temporary logs are flushed first, as any client would); a
 * section that never holds still is counted in busy_sections, not guessed
 * at. Details of the first problems go to `detail` (may be NULL). Returns
 * 0 (see report.errors). */
FMEM_API int fmem_verify(fmem_pool *pool, fmem_verify_report *report, FILE *detail);

/* The user id this pool handle logs under on node `node`, or 0. */
FMEM_API unsigned fmem_user_id(fmem_pool *pool, unsigned node);

#ifdef __cplusplus
}
#endif
#endif
