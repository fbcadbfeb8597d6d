/* preload_forkpool.c - fork() under libfmem-preload.so with a named pool
 * (run by preload-fork.sh). A block is "in the pool" when /proc/self/maps
 * shows it as a shared mapping of $PRELOAD_CHECK_FILE, the pool's data
 * file. Modes:
 *   snap             parent and child each see the blocks (several sizes,
 *                    two fork generations) as of the fork: neither sees
 *                    the other's later writes
 *   reuse SIZE       the parent frees a block a child still reads, then
 *                    it and another process (FILL_CMD, run by system())
 *                    allocate and overwrite the pool's free space: the
 *                    child still reads its snapshot; once the child is
 *                    gone the space is the pool's again
 *   hold SIZE FILE [kill]  allocate SIZE bytes of 'A', fork and exit (or
 *                    die of SIGKILL): the child waits until FILE exists,
 *                    then checks its snapshot and writes "ok" or "bad" to
 *                    FILE.res
 *   fill SIZE N      allocate N blocks of SIZE, overwrite them with 'Z',
 *                    print how many were in the pool, free them
 *   exec SIZE        a child that calls exec does not pin the parent's
 *                    blocks: freed, their space serves the next request
 *   chain N          N generations deep, each holding a block of its own
 *                    in the pool while its descendants run
 *   many N           N forks of one parent, blocks freed and allocated
 *                    between them; every child checks its snapshot and
 *                    allocates from the pool; at the end nothing is pinned
 *   nofd             no descriptor left for the fork's lock: the parent
 *                    copies its blocks into private memory before the
 *                    fork, and the snapshot still holds
 *   threads N        N forks while three threads allocate, write, check
 *                    and free blocks (some of them remapped at a fork and
 *                    so deferred): every snapshot holds, no thread sees
 *                    another's bytes
 *   writers N [SIZE] N forks, each right after a fresh block of SIZE bytes
 *                    (32 MiB: pieces moved aside; 1536 KiB: smaller pieces,
 *                    whose entries are dropped before the remap) was
 *                    allocated (so each fork remaps one) while three
 *                    threads rewrite their part of it round after round and
 *                    read every round back: no round loses a write, and
 *                    each child sees every part as one round, or the next
 *                    one partly written (never the parent's later rounds,
 *                    nor after the child's own writes)
 *   firstfork SIZE   the first fork after allocating a SIZE-byte block
 *                    costs the parent less CPU time than half a plain fork
 *                    of the same process holding SIZE bytes of its own
 *                    memory in 4 KiB pages (best of 3 each): the remap
 *                    does not tear the block's page table entries down
 *                    one page at a time
 *   gaps N SIZE [count]  N blocks of SIZE bytes, every third freed before
 *                    the first fork; with "count" (blocks of several pool
 *                    blocks that lie side by side in the pool, as 200 KB
 *                    ones from a fresh pool do) the first fork remaps each
 *                    live block with one mmap (counted through this
 *                    program's own mmap, which the interposer calls); then
 *                    the parent allocates into the gaps and rewrites every
 *                    block, the
 *                    child sees the blocks as of the fork and its writes
 *                    stay its own; a second fork with new blocks among the
 *                    ones remapped at the first keeps the parent's writes
 *                    to those (their private pages are not dropped); a
 *                    thread allocates, writes and frees blocks of SIZE all
 *                    along, and every one of them holds its bytes
 *   lazy N FORKS [count]  N blocks of 200 KB, FORKS forks while a thread
 *                    allocates, writes and frees blocks; after each fork
 *                    the parent rewrites every block - one through read()
 *                    (a kernel write), one freed and allocated anew, one
 *                    moved by realloc - and the child (and, every eighth
 *                    fork, a grandchild) sees them as of the fork; with
 *                    "count" the forking thread makes at most 2 remapping
 *                    calls per fork (the work at fork does not grow with
 *                    the number of blocks), and so does the child's fork
 *                    handler (unless FMEM_PRELOAD_CHILD_REMAP=eager)
 *   childuse N       N blocks of 200 KB (write-protected at the fork), a
 *                    fork; the child's fork handler makes at most 2
 *                    remapping calls (unless FMEM_PRELOAD_CHILD_REMAP=
 *                    eager); before any other use of the blocks the child
 *                    forks a grandchild (whose fork handler makes at most
 *                    2 too, and which pread()s into one block and checks
 *                    and writes ten), then has the kernel write into them
 *                    (recvmsg, preadv across two, fstat,
 *                    syscall(SYS_pread64)), installs a SIGSEGV handler of
 *                    its own and writes five, lets four threads check
 *                    (against the parent's bytes at the fork) and write a
 *                    quarter each of the rest at once, sees none of the
 *                    grandchild's writes, closes every descriptor and
 *                    writes the last; the parent, which wrote nothing
 *                    since, still reads its bytes. With "failremap" the
 *                    child's remaps fail (ENOMEM from this program's
 *                    mmap): the blocks are copied instead, with the same
 *                    result. With "closefirst" the child instead closes
 *                    every descriptor, opens files that take their numbers
 *                    and forks: the grandchild sees the parent's bytes in
 *                    every block (no remap of another file), its writes
 *                    stay its own
 *   early N [count]  N blocks of 200 KB left alone for a while (write-
 *                    protected before any fork); three of them are then
 *                    written (one through read(), one grown in place by
 *                    realloc) before a fork; the child sees every block as
 *                    of the fork while the parent rewrites them (one
 *                    through read()); with "count" the fork makes at most
 *                    4 write-protect calls (counted through this program's
 *                    own ioctl)
 *   huge SIZE        a SIZE-byte block is mapped on 2 MiB pages (its pool
 *                    file's tmpfs is mounted huge=within_size); after a
 *                    fork both sides see their snapshots
 * Exit status 0 when every check held; one line per failed check. */
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <signal.h>
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

static int failed;
#define CHECK(cond)                                                                      \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            failed++;                                                                    \
            fprintf(stderr, "[%d] %s:%d: check failed: %s\n", (int)getpid(), __FILE__, __LINE__, \
                    #cond);                                                              \
        }                                                                                \
    } while (0)

