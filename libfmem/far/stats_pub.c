/* stats_pub.c - publishing this process's live far-memory figures in a
 * stats page (stats_page.h) for `fmem status --processes`.
 *
 * Regions and ssd:/zmem: nodes register here while they live. While
 * anything is registered, one thread of this process rewrites the page
 * every interval (FMEM_STATS_INTERVAL_MS, default 250) from the counters
 * the regions and stores keep anyway (fmem_region_stats, fmem_region_paths,
 * the transport's stats), so faults and transfers pay nothing for it: no
 * system call, no extra store. The page is removed when the last one
 * goes and at exit. FMEM_STATS=0 turns publishing off. A fork child
 * publishes only what it registers itself. A killed process cannot remove
 * its page: the first page a process publishes removes the stale pages of
 * its own user first (sweep_stale). */
#include "stats_pub.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fmem.h"
#include "fmem_far.h"
#include "region_internal.h"
#include "stats_page.h"
#include "transport.h"

struct pub_region {
    fmem_region *r;
    uint64_t serial;
};

struct pub_node {
    struct transport *t;
};

struct pub_thread {
    pthread_t tid;
    bool stop; /* mu */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv; /* on CLOCK_MONOTONIC: cv_init */
static struct pub_region regions[SP_MAX_REGIONS];
static unsigned nregions, regions_unlisted;
static struct pub_node nodes[SP_MAX_NODES];
static unsigned nnodes, nodes_unlisted;
static uint64_t next_serial = 1;
static struct sp_header *page; /* mapped file, NULL if none */
static char page_path[4096];
static pid_t page_pid;
static struct pub_thread *thread;
static uint64_t interval_ms = 250;
static int enabled = -1; /* -1: not yet read from the environment */
static bool hooks_done;
static bool exiting; /* at_exit ran: no new page */
static bool swept;   /* this process removed its user's stale pages */

static bool pub_enabled(void)
{
    if (enabled < 0) {
        const char *e = getenv("FMEM_STATS");
        enabled = !(e && (!strcmp(e, "0") || !strcmp(e, "off") || !strcmp(e, "no")));
        const char *iv = getenv("FMEM_STATS_INTERVAL_MS");
        if (iv && *iv) {
            unsigned long v = strtoul(iv, NULL, 10);
            if (v >= 1 && v <= 60000)
                interval_ms = v;
        }
    }
    return enabled;
}

static void page_drop(bool unlink_it) /* mu held */
{
    if (!page)
        return;
    if (unlink_it && page_pid == getpid())
        unlink(page_path);
    munmap(page, sp_file_bytes());
    page = NULL;
}

static void at_exit(void)
{
    pthread_mutex_lock(&mu);
    page_drop(true);
    exiting = true;
    pthread_mutex_unlock(&mu);
}

static void cv_init(void)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&cv, &ca);
    pthread_condattr_destroy(&ca);
}

/* In a fork child: nothing of the parent's is ours to publish or remove. */
static void fork_child(void)
{
    pthread_mutex_init(&mu, NULL);
    cv_init();
    if (page)
        munmap(page, sp_file_bytes());
    page = NULL;
    thread = NULL; /* the parent's thread is not in this process */
    nregions = nnodes = regions_unlisted = nodes_unlisted = 0;
}

static void fork_prepare(void)
{
    pthread_mutex_lock(&mu);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&mu);
}

static uint64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Remove dir/name if the calling user owns it and it is still the file
 * (inode) that was judged stale. unlink removes a symbolic link itself,
 * never its target. */
static void unlink_own(const char *dir, const char *name, const struct stat *judged)
{
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (lstat(path, &st) || st.st_uid != geteuid() || st.st_ino != judged->st_ino ||
        st.st_dev != judged->st_dev)
        return;
    unlink(path);
}

/* Pages of this user's processes that were killed (SIGKILL runs no exit
 * handler) stay behind; nobody else may remove them. A page is stale when
 * its pid runs no process, or runs one started at another time than the
 * page says (sp_read's SP_STALE). Only names of this user's uid and files
 * this user owns are touched; a page that cannot be judged (being written,
 * garbage) of a process that runs is left alone. */
static void sweep_stale(const char *dir, pid_t self)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct sp_snapshot *snap = NULL;
    uint64_t me = geteuid();
    struct dirent *e;
    while ((e = readdir(d))) {
        uint64_t uid, pid;
        if (!sp_parse_name(e->d_name, &uid, &pid) || uid != me || pid == (uint64_t)self)
            continue;
        char path[4096];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (lstat(path, &st) || st.st_uid != me)
            continue;
        if (sp_proc_start(pid)) {
            const char *why;
            int err;
            if (!snap && !(snap = malloc(sizeof *snap)))
                break;
            if (sp_read(dir, e->d_name, snap, &why, &err) != SP_STALE)
                continue;
        }
        unlink_own(dir, e->d_name, &st);
    }
    free(snap);
    closedir(d);
}

