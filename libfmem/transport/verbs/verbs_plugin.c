/* verbs_plugin.c - the entry point of libfmem-verbs.so, the verbs transport
 * that libfmem.so loads on demand (verbs_loader.c). */
#include "verbs/verbs_plugin.h"

__attribute__((visibility("default"))) const struct fmem_verbs_plugin fmem_verbs_plugin_v1 = {
    .version = PACKAGE_VERSION,
    .params_size = sizeof(struct verbs_connect_params),
    .connect = verbs_transport_connect,
    .mw_type = verbs_transport_mw_type,
    .peer_qp = verbs_transport_peer_qp,
};