static int in_pool(const void *p)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int found = 0;
    const char *file = getenv("PRELOAD_CHECK_FILE");
    while (f && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 && (uintptr_t)p >= lo &&
            (uintptr_t)p < hi) {
            /* writable: a fork child's read-only view of its parent's
             * block, until its first write, is no way into the pool */
            found = file && *file && perms[1] == 'w' && perms[3] == 's' &&
                    strstr(line, file) != NULL;
            break;
        }
    }
    if (f)
        fclose(f);
    return found;
}

/* The interposer's mmap calls come here (the program exports its symbols,
 * -rdynamic): private mappings of a file at a fixed address - the remap
 * at fork - are counted. */
static _Atomic long private_maps;
static _Thread_local long my_private_maps; /* those made by this thread */
static _Atomic int fail_remaps; /* make them fail with ENOMEM */
__attribute__((visibility("default"))) void *mmap(void *addr, size_t len, int prot, int flags,
                                               int fd, off_t off)
{
    if (fd >= 0 && (flags & MAP_PRIVATE) && (flags & MAP_FIXED)) {
        atomic_fetch_add(&private_maps, 1);
        my_private_maps++;
        if (atomic_load(&fail_remaps)) {
            errno = ENOMEM;
            return MAP_FAILED;
        }
    }
    return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}

/* Write-protect calls (userfaultfd) made by this thread, counted through
 * this program's ioctl, which the interposer calls (as for mmap above). */
static _Thread_local long my_protects;
__attribute__((visibility("default"))) int ioctl(int fd, unsigned long req, ...)
{
    va_list ap;
    va_start(ap, req);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    if (req == UFFDIO_WRITEPROTECT &&
        (((const struct uffdio_writeprotect *)arg)->mode & UFFDIO_WRITEPROTECT_MODE_WP))
        my_protects++;
    return (int)syscall(SYS_ioctl, fd, req, arg);
}

/* Private anonymous memory of this process, kB (RssAnon). */
static long rss_anon_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "RssAnon: %ld", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb;
}

static int all(const unsigned char *p, size_t n, unsigned char v)
{
    for (size_t i = 0; i < n; i += 512)
        if (p[i] != v)
            return 0;
    return p[n - 1] == v;
}

static void put(int fd)
{
    if (write(fd, "x", 1) != 1)
        _exit(3);
}
static void get(int fd)
{
    char c;
    if (read(fd, &c, 1) != 1)
        _exit(3);
}

static int wait_ok(pid_t pid)
{
    int st;
    return waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* parent and child write after the fork, in turn; each checks the other's
 * writes stay out of its view */
static void snap(void)
{
    static const size_t sizes[] = {140000, 300000, (size_t)1 << 20, (5 << 20) + 4096, 33 << 20};
    enum { N = sizeof sizes / sizeof sizes[0] };
    unsigned char *b[N];
    for (int i = 0; i < N; i++) {
        b[i] = malloc(sizes[i]);
        CHECK(b[i] && in_pool(b[i]));
        memset(b[i], 'A', sizes[i]);
    }
    for (int gen = 0; gen < 2; gen++) {
        unsigned char was = gen ? 'B' : 'A';
        /* a block allocated between the forks: remapped at the second */
        unsigned char *late = malloc(2 << 20);
        CHECK(late && in_pool(late));
        memset(late, 'L', 2 << 20);
        int p2c[2], c2p[2];
        if (pipe(p2c) || pipe(c2p))
            exit(2);
        pid_t pid = fork();
        if (pid == 0) {
            /* nothing was copied for the child: at the first fork its
             * ~42 MiB of blocks are file pages, not private memory (at the
             * second it shares the parent's private copies of its writes),
             * and no copy was made and dropped (a copy of 42 MiB faults in
             * thousands of pages) */
            long anon = rss_anon_kb();
            struct rusage ru;
            getrusage(RUSAGE_SELF, &ru);
            get(p2c[0]); /* the parent wrote 'B'/'D' */
            int ok = anon >= 0 && (gen == 1 || anon < 16384) && ru.ru_minflt < 2000;
            if (!ok)
                fprintf(stderr, "child: %ld kB of private memory, %ld page faults after fork\n",
                        anon, ru.ru_minflt);
            for (int i = 0; i < N; i++) {
                ok = ok && all(b[i], sizes[i], was) && !in_pool(b[i]);
                memset(b[i], 'C', sizes[i]);
            }
            ok = ok && all(late, 2 << 20, 'L');
            memset(late, 'c', 2 << 20);
            unsigned char *own = malloc(3 << 20); /* its own, from the pool */
            ok = ok && own && in_pool(own);
            if (own)
                memset(own, 'O', 3 << 20);
            put(c2p[1]);
            get(p2c[0]); /* the parent checked */
            for (int i = 0; i < N; i++)
                ok = ok && all(b[i], sizes[i], 'C');
            free(own);
            for (int i = 0; i < N; i++)
                free(b[i]);
            free(late);
            exit(ok ? 0 : 1); /* exit: the counters are written */
        }
        for (int i = 0; i < N; i++)
            memset(b[i], gen ? 'D' : 'B', sizes[i]);
        memset(late, 'l', 2 << 20);
        put(p2c[1]);
        get(c2p[0]); /* the child wrote 'C' */
        for (int i = 0; i < N; i++)
            CHECK(all(b[i], sizes[i], gen ? 'D' : 'B'));
        CHECK(all(late, 2 << 20, 'l'));
        put(p2c[1]);
        CHECK(wait_ok(pid));
        free(late);
        for (int i = 0; i < N; i++)
            if (gen == 0)
                memset(b[i], 'B', sizes[i]);
        close(p2c[0]), close(p2c[1]), close(c2p[0]), close(c2p[1]);
    }
    for (int i = 0; i < N; i++)
        free(b[i]);
    printf("snap: %d failed\n", failed);
}

static int fill(size_t size, int n)
{
    unsigned char **v = calloc((size_t)n, sizeof *v);
    int inpool = 0;
    for (int i = 0; i < n; i++) {
        v[i] = malloc(size);
        if (v[i]) {
            memset(v[i], 'Z', size);
            inpool += in_pool(v[i]);
        }
    }
    for (int i = 0; i < n; i++)
        free(v[i]);
    free(v);
    return inpool;
}

static void reuse(size_t size)
{
    unsigned char *p = malloc(size);
    CHECK(p && in_pool(p));
    memset(p, 'A', size);
    int p2c[2];
    if (pipe(p2c))
        exit(2);
    pid_t pid = fork();
    if (pid == 0) {
        get(p2c[0]);
        _exit(all(p, size, 'A') ? 0 : 1);
    }
    free(p); /* the child still reads it */
    int here = fill(size, 4);
    const char *cmd = getenv("FILL_CMD");
    int other = cmd ? system(cmd) : -1;
    put(p2c[1]);
    CHECK(wait_ok(pid));
    CHECK(other == 0);
    /* the child is gone: its pages are the pool's again (the free was
     * deferred, given back at a later request) */
    struct timespec ts = {0, 20000000};
    nanosleep(&ts, NULL);
    int after = fill(size, 2);
    CHECK(after == 2);
    printf("reuse: %d of 4 blocks from the pool while the child read, %d of 2 after; %d failed\n",
           here, after, failed);
}

static void hold(size_t size, const char *file, int die)
{
    unsigned char *p = malloc(size);
    CHECK(p && in_pool(p));
    memset(p, 'A', size);
    pid_t pid = fork();
    if (pid == 0) {
        struct stat st;
        for (int i = 0; i < 6000 && stat(file, &st) != 0; i++) {
            struct timespec ts = {0, 10000000};
            nanosleep(&ts, NULL);
        }
        char res[1024];
        snprintf(res, sizeof res, "%s.res", file);
        FILE *f = fopen(res, "w");
        int ok = all(p, size, 'A');
        fprintf(f, ok ? "ok\n" : "bad\n");
        fclose(f);
        _exit(ok ? 0 : 1);
    }
    printf("child %d\n", (int)pid);
    if (die)
        raise(SIGKILL); /* no destructor, no exit handler */
    exit(failed != 0); /* holding the block */
}

static void exec_child(size_t size)
{
    unsigned char *p = malloc(size);
    CHECK(p && in_pool(p));
    memset(p, 'A', size);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sleep", "sleep", "5", (char *)NULL);
        _exit(127);
    }
    struct timespec ts = {0, 100000000};
    nanosleep(&ts, NULL); /* the child has called exec */
    free(p);
    unsigned char *q = malloc(size); /* needs the space p had */
    CHECK(q && in_pool(q));
    free(q);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    printf("exec: %d failed\n", failed);
}