static int page_create(void) /* mu held */
{
    const char *dir = sp_dir();
    pid_t pid = getpid();
    if (!swept) { /* once per process (a fork child of one that swept: not again) */
        swept = true;
        sweep_stale(dir, pid);
    }
    snprintf(page_path, sizeof page_path, "%s/" SP_PREFIX "%u.%d", dir, (unsigned)geteuid(),
             (int)pid);
    int fd = open(page_path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) {
        /* left by a dead process whose pid this one has now */
        unlink(page_path);
        fd = open(page_path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    }
    if (fd < 0)
        return -1;
    size_t len = sp_file_bytes();
    void *m = MAP_FAILED;
    if (ftruncate(fd, (off_t)len) == 0)
        m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        unlink(page_path);
        return -1;
    }
    page = m;
    page_pid = pid;
    struct sp_header *h = page;
    h->version = SP_VERSION;
    h->header_bytes = sizeof(struct sp_header);
    h->region_bytes = sizeof(struct sp_region);
    h->node_bytes = sizeof(struct sp_node);
    h->path_bytes = sizeof(struct sp_path);
    h->max_regions = SP_MAX_REGIONS;
    h->max_nodes = SP_MAX_NODES;
    h->max_paths = SP_MAX_PATHS;
    h->pid = (uint64_t)pid;
    h->uid = geteuid();
    h->start_ticks = sp_proc_start((uint64_t)pid);
    h->interval_ms = interval_ms;
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = 0;
    const char *base = strrchr(exe, '/');
    snprintf(h->program, sizeof h->program, "%.63s", base ? base + 1 : exe);
    atomic_thread_fence(memory_order_release);
    h->magic = SP_MAGIC; /* last: a reader sees a whole header or no magic */
    return 0;
}

static void fill_region(struct sp_region *o, const struct pub_region *pr)
{
    fmem_region *r = pr->r;
    fmem_region_stats_t s;
    fmem_region_tuning t;
    fmem_region_path_t p[SP_MAX_PATHS];
    memset(o, 0, sizeof *o);
    o->serial = pr->serial;
    o->size = r->size;
    o->unit = r->unit;
    if (fmem_region_stats(r, &s) == 0) {
        o->cache_bytes = s.cache_bytes;
        o->cached_bytes = s.cached_bytes;
        o->remote_bytes = s.remote_bytes;
        o->faults = s.faults;
        o->missing_faults = s.missing_faults;
        o->fetches = s.fetches;
        o->prefetches = s.prefetches;
        o->evictions = s.evictions;
        o->writebacks = s.writebacks;
        o->bytes_fetched = s.bytes_fetched;
        o->bytes_written = s.bytes_written;
        o->tier_moves = s.tier_moves;
        o->alloc_failures = s.alloc_failures;
        o->fault_rate = s.fault_rate;
        o->paths = s.paths;
        o->stripe_width = s.stripe_width;
        o->io_width = s.io_width;
        o->prefetch_units = s.prefetch_units;
        o->seq_pct = s.seq_pct;
        o->write_pct = s.write_pct;
        o->refault_pct = s.refault_pct;
        o->fetch_units = s.fetch_units;
        o->fetch_max = s.fetch_max;
    }
    if (fmem_region_tuning_get(r, &t) == 0) {
        o->tier = t.tier;
        o->fixed = t.set;
    }
    int np = fmem_region_paths(r, p, SP_MAX_PATHS);
    if (np < 0)
        np = 0;
    if (np > (int)SP_MAX_PATHS)
        np = SP_MAX_PATHS;
    o->npaths = (uint32_t)np;
    for (int k = 0; k < np; k++) {
        struct sp_path *d = &o->path[k];
        d->node = p[k].node;
        d->placing = p[k].placing;
        d->bytes_fetched = p[k].bytes_fetched;
        d->bytes_written = p[k].bytes_written;
        d->ops = p[k].ops;
        d->busy_ns = p[k].busy_ns;
        d->bandwidth = p[k].bandwidth;
        d->chunks = p[k].chunks;
        fmem_node_stats_t ns;
        if (fmem_node_stats(r->pool, p[k].node, &ns) == 0)
            snprintf(d->kind, sizeof d->kind, "%s", ns.kind);
    }
}

static void fill_node(struct sp_node *o, struct transport *t)
{
    fmem_node_stats_t s;
    memset(&s, 0, sizeof s);
    memset(o, 0, sizeof *o);
    if (t->ops->stats)
        t->ops->stats(t, &s);
    memcpy(o->kind, s.kind, sizeof o->kind);
    memcpy(o->detail, s.detail, sizeof o->detail);
    o->capacity_bytes = s.capacity_bytes;
    o->held_bytes = s.held_bytes;
    o->stored_bytes = s.stored_bytes;
    o->reads = s.reads;
    o->writes = s.writes;
    o->bytes_read = s.bytes_read;
    o->bytes_written = s.bytes_written;
    o->read_ns = s.read_ns;
    o->write_ns = s.write_ns;
    o->errors = s.errors;
    memcpy(o->last_error, s.last_error, sizeof o->last_error);
}

