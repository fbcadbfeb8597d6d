/* region_hint.h - what a region heap tells its region about memory it
 * freed but keeps mapped for reuse (heap_backend.c), without a release:
 *  - region_discard: the units wholly inside [off, off+len) hold nothing
 *    anyone will read. The writer evicts them before any other unit and
 *    drops them without a write-back (their pool copy too); read again,
 *    they read as zeros. No system call: only the unit table changes.
 *  - region_undiscard: the units touching [off, off+len) are in use
 *    again, as they are (old data or zeros). Call it before the memory is
 *    written: a write after it is never lost (the writer checks the mark
 *    only once the unit is write-protected).
 * Both take the region lock only; callers may hold their own locks. */
#ifndef FMEM_FAR_REGION_HINT_H
#define FMEM_FAR_REGION_HINT_H

#include <stddef.h>

#include "fmem_far.h"

void region_discard(fmem_region *r, size_t off, size_t len);
void region_undiscard(fmem_region *r, size_t off, size_t len);

#endif
