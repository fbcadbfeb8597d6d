/* wl_ipc.c - the service-mode benchmark: IPC round trip (application ->
 * fmemd -> application, a no-op request) and 4 KiB allocation + free
 * through the service against the embedded client on the same pool, in one
 * run; plus the memory node's key regeneration rate. It starts its own
 * fmem-mnode and fmemd (forked from this program) in a temporary directory.
 *   --seconds S   per measurement (default 2)
 *   --threads N   application threads (default 1)
 *   --json        JSON rows instead of the table */
#include <fmem.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pool_internal.h"
#include "service/client.h"
#include "service/daemon.h"
#include "service/mnode.h"
#include "service/ring.h"

int fmem_bench_ipc(int argc, char **argv);

/* latency histogram: 10 ns buckets below 100 us, 1 us buckets to 100 ms,
 * then one overflow bucket */
#define FINE 10000
#define COARSE 100000
#define HB (FINE + COARSE)
struct lat {
    uint64_t n, sum, b[HB + 1];
};

static void lat_add(struct lat *l, uint64_t ns)
{
    l->n++;
    l->sum += ns;
    uint64_t i = ns < FINE * 10 ? ns / 10 : FINE + (ns - FINE * 10) / 1000;
    l->b[i < HB ? i : HB]++;
}

static void lat_merge(struct lat *a, const struct lat *b)
{
    a->n += b->n;
    a->sum += b->sum;
    for (int i = 0; i <= HB; i++)
        a->b[i] += b->b[i];
}

static double lat_q(const struct lat *l, double q)
{
    uint64_t want = (uint64_t)(q * (double)l->n), seen = 0;
    for (int i = 0; i <= HB; i++) {
        seen += l->b[i];
        if (seen > want)
            return i < FINE ? i * 10.0 + 5 : FINE * 10.0 + (i - FINE) * 1000.0 + 500;
    }
    return FINE * 10.0 + COARSE * 1000.0;
}

enum what { PING, ALLOC_FREE };

struct job {
    fmem_pool *p;
    enum what what;
    double seconds;
    struct lat *lat;
    int errors;
    pthread_barrier_t *go;
};

static void *job_main(void *arg)
{
    struct job *j = arg;
    pthread_barrier_wait(j->go);
    uint64_t end = ring_now_ns() + (uint64_t)(j->seconds * 1e9);
    /* warm up: caches, spinning worker */
    for (int i = 0; i < 1000; i++)
        j->what == PING ? service_ping(j->p) : 0;
    while (ring_now_ns() < end) {
        for (int k = 0; k < 64; k++) {
            uint64_t t0 = ring_now_ns();
            int rc;
            if (j->what == PING) {
                rc = service_ping(j->p);
            } else {
                fmem_handle h;
                rc = fmem_alloc(j->p, 4096, &h);
                if (rc == 0)
                    rc = fmem_free(j->p, &h);
            }
            lat_add(j->lat, ring_now_ns() - t0);
            j->errors += rc != 0;
        }
    }
    return NULL;
}

static int measure(fmem_pool **pools, unsigned threads, enum what w, double secs, struct lat *out)
{
    pthread_t t[64];
    struct job j[64];
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, threads);
    int errors = 0;
    memset(out, 0, sizeof *out);
    for (unsigned i = 0; i < threads; i++) {
        j[i] = (struct job){.p = pools[i], .what = w, .seconds = secs, .go = &go,
                            .lat = calloc(1, sizeof(struct lat))};
        pthread_create(&t[i], NULL, job_main, &j[i]);
    }
    for (unsigned i = 0; i < threads; i++) {
        pthread_join(t[i], NULL);
        lat_merge(out, j[i].lat);
        errors += j[i].errors;
        free(j[i].lat);
    }
    pthread_barrier_destroy(&go);
    return errors;
}

static _Atomic int child_stop;

static void child_signal(int s)
{
    (void)s;
    atomic_store(&child_stop, 1);
}

/* Run a daemon core in a child process that dies with us. */
static pid_t fork_daemon(int (*fn)(const void *), const void *cfg, const char *log)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    struct sigaction sa = {.sa_handler = child_signal};
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (!freopen(log, "a", stderr))
        _exit(1);
    _exit(fn(cfg));
}

