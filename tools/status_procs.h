/* status_procs.h - `fmem status --processes` (status_procs.c). */
#ifndef FMEM_STATUS_PROCS_H
#define FMEM_STATUS_PROCS_H

#include <stdbool.h>
#include <stdio.h>

/* List the live far-memory figures this user's processes publish; removes
 * pages of processes that are gone. 0, or 1 if the directory is unreadable. */
int status_processes(bool json, FILE *out);

#endif
