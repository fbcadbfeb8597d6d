/* fmem-rdmabench.h - what the client and the serve mode of fmem-rdmabench
 * share: the connection handshake (librdmacm private data) and the RPC
 * messages. */
#ifndef FMEM_RDMABENCH_H
#define FMEM_RDMABENCH_H

#include <stdint.h>

#include "clock_rng.h"

#define RB_MAGIC 0x464d454d52444242ull /* "FMEMRDBB" */
#define RB_VERSION 1
#define RB_CHUNK 4096u      /* bytes per free-array entry / buddy chunk */
#define RB_RECV_DEPTH 4     /* receives the server keeps posted per RPC connection */

enum rb_kind {
    RB_KIND_FREEARRAY = 1, /* one-sided: the client needs the array's address and key */
    RB_KIND_RPC = 2,       /* two-sided: SEND/RECV to the server thread */
};

/* client -> server (connect request private data, at most 56 bytes) */
struct rb_hello {
    uint64_t magic;
    uint32_t version;
    uint32_t kind;
};

/* server -> client (accept private data) */
struct rb_welcome {
    uint64_t magic;
    uint32_t version;
    uint32_t rkey;     /* free array: its memory region's remote key */
    uint64_t addr;     /* free array: remote address of entry 0 */
    uint64_t nchunks;  /* entries of the free array = chunks of the buddy */
};

enum rb_op {
    RB_ALLOC = 1,
    RB_FREE = 2,
    RB_HOLD = 3,    /* a round of calls begins: keep polling (not measured) */
    RB_RELEASE = 4, /* it has ended: the server may sleep */
};

/* an RPC request or its answer (24 bytes) */
struct rb_msg {
    uint32_t op;     /* enum rb_op */
    int32_t status;  /* answer: 0, or -1 (no memory / not allocated) */
    uint64_t chunk;  /* free: the block; answer to alloc: the block */
    uint32_t order;  /* log2 chunks */
    uint32_t seq;    /* echoed */
};

/* serve mode: fmem-rdmabench --serve ADDR PORT [--pool-size N] */
int rb_serve(int argc, char **argv);

/* helpers */
uint64_t rb_parse_size(const char *s); /* 4096, 4K, 64M, 1G; 0 on error */

#endif
