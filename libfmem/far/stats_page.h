/* stats_page.h - the live-statistics page a process publishes for its far
 * memory regions and its ssd:/zmem: nodes, and `fmem status --processes`
 * reads (docs/far-memory.md, "Live figures").
 *
 * One file per process, <dir>/fmem-stats.<uid>.<pid> (dir: $FMEM_STATS_DIR,
 * default /dev/shm), mode 0600, a fixed size: a header, then max_regions
 * region records, then max_nodes node records. The owning process
 * (stats_pub.c) rewrites the records from the regions' and stores' own
 * counters every interval_ms under a sequence counter (odd while a copy
 * is being written), so the fault path itself does no extra work; a
 * reader copies the file and retries while the counter is odd or moved.
 * The file is removed when the last region or node goes, and at exit;
 * a killed process leaves it behind and readers treat it as stale once
 * the pid is gone or belongs to a process started at another time; the
 * next page a process of the same user publishes removes it (stats_pub.c). */
#ifndef FMEM_STATS_PAGE_H
#define FMEM_STATS_PAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SP_MAGIC UINT64_C(0x544154534d454d46) /* "FMEMSTAT" little-endian */
#define SP_VERSION 2u /* 2: fetch_units, fetch_max */
#define SP_MAX_REGIONS 32u
#define SP_MAX_PATHS 16u
#define SP_MAX_NODES 16u
#define SP_PREFIX "fmem-stats."

struct sp_path {
    uint32_t node;    /* node index in the region's pool */
    uint32_t placing; /* 1: new chunks are placed on it */
    char kind[8];     /* the node's backend: "shm", "mem", "ssd", ... */
    uint64_t bytes_fetched, bytes_written, ops, busy_ns;
    uint64_t bandwidth; /* bytes per second while transferring */
    uint64_t chunks;    /* the region's allocations held on it */
};

struct sp_region {
    uint64_t serial; /* the order regions were published in this process */
    uint64_t size, unit, cache_bytes, cached_bytes, remote_bytes;
    uint64_t faults, missing_faults, fetches, prefetches, evictions, writebacks;
    uint64_t bytes_fetched, bytes_written, tier_moves, alloc_failures, fault_rate;
    /* the parameters in force */
    uint32_t paths, stripe_width, io_width, prefetch_units, tier, fixed;
    uint32_t seq_pct, write_pct, refault_pct, npaths;
    uint32_t fetch_units, fetch_max; /* the fetch size in force, its largest */
    struct sp_path path[SP_MAX_PATHS];
};

struct sp_node {
    char kind[8];    /* "ssd", "zmem" */
    char detail[56]; /* the backend's own description */
    uint64_t capacity_bytes, held_bytes, stored_bytes;
    uint64_t reads, writes, bytes_read, bytes_written, read_ns, write_ns, errors;
    char last_error[160];
};

struct sp_header {
    uint64_t magic;
    uint32_t version, header_bytes, region_bytes, node_bytes, path_bytes;
    uint32_t max_regions, max_nodes, max_paths;
    uint64_t pid, uid;
    uint64_t start_ticks; /* the process's start time (/proc/PID/stat field 22) */
    uint64_t seq;         /* odd while the records are rewritten */
    uint64_t updated_ns;  /* CLOCK_REALTIME of the last rewrite */
    uint64_t interval_ms;
    uint32_t nregions, nnodes;
    uint32_t regions_unlisted, nodes_unlisted; /* beyond max_* */
    char program[64];
};

static inline size_t sp_file_bytes(void)
{
    return sizeof(struct sp_header) + SP_MAX_REGIONS * sizeof(struct sp_region) +
           SP_MAX_NODES * sizeof(struct sp_node);
}

/* ---- reading (stats_page_read.c) ---------------------------------------- */

/* What one file holds, copied out and checked. */
struct sp_snapshot {
    struct sp_header h;
    struct sp_region regions[SP_MAX_REGIONS];
    struct sp_node nodes[SP_MAX_NODES];
};

enum sp_state {
    SP_LIVE,      /* the process runs; *snap is valid */
    SP_STALE,     /* its process is gone (or the pid was reused) */
    SP_FOREIGN,   /* another user's file: not read */
    SP_BAD,       /* not a stats page (truncated, garbage, other version) */
    SP_UNREADABLE /* open/read failed (errno in *err) */
};

/* The directory stats pages go to: $FMEM_STATS_DIR or /dev/shm. */
const char *sp_dir(void);
/* Parse "fmem-stats.<uid>.<pid>"; false if the name is not one. */
bool sp_parse_name(const char *name, uint64_t *uid, uint64_t *pid);
/* Start time of `pid` in clock ticks since boot; 0 if it does not run. */
uint64_t sp_proc_start(uint64_t pid);
/* Read the file dir/name into *snap, following no symlink. *why gets a
 * short reason for SP_BAD; *err an errno for SP_UNREADABLE. */
enum sp_state sp_read(const char *dir, const char *name, struct sp_snapshot *snap,
                      const char **why, int *err);

#endif
