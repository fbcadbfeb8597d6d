/* torture.c - many processes allocate and free mixed sizes on one shared
 * pool while this driver kills random ones with SIGKILL at random moments;
 * after each kill it recovers the dead user while the others go on.
 *
 * A shadow map (one owner slot per chunk, shared by all processes) catches
 * a chunk handed out twice: a worker claims every chunk of a new block with
 * a CAS from 0, and releases them before freeing. Before recovering a dead
 * worker the driver clears its slots (its blocks cannot be handed out again
 * until recovery frees them). At the end all workers are killed and
 * recovered; nothing may remain allocated and the verifier must be clean.
 *
 *   torture [--kills N] [--workers W] [--pool-mb M] [--seed S]
 * Last line: kills=N lost=N double=N verifier=clean|dirty */
#include <errno.h>
#include <fmem.h>
#include <fmem_admin.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_WORKERS 32
#define MAX_LIVE 24

struct worker_slot {
    _Atomic pid_t pid;
    _Atomic unsigned uid;   /* set by the worker once its pool is open */
    _Atomic uint64_t ops;
};

struct shared {
    _Atomic uint64_t doubles;  /* chunks found owned at allocation */
    _Atomic uint64_t errors;   /* unexpected error codes in workers */
    _Atomic int stop;
    struct worker_slot w[MAX_WORKERS];
    _Atomic uint32_t owner[]; /* per chunk: worker slot + 1, or 0 */
};

static struct shared *sh;
static char uri[128];
static uint64_t nchunks;

