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
/* What the policy measured over its last window (for the stats). */
struct policy_figures {
    uint64_t fault_rate;   /* missing faults per second */
    uint32_t seq_pct;      /* of them, % a little ahead of the previous */
    uint32_t write_pct;    /* % that were writes */
    uint32_t refault_pct;  /* % on a unit that faulted recently */
    uint32_t refault_dist; /* mean faults between a unit's two faults */
    uint64_t decisions;    /* windows evaluated */
};
void policy_figures(struct fmem_region *r, struct policy_figures *out);

#endif
