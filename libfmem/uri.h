/* uri.h - parsing of pool URIs (see fmem_open in fmem.h). */
#ifndef FMEM_URI_H
#define FMEM_URI_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum uri_kind { URI_MEM, URI_SHM, URI_FILE, URI_RDMA, URI_SSD, URI_ZMEM };

struct node_uri {
    enum uri_kind kind;
    char path[PATH_MAX]; /* shm: /dev/shm/NAME; file: the path; rdma: host */
    char port[8];        /* rdma */
    char src[64];        /* rdma: local address to connect from, or "" */
    char token[256];     /* rdma: file holding the memory node's token, or "" */
    uint64_t size;       /* 0: not given */
    unsigned nodes;      /* mem: number of nodes */
    uint64_t rtt_ns;
    uint64_t bw;         /* bytes per second each node's link carries; 0: no limit */
    unsigned rtt_mode;   /* enum tp_rtt_mode: 0 spin (default), 1 nic */
    unsigned user;       /* 0: claim one */
    bool create;
    /* ssd: and zmem: backends (libfmem/transport/, docs/backends.md) */
    unsigned io;         /* ssd: 0 io_uring when the kernel allows it, else
                          * pread/pwrite; 1 pread/pwrite always */
    int direct;          /* ssd: -1 O_DIRECT where the file system has it, 0 never, 1 required */
    char codec[8];       /* zmem: "lz4" (default) or "zstd" */
    int level;           /* zmem: codec level (zstd 1..19; lz4 acceleration), 0 default */
    uint64_t block;      /* zmem: bytes compressed as one piece, 0 default */
    uint64_t limit;      /* zmem: most compressed bytes held, 0 none */
};

#define URI_MAX_NODES 64

/* Parse `uri` (one or more node URIs separated by ';') into out[]. Returns
 * the number of entries, or FMEM_EURI. */
int uri_parse(const char *uri, struct node_uri *out, int max);
/* Why this thread's last failed uri_parse failed, naming the bad part, key
 * or value ("bad value size='12Q'"); "" if it did not fail. */
const char *uri_last_error(void);
/* Set that message (a backend that cannot open what the URI names). */
void uri_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Split "HOST:PORT" at its last colon into host[hcap] and port[pcap]; false
 * unless both are non-empty and fit. */
bool uri_split_host_port(const char *s, char *host, size_t hcap, char *port, size_t pcap);
/* Parse "123", "64K", "2M", "1G", "1T". false on junk or overflow. */
bool uri_parse_size(const char *s, uint64_t *out);

#endif