static uint64_t rng_next(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static size_t random_size(uint64_t *r)
{
    unsigned pick = rng_next(r) % 100;
    if (pick < 70)
        return (size_t)4096 << (rng_next(r) % 5);   /* 4..64 KiB */
    if (pick < 97)
        return (size_t)131072 << (rng_next(r) % 4); /* 128 KiB..1 MiB */
    return (size_t)4 << 20;                         /* multi-section */
}

static void shadow_claim(const fmem_handle *h, uint32_t me)
{
    uint64_t c0 = h->addr / 4096, n = h->length / 4096;
    for (uint64_t c = c0; c < c0 + n && c < nchunks; c++) {
        uint32_t zero = 0;
        if (!atomic_compare_exchange_strong(&sh->owner[c], &zero, me))
            atomic_fetch_add(&sh->doubles, 1);
    }
}

static void shadow_release(const fmem_handle *h)
{
    uint64_t c0 = h->addr / 4096, n = h->length / 4096;
    for (uint64_t c = c0; c < c0 + n && c < nchunks; c++)
        atomic_store(&sh->owner[c], 0);
}

static void worker(int slot, uint64_t seed)
{
    fmem_pool *p;
    char wuri[160];
    snprintf(wuri, sizeof wuri, "%s?create=0", uri);
    if (fmem_open(wuri, &p) != 0) {
        atomic_fetch_add(&sh->errors, 1);
        _exit(1);
    }
    atomic_store(&sh->w[slot].uid, fmem_user_id(p, 0));
    fmem_handle live[MAX_LIVE];
    int nlive = 0;
    uint64_t r = seed | 1;
    for (;;) {
        if (nlive < MAX_LIVE && (nlive == 0 || rng_next(&r) % 2)) {
            fmem_handle h;
            int rc = fmem_alloc(p, random_size(&r), &h);
            if (rc == 0) {
                shadow_claim(&h, (uint32_t)slot + 1);
                live[nlive++] = h;
            } else if (rc != FMEM_ENOMEM && atomic_fetch_add(&sh->errors, 1) < 5) {
                fprintf(stderr, "torture: worker %d: alloc: %s\n", slot, fmem_strerror(rc));
            }
        } else if (nlive) {
            int i = (int)(rng_next(&r) % (uint64_t)nlive);
            shadow_release(&live[i]);
            int frc = fmem_free(p, &live[i]);
            if (frc != 0 && atomic_fetch_add(&sh->errors, 1) < 5)
                fprintf(stderr, "torture: worker %d: free %#llx+%llu: %s\n", slot,
                        (unsigned long long)live[i].addr, (unsigned long long)live[i].length,
                        fmem_strerror(frc));
            live[i] = live[--nlive];
        }
        atomic_fetch_add_explicit(&sh->w[slot].ops, 1, memory_order_relaxed);
    }
}

static pid_t spawn(int slot, uint64_t seed)
{
    atomic_store(&sh->w[slot].uid, 0);
    pid_t pid = fork();
    if (pid == 0)
        worker(slot, seed);
    atomic_store(&sh->w[slot].pid, pid);
    return pid;
}

/* Kill slot's worker, clear its shadow slots, recover its user id. */
static int kill_and_recover(fmem_pool *p, int slot, fmem_recovery_stats *rs)
{
    pid_t pid = atomic_load(&sh->w[slot].pid);
    kill(pid, SIGKILL);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    for (uint64_t c = 0; c < nchunks; c++)
        if (atomic_load_explicit(&sh->owner[c], memory_order_relaxed) == (uint32_t)slot + 1)
            atomic_store(&sh->owner[c], 0);
    unsigned uid = atomic_load(&sh->w[slot].uid);
    if (uid == 0)
        return 0; /* died before opening the pool: nothing to reclaim */
    int rc = fmem_recover(p, uid, rs);
    if (rc)
        fprintf(stderr, "torture: recover uid %u: %s\n", uid, fmem_strerror(rc));
    return rc;
}

static void wait_ready(int slot)
{
    while (atomic_load(&sh->w[slot].uid) == 0) {
        int status;
        pid_t pid = atomic_load(&sh->w[slot].pid);
        if (waitpid(pid, &status, WNOHANG) == pid) {
            fprintf(stderr, "torture: worker %d exited early\n", slot);
            exit(1);
        }
        usleep(100);
    }
}

int main(int argc, char **argv)
{
    long kills = 300, workers = 6, pool_mb = 64;
    uint64_t seed = (uint64_t)time(NULL);
    for (int i = 1; i < argc; i++) {
        char *end = NULL;
        long *dst = !strcmp(argv[i], "--kills") ? &kills
                    : !strcmp(argv[i], "--workers") ? &workers
                    : !strcmp(argv[i], "--pool-mb") ? &pool_mb : NULL;
        if (dst && i + 1 < argc) {
            *dst = strtol(argv[++i], &end, 10);
            if (*end || *dst < 1) {
                fprintf(stderr, "torture: bad value for %s\n", argv[i - 1]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
            seed = strtoull(argv[++i], &end, 10);
        } else {
            fprintf(stderr, "usage: torture [--kills N] [--workers W] [--pool-mb M] [--seed S]\n");
            return 2;
        }
    }
    if (workers > MAX_WORKERS)
        workers = MAX_WORKERS;
    printf("torture: seed %llu, %ld workers, %ld MiB pool, %ld kills\n", (unsigned long long)seed,
           workers, pool_mb, kills);
    snprintf(uri, sizeof uri, "shm:/fmem-torture-%d", getpid());
    char curi[192];
    snprintf(curi, sizeof curi, "%s?size=%ldM", uri, pool_mb);
    fmem_pool *p;
    int rc = fmem_open(curi, &p);
    if (rc) {
        fprintf(stderr, "torture: open: %s\n", fmem_strerror(rc));
        return 1;
    }
    fmem_stats_t st;
    fmem_stats(p, &st);
    nchunks = st.capacity_bytes / 4096;
    size_t shsize = sizeof *sh + nchunks * sizeof(uint32_t);
    sh = mmap(NULL, shsize, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED)
        return 1;
    for (int s = 0; s < workers; s++) {
        spawn(s, seed * 7919 + (uint64_t)s);
        wait_ready(s);
    }
    uint64_t r = seed | 1, rec_ns = 0, rec_blocks = 0, failures = 0, rec_quarantined = 0;
    for (long k = 0; k < kills; k++) {
        usleep((useconds_t)(rng_next(&r) % 2000)); /* a random moment */
        int slot = (int)(rng_next(&r) % (uint64_t)workers);
        fmem_recovery_stats rs = {0};
        failures += kill_and_recover(p, slot, &rs) != 0;
        rec_ns += rs.elapsed_ns;
        rec_blocks += rs.blocks_freed;
        rec_quarantined += rs.quarantined_finished;
        spawn(slot, seed * 7919 + (uint64_t)k * 31 + (uint64_t)slot + 1000);
        wait_ready(slot);
        if ((k + 1) % 1000 == 0)
            printf("torture: %ld kills, %llu blocks reclaimed, mean recovery %.2f ms\n", k + 1,
                   (unsigned long long)rec_blocks, rec_ns / 1e6 / (double)(k + 1));
    }
    uint64_t ops = 0;
    for (int s = 0; s < workers; s++) {
        ops += atomic_load(&sh->w[s].ops);
        failures += kill_and_recover(p, s, NULL) != 0;
    }
    fmem_verify_report vr;
    fmem_verify(p, &vr, stdout);
    fmem_stats(p, &st);
    uint64_t lost = st.allocated_bytes / 4096;
    uint64_t doubles = atomic_load(&sh->doubles), errors = atomic_load(&sh->errors);
    bool clean = vr.errors == 0 && vr.claims_in_progress == 0;
    printf("torture: %llu worker operations, %llu blocks reclaimed, mean recovery %.2f ms, "
           "%llu worker errors, %llu recovery failures, %llu quarantined frees finished\n",
           (unsigned long long)ops, (unsigned long long)rec_blocks,
           kills ? rec_ns / 1e6 / (double)kills : 0.0, (unsigned long long)errors,
           (unsigned long long)failures, (unsigned long long)rec_quarantined);
    printf("kills=%ld lost=%llu double=%llu verifier=%s\n", kills, (unsigned long long)lost,
           (unsigned long long)doubles, clean ? "clean" : "dirty");
    fmem_close(p);
    fmem_unlink(uri);
    return (lost || doubles || !clean || errors || failures) ? 1 : 0;
}
