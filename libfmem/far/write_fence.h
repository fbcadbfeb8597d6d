/* write_fence.h - a userfaultfd write-protect fence around a copy-then-
 * remap: the range whose bytes are being copied elsewhere is write-
 * protected before the copy, a thread writing there (user code, or the
 * kernel in a read(2) into it) sleeps in its page fault, and after the
 * range was remapped onto the copy it is woken and its write lands in the
 * new mapping. Used by heap compaction (heap_compact.c) and by the page
 * sharing of pymalloc pools (gc_hooks/python_share.c), which builds this
 * file into its own library. Nobody reads the fd: faults just wait for
 * write_fence_down or write_fence_undo. */
#ifndef FMEM_FAR_WRITE_FENCE_H
#define FMEM_FAR_WRITE_FENCE_H

#include <stddef.h>

/* A write-protect-only userfaultfd, or -1: FMEM_COMPACT_FENCE=0 in the
 * environment, no userfaultfd (permission, old kernel), or, with
 * kernel_writes, one that handles only user-mode faults (a kernel write
 * into a fenced range would fail with EFAULT instead of waiting). */
int write_fence_open(int kernel_writes);
/* Register and write-protect [at, at+len): 0, or a negative errno with
 * nothing left registered (-ENOTSUP: this mapping cannot be fenced). */
int write_fence_up(int fd, void *at, size_t len);
/* The copy was not mapped: unprotect (which wakes the writers, whose
 * writes then land in the range's own memory) and unregister. */
void write_fence_undo(int fd, void *at, size_t len);
/* The range was remapped (the fenced mapping is gone): wake its writers. */
void write_fence_down(int fd, void *at, size_t len);

#endif
