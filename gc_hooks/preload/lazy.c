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
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "preload.h"

#ifndef USERFAULTFD_IOC_NEW
#define USERFAULTFD_IOC_NEW _IO(0xAA, 0x00)
#endif

static pthread_mutex_t wp_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t start_mu = PTHREAD_MUTEX_INITIALIZER; /* forks of two threads */
static int uffd = -1;
static _Atomic int state; /* 0: not tried; 1: the fault thread runs; -1: not available */

static int open_uffd(void)
{
    int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC);
    if (fd < 0) {
        int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
        if (dev < 0)
            return -1;
        fd = ioctl(dev, USERFAULTFD_IOC_NEW, O_CLOEXEC);
        close(dev);
        if (fd < 0)
            return -1;
    }
    struct uffdio_api api = {.api = UFFD_API, .features = UFFD_FEATURE_WP_HUGETLBFS_SHMEM};
    if (ioctl(fd, UFFDIO_API, &api) != 0 ||
        !(api.ioctls & ((uint64_t)1 << _UFFDIO_REGISTER))) {
        close(fd);
        return -1;
    }
    return fd;
}

static void wake(int fd, uint64_t start, uint64_t len)
{
    struct uffdio_range r = {.start = start, .len = len};
    ioctl(fd, UFFDIO_WAKE, &r);
}

static void *fault_thread(void *arg)
{
    int fd = (int)(intptr_t)arg;
    fp_in_pool = 1; /* never the pool's allocations from here */
    for (;;) {
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
            wake(fd, (uint64_t)(uintptr_t)start, len);
        else
            wake(fd, page, 4096);
    }
}

static int start(void)
{
    if (!fp_cfg.lazy_fork)
        return -1;
    int fd = open_uffd();
    if (fd < 0)
        return -1;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&at, 64 << 10);
    pthread_t t;
    int rc = pthread_create(&t, &at, fault_thread, (void *)(intptr_t)fd);
    pthread_attr_destroy(&at);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        close(fd);
        return -1;
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

void fp_lazy_lock(void) { pthread_mutex_lock(&wp_mu); }
void fp_lazy_unlock(void) { pthread_mutex_unlock(&wp_mu); }

void fp_lazy_child(void)
{
    static const pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    memcpy(&wp_mu, &fresh, sizeof wp_mu);
    memcpy(&start_mu, &fresh, sizeof start_mu);
    if (uffd >= 0)
        close(uffd); /* the parent's: its thread is not here */
    uffd = -1;
    atomic_store(&state, 0);
}