static int chain(int n, int depth)
{
    unsigned char *b = malloc(1 << 20);
    int ok = b && in_pool(b);
    if (!ok)
        fprintf(stderr, "chain: level %d: block not in the pool\n", depth);
    if (b)
        memset(b, depth & 0xff, 1 << 20);
    if (depth < n) {
        pid_t pid = fork();
        if (pid == 0)
            _exit(chain(n, depth + 1) ? 0 : 1);
        memset(b, 0xee, 1 << 19); /* after the fork: the child must not see it */
        ok = wait_ok(pid) && ok;
        ok = ok && all(b + (1 << 19), 1 << 19, depth & 0xff);
    } else {
        printf("chain: %d generations deep\n", depth);
        fflush(stdout);
    }
    free(b);
    return ok;
}

static void many(int n)
{
    unsigned char *keep = malloc(4 << 20);
    CHECK(keep && in_pool(keep));
    int bad = 0;
    for (int i = 0; i < n; i++) {
        memset(keep, i & 0xff, 4 << 20);
        unsigned char *t = malloc(1 << 20); /* freed after the fork: deferred */
        memset(t, 'T', 1 << 20);
        pid_t pid = fork();
        if (pid == 0) {
            unsigned char *own = malloc(1 << 20);
            int ok = own && in_pool(own) && all(keep, 4 << 20, i & 0xff) && all(t, 1 << 20, 'T');
            exit(ok ? 0 : 1);
        }
        free(t);
        memset(keep, 0xff, 4 << 20);
        bad += !wait_ok(pid);
    }
    CHECK(bad == 0);
    free(keep);
    /* every child is gone: nothing is pinned, the whole pool serves */
    struct timespec ts = {0, 20000000};
    nanosleep(&ts, NULL);
    size_t big = (size_t)atol(getenv("MANY_BIG") ? getenv("MANY_BIG") : "0");
    if (big) {
        unsigned char *q = malloc(big);
        CHECK(q && in_pool(q));
        free(q);
    }
    printf("many: %d forks, %d children failed; %d failed\n", n, bad, failed);
}

static void nofd(void)
{
    unsigned char *p = malloc(8 << 20);
    CHECK(p && in_pool(p));
    memset(p, 'A', 8 << 20);
    int p2c[2];
    if (pipe(p2c))
        exit(2);
    int lo = -1, hi = -1, fd;
    while ((fd = open("/dev/null", O_RDONLY)) >= 0) { /* up to the descriptor limit */
        if (lo < 0)
            lo = fd;
        hi = fd;
    }
    pid_t pid = fork();
    for (fd = lo; lo >= 0 && fd <= hi; fd++)
        close(fd); /* room for the counters' file at exit */
    if (pid == 0) {
        get(p2c[0]);
        exit(all(p, 8 << 20, 'A') ? 0 : 1); /* exit: the counters are written */
    }
    memset(p, 'B', 8 << 20);
    put(p2c[1]);
    CHECK(wait_ok(pid));
    CHECK(all(p, 8 << 20, 'B'));
    free(p);
    printf("nofd: %d failed\n", failed);
}

static _Atomic int stop_threads;
static void *churn(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg, bad = 0;
    unsigned char v = (unsigned char)(0x40 + seed);
    while (!stop_threads) {
        size_t n = (size_t)(131072 + rand_r(&seed) % (3 << 20));
        unsigned char *p = malloc(n);
        if (!p)
            continue;
        memset(p, v, n);
        sched_yield(); /* a fork may remap it here */
        bad += !all(p, n, v);
        free(p);
    }
    return (void *)(uintptr_t)bad;
}

static void threads(int n)
{
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&t[i], NULL, churn, (void *)(uintptr_t)(i + 1));
    unsigned char *keep = malloc(8 << 20);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        memset(keep, i & 0xff, 8 << 20);
        pid_t pid = fork();
        if (pid == 0) {
            unsigned char *own = malloc(1 << 20);
            int ok = own && in_pool(own) && all(keep, 8 << 20, i & 0xff);
            _exit(ok ? 0 : 1);
        }
        memset(keep, 0xff, 8 << 20);
        bad += !wait_ok(pid);
    }
    stop_threads = 1;
    uintptr_t wrong = 0;
    for (int i = 0; i < 3; i++) {
        void *r;
        pthread_join(t[i], &r);
        wrong += (uintptr_t)r;
    }
    CHECK(bad == 0);
    CHECK(wrong == 0);
    free(keep);
    printf("threads: %d forks while 3 threads allocate, %d children failed, %lu bad blocks\n", n,
           bad, (unsigned long)wrong);
}

