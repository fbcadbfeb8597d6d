/* verbs_plugin.h - the interface between libfmem.so and its verbs transport
 * plugin (PKGLIBDIR/libfmem-verbs.so, see libfmem/transport/verbs/plugin.am). Both
 * come from the same build: the plugin names its version and the loader
 * takes only its own. */
#ifndef FMEM_VERBS_PLUGIN_H
#define FMEM_VERBS_PLUGIN_H

#include "verbs/transport_verbs.h"

#define FMEM_VERBS_PLUGIN_FILE "libfmem-verbs.so"

struct fmem_verbs_plugin {
    const char *version; /* PACKAGE_VERSION of the build */
    unsigned params_size; /* sizeof(struct verbs_connect_params) */
    int (*connect)(const struct verbs_connect_params *p, struct transport **out);
    /* what an application of fmemd needs for type-2B windows */
    unsigned (*mw_type)(const struct transport *t);
    uint32_t (*peer_qp)(struct transport *t);
};

/* the one symbol the plugin exports */
#define FMEM_VERBS_PLUGIN_SYMBOL "fmem_verbs_plugin_v1"

#endif
