/* verbs_proto.h - what a memory node tells a client when it accepts an
 * RDMA connection (librdmacm private data, at most 196 bytes on RC). */
#ifndef FMEM_VERBS_PROTO_H
#define FMEM_VERBS_PROTO_H

#include <stdint.h>

#define VERBS_MAGIC 0x464d454d56524253ull /* "FMEMVRBS" */
#define VERBS_VERSION 1

/* Client -> memory node (connect request). */
struct verbs_hello {
    uint64_t magic;
    uint32_t version;
    uint32_t reserved;
};

/* Memory node -> client (accept). All fields little-endian host order. */
struct verbs_welcome {
    uint64_t magic;
    uint32_t version;
    uint32_t rkey;       /* key of the region covering the whole pool */
    uint64_t base;       /* remote address of pool offset 0 */
    uint64_t size;       /* bytes: metadata + data */
    uint64_t meta_size;  /* bytes of metadata; the data follows */
};

#endif
