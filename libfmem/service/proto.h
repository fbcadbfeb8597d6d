/* proto.h - the wire format of the service: messages on the UNIX sockets
 * (application <-> fmemd handshake and control, fmemd <-> fmem-mnode
 * registration and heartbeats, fmem status queries) and the request slots of
 * the per-application shared-memory ring.
 *
 * Every socket is SOCK_SEQPACKET: one datagram is one message, so a message
 * is never split or merged. Every message starts with a msg_hdr whose `len`
 * is the whole datagram; each type has a fixed payload size (STATUS_REPORT and
 * MAP_CHUNK: a bounded variable tail). Whatever arrives from another process
 * goes through msg_decode() (msg.c), which rejects anything malformed. */
#ifndef FMEM_SVC_PROTO_H
#define FMEM_SVC_PROTO_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "fmem.h"

#define MSG_MAGIC 0x56534d46u /* "FMSV" little endian */
#define MSG_VERSION 4
#define MSG_NAME_MAX 32         /* names carried in messages, NUL included */
#define MSG_MAX_BYTES 65536     /* largest datagram anyone sends */
#define MSG_TEXT_MAX (MSG_MAX_BYTES - 64)
#define MSG_MAP_MAX 32768       /* span states per MAP_CHUNK */
#define SVC_MAX_NODES 16        /* memory nodes one fmemd serves */
#define SVC_MAX_FDS (2 * SVC_MAX_NODES + 2) /* ring + data and sessions per node */

enum msg_type {
    MSG_ERROR = 1,        /* any direction: a request was refused */
    MSG_APP_HELLO,        /* app -> fmemd: first message of a session */
    MSG_APP_WELCOME,      /* fmemd -> app: + fds: ring, data file and session
                           * table per shm node */
    MSG_STATUS_REQ,       /* tool -> daemon */
    MSG_STATUS_REPORT,    /* daemon -> tool: status records (status_wire.h) */
    MSG_MAP_REQ,          /* tool -> daemon: span states of one node */
    MSG_MAP_CHUNK,        /* daemon -> tool: part of the span states */
    MSG_STATS_REQ,        /* app -> fmemd: pool figures for fmem_stats */
    MSG_STATS,            /* fmemd -> app */
    MSG_SVC_REGISTER,     /* fmemd -> mnode: first message of a service */
    MSG_SVC_WELCOME,      /* mnode -> fmemd: + fds: metadata, data, sessions */
    MSG_HEARTBEAT,        /* fmemd -> mnode, every heartbeat period */
    MSG_SVC_BYE,          /* fmemd -> mnode: clean exit, nothing held */
    MSG_SHUTDOWN,         /* mnode -> fmemd: the memory node is stopping */
    MSG_TYPE_END
};

struct msg_hdr {
    uint32_t magic;
    uint16_t type;
    uint16_t version;
    uint32_t len; /* whole message, header included */
    uint32_t seq; /* echoed in replies */
};

struct msg_error {
    int32_t code; /* FMEM_E* */
    uint32_t pad;
    char text[64];
};

struct msg_app_hello {
    uint32_t flags; /* 0 */
    uint32_t pad;
    char name[MSG_NAME_MAX]; /* the application's name, for status */
};

#define MSG_RDMA_ADDR_MAX 64 /* "host:port" of a memory node served over RDMA */
struct msg_app_welcome {
    uint32_t app_id;
    uint32_t nnodes;       /* after the ring fd, per shm node: its data file
                            * and its memory node's session table */
    uint32_t nslots;       /* request slots in the ring */
    uint32_t ring_bytes;   /* size of the ring file */
    uint64_t max_bytes;    /* this application's quota (0: none) */
    uint64_t max_allocs;
    uint64_t data_bytes[SVC_MAX_NODES];
    /* nodes served over RDMA: their address (the application connects with
     * a queue pair of its own and no key); "" for shm nodes (a data fd) */
    char rdma_addr[SVC_MAX_NODES][MSG_RDMA_ADDR_MAX];
    /* shm nodes: fmemd's user id there and its session, which the
     * application finds in the session table while fmemd may serve it
     * (session_table.h) */
    uint32_t svc_uid[SVC_MAX_NODES];
    uint64_t session[SVC_MAX_NODES];
};

