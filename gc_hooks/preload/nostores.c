/* nostores.c - libfmem-preload.so is built without libfmem's ssd: and
 * zmem: stores. A pool on them keeps its data out of reach of a mapping,
 * which the interposer needs (blocks.c: "its transport cannot map
 * memory"), so it could not use one anyway; leaving them out keeps
 * liburing, liblz4 and libzstd out of every program started with the
 * library preloaded (and their loading out of every exec). */
#include <fmem.h>

#include "store.h"
#include "uri.h"

static int left_out(const struct node_uri *u, struct store **out)
{
    (void)u;
    *out = NULL;
    uri_set_error("ssd: and zmem: pools cannot be mapped: libfmem-preload.so has no such "
                  "backend");
    return FMEM_ENOTSUP;
}

int ssd_store_open(const struct node_uri *u, uint64_t data_size, struct store **out)
{
    (void)data_size;
    return left_out(u, out);
}

int zmem_store_open(const struct node_uri *u, uint64_t data_size, struct store **out)
{
    (void)data_size;
    return left_out(u, out);
}