/* writers: each thread owns a part of the block and writes round r into
 * every word of it, then reads the part back */
struct part {
    _Atomic uint64_t *w;
    size_t n;
    _Atomic int stop;
    unsigned long rounds, lost;
};
static void *writer(void *arg)
{
    struct part *p = arg;
    for (uint64_t r = 1; !atomic_load(&p->stop); r++) {
        for (size_t i = 0; i < p->n; i++)
            atomic_store_explicit(&p->w[i], r, memory_order_relaxed);
        for (size_t i = 0; i < p->n; i++)
            if (atomic_load_explicit(&p->w[i], memory_order_relaxed) != r) {
                p->lost++;
                break;
            }
        p->rounds++;
    }
    return NULL;
}

/* a snapshot of a part: round r up to some word, round r - 1 after it */
static int one_round(const _Atomic uint64_t *w, size_t n)
{
    uint64_t first = w[0], last = w[n - 1];
    if (first < last || first - last > 1)
        return 0;
    for (size_t i = 1; i < n; i++)
        if (w[i] > w[i - 1] || (w[i] != first && w[i] != last))
            return 0;
    return 1;
}

static void writers(int n, size_t size)
{
    enum { NT = 3 };
    const size_t part = size / NT / 8;
    int bad = 0;
    unsigned long rounds = 0, lost = 0;
    for (int f = 0; f < n; f++) {
        _Atomic uint64_t *b = malloc(size);
        CHECK(b && in_pool(b));
        if (!b)
            return;
        memset((void *)b, 0, size);
        struct part parts[NT];
        pthread_t t[NT];
        for (int i = 0; i < NT; i++) {
            parts[i] = (struct part){.w = b + i * part, .n = part};
            pthread_create(&t[i], NULL, writer, &parts[i]);
        }
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
        pid_t pid = fork();
        if (pid == 0) {
            int ok = 1;
            for (int i = 0; i < NT; i++)
                ok = ok && one_round(b + i * part, part);
            memset((void *)b, 0xee, size); /* never seen by the parent */
            _exit(ok ? 0 : 1);
        }
        bad += !wait_ok(pid);
        nanosleep(&ts, NULL);
        for (int i = 0; i < NT; i++) {
            atomic_store(&parts[i].stop, 1);
            pthread_join(t[i], NULL);
            rounds += parts[i].rounds;
            lost += parts[i].lost;
        }
        free((void *)b);
    }
    CHECK(bad == 0);
    CHECK(lost == 0);
    printf("writers: %d forks while 3 threads rewrote the %zu KiB block remapped at each: %lu "
           "rounds, %lu lost writes, %d wrong snapshots\n", n, size >> 10, rounds, lost, bad);
}

static double thread_cpu_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* the parent's CPU time of one fork; the child checks two bytes */
static double fork_cpu(const unsigned char *p, size_t n, unsigned char v)
{
    double t0 = thread_cpu_ms();
    pid_t pid = fork();
    if (pid == 0)
        _exit(p[0] == v && p[n - 1] == v ? 0 : 1);
    double t = thread_cpu_ms() - t0;
    CHECK(wait_ok(pid));
    return t;
}

static void firstfork(size_t size)
{
    double plain = 1e9, named = 1e9;
    for (int r = 0; r < 3; r++) {
        unsigned char *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                                -1, 0);
        CHECK(m != MAP_FAILED);
        if (m == MAP_FAILED)
            return;
        madvise(m, size, MADV_NOHUGEPAGE);
        memset(m, 1, size);
        double t = fork_cpu(m, size, 1);
        plain = t < plain ? t : plain;
        munmap(m, size);
        unsigned char *b = malloc(size);
        CHECK(b && in_pool(b));
        if (!b)
            return;
        memset(b, 2, size);
        t = fork_cpu(b, size, 2);
        named = t < named ? t : named;
        free(b);
    }
    printf("first fork with a %zu MiB block: %.3f ms of CPU, a plain fork %.3f ms\n", size >> 20,
           named, plain);
    CHECK(named < plain / 2);
}

/* kB of the mapping holding p that are mapped as 2 MiB pages of shared
 * memory (ShmemPmdMapped in /proc/self/smaps) */
static long pmd_mapped_kb(const void *p)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    long kb = -1;
    int in = 0;
    while (f && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
            in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        else if (in && sscanf(line, "ShmemPmdMapped: %ld", &kb) == 1)
            break;
    }
    if (f)
        fclose(f);
    return kb;
}

static void huge(size_t size)
{
    unsigned char *b = malloc(size);
    CHECK(b && in_pool(b));
    if (!b)
        return;
    memset(b, 'H', size);
    long kb = pmd_mapped_kb(b);
    CHECK(kb >= 2048);
    int p2c[2], c2p[2];
    CHECK(pipe(p2c) == 0 && pipe(c2p) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        get(p2c[0]); /* the parent has written */
        int ok = all(b, size, 'H');
        memset(b, 'C', size);
        put(c2p[1]);
        _exit(ok && all(b, size, 'C') ? 0 : 1);
    }
    memset(b, 'P', size / 2);
    put(p2c[1]);
    get(c2p[0]); /* the child has written */
    CHECK(all(b, size / 2, 'P') && all(b + size / 2, size - size / 2, 'H'));
    CHECK(wait_ok(pid));
    free(b);
    printf("huge: a %zu MiB block on %ld kB of 2 MiB pages, snapshots held\n", size >> 20, kb);
}

/* gaps: see the top of the file */
static size_t GAP_SIZE = 204800;
static unsigned char gap_val(int i, int round) { return (unsigned char)(1 + (i * 7 + round * 31) % 250); }

