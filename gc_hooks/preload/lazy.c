/* lazy.c - write protection of a named pool's blocks at fork (userfaultfd).
 *
 * At fork the parent write-protects its small shared blocks instead of
 * remapping them (snap.c); its first write to one after the fork stops in
 * the kernel, and a thread of ours remaps that block MAP_PRIVATE at its
 * place (the bytes stay: the file's pages) before the write goes on. So
 * the parent never writes a pool page a fork child may read, and the fork
 * itself costs about what a plain fork costs: one write-protect call per
 * block, no page table torn down and no mapping made while the program
 * waits. The kernel does not copy the page tables of a shared mapping at
 * fork, and the child, which loses the registration, remaps the
 * write-protected blocks itself (cheap there: no page table entries).
 *
 * Most blocks are protected before the fork (early.c): the same
 * thread, started at the first large allocation, protects blocks live for
 * a while between faults, and a write to such a block before any fork
 * only lifts its protection. The fork then protects the rest.
 *
 * Kernel writes (read() into a block) stop the same way: the protection
 * is not limited to user mode. Where userfaultfd is not allowed
 * (vm.unprivileged_userfaultfd=0 without CAP_SYS_PTRACE and no access to
 * /dev/userfaultfd) or FMEM_PRELOAD_LAZY_FORK=0, fork remaps every block
 * at once as before.
 *
 * Locks: wp_mu orders a remap against a free of the same block and
 * against fork (held by the prepare handler from the protection until
 * after the fork, so no block is remapped while the kernel copies the
 * process and the child's view of which blocks are still shared is
 * right). The fault thread takes nothing else; a free takes it while
 * holding the block lock, as fork does. */
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "preload.h"

#ifndef USERFAULTFD_IOC_NEW
#define USERFAULTFD_IOC_NEW _IO(0xAA, 0x00)
#endif

static pthread_mutex_t wp_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t start_mu = PTHREAD_MUTEX_INITIALIZER; /* forks of two threads */
static int uffd = -1;
static dev_t uffd_dev; /* which file it is: a program may close it */
static ino_t uffd_ino;
static _Atomic int state; /* 0: not tried; 1: the fault thread runs; -1: not available */
/* Early passes (early.c) run this often while objects wait for one, and
 * otherwise when a block was handed out since the last pass. */
#define EARLY_EVERY_MS 20
static _Atomic int handed_out; /* a block was handed out since the last early pass */
static _Atomic int idle;        /* the fault thread waits for a fault or a kick */
static int kick_fd = -1;        /* eventfd: wakes it */
static _Atomic uint64_t last_early; /* CLOCK_MONOTONIC ms of the last early pass */

static int early_due(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t now = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
    if (now - atomic_load(&last_early) < EARLY_EVERY_MS)
        return 0;
    atomic_store(&last_early, now);
    return 1;
}

int fp_uffd_open(uint64_t features, int flags)
{
    int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | flags);
    if (fd < 0) {
        int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
        if (dev < 0)
            return -1;
        fd = ioctl(dev, USERFAULTFD_IOC_NEW, O_CLOEXEC | flags);
        close(dev);
        if (fd < 0)
            return -1;
    }
    struct uffdio_api api = {.api = UFFD_API, .features = features};
    if (ioctl(fd, UFFDIO_API, &api) != 0 || (api.features & features) != features ||
        !(api.ioctls & ((uint64_t)1 << _UFFDIO_REGISTER))) {
        close(fd);
        return -1;
    }
    return fd;
}

void fp_uffd_wake(int fd, uint64_t start, uint64_t len)
{
    struct uffdio_range r = {.start = start, .len = len};
    ioctl(fd, UFFDIO_WAKE, &r);
}

static void *fault_thread(void *arg)
{
    int fd = (int)(intptr_t)arg;
    fp_in_pool = 1; /* never the pool's allocations from here */
    int waiting = 0; /* objects seen by the last early pass */
    for (;;) {
        struct pollfd pf[2] = {{.fd = fd, .events = POLLIN}, {.fd = kick_fd, .events = POLLIN}};
        int timeout = EARLY_EVERY_MS;
        if (!waiting) {
            atomic_store(&idle, 1);
            if (!atomic_load(&handed_out))
                timeout = -1; /* until a fault or a kick */
        }
        int r = poll(pf, kick_fd >= 0 ? 2 : 1, timeout);
        atomic_store(&idle, 0);
        if ((r < 0 && errno != EINTR) || (r > 0 && (pf[0].revents & (POLLNVAL | POLLERR)))) {
            atomic_store(&state, -1); /* closed by the program: no protection from here */
            return NULL;
        }
        if (r > 0 && (pf[1].revents & POLLIN)) {
            uint64_t v;
            ssize_t k = read(kick_fd, &v, sizeof v);
            (void)k;
        }
        if ((waiting || atomic_load(&handed_out)) && early_due()) {
            atomic_store(&handed_out, 0);
            waiting = fp_early_pass();
        }
        if (r <= 0 || !(pf[0].revents & POLLIN))
            continue;
        struct uffd_msg m;
        ssize_t n = read(fd, &m, sizeof m);
        if (n != (ssize_t)sizeof m) {
            if (n < 0 && (errno == EINTR || errno == EAGAIN))
                continue;
            return NULL; /* closed */
        }
        if (m.event != UFFD_EVENT_PAGEFAULT)
            continue;
        uint64_t page = m.arg.pagefault.address & ~(uint64_t)4095;
        char *start = NULL;
        size_t len = 0;
        pthread_mutex_lock(&wp_mu);
        fp_snap_fault((char *)(uintptr_t)page, &start, &len);
        pthread_mutex_unlock(&wp_mu);
        if (len)
            fp_uffd_wake(fd, (uint64_t)(uintptr_t)start, len);
        else if (fp_lazy_unprotect((char *)(uintptr_t)page, 4096) != 0)
            fp_uffd_wake(fd, page, 4096); /* in no object: nothing to keep */
        fp_early_after_fault();
    }
}

