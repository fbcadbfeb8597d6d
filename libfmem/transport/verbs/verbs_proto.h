/* verbs_proto.h - what a client and a memory node tell each other when an
 * RDMA connection is set up (librdmacm private data: at most 56 bytes in a
 * connect request and 196 in an accept on RC). */
#ifndef FMEM_VERBS_PROTO_H
#define FMEM_VERBS_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VERBS_MAGIC 0x464d454d56524253ull /* "FMEMVRBS" */
#define VERBS_VERSION 4
#define VERBS_TOKEN_BYTES 16

/* Who connects. Services (and the memory node's own regenerator) prove
 * they hold the node's secret token and get the keys of the metadata and
 * the window-key table; applications get no key at all: they reach only
 * blocks whose window keys their service handed them. */
enum verbs_role {
    VERBS_ROLE_SERVICE = 1,
    VERBS_ROLE_APP = 2,
    VERBS_ROLE_LOCAL = 3, /* the memory node's regenerator, over loopback */
};

/* Client -> memory node (connect request), 40 bytes. */
struct verbs_hello {
    uint64_t magic;
    uint32_t version;
    uint32_t role;
    uint8_t token[VERBS_TOKEN_BYTES]; /* services: the node's token */
    uint64_t session; /* services: random, the same on all their queue pairs */
};

/* Memory node -> client when it refuses a connection (reject private
 * data; absent for malformed requests). */
enum verbs_refusal {
    VERBS_REFUSED_FENCED = 1, /* the session was fenced: its service was
                               * taken for dead and recovered */
};
struct verbs_reject {
    uint64_t magic;
    uint32_t reason; /* enum verbs_refusal */
    uint32_t pad;
};

/* Memory node -> client (accept). Keys are 0 for applications. */
struct verbs_welcome {
    uint64_t magic;
    uint32_t version;
    uint32_t meta_rkey;  /* window over the pool's metadata */
    uint64_t base;       /* remote address of pool offset 0 */
    uint64_t size;       /* bytes: metadata + data */
    uint64_t meta_size;  /* bytes of metadata; the data follows */
    uint64_t wk_base;    /* remote address of the window-key table */
    uint64_t wk_size;    /* its bytes (wkeys.h) */
    uint32_t wk_rkey;    /* window over it */
    uint32_t mr_rkey;    /* the region's own key: no remote access (tests) */
    uint32_t qp_num;     /* the memory node's end of this connection */
    uint32_t mw_type;    /* 2: applications' block windows are type 2B,
                          * bound to their queue pair (mw=type2); else 1 */
};

/* ---- type-2B windows (memory node started with mw=type2) -------------------
 * A service asks the memory node, with a SEND on its own queue pair, to bind
 * a type-2B window over a data range to the memory node's end of an
 * application's connection (named by qp_num, as that application's
 * welcome told it); the node answers with a SEND carrying the new key,
 * which then works from that application's queue pair only. The service
 * revokes a key with a SEND_WITH_INV naming it: the memory node's NIC
 * invalidates the window before it acknowledges, with no work of the
 * node's CPU on the way (it only re-posts the receive and keeps the
 * window object for the next bind). */
enum verbs_mw2_op { VERBS_MW2_BIND = 1, VERBS_MW2_REVOKE = 2 };
struct verbs_mw2_req {
    uint32_t op;     /* enum verbs_mw2_op */
    uint32_t qp_num; /* BIND: the application's connection (its welcome's qp_num) */
    uint64_t addr;   /* BIND: remote address of the range (in the data) */
    uint64_t len;    /* BIND: its bytes */
    uint32_t rkey;   /* REVOKE: the key the SEND_WITH_INV invalidated (rxe's
                      * receive completions do not carry IBV_WC_WITH_INV) */
    uint32_t pad;
};
struct verbs_mw2_rep {
    int32_t status; /* 0, or an FMEM_E* code */
    uint32_t rkey;  /* the window's key */
};

/* ---- parsing (verbs_proto.c) ---------------------------------------------- */

/* Copy a connect request's private data (len bytes at pd, any alignment)
 * into *h: 0 if it is a hello of this version with a known role, else -1. */
int verbs_hello_parse(const void *pd, size_t len, struct verbs_hello *h);

/* What the memory node does with a parsed hello, given its token and
 * whether its windows are bound (`ready`). A fenced session is the
 * caller's to check (under its lock). */
enum verbs_admission {
    VERBS_REFUSE,     /* wrong token, not ready, or a service without session */
    VERBS_ADMIT_APP,  /* an application: a queue pair and no key */
    VERBS_ADMIT_KEYS, /* a service or the regenerator: the metadata keys too */
};
enum verbs_admission verbs_hello_admit(const struct verbs_hello *h,
                                       const uint8_t token[VERBS_TOKEN_BYTES], bool ready);

/* Client: an accept's private data as a welcome (0, or -1 when it is not
 * one: wrong magic or version, sizes that do not add up). */
int verbs_welcome_parse(const void *pd, size_t len, struct verbs_welcome *w);
/* Client: does a reject's private data say our session was fenced? */
bool verbs_reject_fenced(const void *pd, size_t len);

#endif