static void *gap_churn(void *arg)
{
    (void)arg;
    unsigned long bad = 0;
    for (unsigned r = 0; !stop_threads; r++) {
        unsigned char *q[4];
        for (int k = 0; k < 4; k++) {
            q[k] = malloc(GAP_SIZE);
            if (q[k])
                memset(q[k], 0x80 + (int)((r + (unsigned)k) % 64), GAP_SIZE);
        }
        sched_yield(); /* a fork may remap them here */
        for (int k = 0; k < 4; k++)
            if (q[k]) {
                bad += !all(q[k], GAP_SIZE, (unsigned char)(0x80 + (int)((r + (unsigned)k) % 64)));
                free(q[k]);
            }
    }
    return (void *)(uintptr_t)bad;
}

static int gap_fork(unsigned char **b, int n, int round, unsigned char **extra, int nextra)
{
    int p2c[2], c2p[2];
    if (pipe(p2c) || pipe(c2p))
        return 0;
    pid_t pid = fork();
    if (pid == 0) {
        get(p2c[0]); /* the parent has rewritten everything */
        int bad = 0;
        for (int i = 0; i < n; i++)
            if (b[i]) {
                bad += !all(b[i], GAP_SIZE, gap_val(i, round));
                memset(b[i], 0xC5, GAP_SIZE);
            }
        for (int k = 0; k < nextra; k++) {
            bad += !all(extra[k], GAP_SIZE, 0xAA);
            memset(extra[k], 0xC5, GAP_SIZE);
        }
        put(c2p[1]);
        _exit(bad ? 1 : 0);
    }
    for (int i = 0; i < n; i++)
        if (b[i])
            memset(b[i], gap_val(i, round + 1), GAP_SIZE);
    put(p2c[1]);
    get(c2p[0]); /* the child has checked and written */
    close(p2c[0]);
    close(p2c[1]);
    close(c2p[0]);
    close(c2p[1]);
    return wait_ok(pid);
}

static void gaps(int n, int count)
{
    unsigned char **b = calloc((size_t)n, sizeof *b), **c = calloc((size_t)n, sizeof *c);
    int live = 0, nc = 0;
    for (int i = 0; i < n; i++) {
        b[i] = malloc(GAP_SIZE);
        memset(b[i], gap_val(i, 0), GAP_SIZE);
    }
    CHECK(in_pool(b[0]) && in_pool(b[n - 1]));
    for (int i = 0; i < n; i++)
        if (i % 3 == 1) {
            free(b[i]);
            b[i] = NULL;
        } else {
            live++;
        }
    pthread_t t;
    pthread_create(&t, NULL, gap_churn, NULL);
    long before = atomic_load(&private_maps);
    /* first fork: each live block remapped with one call (the churning
     * thread's blocks add a few) */
    int ok1 = gap_fork(b, n, 0, NULL, 0);
    long maps = atomic_load(&private_maps) - before;
    CHECK(ok1);
    if (count)
        CHECK(maps >= live && maps <= live + 8);
    /* the parent's later blocks go into the gaps; its writes after the
     * fork (round 1) are its own */
    for (int i = 0; i < n; i++)
        if (b[i])
            CHECK(all(b[i], GAP_SIZE, gap_val(i, 1)));
    for (int i = 0; i < n; i++)
        if (!b[i] && (c[nc] = malloc(GAP_SIZE)) != NULL)
            memset(c[nc++], 0xAA, GAP_SIZE);
    /* second fork: the new blocks lie among blocks remapped at the first,
     * whose private pages (round 1) must survive it */
    int ok2 = gap_fork(b, n, 1, c, nc);
    CHECK(ok2);
    for (int i = 0; i < n; i++)
        if (b[i])
            CHECK(all(b[i], GAP_SIZE, gap_val(i, 2)));
    int wrong_c = 0;
    for (int k = 0; k < nc; k++)
        wrong_c += !all(c[k], GAP_SIZE, 0xAA);
    CHECK(wrong_c == 0);
    stop_threads = 1;
    void *r;
    pthread_join(t, &r);
    CHECK((uintptr_t)r == 0);
    for (int i = 0; i < n; i++)
        free(b[i]);
    for (int k = 0; k < nc; k++)
        free(c[k]);
    printf("gaps: %d blocks of %zu KB, %d live at the first fork: %ld remapping calls; "
           "%d blocks in the gaps, two snapshots held both ways, %lu bad churned blocks\n",
           n, GAP_SIZE / 1000, live, maps, nc, (unsigned long)(uintptr_t)r);
    free(b);
    free(c);
}