struct msg_status_req {
    uint32_t what; /* 0 */
    uint32_t node; /* MAP_REQ: node index */
};

struct msg_map_chunk {
    uint64_t nspans; /* total spans of the node */
    uint64_t first;  /* index of states[0] */
    uint32_t count;  /* states in this message */
    uint32_t node;
    /* uint8_t states[count] follows (occupancy.h encoding) */
};

struct msg_stats {
    uint64_t capacity_bytes, allocated_bytes, metadata_bytes;
    uint32_t nodes, user_id;
    uint64_t app_bytes, app_allocs; /* this application's holdings */
    /* the memory operations fmemd issued for this application's requests */
    uint64_t cas_ops, cas_failures, reads, writes, round_trips, log_flushes, max_retries;
};

struct msg_svc_register {
    uint32_t resume_uid; /* user id held before a reconnect, else 0 */
    uint32_t pid;        /* informational: SO_PEERCRED is what counts */
    char name[MSG_NAME_MAX];
};

struct msg_svc_welcome {
    uint32_t uid;
    uint32_t heartbeat_ms;
    uint32_t miss_limit;
    uint32_t pad;
    char pool[64]; /* the pool's name, for status */
    uint64_t session; /* this service's word in the session table */
};

struct msg_heartbeat {
    uint64_t seq;
    uint32_t napps;
    uint32_t pad;
    uint64_t app_bytes; /* bytes the service's applications hold */
};

/* A decoded message: header fields plus the payload of its type. */
struct msg {
    uint16_t type;
    uint32_t seq;
    union {
        struct msg_error error;
        struct msg_app_hello hello;
        struct msg_app_welcome welcome;
        struct msg_status_req status_req;
        struct msg_map_chunk map;
        struct msg_stats stats;
        struct msg_svc_register reg;
        struct msg_svc_welcome svc_welcome;
        struct msg_heartbeat heartbeat;
    } u;
    const void *report;    /* STATUS_REPORT: records, checked; in the buffer */
    size_t report_len;
    const uint8_t *states; /* MAP_CHUNK: points into the buffer */
};

/* msg.c */
/* Decode one datagram of `n` bytes. 0, or FMEM_EINVAL (malformed: wrong
 * magic, version, length or field), FMEM_ENOTSUP (unknown type). */
int msg_decode(const void *buf, size_t n, struct msg *out);
/* Build a message of `type` with payload `p` of `plen` bytes into `buf`
 * (MSG_MAX_BYTES). Returns the message length. */
size_t msg_encode(void *buf, uint16_t type, uint32_t seq, const void *p, size_t plen);
/* The fixed payload size of a type (variable types: the fixed part). */
size_t msg_payload_size(uint16_t type);
const char *msg_type_name(uint16_t type);

/* ---- the request ring --------------------------------------------------
 * One shared-memory file per application, made by fmemd and sealed so the
 * application cannot resize it: a header and RING_SLOTS slots. An
 * application thread claims a free slot, writes its request, marks it
 * posted and sets its bit in `posted`; the worker serving the ring takes
 * the posted bits, copies each request out (the application may scribble on
 * the slot at any time), decodes it strictly, runs it and writes the reply.
 * Wake-ups: futex words `bell` (worker) and the slot's `state` (client). */
#define RING_MAGIC 0x474e4952u /* "RING" */
#define RING_SLOTS 64

