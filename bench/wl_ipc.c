/* wl_ipc.c - the service-mode benchmark: IPC round trip (application ->
 * fmemd -> application, a no-op request) and 4 KiB allocation + free
 * through the service against the embedded client on the same pool, in one
 * run; plus the memory node's key regeneration rate. It starts its own
 * fmem-mnode and fmemd (forked from this program) in a temporary directory.
 *   --seconds S   per measurement (default 2)
 *   --threads N   application threads in this process (default 1)
 *   --apps N      application processes instead, each with its own
 *                 connection; prints each one's p99 and worst latency
 *   --load N      N busy processes (endless loops) on the same cores for
 *                 the whole run; the load average is printed with the figures
 *   --worker-rt P fmemd's workers SCHED_FIFO at priority P (fmemd --worker-rt)
 *   --json        JSON rows instead of the table
 * The service's 4 KiB allocation is measured twice: with the block cache
 * (the default) and without it (FMEM_SERVICE_CACHE=0, a round trip per
 * allocation and per free). */
#include <fmem.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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

/* The same in `apps` processes, one connection each (opened in the child,
 * with FMEM_SERVICE_CACHE=`cache`); out[i]: process i's figures. */
static int measure_apps(const char *uri, const char *cache, unsigned apps, enum what w,
                        double secs, struct lat *out)
{
    struct shared {
        pthread_barrier_t go;
        int errors;
    } *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED)
        return 1;
    pthread_barrierattr_t ba;
    pthread_barrierattr_init(&ba);
    pthread_barrierattr_setpshared(&ba, PTHREAD_PROCESS_SHARED);
    pthread_barrier_init(&sh->go, &ba, apps);
    sh->errors = 0;
    memset(out, 0, apps * sizeof *out);
    pid_t kids[64];
    for (unsigned i = 0; i < apps; i++) {
        kids[i] = fork();
        if (kids[i] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            setenv("FMEM_SERVICE_CACHE", cache, 1);
            fmem_pool *p = NULL;
            int bad = fmem_open(uri, &p) != 0;
            struct job j = {.p = p, .what = w, .seconds = secs, .go = &sh->go, .lat = &out[i]};
            if (bad)
                pthread_barrier_wait(&sh->go);
            else
                job_main(&j);
            __atomic_add_fetch(&sh->errors, j.errors + bad, __ATOMIC_SEQ_CST);
            if (p)
                fmem_close(p);
            _exit(0);
        }
    }
    for (unsigned i = 0; i < apps; i++)
        if (kids[i] > 0)
            waitpid(kids[i], NULL, 0);
    int errors = sh->errors;
    pthread_barrier_destroy(&sh->go);
    munmap(sh, sizeof *sh);
    return errors;
}

/* --load N: busy processes that die with us */
static pid_t load_kids[256];
static unsigned nload;

static void start_load(unsigned n)
{
    for (nload = 0; nload < n && nload < 256; nload++) {
        pid_t pid = fork();
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            for (volatile uint64_t x = 0;; x++)
                ;
        }
        load_kids[nload] = pid;
    }
}

static void stop_load(void)
{
    for (unsigned i = 0; i < nload; i++)
        if (load_kids[i] > 0) {
            kill(load_kids[i], SIGKILL);
            waitpid(load_kids[i], NULL, 0);
        }
    nload = 0;
}

/* 1-minute load average and runnable tasks now (/proc/loadavg) */
static void loadavg(double *avg, int *runnable)
{
    *avg = 0;
    *runnable = 0;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf %*f %*f %d", avg, runnable) != 2)
            *avg = 0;
        fclose(f);
    }
}

static double mean_ns(const struct lat *l) { return l->n ? (double)l->sum / (double)l->n : 0; }

