/* kwrite.c - calls through which the kernel writes into the caller's
 * memory, for a fork child's blocks still read-only (childmap.c).
 *
 * A write by the kernel to such a block is no fault the SIGSEGV handler
 * sees: the call fails with EFAULT. These calls then remap the blocks the
 * buffer meets MAP_PRIVATE (what the child's own first write would have
 * done) and call again. Nothing else changes: the first call wrote
 * nothing (the kernel checks the buffer page by page; a read that stopped
 * at a read-only page after some bytes returns that count, not EFAULT).
 * Other calls that write to memory (stat buffers, recvmsg, io_uring,
 * syscall()) still get EFAULT there; FMEM_PRELOAD_CHILD_REMAP=eager
 * avoids that. */
#include <dlfcn.h>
#include <errno.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "preload.h"

#define API __attribute__((visibility("default")))

/* the next definitions (libc's): looked up when the library loads (not
 * in a signal handler's read()), or at the first call if that comes
 * earlier (another library's constructor) */
static __typeof__(&read) real_read;
static __typeof__(&pread) real_pread;
static __typeof__(&pread64) real_pread64;
static __typeof__(&recv) real_recv;
static __typeof__(&recvfrom) real_recvfrom;
static __typeof__(&readv) real_readv;
#define REAL(name)                                                         \
    if (!real_##name)                                                      \
        real_##name = (__typeof__(&name))dlsym(RTLD_NEXT, #name);

__attribute__((constructor)) static void look_up(void)
{
    REAL(read)
    REAL(pread)
    REAL(pread64)
    REAL(recv)
    REAL(recvfrom)
    REAL(readv)
}

static int retry(ssize_t r, const void *buf, size_t len)
{
    return r < 0 && errno == EFAULT && fp_childmap_unshare(buf, len);
}

/* the call, and once more if it met blocks now remapped */
#define CALL_RETRYING(buf, len, call)                                      \
    ssize_t r = call;                                                      \
    if (retry(r, buf, len))                                                \
        r = call;                                                          \
    return r;

API ssize_t read(int fd, void *buf, size_t len)
{
    REAL(read)
    CALL_RETRYING(buf, len, real_read(fd, buf, len))
}

API ssize_t pread(int fd, void *buf, size_t len, off_t off)
{
    REAL(pread)
    CALL_RETRYING(buf, len, real_pread(fd, buf, len, off))
}

API ssize_t pread64(int fd, void *buf, size_t len, off_t off)
{
    REAL(pread64)
    CALL_RETRYING(buf, len, real_pread64(fd, buf, len, off))
}

API ssize_t recv(int fd, void *buf, size_t len, int flags)
{
    REAL(recv)
    CALL_RETRYING(buf, len, real_recv(fd, buf, len, flags))
}

API ssize_t recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *from, socklen_t *fl)
{
    REAL(recvfrom)
    CALL_RETRYING(buf, len, real_recvfrom(fd, buf, len, flags, from, fl))
}

API ssize_t readv(int fd, const struct iovec *iov, int n)
{
    REAL(readv)
    ssize_t r = real_readv(fd, iov, n);
    if (r < 0 && errno == EFAULT) {
        int again = 0;
        for (int i = 0; i < n; i++)
            again |= fp_childmap_unshare(iov[i].iov_base, iov[i].iov_len);
        if (again)
            r = real_readv(fd, iov, n);
    }
    return r;
}
