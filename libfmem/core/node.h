/* node.h - one memory node as seen by a client: its transport, geometry,
 * this client's header caches, and the allocation protocol on it. */
#ifndef FMEM_NODE_H
#define FMEM_NODE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "layout.h"
#include "transport.h"
#include "wkeys.h"

/* Span-header log size code 7: not an operation but a claim record: user
 * `uid` is moving this detached span into or out of the chunk layer (uid 0:
 * nobody). It keeps the timestamp of the last operation, which was a free. */
#define SPAN_LOG_CLAIM 7

#define RETRY_LOW 3   /* below: a contended span/section becomes normal */
#define RETRY_HIGH 10 /* above: it is marked contended */
#define NODE_QRING 64

struct own_records; /* alloc.c: what a free of a block allocated here needs */

struct node {
    struct transport *tp;
    struct geometry g;
    unsigned index;   /* position in the pool's node list */
    unsigned uid;     /* user id this client logs under */
    bool log_none;    /* benchmarks only: no log entries at all, and so no
                       * size check of handles (never set from a URI) */
    bool owns_uid;    /* release the user slot on close */
    bool no_user;     /* opened for administration: no user slot, so no
                       * allocation or free (fmem_open_admin) */
    bool private_pool; /* a memfd no other process maps (mem:) */
    uint32_t slot_pid; /* what this client wrote into its user slot */
    char *path;       /* a named pool's metadata file (its session table
                       * is next to it), or NULL */
    bool fork_claim;  /* a fork child that has yet to claim its own slot */
    bool remote_regen; /* a memory node refills backup keys (service mode) */
    /* this client's caches of the section and span headers; refreshed only
     * when a CAS fails or a search comes up empty */
    _Atomic uint64_t *sec_cache;
    _Atomic uint64_t *span_cache;
    /* last header value whose temporary log is known to be flushed, per span
     * and per section (skips redundant flushes) */
    _Atomic uint64_t *span_flushed;
    _Atomic uint64_t *sec_flushed;
    _Atomic uint64_t rng;
    /* the last blocks this client quarantined ((chunk << 6 | log2) + 1, 0
     * empty): an allocation that finds no room waits for them (alloc.c) */
    _Atomic uint64_t quarantined[NODE_QRING];
    _Atomic unsigned qnext;
    /* distinct for every node opened by this process (a closed node's
     * memory may be reused for the next): thread caches key on it */
    uint64_t serial;
    _Atomic(struct own_records *) own; /* made on first use */
};

/* Region offsets. */
static inline uint64_t sec_hdr_off(const struct node *n, uint64_t x) { return n->g.sect_off + 8 * x; }
static inline uint64_t span_hdr_off(const struct node *n, uint64_t s) { return n->g.span_off + 8 * s; }
static inline uint64_t cap_off(const struct node *n, uint64_t c) { return n->g.cap_off + 8 * c; }
static inline uint64_t log_off(const struct node *n, uint64_t c) { return n->g.log_off + 8 * c; }
/* Where the key of the block (c, 2^log2c chunks) lives: the capability
 * entry of its first chunk, or over verbs its window-key entry. */
static inline uint64_t key_off(const struct node *n, uint64_t c, unsigned log2c)
{
    if (n->tp->wkeys_off)
        return n->tp->wkeys_off + WK_HDR + 8 * wk_entry(n->g.nchunks, c, log2c);
    return cap_off(n, c);
}
static inline uint64_t data_off(const struct node *n, uint64_t c) { return n->g.data_off + (c << CHUNK_SHIFT); }

/* A user slot claimed over RDMA holds the claimer's pid with this bit set:
 * it is a process on another machine, not one the memory node can watch. */
#define NODE_PID_REMOTE 0x80000000u

/* node.c */
/* How a client takes its user id on a node. */
enum node_user {
    NODE_CLAIM_ANY,   /* claim a free user slot */
    NODE_CLAIM_EXACT, /* claim slot `uid` (URI user=N); FMEM_EBUSY if held */
    NODE_ADOPT,       /* log as `uid`, a slot a memory node claimed for us */
    NODE_NO_USER,     /* administration: no slot, no allocation or free */
};
/* Attach to the pool behind tp; created: tp's files were just made (they
 * read as zeros) and are formatted here. */
