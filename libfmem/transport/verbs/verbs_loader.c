/* verbs_loader.c - verbs_transport_connect for libfmem.so and
 * libfmem-preload.so: the transport is a plugin (libfmem-verbs.so) loaded
 * with dlopen the first time an rdma:// pool is opened, so that a process
 * that never opens one does not load librdmacm, libibverbs and their
 * providers. Looked for, in this order: $FMEM_VERBS_PLUGIN (ignored in
 * set-uid programs), DIR/fmem/ and DIR/ where DIR is the directory this
 * library was loaded from (installed: LIBDIR/fmem/; a build tree: .libs/),
 * then PKGLIBDIR. Without it, rdma:// pools fail with FMEM_ENOTSUP, as in
 * a build without rdma-core. */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmem.h"
#include "verbs/verbs_plugin.h"

static const struct fmem_verbs_plugin *plugin;
static pthread_once_t plugin_once = PTHREAD_ONCE_INIT;

static const struct fmem_verbs_plugin *try_load(const char *path)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return NULL;
    const struct fmem_verbs_plugin *p = dlsym(h, FMEM_VERBS_PLUGIN_SYMBOL);
    if (p && p->connect && p->mw_type && p->peer_qp && p->params_size == sizeof(struct verbs_connect_params) &&
        p->version && !strcmp(p->version, PACKAGE_VERSION))
        return p; /* stays loaded: its transports live as long as the process */
    dlclose(h);
    return NULL;
}

static void load_plugin(void)
{
    const char *env = secure_getenv("FMEM_VERBS_PLUGIN");
    if (env && *env) {
        plugin = try_load(env);
        return; /* asked for that one: no other */
    }
    Dl_info info;
    char dir[PATH_MAX], path[PATH_MAX + 64];
    if (dladdr((void *)load_plugin, &info) && info.dli_fname &&
        snprintf(dir, sizeof dir, "%s", info.dli_fname) < (int)sizeof dir) {
        char *slash = strrchr(dir, '/');
        if (slash) {
            *slash = 0;
            snprintf(path, sizeof path, "%s/fmem/%s", dir, FMEM_VERBS_PLUGIN_FILE);
            if ((plugin = try_load(path)))
                return;
            snprintf(path, sizeof path, "%s/%s", dir, FMEM_VERBS_PLUGIN_FILE);
            if ((plugin = try_load(path)))
                return;
        }
    }
    plugin = try_load(FMEM_PKGLIBDIR "/" FMEM_VERBS_PLUGIN_FILE);
}

int verbs_transport_connect(const struct verbs_connect_params *p, struct transport **out)
{
    pthread_once(&plugin_once, load_plugin);
    if (!plugin) {
        errno = ENOENT;
        return FMEM_ENOTSUP; /* as without rdma-core */
    }
    return plugin->connect(p, out);
}

/* Only transports the plugin made reach these: it is loaded. */
unsigned verbs_transport_mw_type(const struct transport *t)
{
    return plugin->mw_type(t);
}

uint32_t verbs_transport_peer_qp(struct transport *t)
{
    return plugin->peer_qp(t);
}
