/* stats_pub.h - this process's live-statistics page (stats_pub.c,
 * stats_page.h): regions and store-backed nodes register while they live. */
#ifndef FMEM_STATS_PUB_H
#define FMEM_STATS_PUB_H

#include "fmem_far.h"

struct transport;

/* After a region is fully created / before its destruction starts. */
void stats_pub_region_add(fmem_region *r);
void stats_pub_region_remove(fmem_region *r);
/* An ssd:/zmem: node's transport, after it opened / before it closes. */
void stats_pub_node_add(struct transport *t);
void stats_pub_node_remove(struct transport *t);
/* Rewrite the page now (tests; the page is otherwise rewritten every
 * FMEM_STATS_INTERVAL_MS). */
void stats_pub_flush(void);
/* The page's path, NULL if this process publishes none now. */
const char *stats_pub_path(void);

#endif