int fp_thread_start(void *(*fn)(void *), void *arg)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&at, 64 << 10);
    pthread_t t;
    int rc = pthread_create(&t, &at, fn, arg);
    pthread_attr_destroy(&at);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

static int start(void)
{
    if (!fp_cfg.lazy_fork)
        return -1;
    int fd = fp_uffd_open(UFFD_FEATURE_WP_HUGETLBFS_SHMEM, O_NONBLOCK); /* for poll */
    if (fd < 0)
        return -1;
    kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (fp_thread_start(fault_thread, (void *)(intptr_t)fd) != 0) {
        close(fd);
        if (kick_fd >= 0)
            close(kick_fd);
        kick_fd = -1;
        return -1;
    }
    struct stat sb;
    if (fstat(fd, &sb) == 0) {
        uffd_dev = sb.st_dev;
        uffd_ino = sb.st_ino;
    }
    uffd = fd;
    return 1;
}

int fp_lazy_start(void)
{
    int st = atomic_load(&state);
    if (st)
        return st > 0;
    pthread_mutex_lock(&start_mu);
    if ((st = atomic_load(&state)) == 0)
        atomic_store(&state, st = start());
    pthread_mutex_unlock(&start_mu);
    return st > 0;
}

int fp_lazy_usable(void)
{
    if (!fp_lazy_start())
        return 0;
    struct stat sb;
    if (fstat(uffd, &sb) != 0 || sb.st_dev != uffd_dev || sb.st_ino != uffd_ino) {
        /* closed by the program (and perhaps the number reused): the
         * kernel dropped the protections with it */
        atomic_store(&state, -1);
        return 0;
    }
    return 1;
}

int fp_lazy_protect(char *p, size_t len)
{
    if (atomic_load(&state) <= 0)
        return -1;
    struct uffdio_register rg = {.range = {.start = (uint64_t)(uintptr_t)p, .len = len},
                                 .mode = UFFDIO_REGISTER_MODE_WP};
    if (ioctl(uffd, UFFDIO_REGISTER, &rg) != 0)
        return -1;
    struct uffdio_writeprotect wp = {.range = rg.range, .mode = UFFDIO_WRITEPROTECT_MODE_WP};
    if (ioctl(uffd, UFFDIO_WRITEPROTECT, &wp) != 0) {
        struct uffdio_range r = rg.range;
        ioctl(uffd, UFFDIO_UNREGISTER, &r);
        return -1;
    }
    return 0;
}

int fp_lazy_unprotect(char *p, size_t len)
{
    if (atomic_load(&state) <= 0)
        return -1;
    struct uffdio_writeprotect wp = {.range = {.start = (uint64_t)(uintptr_t)p, .len = len}};
    return ioctl(uffd, UFFDIO_WRITEPROTECT, &wp) == 0 ? 0 : -1;
}

void fp_lazy_note_alloc(void)
{
    if (!atomic_load_explicit(&handed_out, memory_order_relaxed))
        atomic_store(&handed_out, 1);
    int st = atomic_load_explicit(&state, memory_order_relaxed);
    if (st == 0)
        fp_lazy_start();
    else if (st > 0 && atomic_load_explicit(&idle, memory_order_relaxed) &&
             atomic_exchange(&idle, 0)) {
        uint64_t one = 1;
        ssize_t w = write(kick_fd, &one, sizeof one);
        (void)w;
    }
}

void fp_lazy_lock(void) { pthread_mutex_lock(&wp_mu); }
void fp_lazy_unlock(void) { pthread_mutex_unlock(&wp_mu); }

void fp_lazy_child(void)
{
    static const pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    memcpy(&wp_mu, &fresh, sizeof wp_mu);
    memcpy(&start_mu, &fresh, sizeof start_mu);
    if (uffd >= 0)
        close(uffd); /* the parent's: its thread is not here */
    if (kick_fd >= 0)
        close(kick_fd);
    uffd = kick_fd = -1;
    atomic_store(&idle, 0);
    atomic_store(&state, 0);
    atomic_store(&handed_out, 0);
}
