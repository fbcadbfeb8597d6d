/* region_policy.h - per-region placement and tuning from what the fault
 * handler sees (region_policy.c). */
#ifndef FMEM_FAR_REGION_POLICY_H
#define FMEM_FAR_REGION_POLICY_H

#include <stdint.h>

#include "fmem_far.h"

struct fmem_region;

/* At creation (remote_init): the defaults, and which parameters the
 * configuration fixed (an explicit cfg->prefetch). */
int policy_init(struct fmem_region *r, const fmem_region_config *cfg);
void policy_fini(struct fmem_region *r);
/* The handler served a missing fault on absent unit u (handler thread):
 * record it, and every POLICY_WINDOW faults choose the parameters again.
 * Also applies a read-ahead depth set with fmem_region_tune. */
void policy_note_fault(struct fmem_region *r, uint32_t u, int write);
/* Read-ahead per stream (handler, after policy_note_fault for the same
 * fault): the units to read ahead after the fault (0: none: it continued
 * no stream), or -1 when the read-ahead depth is fixed and the handler's
 * single-stream detector decides. */
int policy_stream_window(struct fmem_region *r);
/* The units a demand read fault on absent unit u brings in from u on, as
 * one run, when it continues a sequential stream that reads ahead
 * (handler, before policy_note_fault for it; 0: it continues none, or the
 * fetch size or read-ahead depth is fixed). */
unsigned policy_stream_fetch(struct fmem_region *r, uint32_t u);
/* The handler brought the current stream in up to unit `end`. */
void policy_stream_ahead(struct fmem_region *r, uint32_t end);
/* What the policy measured over its last window (for the stats). */
struct policy_figures {
    uint64_t fault_rate;   /* missing faults per second */
    uint32_t seq_pct;      /* of them, % a little ahead of the previous */
    uint32_t write_pct;    /* % that were writes */
    uint32_t refault_pct;  /* % on a unit that faulted recently */
    uint32_t refault_dist; /* mean faults between a unit's two faults */
    uint64_t decisions;    /* windows evaluated */
    uint64_t tier_moves;   /* chunks moved between tiers */
    uint64_t fetch_changes; /* times the policy changed the fetch size */
};
/* The fetch size for the demand read fault the handler serves next
 * (before policy_note_fault for it): it brings in the aligned group of
 * that many units around the fault. Now and then half the size in force
 * (a probe, see region_policy.c). A fault served without asking (a write,
 * a first touch) is not measured. */
unsigned policy_fetch_units(struct fmem_region *r);
/* The largest fetch size, units (a power of two). */
unsigned policy_fetch_max(const struct fmem_region *r);
/* Chunks per interleave group (remote_init, before policy_init): one per
 * path, or with links of unequal bandwidth the placement weights' cycle
 * (see region_policy.c). */
unsigned policy_ileave(const struct fmem_region *r);
/* The node a new chunk `chunk` is allocated on: with tiers a node of the
 * tier its fault history asks for (policy_tier_slow), else the policy's
 * weighted placement, or with an explicit stripe width
 * chunk % ileave % stripe. */
unsigned policy_place(const struct fmem_region *r, uint32_t chunk);
/* Tiers (fast memory nodes, slow ssd:/zmem: nodes): 1 when chunk `chunk`
 * belongs on a slow node, 0 on a fast one, -1 when the region has no tiers
 * (one kind of node, or FMEM_REGION_TIER_NONE in force). */
int policy_tier_slow(const struct fmem_region *r, uint32_t chunk);
/* The node for chunk `chunk` on the tier `slow` (only with tiers). */
unsigned policy_place_tier(const struct fmem_region *r, uint32_t chunk, int slow);
/* A chunk moved between tiers (for the stats). */
void policy_tier_moved(struct fmem_region *r);
/* 1: node `node` is a slow one. */
int policy_node_slow(const struct fmem_region *r, unsigned node);
/* The chunk holding unit u (region_remote.c). */
uint32_t remote_chunk(const struct fmem_region *r, uint32_t u);
/* 1: new chunks go to path `path`. */
int policy_path_placing(const struct fmem_region *r, unsigned path);
void policy_figures(struct fmem_region *r, struct policy_figures *out);

#endif
