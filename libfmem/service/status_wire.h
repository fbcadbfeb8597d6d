/* status_wire.h - the daemons' answer to fmem status as data: a STATUS_REPORT
 * message (proto.h) carries a sequence of records, each a st_hdr and the
 * fixed-size payload of its kind. fmemd sends one ST_SERVICE, one ST_NODE
 * per memory node, then ST_APP and ST_WORKER records; fmem-mnode sends one
 * ST_MNODE, its ST_NODE, then ST_PEER (registered services) and
 * ST_RECOVERY records. The tool renders text and JSON from the same
 * records; nothing here is formatted for people. */
#ifndef FMEM_SVC_STATUS_WIRE_H
#define FMEM_SVC_STATUS_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "service/occupancy.h"
#include "service/proto.h"

enum st_kind {
    ST_SERVICE = 1, /* fmemd itself */
    ST_MNODE,       /* fmem-mnode itself */
    ST_NODE,        /* a memory node's space (both daemons) */
    ST_APP,         /* fmemd: a connected application */
    ST_WORKER,      /* fmemd: a worker thread */
    ST_PEER,        /* fmem-mnode: a registered allocation service */
    ST_RECOVERY,    /* fmem-mnode: a recent recovery */
    ST_KIND_END
};

struct st_hdr {
    uint16_t kind;
    uint16_t len; /* payload bytes: exactly the size of the kind's struct */
};

#define ST_PATH_MAX 128

struct st_service {
    char socket[ST_PATH_MAX];
    uint64_t pid, uptime_ns, workers, apps;
    uint64_t app_max_bytes, app_max_allocs; /* 0: no limit */
    uint64_t apps_departed, blocks_reaped, apps_reaping, bad_messages;
    uint64_t max_apps, max_apps_per_user, opening, max_opening, max_opening_per_user;
    uint64_t apps_unlisted; /* applications left out: the report was full */
};

struct st_mnode {
    char pool[ST_PATH_MAX];
    uint64_t pid, uptime_ns, services;
    uint64_t keys, key_passes, key_work_ns, key_last_pass;
    uint64_t recoveries, recoveries_queued;
};

struct st_node {
    uint64_t index, uid;   /* uid: the service's user id there (fmemd) */
    uint64_t connected;    /* 1, or 0 while fmemd reconnects */
    char pool[64];
    char path[ST_PATH_MAX]; /* fmemd: the node's socket or rdma:// address */
    struct occ_report occ;
};

struct st_app {
    uint64_t id, pid, uid, blocks, bytes;
    uint64_t allocs, frees, pings, errors, over_quota;
    uint64_t refills, trims, revoked;
    char name[MSG_NAME_MAX];
};

struct st_worker {
    uint64_t index, apps, served, sleeps, spin_ns;
};

struct st_peer {
    uint64_t uid, pid, apps, app_bytes, heartbeat_age_ns;
    char name[MSG_NAME_MAX];
};

struct st_recovery {
    uint64_t uid, blocks, bytes, elapsed_ns;
    char name[MSG_NAME_MAX];
    char why[32];
};

/* Building a report: records are appended while they fit (MSG_TEXT_MAX). */
struct st_builder {
    uint8_t buf[MSG_TEXT_MAX];
    size_t len;
};
/* Append a record of `kind` (payload: that kind's struct). false: full. */
bool st_add(struct st_builder *b, enum st_kind kind, const void *rec);

/* Check a received record stream: every header complete, every kind known
 * with its exact length, every string terminated inside its field. 0 or
 * FMEM_EINVAL (msg_decode calls it for STATUS_REPORT). */
int st_check(const void *p, size_t n);

/* A checked stream, decoded into aligned copies. */
struct st_report {
    bool has_service, has_mnode;
    struct st_service service;
    struct st_mnode mnode;
    struct st_node *nodes;
    struct st_app *apps;
    struct st_worker *workers;
    struct st_peer *peers;
    struct st_recovery *recoveries;
    unsigned nnodes, napps, nworkers, npeers, nrecoveries;
};
/* 0, FMEM_EINVAL (st_check failed) or FMEM_ENOMEM. st_free after either. */
int st_parse(const void *p, size_t n, struct st_report *r);
void st_free(struct st_report *r);

#endif
