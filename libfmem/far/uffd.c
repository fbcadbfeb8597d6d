/* uffd.c - userfaultfd wrappers (see uffd.h). */
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "uffd.h"

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif
#ifndef USERFAULTFD_IOC_NEW
#define USERFAULTFD_IOC_NEW _IO(0xAA, 0x00)
#endif

#define UFFD_FEATURES (UFFD_FEATURE_PAGEFAULT_FLAG_WP | UFFD_FEATURE_EVENT_REMOVE | \
                       UFFD_FEATURE_THREAD_ID)

/* Kernel faults (a read(2) into region memory) are handled only by a
 * userfaultfd made without UFFD_USER_MODE_ONLY, which needs CAP_SYS_PTRACE
 * or vm.unprivileged_userfaultfd=1 for the system call, or access to
 * /dev/userfaultfd. Try those first; user-mode-only is the last resort. */
static int open_fd(int *user_only)
{
    const int flags = O_CLOEXEC | O_NONBLOCK;
    *user_only = 0;
    int fd = (int)syscall(SYS_userfaultfd, flags);
    if (fd >= 0)
        return fd;
    int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
    if (dev >= 0) {
        fd = ioctl(dev, USERFAULTFD_IOC_NEW, flags);
        close(dev);
        if (fd >= 0)
            return fd;
    }
    fd = (int)syscall(SYS_userfaultfd, flags | UFFD_USER_MODE_ONLY);
    if (fd >= 0) {
        *user_only = 1;
        return fd;
    }
    return errno == ENOSYS ? -ENOTSUP : -EPERM;
}

int uffd_open_with(uint64_t features, int *user_only)
{
    int fd = open_fd(user_only);
    if (fd < 0)
        return fd;
    struct uffdio_api api = {.api = UFFD_API, .features = features};
    if (ioctl(fd, UFFDIO_API, &api) < 0 || (api.features & features) != features) {
        close(fd);
        return -ENOTSUP;
    }
    return fd;
}

int uffd_open(int *user_only)
{
    return uffd_open_with(UFFD_FEATURES, user_only);
}

int uffd_register(int fd, void *addr, size_t len)
{
    struct uffdio_register reg = {
        .range = {.start = (uintptr_t)addr, .len = len},
        .mode = UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP,
    };
    if (ioctl(fd, UFFDIO_REGISTER, &reg) < 0)
        return errno == EINVAL ? -ENOTSUP : -errno;
    const uint64_t need = (uint64_t)1 << _UFFDIO_COPY | (uint64_t)1 << _UFFDIO_WRITEPROTECT |
                          (uint64_t)1 << _UFFDIO_WAKE;
    return (reg.ioctls & need) == need ? 0 : -ENOTSUP;
}

int uffd_copy(int fd, void *dst, const void *src, size_t len, int wp, int dontwake,
              size_t *done)
{
    struct uffdio_copy c = {
        .dst = (uintptr_t)dst,
        .src = (uintptr_t)src,
        .len = len,
        .mode = (wp ? UFFDIO_COPY_MODE_WP : 0) | (dontwake ? UFFDIO_COPY_MODE_DONTWAKE : 0),
    };
    int rc = ioctl(fd, UFFDIO_COPY, &c) < 0 ? -errno : 0;
    *done = c.copy > 0 ? (size_t)c.copy : 0;
    if (rc == 0 && *done < len) /* short copy without an error code */
        rc = -EAGAIN;
    return rc;
}

int uffd_wp(int fd, void *addr, size_t len, int protect)
{
    struct uffdio_writeprotect w = {
        .range = {.start = (uintptr_t)addr, .len = len},
        .mode = protect ? UFFDIO_WRITEPROTECT_MODE_WP : 0,
    };
    return ioctl(fd, UFFDIO_WRITEPROTECT, &w) < 0 ? -errno : 0;
}

int uffd_wake(int fd, void *addr, size_t len)
{
    struct uffdio_range rg = {.start = (uintptr_t)addr, .len = len};
    return ioctl(fd, UFFDIO_WAKE, &rg) < 0 ? -errno : 0;
}
