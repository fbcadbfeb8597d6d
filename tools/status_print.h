/* status_print.h - `fmem status` reports for people (text) and for programs
 * (JSON), both rendered from the same data: a daemon's status records
 * (status_wire.h) or a pool file's occupancy report. */
#ifndef FMEM_SVC_STATUS_PRINT_H
#define FMEM_SVC_STATUS_PRINT_H

#include <stdio.h>

#include "service/occupancy.h"
#include "service/status_wire.h"

/* One node's space, fragmentation, spans and live blocks, as text lines. */
void status_print_occ(const struct occ_report *r, FILE *f);
void status_print_text(const struct st_report *r, FILE *f);
/* One JSON object and a newline. */
void status_print_json(const struct st_report *r, FILE *f);

/* A byte count for people: "512 B", "1.5 MiB". */
void status_human(char *b, size_t n, uint64_t v);
/* A JSON string (quoted and escaped). */
void json_string(FILE *f, const char *s);
/* One node's space as a JSON object: {"node": index, "pool": ..., "path":
 * ..., "user": ..., "connected": ..., then the occupancy fields}; pool,
 * path and conn (user and connected) are left out when NULL. The pool
 * file report and both daemons' reports all print their nodes with it. */
void json_node(FILE *f, unsigned index, const char *pool, const char *path,
               const struct st_node *conn, const struct occ_report *r);

#endif