/* lazy: see the top of the file */
static void lazy(int n, int forks, int count)
{
    unsigned char **b = calloc((size_t)n, sizeof *b);
    size_t *sz = calloc((size_t)n, sizeof *sz);
    for (int i = 0; i < n; i++) {
        sz[i] = GAP_SIZE;
        b[i] = malloc(sz[i]);
        memset(b[i], gap_val(i, 0), sz[i]);
    }
    CHECK(in_pool(b[0]) && in_pool(b[n - 1]));
    int kfd = memfd_create("preload-forkpool-lazy", MFD_CLOEXEC);
    CHECK(kfd >= 0);
    pthread_t t;
    pthread_create(&t, NULL, gap_churn, NULL);
    long most = 0;
    int nested = 0;
    for (int f = 0; f < forks; f++) {
        int p2c[2], c2p[2];
        if (pipe(p2c) || pipe(c2p))
            exit(2);
        long before = my_private_maps;
        pid_t pid = fork();
        if (pid == 0) {
            /* the child's fork handler remaps nothing either: its blocks
             * are remapped at its first access to each (with
             * FMEM_PRELOAD_CHILD_REMAP=eager it remaps them all) */
            long child_maps = my_private_maps - before;
            const char *cr = getenv("FMEM_PRELOAD_CHILD_REMAP");
            int child_lazy = !(cr && strcmp(cr, "eager") == 0);
            get(p2c[0]); /* the parent has rewritten, freed and moved blocks */
            int bad = 0;
            if (count && child_lazy && child_maps > 2) {
                fprintf(stderr, "fork %d: %ld remapping calls in the child's fork handler\n", f,
                        child_maps);
                bad++;
            }
            for (int i = 0; i < n; i++)
                bad += !all(b[i], sz[i], gap_val(i, f)) || (i < 4 && in_pool(b[i]));
            if (f % 8 == 0) { /* a grandchild sees the same; its writes stay its own */
                pid_t g = fork();
                if (g == 0) {
                    int gbad = 0;
                    for (int i = 0; i < n; i++) {
                        gbad += !all(b[i], sz[i], gap_val(i, f));
                        memset(b[i], 0x11, sz[i]);
                    }
                    _exit(gbad ? 1 : 0);
                }
                bad += !wait_ok(g);
                for (int i = 0; i < n; i++)
                    bad += !all(b[i], sz[i], gap_val(i, f));
            }
            /* a write by the kernel before any of the child's own: block
             * 3 read from the file the parent just wrote */
            if (pread(kfd, b[3], sz[3], 0) != (ssize_t)sz[3] || !all(b[3], sz[3], gap_val(0, f + 1)))
                bad++;
            for (int i = 0; i < n; i++)
                memset(b[i], 0xC5, sz[i]);
            put(c2p[1]);
            if (bad)
                fprintf(stderr, "fork %d: %d blocks not as of the fork\n", f, bad);
            _exit(bad ? 1 : 0);
        }
        long maps = my_private_maps - before;
        most = maps > most ? maps : most;
        nested += f % 8 == 0;
        /* the parent rewrites everything: block 0 by the kernel (read()),
         * block 1 freed and allocated anew, block 2 moved by realloc */
        unsigned char *buf = malloc(sz[0]);
        memset(buf, gap_val(0, f + 1), sz[0]);
        CHECK(pwrite(kfd, buf, sz[0], 0) == (ssize_t)sz[0]);
        free(buf);
        CHECK(pread(kfd, b[0], sz[0], 0) == (ssize_t)sz[0]);
        free(b[1]);
        b[1] = malloc(sz[1]);
        memset(b[1], gap_val(1, f + 1), sz[1]);
        sz[2] = sz[2] == GAP_SIZE ? GAP_SIZE + 65536 : GAP_SIZE;
        unsigned char *r = realloc(b[2], sz[2]);
        CHECK(r != NULL);
        b[2] = r;
        memset(b[2], gap_val(2, f + 1), sz[2]);
        for (int i = 3; i < n; i++)
            memset(b[i], gap_val(i, f + 1), sz[i]);
        put(p2c[1]);
        get(c2p[0]); /* the child has checked and written */
        CHECK(wait_ok(pid));
        int wrong = 0;
        for (int i = 0; i < n; i++)
            wrong += !all(b[i], sz[i], gap_val(i, f + 1));
        CHECK(wrong == 0);
        close(p2c[0]), close(p2c[1]), close(c2p[0]), close(c2p[1]);
    }
    stop_threads = 1;
    void *res;
    pthread_join(t, &res);
    CHECK((uintptr_t)res == 0);
    if (count)
        CHECK(most <= 2);
    for (int i = 0; i < n; i++)
        free(b[i]);
    free(b);
    free(sz);
    close(kfd);
    printf("lazy: %d blocks of %zu KB, %d forks (%d nested): at most %ld remapping calls "
           "during a fork; every snapshot held while the parent rewrote, freed, moved and "
           "read() into its blocks; %lu bad churned blocks\n",
           n, GAP_SIZE / 1000, forks, nested, most, (unsigned long)(uintptr_t)res);
}

/* childuse: see the top of the file */
struct cu_writer {
    unsigned char **b;
    int from, n, k;
    _Atomic int *go;
    int bad;
};

/* Thread k of 4 checks its quarter of every block against the parent's
 * bytes at the fork, then writes it, all four starting at once (so they
 * race for the same blocks' remaps). */
static void *cu_write(void *arg)
{
    struct cu_writer *w = arg;
    size_t q = GAP_SIZE / 4;
    atomic_fetch_add(w->go, 1);
    while (atomic_load(w->go) < 4)
        ;
    for (int j = 0; j < w->n; j++) {
        int i = w->from + (j + w->k * 7) % w->n;
        unsigned char *p = w->b[i] + (size_t)w->k * q;
        w->bad += !all(p, q, gap_val(i, 0));
        memset(p, 0xC0 + w->k, q);
    }
    return NULL;
}

static void cu_segv(int sig)
{
    (void)sig;
    _exit(7); /* the program's handler: no fault may reach it */
}

/* The child's uses of its parent's blocks, before any other use of
 * them: kernel writes, writes under a SIGSEGV handler of its own, four
 * threads racing, writes after closing every descriptor. The number of
 * failed checks. */