int node_open_user(struct transport *tp, bool created, enum node_user how, unsigned uid,
                   struct node **out);
/* uid 0: NODE_CLAIM_ANY, else NODE_ADOPT. */
int node_open(struct transport *tp, bool created, unsigned uid, struct node **out);
void node_close(struct node *n);
/* Post the doorbell the calling thread's own frees on n still owe (alloc.c). */
void node_ring_owed(struct node *n);
/* alloc.c: free the records of own allocations (node_close) */
void node_own_records_free(struct node *n);
/* alloc.c: post the quarantine marks own frees still hold */
void node_send_marks(struct node *n);
/* Free user slot `uid` (after its recovery). */
void node_clear_uid(struct node *n, unsigned uid);
/* Free slot `uid` only if it still holds `pid`: true if it did. */
bool node_release_uid(struct node *n, unsigned uid, uint32_t pid);
/* Claim a free user slot on behalf of process `pid` (a memory node for its
 * services); the pid of slot `uid`, 0 if free. */
int node_claim_uid_for(struct node *n, uint32_t pid, unsigned *uid);
/* Claim slot `uid` itself for `pid`: 0, or FMEM_EBUSY if it is held. */
int node_claim_uid_exact(struct node *n, unsigned uid, uint32_t pid);
uint32_t node_uid_pid(struct node *n, unsigned uid);
/* Fork readers (libfmem-preload): a process forked from a user of a named
 * pool may read that user's blocks through copy-on-write mappings of the
 * pool's data file, so their pages must stay allocated while it lives.
 * It holds an open-file-description lock (F_OFD_SETLK, inherited by fork,
 * dropped at exit or exec) on byte NODE_FORK_LOCK_OFF(uid, gen) of the
 * data file, far beyond its end, for each fork generation gen (1..2^32-1)
 * of that user. true if a lock on a generation >= gen of uid is held. */
#define NODE_FORK_LOCK_OFF(uid, gen) (((int64_t)1 << 60) + ((int64_t)(uid) << 32) + (int64_t)(gen))
bool node_fork_readers(struct node *n, unsigned uid, uint32_t gen);
/* The one liveness test of recovery, verify and the user table: true when
 * slot uid names a local process (pid) that is gone and no process forked
 * from it still reads its blocks. */
bool node_user_gone(struct node *n, unsigned uid, uint32_t pid);
/* What this process writes into a user slot it claims on n. */
uint32_t node_own_pid(const struct node *n);
/* Did this process claim n's user slot (not a recovery's, not the parent's
 * of a fork child)? */
bool node_holds_slot(const struct node *n);
uint32_t node_new_key(struct node *n);
void node_refresh_all(struct node *n);
/* Forget which header values this client saw flushed (recovery and the
 * verifier must flush whatever is pending, even a value that recurs). */
void node_forget_flushed(struct node *n);
uint64_t node_allocated_bytes(struct node *n);

/* recovery.c: at close of a shared pool, free every block this client
 * still holds (unless its user id was recovered meanwhile). */
void node_release_blocks(struct node *n);

/* alloc.c: the two-layer protocol. A block is (first chunk, log2 chunks). */
int node_alloc(struct node *n, unsigned log2_chunks, uint64_t *chunk, uint32_t *rkey);
int node_free(struct node *n, uint64_t chunk, unsigned log2_chunks, uint32_t rkey);
/* What node_free would answer for this handle, touching nothing: 0 if it
 * would free the block (its key is live), else FMEM_EDOUBLEFREE,
 * FMEM_EACCES or FMEM_EBADHANDLE. The service uses it for the handles an
 * application no longer holds, so that a double free is named as here. */
int node_free_verdict(struct node *n, uint64_t chunk, unsigned log2_chunks, uint32_t rkey);
/* Free on behalf of `uid` without a key check (recovery). */
int node_free_as(struct node *n, uint64_t chunk, unsigned log2_chunks, unsigned uid);
/* Free section x alone, one part of a multi-section block (recovery). */
int node_free_section_as(struct node *n, uint64_t x, unsigned p, unsigned uid);
/* Quarantine (layout.h, LOG_QUARANTINE): over verbs a free commits by
 * revoking the key and marking the block's log entry; the memory node's
 * regenerator, once the old window is destroyed, frees the block in its
 * layer with this. 0 also when there was nothing to do. */