enum ring_op {
    RING_PING = 1, /* no allocation work: measures the round trip */
    RING_ALLOC,
    RING_FREE,
    RING_REFILL, /* put up to `count` new blocks of `size` bytes in the cache */
    RING_TRIM,   /* give back the cached blocks of `size` bytes beyond entry `count` */
    RING_FREE_CHECK, /* a handle the application does not hold: what would
                      * freeing it answer (EDOUBLEFREE, EACCES, EBADHANDLE)?
                      * reads only */
    RING_SET_QP, /* node h.node is served with type-2B windows: bind this
                  * application's blocks there to the memory node's end of
                  * its queue pair, number `count` */
    RING_OP_END
};

enum slot_state {
    SLOT_FREE = 0,
    SLOT_CLAIMED, /* a client thread is writing the request */
    SLOT_POSTED,  /* request ready */
    SLOT_BUSY,    /* a worker is running it */
    SLOT_DONE,    /* reply ready */
};

struct ring_req {
    uint32_t op;
    uint32_t flags; /* 0 */
    uint64_t size;  /* ALLOC */
    fmem_handle h;  /* FREE */
    uint64_t cookie; /* echoed */
    uint32_t count;  /* REFILL: blocks wanted; TRIM: entries kept */
    uint32_t pad;
};

struct ring_rsp {
    int32_t rc;
    uint32_t count; /* REFILL: blocks put in the cache; TRIM: given back */
    fmem_handle h; /* ALLOC */
    uint64_t cookie;
};

struct ring_slot {
    _Atomic uint32_t state;
    _Atomic uint32_t waiting; /* the client sleeps on `state` */
    uint32_t pad[2];
    struct ring_req req;
    struct ring_rsp rsp;
} __attribute__((aligned(128)));

/* The application's cache of blocks it holds but has not handed out yet,
 * per size class (4 KiB << class). fmemd allocates the blocks into it
 * (REFILL; they count against the application's quota and are freed with
 * the rest of its blocks when it leaves); the application takes them and
 * puts freed ones back without a round trip. `state` is generation << 1 |
 * full: whoever empties an entry does so with a compare-and-swap of the
 * whole word, so an entry is taken once, by the application (a block handed
 * out) or by fmemd (a block revoked: TRIM, or memory running short for
 * another application). fmemd keeps its own table of what the application
 * holds and frees only blocks that table names, whatever the entries say. */
#define RING_CACHE_CLASSES 4  /* 4 KiB to 32 KiB blocks */
#define RING_CACHE_ENTRIES 32 /* per class */
struct ring_cache_ent {
    _Atomic uint32_t state;
    uint32_t pad;
    fmem_handle h;
};

struct ring_hdr {
    uint32_t magic;
    uint32_t nslots;
    _Atomic uint64_t posted;     /* bit i: slot i posted */
    _Atomic uint32_t bell;       /* futex: bumped to wake the worker */
    _Atomic uint32_t sleeping;   /* the worker is (about to be) asleep */
    _Atomic uint32_t free_slots; /* futex: bumped when a slot is freed */
    _Atomic uint32_t slot_waiters;
    /* set by fmemd before it gives back the application's blocks (it drops
     * the application, or shuts down): every later use of a handle fails */
    _Atomic uint32_t revoked;
    char pad[128 - 36];
    struct ring_slot slots[RING_SLOTS];
    struct ring_cache_ent cache[RING_CACHE_CLASSES][RING_CACHE_ENTRIES];
};

#define RING_BYTES (((sizeof(struct ring_hdr) + 4095) / 4096) * 4096)

/* A request after decoding: what the worker acts on. */
struct svc_req {
    enum ring_op op;
    unsigned log2_chunks; /* ALLOC, REFILL, TRIM */
    unsigned count;       /* REFILL, TRIM; SET_QP: queue pair number */
    fmem_handle h;        /* FREE */
    uint64_t cookie;
};

/* Copy slot `req` out and check it: 0, or the FMEM_E* code to reply with.
 * `max_bytes`: the largest block any node can hold; `nnodes`: node count. */
int ring_req_decode(const struct ring_req *req, uint64_t max_bytes, unsigned nnodes,
                    struct svc_req *out);

#endif