static int run_mnode(const void *c) { return mnode_run(c); }
static int run_fmemd(const void *c) { return fmemd_run(c); }

static int wait_sock(const char *path)
{
    struct stat st;
    for (int i = 0; i < 500; i++) {
        if (stat(path, &st) == 0)
            return 0;
        usleep(10000);
    }
    return -1;
}

/* Regenerator throughput: empty every backup key of a 1 GiB pool, time a
 * pass that refills them. */
static double regen_rate(uint64_t *keys)
{
    fmem_pool *p;
    if (fmem_open("mem:?size=1G", &p))
        return 0;
    struct node *n = p->nodes[0];
    uint64_t *caps = (uint64_t *)((char *)n->tp->base + n->g.cap_off);
    for (uint64_t c = 0; c < n->g.nchunks; c++) /* a main key, no backup */
        caps[c] = (caps[c] & 0xFFFFFFFFu) ? (caps[c] & 0xFFFFFFFFu) : (uint32_t)(c + 1);
    struct regen_stats st = {0};
    uint64_t t0 = ring_now_ns();
    *keys = regen_pass(n, &st);
    double secs = (ring_now_ns() - t0) / 1e9;
    fmem_close(p);
    return secs > 0 ? (double)*keys / secs : 0;
}

int fmem_bench_ipc(int argc, char **argv)
{
    double secs = 2;
    unsigned threads = 1;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            secs = atof(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--workload") && i + 1 < argc)
            i++; /* "ipc": the only one here */
        else {
            fprintf(stderr, "usage: %s [--seconds S] [--threads N] [--json]\n", argv[0]);
            return 2;
        }
    }
    if (secs <= 0 || threads < 1 || threads > 64) {
        fprintf(stderr, "fmem-ipcbench: --seconds > 0, --threads 1..64\n");
        return 2;
    }
    char dir[] = "/tmp/fmem-ipcbench-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    char pool[128], msock[128], dsock[128], mlog[128], dlog[128], uri[160], emb_uri[160];
    snprintf(pool, sizeof pool, "file:%s/pool?size=256M", dir);
    snprintf(msock, sizeof msock, "%s/mnode.sock", dir);
    snprintf(dsock, sizeof dsock, "%s/fmemd.sock", dir);
    snprintf(mlog, sizeof mlog, "%s/mnode.log", dir);
    snprintf(dlog, sizeof dlog, "%s/fmemd.log", dir);
    snprintf(uri, sizeof uri, "unix:%s", dsock);
    snprintf(emb_uri, sizeof emb_uri, "file:%s/pool?create=0", dir);
    static struct mnode_config mc;
    mc = (struct mnode_config){.pool_uri = pool, .socket_path = msock, .socket_mode = 0600,
                               .heartbeat_ms = 1000, .miss_limit = 3, .regen_ms = 100,
                               .sweep_ms = 5000, .allow_uid = (uid_t)-1, .stop = &child_stop};
    static struct fmemd_config dc;
    dc = (struct fmemd_config){.socket_path = dsock, .socket_mode = 0600, .nmnodes = 1,
                               .spin_ns = 50000, .connect_ms = 5000, .allow_uid = (uid_t)-1,
                               .allow_gid = (gid_t)-1, .name = "ipcbench", .stop = &child_stop};
    dc.mnode_sockets[0] = msock;
    int status = 1;
    pid_t m = fork_daemon(run_mnode, &mc, mlog), d = -1;
    fmem_pool *svc[64] = {0}, *emb[64] = {0};
    if (m < 0 || wait_sock(msock))
        goto out;
    d = fork_daemon(run_fmemd, &dc, dlog);
    if (d < 0 || wait_sock(dsock))
        goto out;
    for (unsigned i = 0; i < threads; i++)
        if (fmem_open(uri, &svc[i]) || fmem_open(emb_uri, &emb[i])) {
            fprintf(stderr, "fmem-ipcbench: cannot open the pools\n");
            goto out;
        }
    struct lat *ping = calloc(1, sizeof *ping), *sa = calloc(1, sizeof *sa),
               *ea = calloc(1, sizeof *ea);
    int errs = measure(svc, threads, PING, secs, ping);
    errs += measure(svc, threads, ALLOC_FREE, secs, sa);
    errs += measure(emb, threads, ALLOC_FREE, secs, ea);
    uint64_t keys = 0;
    double krate = regen_rate(&keys);
    double smean = sa->n ? (double)sa->sum / sa->n : 0, emean = ea->n ? (double)ea->sum / ea->n : 0;
    double ratio = emean > 0 ? smean / emean : 0, ratio50 = lat_q(ea, .5) > 0 ? lat_q(sa, .5) / lat_q(ea, .5) : 0;
    if (json) {
        printf("{\"bench\":\"ipc\",\"metric\":\"round_trip\",\"threads\":%u,\"ops\":%llu,"
               "\"p50_ns\":%.0f,\"p99_ns\":%.0f,\"mean_ns\":%.0f}\n",
               threads, (unsigned long long)ping->n, lat_q(ping, .5), lat_q(ping, .99),
               ping->n ? (double)ping->sum / ping->n : 0);
        const struct lat *ls[2] = {sa, ea};
        const char *mode[2] = {"service", "embedded"};
        for (int k = 0; k < 2; k++)
            printf("{\"bench\":\"ipc\",\"metric\":\"alloc_free_4k\",\"mode\":\"%s\",\"threads\":%u,"
                   "\"ops\":%llu,\"p50_ns\":%.0f,\"p99_ns\":%.0f,\"mean_ns\":%.0f}\n",
                   mode[k], threads, (unsigned long long)ls[k]->n, lat_q(ls[k], .5),
                   lat_q(ls[k], .99), ls[k]->n ? (double)ls[k]->sum / ls[k]->n : 0);
        printf("{\"bench\":\"ipc\",\"metric\":\"service_vs_embedded\",\"threads\":%u,"
               "\"mean_ratio\":%.2f,\"p50_ratio\":%.2f}\n",
               threads, ratio, ratio50);
        printf("{\"bench\":\"ipc\",\"metric\":\"key_regeneration\",\"keys\":%llu,"
               "\"keys_per_s\":%.0f}\n",
               (unsigned long long)keys, krate);
    } else {
        printf("%-34s %10s %10s %10s %10s\n", "measurement", "ops", "p50 us", "p99 us", "mean us");
        printf("%-34s %10llu %10.2f %10.2f %10.2f\n", "IPC round trip (no-op request)",
               (unsigned long long)ping->n, lat_q(ping, .5) / 1e3, lat_q(ping, .99) / 1e3,
               ping->n ? (double)ping->sum / ping->n / 1e3 : 0);
        printf("%-34s %10llu %10.2f %10.2f %10.2f\n", "4 KiB alloc+free, service",
               (unsigned long long)sa->n, lat_q(sa, .5) / 1e3, lat_q(sa, .99) / 1e3, smean / 1e3);
        printf("%-34s %10llu %10.2f %10.2f %10.2f\n", "4 KiB alloc+free, embedded",
               (unsigned long long)ea->n, lat_q(ea, .5) / 1e3, lat_q(ea, .99) / 1e3, emean / 1e3);
        printf("service / embedded: %.2fx (mean), %.2fx (p50); %u application thread(s)\n", ratio,
               ratio50, threads);
        printf("key regeneration: %llu keys in one pass, %.1f M keys/s\n",
               (unsigned long long)keys, krate / 1e6);
    }
    free(ping);
    free(sa);
    free(ea);
    status = errs ? 1 : 0;
    if (errs)
        fprintf(stderr, "fmem-ipcbench: %d failed operations\n", errs);
out:
    for (unsigned i = 0; i < threads; i++) {
        fmem_close(svc[i]);
        fmem_close(emb[i]);
    }
    pid_t kids[2] = {d, m};
    for (int i = 0; i < 2; i++)
        if (kids[i] > 0) {
            kill(kids[i], SIGTERM);
            waitpid(kids[i], NULL, 0);
        }
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (status == 0 && system(cmd) != 0)
        fprintf(stderr, "fmem-ipcbench: could not remove %s\n", dir);
    return status;
}