static int cu_child(unsigned char **b, int n, int kfd, long maps, int failing)
{
    int bad = 0;
    atomic_store(&fail_remaps, failing); /* the remaps at first use fail */
    const char *cr = getenv("FMEM_PRELOAD_CHILD_REMAP");
    if (!(cr && strcmp(cr, "eager") == 0) && maps > 2) {
        fprintf(stderr, "childuse: %ld remapping calls in the child's fork handler\n", maps);
        bad++;
    }
    /* a grandchild before the child used any block: the blocks wait for
     * their first use there too, its writes stay its own */
    long gbefore = my_private_maps;
    pid_t g = fork();
    if (g == 0) {
        long gmaps = my_private_maps - gbefore;
        int gbad = !(cr && strcmp(cr, "eager") == 0) && gmaps > 2;
        gbad += pread(kfd, b[5], GAP_SIZE, 0) != (ssize_t)GAP_SIZE || !all(b[5], GAP_SIZE, 0x3C);
        for (int i = 0; i < 10; i++) {
            gbad += i != 5 && !all(b[i], GAP_SIZE, gap_val(i, 0));
            memset(b[i], 0x99, GAP_SIZE);
        }
        if (gbad)
            fprintf(stderr, "childuse: grandchild: %ld remapping calls, %d failed checks\n", gmaps, gbad);
        _exit(gbad ? 1 : 0);
    }
    bad += !wait_ok(g);
    /* (b) the kernel writes first: recvmsg, preadv, fstat, syscall(SYS_read) */
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        return bad + 1;
    unsigned char msg[4096];
    memset(msg, 0x5A, sizeof msg);
    if (write(sv[0], msg, sizeof msg) != (ssize_t)sizeof msg)
        bad++;
    struct iovec iv = {.iov_base = b[10] + 8192, .iov_len = sizeof msg};
    struct msghdr mh = {.msg_iov = &iv, .msg_iovlen = 1};
    ssize_t r = recvmsg(sv[1], &mh, 0);
    if (r != (ssize_t)sizeof msg || !all(b[10] + 8192, sizeof msg, 0x5A) ||
        !all(b[10], 8192, gap_val(10, 0))) {
        fprintf(stderr, "childuse: recvmsg into a block: %zd (%s)\n", r, r < 0 ? strerror(errno) : "");
        bad++;
    }
    struct iovec two[2] = {{b[11], GAP_SIZE}, {b[12], GAP_SIZE}};
    r = preadv(kfd, two, 2, 0);
    if (r != (ssize_t)(2 * GAP_SIZE) || !all(b[11], GAP_SIZE, 0x3C) || !all(b[12], GAP_SIZE, 0x3C)) {
        fprintf(stderr, "childuse: preadv into two blocks: %zd (%s)\n", r, r < 0 ? strerror(errno) : "");
        bad++;
    }
    struct stat *st = (struct stat *)(void *)(b[13] + 4096);
    if (fstat(kfd, st) != 0 || st->st_size != (off_t)(2 * GAP_SIZE)) {
        fprintf(stderr, "childuse: fstat into a block: %s\n", strerror(errno));
        bad++;
    }
    r = syscall(SYS_pread64, kfd, b[14], GAP_SIZE, 0);
    if (r != (ssize_t)GAP_SIZE || !all(b[14], GAP_SIZE, 0x3C)) {
        fprintf(stderr, "childuse: syscall(SYS_pread64) into a block: %zd (%s)\n", r,
                r < 0 ? strerror(errno) : "");
        bad++;
    }
    close(sv[0]);
    close(sv[1]);
    /* (c) a SIGSEGV handler of the program's own: writes go on */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = cu_segv;
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGBUS, &sa, NULL);
    for (int i = 15; i < 20; i++) {
        bad += !all(b[i], GAP_SIZE, gap_val(i, 0));
        memset(b[i], 0xE1, GAP_SIZE);
        bad += !all(b[i], GAP_SIZE, 0xE1);
    }
    /* (d) four threads race for the remaps of the same blocks */
    _Atomic int go = 0;
    struct cu_writer w[4];
    pthread_t t[4];
    for (int k = 0; k < 4; k++) {
        w[k] = (struct cu_writer){b, 20, n - 21, k, &go, 0};
        pthread_create(&t[k], NULL, cu_write, &w[k]);
    }
    for (int k = 0; k < 4; k++) {
        pthread_join(t[k], NULL);
        bad += w[k].bad;
    }
    for (int i = 20; i < n - 1; i++)
        for (int k = 0; k < 4; k++)
            bad += !all(b[i] + (size_t)k * (GAP_SIZE / 4), GAP_SIZE / 4, (unsigned char)(0xC0 + k));
    for (int i = 0; i < 10; i++) /* the grandchild's writes */
        bad += !all(b[i], GAP_SIZE, gap_val(i, 0));
    /* a daemon closes every descriptor, then writes */
    syscall(SYS_close_range, 3, ~0u, 0);
    memset(b[n - 1], 0xD1, GAP_SIZE);
    bad += !all(b[n - 1], GAP_SIZE, 0xD1);
    return bad;
}

/* The child closes every descriptor first and opens files that take
 * their numbers (the pool file's among them), then forks: the
 * grandchild's view of the blocks (none used yet) is the parent's bytes,
 * its writes its own. The number of failed checks. */
static int cu_closefirst(unsigned char **b, int n)
{
    syscall(SYS_close_range, 3, ~0u, 0);
    /* no allocation here: a pool of the child's own would take the
     * numbers (with the same pool file) */
    for (int k = 0; k < 16; k++) { /* a remap of one would show zeros */
        int fd = memfd_create("preload-forkpool-junk", 0);
        if (fd < 0 || ftruncate(fd, (off_t)1 << 30) != 0)
            return 1;
    }
    pid_t g = fork();
    if (g == 0) {
        int gbad = 0;
        for (int i = 0; i < n; i++) {
            gbad += !all(b[i], GAP_SIZE, gap_val(i, 0));
            memset(b[i], 0x99, GAP_SIZE);
        }
        if (gbad)
            fprintf(stderr, "childuse: grandchild after closing: %d blocks wrong\n", gbad);
        _exit(gbad ? 1 : 0);
    }
    int bad = !wait_ok(g);
    for (int i = 0; i < n; i++)
        bad += !all(b[i], GAP_SIZE, gap_val(i, 0));
    return bad;
}

static void childuse(int n, int failing, int closefirst)
{
    unsigned char **b = calloc((size_t)n, sizeof *b);
    for (int i = 0; i < n; i++) {
        b[i] = malloc(GAP_SIZE);
        memset(b[i], gap_val(i, 0), GAP_SIZE);
    }
    CHECK(n > 30 && in_pool(b[0]) && in_pool(b[n - 1]));
    int kfd = memfd_create("preload-forkpool-childuse", MFD_CLOEXEC);
    unsigned char *buf = malloc(2 * GAP_SIZE);
    memset(buf, 0x3C, 2 * GAP_SIZE);
    CHECK(kfd >= 0 && write(kfd, buf, 2 * GAP_SIZE) == (ssize_t)(2 * GAP_SIZE));
    free(buf);
    long before = my_private_maps;
    pid_t pid = fork();
    if (pid == 0) {
        int bad = closefirst ? cu_closefirst(b, n)
                             : cu_child(b, n, kfd, my_private_maps - before, failing);
        if (bad)
            fprintf(stderr, "childuse: %d failed checks in the child\n", bad);
        _exit(bad ? 1 : 0);
    }
    int st = -1;
    CHECK(waitpid(pid, &st, 0) == pid);
    int child_ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    CHECK(child_ok);
    /* the parent read nothing but the pool pages the child must not write */
    int wrong = 0;
    for (int i = 0; i < n; i++)
        wrong += !all(b[i], GAP_SIZE, gap_val(i, 0));
    CHECK(wrong == 0);
    for (int i = 0; i < n; i++)
        free(b[i]);
    free(b);
    close(kfd);
    printf("childuse: %d blocks of %zu KB; %s: %s (status %#x); %d blocks of the parent "
           "changed\n",
           n, GAP_SIZE / 1000,
           closefirst ? "a grandchild forked after the child closed every descriptor and "
                        "opened files in their place"
                      : "the child's remapping calls at fork, a grandchild, recvmsg, preadv, "
                        "fstat and syscall() into them, writes under its own SIGSEGV handler, 4 "
                        "threads racing and writes after closing every descriptor",
           child_ok ? "all held" : "FAILED", st, wrong);
}