/* Rewrite the records (mu held). The records go to a private copy first
 * so that the odd-sequence window is one memcpy long. */
static void publish(void)
{
    if (!page)
        return;
    static struct sp_region rbuf[SP_MAX_REGIONS];
    static struct sp_node nbuf[SP_MAX_NODES];
    for (unsigned i = 0; i < nregions; i++)
        fill_region(&rbuf[i], &regions[i]);
    for (unsigned i = 0; i < nnodes; i++)
        fill_node(&nbuf[i], nodes[i].t);
    struct sp_header *h = page;
    struct sp_region *rr = (struct sp_region *)(h + 1);
    struct sp_node *nn = (struct sp_node *)(rr + SP_MAX_REGIONS);
    uint64_t seq = h->seq;
    __atomic_store_n(&h->seq, seq + 1, __ATOMIC_RELAXED);
    atomic_thread_fence(memory_order_release);
    memcpy(rr, rbuf, nregions * sizeof *rr);
    memcpy(nn, nbuf, nnodes * sizeof *nn);
    h->nregions = nregions;
    h->nnodes = nnodes;
    h->regions_unlisted = regions_unlisted;
    h->nodes_unlisted = nodes_unlisted;
    h->updated_ns = realtime_ns();
    atomic_thread_fence(memory_order_release);
    __atomic_store_n(&h->seq, seq + 2, __ATOMIC_RELAXED);
}

static void *pub_main(void *arg)
{
    struct pub_thread *me = arg;
    pthread_mutex_lock(&mu);
    while (!me->stop) {
        publish();
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + interval_ms * 1000000u;
        ts.tv_sec += (time_t)(ns / 1000000000u);
        ts.tv_nsec = (long)(ns % 1000000000u);
        pthread_cond_timedwait(&cv, &mu, &ts);
    }
    pthread_mutex_unlock(&mu);
    return NULL;
}

/* Something was registered (mu held): a page and a thread if none. */
static void pub_start(void)
{
    if (!hooks_done) {
        hooks_done = true;
        cv_init();
        pthread_atfork(fork_prepare, fork_parent, fork_child);
        atexit(at_exit);
    }
    if (exiting || (!page && page_create() != 0))
        return; /* no page (full /dev/shm, no such directory): no figures */
    if (!thread) {
        struct pub_thread *t = calloc(1, sizeof *t);
        if (t && pthread_create(&t->tid, NULL, pub_main, t) == 0)
            thread = t;
        else
            free(t);
    }
    publish();
}

/* Something went (mu held; unlocks it): with nothing left, the page and
 * the thread go too. */
static void pub_maybe_stop(void)
{
    if (nregions || nnodes || regions_unlisted || nodes_unlisted) {
        publish();
        pthread_mutex_unlock(&mu);
        return;
    }
    page_drop(true);
    struct pub_thread *t = thread;
    thread = NULL;
    if (t)
        t->stop = true;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    if (t) {
        pthread_join(t->tid, NULL);
        free(t);
    }
}

void stats_pub_region_add(fmem_region *r)
{
    if (!pub_enabled())
        return;
    pthread_mutex_lock(&mu);
    if (nregions < SP_MAX_REGIONS)
        regions[nregions++] = (struct pub_region){.r = r, .serial = next_serial++};
    else
        regions_unlisted++;
    pub_start();
    pthread_mutex_unlock(&mu);
}

void stats_pub_region_remove(fmem_region *r)
{
    if (!pub_enabled())
        return;
    pthread_mutex_lock(&mu);
    bool found = false;
    for (unsigned i = 0; i < nregions; i++)
        if (regions[i].r == r) {
            memmove(&regions[i], &regions[i + 1], (nregions - i - 1) * sizeof regions[0]);
            nregions--;
            found = true;
            break;
        }
    if (!found && regions_unlisted)
        regions_unlisted--;
    pub_maybe_stop();
}

void stats_pub_node_add(struct transport *t)
{
    if (!pub_enabled())
        return;
    pthread_mutex_lock(&mu);
    if (nnodes < SP_MAX_NODES)
        nodes[nnodes++] = (struct pub_node){.t = t};
    else
        nodes_unlisted++;
    pub_start();
    pthread_mutex_unlock(&mu);
}

void stats_pub_node_remove(struct transport *t)
{
    if (!pub_enabled())
        return;
    pthread_mutex_lock(&mu);
    bool found = false;
    for (unsigned i = 0; i < nnodes; i++)
        if (nodes[i].t == t) {
            memmove(&nodes[i], &nodes[i + 1], (nnodes - i - 1) * sizeof nodes[0]);
            nnodes--;
            found = true;
            break;
        }
    if (!found && nodes_unlisted)
        nodes_unlisted--;
    pub_maybe_stop();
}

void stats_pub_flush(void)
{
    pthread_mutex_lock(&mu);
    publish();
    pthread_mutex_unlock(&mu);
}

const char *stats_pub_path(void)
{
    return page ? page_path : NULL;
}
