/* verbs_serve - serve a named pool over RDMA for the soft-RoCE tests:
 *   verbs_serve POOL_URI ADDR PORT TOKEN_FILE [type2]   (until SIGTERM/SIGINT)
 * Creates the pool if needed, registers it as one memory region, binds its
 * windows, writes the services' token to TOKEN_FILE and accepts
 * connections; prints "ready" once listening and the regenerator's figures
 * when stopped. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "fmem.h"
#include "pool_internal.h"
#include "verbs/transport_verbs.h"

static atomic_int stop;

static void on_signal(int sig)
{
    (void)sig;
    atomic_store(&stop, 1);
}

int main(int argc, char **argv)
{
    if (argc != 5 && !(argc == 6 && !strcmp(argv[5], "type2"))) {
        fprintf(stderr, "usage: verbs_serve POOL_URI ADDR PORT TOKEN_FILE [type2]\n");
        return 2;
    }
    fmem_pool *p;
    int rc = fmem_open(argv[1], &p);
    if (rc) {
        fprintf(stderr, "verbs_serve: %s: %s\n", argv[1], fmem_strerror(rc));
        return 1;
    }
    struct verbs_server *s;
    rc = verbs_server_start(p->nodes[0]->tp, argv[2], argv[3], argv[4],
                           argc == 6 ? VERBS_SERVER_MW_TYPE2 : 0, &s);
    if (rc) {
        fprintf(stderr, "verbs_serve: listen %s:%s: %s\n", argv[2], argv[3], fmem_strerror(rc));
        return 1;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    struct verbs_server_stats st;
    verbs_server_get_stats(s, &st);
    printf("ready: %llu windows bound in %.1f ms\n", (unsigned long long)st.windows,
           st.setup_ns / 1e6);
    fflush(stdout);
    rc = verbs_server_run(s, &stop);
    verbs_server_get_stats(s, &st);
    printf("regenerator: %llu windows re-bound in %llu passes, %.1f us each\n",
           (unsigned long long)st.regenerated, (unsigned long long)st.passes,
           st.regenerated ? st.regen_ns / 1e3 / st.regenerated : 0.0);
    verbs_server_stop(s);
    fmem_close(p);
    return rc ? 1 : 0;
}