/* the largest latency recorded (bucket upper bound) */
static double lat_max(const struct lat *l)
{
    for (int i = HB; i >= 0; i--)
        if (l->b[i])
            return i < FINE ? i * 10.0 + 10 : FINE * 10.0 + (i - FINE) * 1000.0 + 1000;
    return 0;
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
    unsigned threads = 1, apps = 0, load = 0, rt = 0;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            secs = atof(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--apps") && i + 1 < argc)
            apps = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--load") && i + 1 < argc)
            load = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--worker-rt") && i + 1 < argc)
            rt = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--workload") && i + 1 < argc)
            i++; /* "ipc": the only one here */
        else {
            fprintf(stderr, "usage: %s [--seconds S] [--threads N | --apps N] [--load N] [--worker-rt PRIO] [--json]\n",
                    argv[0]);
            return 2;
        }
    }
    if (secs <= 0 || threads < 1 || threads > 64 || apps > 64 || load > 256 || rt > 99) {
        fprintf(stderr, "fmem-ipcbench: --seconds > 0, --threads 1..64, --apps 0..64, --load 0..256\n");
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
    dc.worker_rt_prio = rt;
    int status = 1;
    pid_t m = fork_daemon(run_mnode, &mc, mlog), d = -1;
    fmem_pool *svc[64] = {0}, *nc[64] = {0}, *emb[64] = {0};
    unsigned n = apps ? apps : threads;
    /* per application (or thread): ping, service, service without cache, embedded */
    size_t lbytes = 4 * (size_t)n * sizeof(struct lat);
    struct lat *L = mmap(NULL, lbytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m < 0 || wait_sock(msock) || L == MAP_FAILED)
        goto out;
    d = fork_daemon(run_fmemd, &dc, dlog);
    if (d < 0 || wait_sock(dsock))
        goto out;
    for (unsigned i = 0; !apps && i < threads; i++) {
        int bad = setenv("FMEM_SERVICE_CACHE", "1", 1) || fmem_open(uri, &svc[i]);
        bad = bad || setenv("FMEM_SERVICE_CACHE", "0", 1) || fmem_open(uri, &nc[i]);
        if (bad || fmem_open(emb_uri, &emb[i])) {
            fprintf(stderr, "fmem-ipcbench: cannot open the pools\n");
            goto out;
        }
    }
    struct lat *lp = L, *ls = L + n, *ln = L + 2 * n, *le = L + 3 * n;
    start_load(load);
    int errs = 0;
    if (apps) {
        errs += measure_apps(uri, "1", apps, PING, secs, lp);
        errs += measure_apps(uri, "1", apps, ALLOC_FREE, secs, ls);
        errs += measure_apps(uri, "0", apps, ALLOC_FREE, secs, ln);
        errs += measure_apps(emb_uri, "1", apps, ALLOC_FREE, secs, le);
    } else {
        errs += measure(svc, threads, PING, secs, lp);
        errs += measure(svc, threads, ALLOC_FREE, secs, ls);
        errs += measure(nc, threads, ALLOC_FREE, secs, ln);
        errs += measure(emb, threads, ALLOC_FREE, secs, le);
    }
    double la;
    int runnable;
    loadavg(&la, &runnable);
    stop_load();
    /* totals over the applications */
    struct lat *ping = calloc(1, sizeof *ping), *sa = calloc(1, sizeof *sa),
               *sn = calloc(1, sizeof *sn), *ea = calloc(1, sizeof *ea);
    for (unsigned i = 0; i < (apps ? apps : 1); i++) {
        lat_merge(ping, &lp[i]);
        lat_merge(sa, &ls[i]);
        lat_merge(sn, &ln[i]);
        lat_merge(ea, &le[i]);
    }
    uint64_t keys = 0;
    double krate = regen_rate(&keys);
    double smean = mean_ns(sa), nmean = mean_ns(sn), emean = mean_ns(ea);
    double ratio = emean > 0 ? smean / emean : 0, ratio50 = lat_q(ea, .5) > 0 ? lat_q(sa, .5) / lat_q(ea, .5) : 0;
    double nratio = emean > 0 ? nmean / emean : 0;
    const char *unit = apps ? "application process(es)" : "application thread(s)";
    if (json) {
        const struct lat *ls4[4] = {ping, sa, sn, ea};
        const char *what[4] = {"round_trip", "alloc_free_4k", "alloc_free_4k", "alloc_free_4k"};
        const char *mode[4] = {"service", "service", "service_nocache", "embedded"};
        for (int k = 0; k < 4; k++)
            printf("{\"bench\":\"ipc\",\"metric\":\"%s\",\"mode\":\"%s\",\"apps\":%u,"
                   "\"threads\":%u,\"load\":%u,\"loadavg\":%.2f,\"ops\":%llu,\"p50_ns\":%.0f,"
                   "\"p99_ns\":%.0f,\"mean_ns\":%.0f,\"max_ns\":%.0f}\n",
                   what[k], mode[k], apps, apps ? 1 : threads, load, la,
                   (unsigned long long)ls4[k]->n, lat_q(ls4[k], .5), lat_q(ls4[k], .99),
                   mean_ns(ls4[k]), lat_max(ls4[k]));
        printf("{\"bench\":\"ipc\",\"metric\":\"service_vs_embedded\",\"apps\":%u,\"threads\":%u,"
               "\"load\":%u,\"loadavg\":%.2f,\"mean_ratio\":%.2f,\"p50_ratio\":%.2f,"
               "\"nocache_mean_ratio\":%.2f}\n",
               apps, apps ? 1 : threads, load, la, ratio, ratio50, nratio);
        for (unsigned i = 0; apps > 1 && i < apps; i++)
            printf("{\"bench\":\"ipc\",\"metric\":\"per_app\",\"app\":%u,\"ping_p99_ns\":%.0f,"
                   "\"ping_max_ns\":%.0f,\"alloc_p99_ns\":%.0f,\"alloc_max_ns\":%.0f,"
                   "\"ping_ops\":%llu,\"alloc_ops\":%llu}\n",
                   i, lat_q(&lp[i], .99), lat_max(&lp[i]), lat_q(&ls[i], .99), lat_max(&ls[i]),
                   (unsigned long long)lp[i].n, (unsigned long long)ls[i].n);
        printf("{\"bench\":\"ipc\",\"metric\":\"key_regeneration\",\"keys\":%llu,"
               "\"keys_per_s\":%.0f}\n",
               (unsigned long long)keys, krate);
    } else {
        printf("%-36s %10s %9s %9s %9s %9s\n", "measurement", "ops", "p50 us", "p99 us", "mean us",
               "max us");
        const struct lat *ls4[4] = {ping, sa, sn, ea};
        const char *name[4] = {"IPC round trip (no-op request)", "4 KiB alloc+free, service",
                               "4 KiB alloc+free, service no cache", "4 KiB alloc+free, embedded"};
        for (int k = 0; k < 4; k++)
            printf("%-36s %10llu %9.2f %9.2f %9.2f %9.1f\n", name[k], (unsigned long long)ls4[k]->n,
                   lat_q(ls4[k], .5) / 1e3, lat_q(ls4[k], .99) / 1e3, mean_ns(ls4[k]) / 1e3,
                   lat_max(ls4[k]) / 1e3);
        printf("service / embedded: %.2fx (mean), %.2fx (p50); without the cache %.2fx (mean); "
               "%u %s\n",
               ratio, ratio50, nratio, n, unit);
        printf("load: %u busy processes started; 1-minute load average %.2f, %d runnable at the end, "
               "%ld cores; workers %s\n",
               load, la, runnable, sysconf(_SC_NPROCESSORS_ONLN), rt ? "SCHED_FIFO" : "SCHED_OTHER");
        if (apps > 1) {
            printf("%-6s %12s %12s %12s %12s %10s %10s\n", "app", "ping p99 us", "ping max us",
                   "alloc p99 us", "alloc max us", "pings", "allocs");
            for (unsigned i = 0; i < apps; i++)
                printf("%-6u %12.2f %12.1f %12.2f %12.1f %10llu %10llu\n", i, lat_q(&lp[i], .99) / 1e3,
                       lat_max(&lp[i]) / 1e3, lat_q(&ls[i], .99) / 1e3, lat_max(&ls[i]) / 1e3,
                       (unsigned long long)lp[i].n, (unsigned long long)ls[i].n);
        }
        printf("key regeneration: %llu keys in one pass, %.1f M keys/s\n",
               (unsigned long long)keys, krate / 1e6);
    }
    free(ping);
    free(sa);
    free(sn);
    free(ea);
    status = errs ? 1 : 0;
    if (errs)
        fprintf(stderr, "fmem-ipcbench: %d failed operations\n", errs);
out:
    stop_load();
    for (unsigned i = 0; i < threads; i++) {
        fmem_close(svc[i]);
        fmem_close(nc[i]);
        fmem_close(emb[i]);
    }
    if (L != MAP_FAILED)
        munmap(L, lbytes);
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
