/* uffd.h - thin wrappers over the userfaultfd system calls the far-memory
 * region uses: open (three ways, see uffd_open), feature handshake,
 * register, UFFDIO_COPY, write-protect and wake. Every call returns 0 or a
 * negative errno; EAGAIN means a non-cooperative event (a madvise(2)
 * removal) is waiting to be read and the call should be retried after it. */
#ifndef FMEM_FAR_UFFD_H
#define FMEM_FAR_UFFD_H

#include <stddef.h>
#include <stdint.h>

#define UFFD_PAGE ((size_t)4096)

/* Open a userfaultfd (O_CLOEXEC | O_NONBLOCK) and enable the features the
 * region needs: write-protect faults, removal events and thread ids.
 * *user_only is set when only user-mode faults are handled. Returns the fd
 * or a negative errno (-EPERM: no permission, -ENOTSUP: kernel too old). */
int uffd_open(int *user_only);
/* The same with other features (UFFD_FEATURE_* bits, all required). */
int uffd_open_with(uint64_t features, int *user_only);
/* Register [addr, addr+len) for missing and write-protect faults. */
int uffd_register(int fd, void *addr, size_t len);
/* Copy len bytes (whole pages) from src to dst and map them, write-protected
 * if wp. *done = bytes mapped before an error. -EEXIST: the page at
 * dst + *done is already mapped. Wakes the faulting threads unless
 * dontwake. */
int uffd_copy(int fd, void *dst, const void *src, size_t len, int wp, int dontwake,
              size_t *done);
/* Write-protect (protect != 0) or unprotect a range; unprotecting wakes
 * threads waiting on it. */
int uffd_wp(int fd, void *addr, size_t len, int protect);
int uffd_wake(int fd, void *addr, size_t len);

#endif
