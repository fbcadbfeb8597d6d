/* fmemd - the allocation service of a compute node, in the foreground.
 * See --help. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service/daemon.h"
#include "cli.h"
#include "daemon_signals.h"
#include "service/ids.h"
#include "uri.h"

static int usage(FILE *f)
{
    fprintf(f,
            "usage: fmemd --mnode PATH [--mnode PATH ...] --socket PATH [options]\n"
            "  --mnode PATH        a memory node's socket (repeat for several; the order\n"
            "                      is the node order applications see), or a memory node\n"
            "                      served over RDMA: rdma://HOST:PORT?token=FILE\n"
            "  --socket PATH       where applications connect (fmem_open(\"unix:PATH\"))\n"
            "  --mode OCTAL        socket file mode (default 0660): who may connect\n"
            "  --allow-uid USER    may connect besides root and our own uid (name or id)\n"
            "  --allow-gid GROUP   members of this group may connect (name or id)\n"
            "  --workers N         worker threads (default: one per core)\n"
            "  --app-max-bytes N   per-application quota (bytes: 8G, 512MiB; default none)\n"
            "  --app-max-allocs N  per-application live allocations (default none)\n"
            "  --max-apps N        applications at once (default 256)\n"
            "  --max-apps-per-uid N  applications of one user at once (default a\n"
            "                      quarter of --max-apps; root and our own user: any)\n"
            "  --spin-us N         longest worker spin before sleeping (default 50; it\n"
            "                      adapts down to 0 on a busy machine)\n"
            "  --worker-rt PRIO    run the workers SCHED_FIFO at PRIO (1-99; default off):\n"
            "                      bounded service latency on a busy machine\n"
            "  --connect-ms N      wait this long for the memory nodes (default 10000)\n"
            "  --name NAME         shown by fmem status (default fmemd)\n"
            "  -v, --verbose\n"
            "  -h, --help          this text;  -V, --version  the version\n");
    return f == stderr ? 2 : 0;
}

static uint64_t num(const char *opt, const char *s, uint64_t max)
{
    uint64_t v;
    if (!uri_parse_size(s, &v) || v > max) {
        fprintf(stderr, "fmemd: %s: bad value '%s'\n", opt, s);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    struct fmemd_config c = {.socket_mode = 0660, .spin_ns = 50000, .connect_ms = 10000,
                             .allow_uid = (uid_t)-1, .allow_gid = (gid_t)-1, .stop = &daemon_stop,
                             .name = "fmemd"};
    static const struct option opts[] = {
        {"mnode", 1, 0, 'n'},         {"socket", 1, 0, 's'},    {"mode", 1, 0, 'm'},
        {"allow-uid", 1, 0, 'u'},     {"allow-gid", 1, 0, 'g'}, {"workers", 1, 0, 'w'},
        {"app-max-bytes", 1, 0, 'B'}, {"app-max-allocs", 1, 0, 'A'},
        {"max-apps", 1, 0, 'a'},      {"spin-us", 1, 0, 'S'},   {"connect-ms", 1, 0, 'c'},
        {"max-apps-per-uid", 1, 0, 'U'}, {"worker-rt", 1, 0, 'R'},
        {"name", 1, 0, 'N'},          {"verbose", 0, 0, 'v'},   {"help", 0, 0, 'h'},
        {"version", 0, 0, 'V'},
        {0, 0, 0, 0}};
    int o;
    opterr = 0; /* cli_bad_option says it in one line */
    while ((o = getopt_long(argc, argv, ":vhV", opts, NULL)) != -1) {
        switch (o) {
        case 'n':
            if (c.nmnodes >= SVC_MAX_NODES) {
                fprintf(stderr, "fmemd: at most %d memory nodes\n", SVC_MAX_NODES);
                return 2;
            }
            c.mnode_sockets[c.nmnodes++] = optarg;
            break;
        case 's': c.socket_path = optarg; break;
        case 'm': {
            char *end;
            errno = 0;
            unsigned long m = strtoul(optarg, &end, 8);
            if (errno || *end || m > 0777) {
                fprintf(stderr, "fmemd: --mode: bad value '%s'\n", optarg);
                return 2;
            }
            c.socket_mode = (unsigned)m;
            break;
        }
        case 'u':
            if (!svc_parse_uid(optarg, &c.allow_uid)) {
                fprintf(stderr, "fmemd: --allow-uid: no such user '%s'\n", optarg);
                return 2;
            }
            break;
        case 'g':
            if (!svc_parse_gid(optarg, &c.allow_gid)) {
                fprintf(stderr, "fmemd: --allow-gid: no such group '%s'\n", optarg);
                return 2;
            }
            break;
        case 'w': c.workers = (unsigned)num("--workers", optarg, 64); break;
        case 'B': c.app_max_bytes = num("--app-max-bytes", optarg, UINT64_MAX); break;
        case 'A': c.app_max_allocs = num("--app-max-allocs", optarg, UINT64_MAX); break;
        case 'a': c.max_apps = (unsigned)num("--max-apps", optarg, 4096); break;
        case 'U': c.max_apps_per_uid = (unsigned)num("--max-apps-per-uid", optarg, 4096); break;
        case 'S': c.spin_ns = num("--spin-us", optarg, 1000000) * 1000; break;
        case 'R': c.worker_rt_prio = (unsigned)num("--worker-rt", optarg, 99); break;
        case 'c': c.connect_ms = (unsigned)num("--connect-ms", optarg, 3600000); break;
        case 'N': c.name = optarg; break;
        case 'v': c.verbose = true; break;
        case 'h': return usage(stdout);
        case 'V': return cli_version("fmemd");
        default: return cli_bad_option("fmemd", o, argv);
        }
    }
    if (optind != argc)
        return cli_error("fmemd", "unexpected argument (options only)");
    if (!c.nmnodes || !c.socket_path)
        return cli_error("fmemd", "--mnode and --socket are required");
    daemon_signals_install();
    return fmemd_run(&c);
}
