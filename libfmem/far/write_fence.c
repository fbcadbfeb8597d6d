/* write_fence.c - the write fence of a copy-then-remap (write_fence.h). */
#include <linux/userfaultfd.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "uffd.h"
#include "write_fence.h"

/* Write-protect faults only: no removal events, which would stop a thread
 * that madvises a fenced range until somebody reads them. */
int write_fence_open(int kernel_writes)
{
    const char *e = getenv("FMEM_COMPACT_FENCE"); /* "0": unfenced (to measure the cost) */
    if (e && strcmp(e, "0") == 0)
        return -1;
    int user_only;
    int fd = uffd_open_with(UFFD_FEATURE_PAGEFAULT_FLAG_WP, &user_only);
    if (fd >= 0 && kernel_writes && user_only) {
        close(fd);
        return -1;
    }
    return fd < 0 ? -1 : fd;
}

static void unregister(int fd, void *at, size_t len)
{
    struct uffdio_range rg = {.start = (uintptr_t)at, .len = len};
    ioctl(fd, UFFDIO_UNREGISTER, &rg);
}

int write_fence_up(int fd, void *at, size_t len)
{
    int rc = uffd_register(fd, at, len);
    if (rc == 0 && (rc = uffd_wp(fd, at, len, 1)) != 0)
        unregister(fd, at, len);
    return rc;
}

void write_fence_undo(int fd, void *at, size_t len)
{
    uffd_wp(fd, at, len, 0);
    unregister(fd, at, len);
}

void write_fence_down(int fd, void *at, size_t len)
{
    uffd_wake(fd, at, len);
}
