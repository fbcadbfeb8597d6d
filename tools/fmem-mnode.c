/* fmem-mnode - the memory node daemon, in the foreground. See --help. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "daemon_signals.h"
#include "service/ids.h"
#include "service/mnode.h"

static int usage(FILE *f)
{
    fprintf(f,
            "usage: fmem-mnode --pool URI --socket PATH [options]\n"
            "  --pool URI          the pool: shm:/NAME?size=1G or file:/PATH?size=1G;\n"
            "                      created when absent, else reopened as it is\n"
            "  --socket PATH       where services and fmem status connect\n"
            "  --mode OCTAL        socket file mode (default 0660)\n"
            "  --heartbeat-ms N    heartbeat period services must keep (default 1000)\n"
            "  --miss N            missed heartbeats that mean death (default 3)\n"
            "  --regen-ms N        key regenerator period (default 100)\n"
            "  --allow-uid USER    may register besides root and our own uid (name or id)\n"
            "  --no-fence          do not kill a silent service before recovering it\n"
            "  --rdma ADDR:PORT    serve the pool over RDMA verbs instead of handing its\n"
            "                      files to local services: a memory window per block,\n"
            "                      services connect with rdma://ADDR:PORT?token=FILE\n"
            "  --mw type1|type2    with --rdma: applications' block windows; type2 binds\n"
            "                      them to the application's queue pair (default type1)\n"
            "  --token FILE        where to write the services' token (default:\n"
            "                      the socket path + .token, mode 0600)\n"
            "  -v, --verbose\n"
            "  -h, --help          this text;  -V, --version  the version\n");
    return f == stderr ? 2 : 0;
}

static unsigned num(const char *opt, const char *s, int base, unsigned long max)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, base);
    if (errno || *end || !*s || v > max) {
        fprintf(stderr, "fmem-mnode: %s: bad value '%s'\n", opt, s);
        exit(2);
    }
    return (unsigned)v;
}

int main(int argc, char **argv)
{
    struct mnode_config c = {.socket_mode = 0660, .heartbeat_ms = 1000, .miss_limit = 3,
                             .regen_ms = 100, .sweep_ms = 5000, .allow_uid = (uid_t)-1,
                             .stop = &daemon_stop};
    static const struct option opts[] = {
        {"pool", 1, 0, 'p'},       {"socket", 1, 0, 's'}, {"mode", 1, 0, 'm'},
        {"heartbeat-ms", 1, 0, 'H'}, {"miss", 1, 0, 'M'}, {"regen-ms", 1, 0, 'r'},
        {"allow-uid", 1, 0, 'u'},  {"no-fence", 0, 0, 'F'}, {"verbose", 0, 0, 'v'},
        {"rdma", 1, 0, 'R'},       {"token", 1, 0, 'T'},  {"help", 0, 0, 'h'},
        {"version", 0, 0, 'V'},    {"mw", 1, 0, 'W'},
        {0, 0, 0, 0}};
    int o;
    opterr = 0; /* cli_bad_option says it in one line */
    while ((o = getopt_long(argc, argv, ":vhV", opts, NULL)) != -1) {
        switch (o) {
        case 'p': c.pool_uri = optarg; break;
        case 's': c.socket_path = optarg; break;
        case 'm': c.socket_mode = num("--mode", optarg, 8, 0777); break;
        case 'H': c.heartbeat_ms = num("--heartbeat-ms", optarg, 10, 600000); break;
        case 'M': c.miss_limit = num("--miss", optarg, 10, 1000); break;
        case 'r': c.regen_ms = num("--regen-ms", optarg, 10, 60000); break;
        case 'u':
            if (!svc_parse_uid(optarg, &c.allow_uid)) {
                fprintf(stderr, "fmem-mnode: --allow-uid: no such user '%s'\n", optarg);
                return 2;
            }
            break;
        case 'F': c.no_fence = true; break;
        case 'R': c.rdma_addr = optarg; break;
        case 'T': c.token_path = optarg; break;
        case 'W':
            if (strcmp(optarg, "type1") && strcmp(optarg, "type2"))
                return cli_error("fmem-mnode", "--mw: type1 or type2");
            c.mw_type2 = !strcmp(optarg, "type2");
            break;
        case 'v': c.verbose = true; break;
        case 'h': return usage(stdout);
        case 'V': return cli_version("fmem-mnode");
        default: return cli_bad_option("fmem-mnode", o, argv);
        }
    }
    if (optind != argc)
        return cli_error("fmem-mnode", "unexpected argument (options only)");
    if (!c.pool_uri || !c.socket_path)
        return cli_error("fmem-mnode", "--pool and --socket are required");
    if (!c.heartbeat_ms || !c.miss_limit || !c.regen_ms)
        return cli_error("fmem-mnode", "--heartbeat-ms, --miss and --regen-ms must not be 0");
    if (c.mw_type2 && !c.rdma_addr)
        return cli_error("fmem-mnode", "--mw type2 needs --rdma");
    char token[4200];
    if (c.rdma_addr && !c.token_path) {
        snprintf(token, sizeof token, "%s.token", c.socket_path);
        c.token_path = token;
    }
    daemon_signals_install();
    return mnode_run(&c);
}