/* early: see the top of the file */
static void early(int n, int count)
{
    unsigned char **b = calloc((size_t)n, sizeof *b);
    size_t *sz = calloc((size_t)n, sizeof *sz);
    unsigned char *v = calloc((size_t)n, 1); /* each block's bytes at the fork */
    for (int i = 0; i < n; i++) {
        sz[i] = GAP_SIZE;
        b[i] = malloc(sz[i]);
        memset(b[i], v[i] = gap_val(i, 0), sz[i]);
    }
    CHECK(in_pool(b[0]) && in_pool(b[n - 1]));
    sleep(1); /* long enough for the blocks to be protected early */
    int kfd = memfd_create("preload-forkpool-early", MFD_CLOEXEC);
    CHECK(kfd >= 0);
    unsigned char *buf = malloc(GAP_SIZE + 32768);
    /* written before the fork: by the kernel, by memset, grown in place */
    memset(buf, v[0] = gap_val(0, 1), sz[0]);
    CHECK(pwrite(kfd, buf, sz[0], 0) == (ssize_t)sz[0]);
    CHECK(pread(kfd, b[0], sz[0], 0) == (ssize_t)sz[0]);
    memset(b[1], v[1] = gap_val(1, 1), sz[1]);
    unsigned char *r = realloc(b[2], GAP_SIZE + 32768);
    CHECK(r == b[2]); /* grown where it is (its slot holds 256 KB) */
    sz[2] = GAP_SIZE + 32768;
    memset(b[2], v[2] = gap_val(2, 1), sz[2]);
    int p2c[2], c2p[2];
    if (pipe(p2c) || pipe(c2p))
        exit(2);
    long before = my_protects;
    pid_t pid = fork();
    if (pid == 0) {
        get(p2c[0]); /* the parent has rewritten every block */
        int bad = 0;
        for (int i = 0; i < n; i++)
            bad += !all(b[i], sz[i], v[i]);
        for (int i = 0; i < n; i++)
            memset(b[i], 0xC5, sz[i]);
        if (bad)
            fprintf(stderr, "early: %d blocks not as of the fork\n", bad);
        put(c2p[1]);
        _exit(bad ? 1 : 0);
    }
    long protects = my_protects - before;
    memset(buf, gap_val(3, 2), sz[3]);
    CHECK(pwrite(kfd, buf, sz[3], 0) == (ssize_t)sz[3]);
    CHECK(pread(kfd, b[3], sz[3], 0) == (ssize_t)sz[3]);
    for (int i = 0; i < n; i++)
        if (i != 3)
            memset(b[i], gap_val(i, 2), sz[i]);
    put(p2c[1]);
    get(c2p[0]);
    CHECK(wait_ok(pid));
    int wrong = 0;
    for (int i = 0; i < n; i++)
        wrong += !all(b[i], sz[i], gap_val(i, 2));
    CHECK(wrong == 0);
    if (count)
        CHECK(protects <= 4);
    for (int i = 0; i < n; i++)
        free(b[i]);
    free(buf);
    free(b);
    free(sz);
    free(v);
    close(kfd);
    printf("early: %d blocks of %zu KB left alone before the fork, 3 written before it: "
           "%ld write-protect calls during the fork; the snapshot held while the parent "
           "rewrote every block\n",
           n, GAP_SIZE / 1000, protects);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 2 && strcmp(argv[1], "snap") == 0)
        snap();
    else if (argc == 3 && strcmp(argv[1], "reuse") == 0)
        reuse((size_t)atol(argv[2]));
    else if ((argc == 4 || argc == 5) && strcmp(argv[1], "hold") == 0)
        hold((size_t)atol(argv[2]), argv[3], argc == 5 && strcmp(argv[4], "kill") == 0);
    else if (argc == 4 && strcmp(argv[1], "fill") == 0)
        printf("fill: %d in the pool\n", fill((size_t)atol(argv[2]), atoi(argv[3])));
    else if (argc == 3 && strcmp(argv[1], "exec") == 0)
        exec_child((size_t)atol(argv[2]));
    else if (argc == 3 && strcmp(argv[1], "chain") == 0)
        failed += !chain(atoi(argv[2]), 0);
    else if (argc == 3 && strcmp(argv[1], "many") == 0)
        many(atoi(argv[2]));
    else if (argc == 2 && strcmp(argv[1], "nofd") == 0)
        nofd();
    else if (argc == 3 && strcmp(argv[1], "threads") == 0)
        threads(atoi(argv[2]));
    else if ((argc == 3 || argc == 4) && strcmp(argv[1], "writers") == 0)
        writers(atoi(argv[2]), argc == 4 ? (size_t)atol(argv[3]) : (size_t)32 << 20);
    else if ((argc == 4 || argc == 5) && strcmp(argv[1], "gaps") == 0) {
        GAP_SIZE = (size_t)atol(argv[3]);
        gaps(atoi(argv[2]), argc == 5 && strcmp(argv[4], "count") == 0);
    }
    else if ((argc == 4 || argc == 5) && strcmp(argv[1], "lazy") == 0)
        lazy(atoi(argv[2]), atoi(argv[3]), argc == 5 && strcmp(argv[4], "count") == 0);
    else if ((argc == 3 || argc == 4) && strcmp(argv[1], "early") == 0)
        early(atoi(argv[2]), argc == 4 && strcmp(argv[3], "count") == 0);
    else if ((argc == 3 || argc == 4) && strcmp(argv[1], "childuse") == 0)
        childuse(atoi(argv[2]), argc == 4 && strcmp(argv[3], "failremap") == 0,
                 argc == 4 && strcmp(argv[3], "closefirst") == 0);
    else if (argc == 3 && strcmp(argv[1], "huge") == 0)
        huge((size_t)atol(argv[2]));
    else if (argc == 3 && strcmp(argv[1], "firstfork") == 0)
        firstfork((size_t)atol(argv[2]));
    else {
        fprintf(stderr, "usage: preload_forkpool snap|reuse SIZE|hold SIZE FILE|fill SIZE N|"
                        "exec SIZE|chain N|many N|nofd|threads N|writers N [SIZE]|firstfork SIZE|gaps N SIZE [count]|lazy N FORKS [count]|childuse N [failremap|closefirst]|early N [count]|huge SIZE\n");
        return 2;
    }
    return failed != 0;
}