int node_quarantine_finish(struct node *n, uint64_t chunk, unsigned log2_chunks);
/* Tests: quarantine frees on shm pools too (the freeing client finishes
 * them at once, its key being dead already). */
extern bool fmem_quarantine_local;
/* 0 if (chunk, log2, rkey) names a live allocation, else FMEM_E*. */
int node_check_access(struct node *n, uint64_t chunk, unsigned log2_chunks, uint32_t rkey);

/* recovery.c */
struct fmem_recovery_stats;
/* Flush every pending temporary log of the node; with uid != 0 also finish
 * that user's half-done span moves. st may be NULL. */
void node_flush_all(struct node *n, unsigned uid, struct fmem_recovery_stats *st);
/* Call fn for each full log entry recording an allocation by uid (flush
 * first). Returns the entries scanned, or a negative FMEM_E*. */
int64_t node_walk_allocs(struct node *n, unsigned uid,
                         void (*fn)(struct node *n, uint64_t chunk, uint64_t e, void *arg),
                         void *arg);

/* redolog.c */
/* Flush the temporary log held in header value `h` of span `s` (span header)
 * or section `x` (section header) into the full log. */
void log_flush_span(struct node *n, uint64_t s, uint64_t h);
void log_flush_section(struct node *n, uint64_t x, uint64_t h);
/* After this client's own commit of header value h: flush its log. */
/* node_alloc arms this: the commit of its allocation then reads the new
 * block's key in the same round trip as the flush (saves one). */
struct key_read {
    bool armed, done;
    uint64_t chunk;
    unsigned log2c;
    uint64_t key;
    /* the block's full log entry, read in the commit's own round trip
     * (right after the header CAS): the commit's flush starts from it */
    bool entry_read;
    uint64_t entry;
    /* the entry came from the span's snapshot (redolog.c), not a READ */
    bool entry_snap;
};
extern _Thread_local struct key_read log_key_read;
/* Tests: flushes whose expected entry, known from a span snapshot, was
 * not what the entry held (seen where the transport answers posts at once) */
extern _Atomic uint64_t log_snap_wrong;
void log_commit_span(struct node *n, uint64_t s, uint64_t h);
/* node_alloc's commit CAS on span header s (hv -> nv) for the block
 * (chunk, log2c): in the same round trip it reads the block's log entry
 * and key (log_key_read). Returns like tp_cas. */
int log_commit_cas_span(struct node *n, uint64_t s, uint64_t hv, uint64_t nv, uint64_t *old,
                        uint64_t chunk, unsigned log2c);
void log_commit_section(struct node *n, uint64_t x, uint64_t h);
/* Flush unconditionally, ignoring which values this client saw flushed
 * (the verifier: a value can recur). */
void log_flush_span_now(struct node *n, uint64_t s, uint64_t h);
void log_flush_section_now(struct node *n, uint64_t x, uint64_t h);
/* Where the temporary log of span header value h (span s) belongs in the
 * full log (*chunk) and the entry it must become (*want); false if there is
 * nothing to flush. For a section header (section x) span_hdrs are its
 * spans' current headers: a section log is stale once its span is attached. */
bool log_expected_span(uint64_t s, uint64_t h, uint64_t *chunk, uint64_t *want);
bool log_expected_section(uint64_t x, uint64_t h, const uint64_t span_hdrs[SPANS_PER_SECTION],
                          uint64_t *chunk, uint64_t *want);
/* Whether the temporary log in a span / section header value records an
 * allocation (else a free, a claim, or nothing). */
bool log_span_prev_alloc(uint64_t h);
bool log_sec_prev_alloc(uint64_t h);
/* Next timestamp for an operation of kind `alloc` after header value `h`. */
unsigned log_next_ts(uint64_t h, bool prev_alloc, bool alloc);

/* Per-allocation trace for benchmarks: CAS failures of the last call. */
extern _Thread_local unsigned node_last_retries;

#endif
