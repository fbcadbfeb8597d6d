/* ssd.c - the ssd: store: a node's data area in a file or block device,
 * for cold data. Reads and writes go through io_uring when the kernel
 * allows it (a few rings, each used by one thread at a time) and through
 * pread/pwrite when it does not (io_uring disabled by sysctl or seccomp,
 * or io=sync). The file is opened O_DIRECT where the file system offers
 * it, so cold units do not fill the page cache; requests that are not
 * 4 KiB aligned then go through an aligned bounce buffer.
 *
 * A regular file is not sized up front: it grows as units are written
 * (size= is the capacity) and reads past its end are zeros, which is what
 * a never-written unit holds. A read that comes up short inside the part
 * already written means the file was cut behind our back: an error, never
 * zeros. */
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef HAVE_LIBURING
#include <liburing.h>
#endif

#include "store.h"

#define SSD_ALIGN 4096
#define SSD_RINGS 4   /* I/O in flight at once through io_uring */
#define SSD_DEPTH 8

struct ssd_ring {
    pthread_mutex_t mu;
    bool broken; /* a submit or wait failed: plain I/O from now on */
#ifdef HAVE_LIBURING
    struct io_uring ring;
#endif
};

struct ssd_store {
    struct store s;
    int fd;
    bool direct, blockdev;
    pid_t owner;            /* a fork child shares the file: it may not write */
    unsigned nrings;        /* 0: pread/pwrite */
    struct ssd_ring rings[SSD_RINGS];
    _Atomic unsigned next_ring;
    pthread_mutex_t rmw_mu; /* read-modify-write of partial 4 KiB blocks */
    _Atomic uint64_t written_end;
    char why_sync[48];      /* why io_uring is not used */
    char path[PATH_MAX];
};

/* One transfer; returns bytes moved or -errno. */
static ssize_t xfer(struct ssd_store *d, bool wr, uint64_t off, void *buf, size_t len)
{
#ifdef HAVE_LIBURING
    if (d->nrings) {
        unsigned start = atomic_fetch_add_explicit(&d->next_ring, 1, memory_order_relaxed);
        struct ssd_ring *r = NULL;
        for (unsigned i = 0; i < d->nrings && !r; i++)
            if (pthread_mutex_trylock(&d->rings[(start + i) % d->nrings].mu) == 0)
                r = &d->rings[(start + i) % d->nrings];
        if (!r) {
            r = &d->rings[start % d->nrings];
            pthread_mutex_lock(&r->mu);
        }
        ssize_t res = 0;
        struct io_uring_sqe *sqe = r->broken ? NULL : io_uring_get_sqe(&r->ring);
        if (sqe) {
            if (wr)
                io_uring_prep_write(sqe, d->fd, buf, (unsigned)len, (off_t)off);
            else
                io_uring_prep_read(sqe, d->fd, buf, (unsigned)len, (off_t)off);
            struct io_uring_cqe *cqe = NULL;
            int rc;
            do
                rc = io_uring_submit(&r->ring);
            while (rc == -EINTR);
            if (rc == 1) {
                do
                    rc = io_uring_wait_cqe(&r->ring, &cqe);
                while (rc == -EINTR);
            } else if (rc >= 0) {
                rc = -EIO;
            }
            if (rc < 0) {
                /* the ring's state is unknown now: this ring is done */
                r->broken = true;
                res = rc;
            } else {
                res = cqe->res;
                io_uring_cqe_seen(&r->ring, cqe);
            }
        }
        if (!sqe) { /* a broken ring (or, never expected, a full one): plain I/O */
            r->broken = true;
            res = wr ? pwrite(d->fd, buf, len, (off_t)off) : pread(d->fd, buf, len, (off_t)off);
            if (res < 0)
                res = -errno;
        }
        pthread_mutex_unlock(&r->mu);
        return res;
    }
#endif
    ssize_t n = wr ? pwrite(d->fd, buf, len, (off_t)off) : pread(d->fd, buf, len, (off_t)off);
    return n < 0 ? -errno : n;
}

/* Move all of [off, off+len); reads past the end of the file are zeros. */
static int xfer_all(struct ssd_store *d, bool wr, uint64_t off, char *buf, size_t len)
{
    size_t done = 0;
    while (done < len) {
        size_t chunk = len - done > (1u << 30) ? (1u << 30) : len - done;
        ssize_t n = xfer(d, wr, off + done, buf + done, chunk);
        if (n == -EINTR || n == -EAGAIN)
            continue;
        if (n < 0) {
            store_fail(&d->s, "%s at offset %llu: %s (%s)", wr ? "write" : "read",
                       (unsigned long long)(off + done), strerror((int)-n), d->path);
            return FMEM_EIO;
        }
        if (n == 0) {
            if (wr) {
                store_fail(&d->s, "write at offset %llu: no progress (%s)",
                           (unsigned long long)(off + done), d->path);
                return FMEM_EIO;
            }
            if (off + done < atomic_load(&d->written_end)) {
                store_fail(&d->s, "file cut: read at offset %llu ends before the data written "
                           "there (%s)", (unsigned long long)(off + done), d->path);
                return FMEM_EIO;
            }
            memset(buf + done, 0, len - done); /* never written */
            return 0;
        }
        done += (size_t)n;
    }
    return 0;
}

static bool aligned(uint64_t off, size_t len, const void *buf)
{
    return !(off % SSD_ALIGN) && !(len % SSD_ALIGN) && !((uintptr_t)buf % SSD_ALIGN);
}

static int ssd_io(struct ssd_store *d, bool wr, uint64_t off, char *buf, size_t len)
{
    if (getpid() != d->owner) {
        store_fail(&d->s, "%s: an ssd: node belongs to the process that opened it, not to a "
                   "fork child", d->path);
        return FMEM_EIO;
    }
    if (!d->direct || aligned(off, len, buf))
        return xfer_all(d, wr, off, buf, len);
    /* O_DIRECT wants aligned offsets, lengths and memory: bounce */
    uint64_t a0 = off / SSD_ALIGN * SSD_ALIGN;
    uint64_t a1 = (off + len + SSD_ALIGN - 1) / SSD_ALIGN * SSD_ALIGN;
    char *b = aligned_alloc(SSD_ALIGN, a1 - a0);
    if (!b) {
        store_fail(&d->s, "%s: no memory for a bounce buffer", d->path);
        return FMEM_ENOMEM;
    }
    int rc;
    if (!wr) {
        rc = xfer_all(d, false, a0, b, a1 - a0);
        if (rc == 0)
            memcpy(buf, b + (off - a0), len);
    } else if (a0 == off && a1 == off + len) {
        memcpy(b, buf, len);
        rc = xfer_all(d, true, a0, b, len);
    } else {
        /* two partial writes to one block must not undo each other */
        pthread_mutex_lock(&d->rmw_mu);
        rc = xfer_all(d, false, a0, b, a1 - a0);
        if (rc == 0) {
            memcpy(b + (off - a0), buf, len);
            rc = xfer_all(d, true, a0, b, a1 - a0);
        }
        pthread_mutex_unlock(&d->rmw_mu);
    }
    free(b);
    return rc;
}

static int ssd_read(struct store *s, uint64_t off, void *dst, size_t len)
{
    return ssd_io((struct ssd_store *)s, false, off, dst, len);
}

static int ssd_write(struct store *s, uint64_t off, const void *src, size_t len)
{
    struct ssd_store *d = (struct ssd_store *)s;
    int rc = ssd_io(d, true, off, (char *)src, len);
    if (rc == 0) {
        uint64_t end = off + len, cur = atomic_load(&d->written_end);
        while (end > cur && !atomic_compare_exchange_weak(&d->written_end, &cur, end))
            ;
    }
    return rc;
}

static void ssd_stats(struct store *s, fmem_node_stats_t *st)
{
    struct ssd_store *d = (struct ssd_store *)s;
    struct stat sb;
    bool gone = false;
    if (!d->blockdev && fstat(d->fd, &sb) == 0) {
        st->held_bytes = (uint64_t)sb.st_blocks * 512;
        gone = sb.st_nlink == 0;
    } else {
        st->held_bytes = atomic_load(&d->written_end);
    }
    char text[160];
    snprintf(text, sizeof text, "%s%s%s%s%s%s", d->nrings ? "io_uring" : "pread/pwrite",
             d->why_sync[0] ? " (" : "", d->why_sync, d->why_sync[0] ? ")" : "",
             d->direct ? ", O_DIRECT" : "", gone ? ", file deleted" : "");
    memcpy(st->detail, text, sizeof st->detail - 1);
    st->detail[sizeof st->detail - 1] = 0;
}

static void ssd_close(struct store *s)
{
    struct ssd_store *d = (struct ssd_store *)s;
#ifdef HAVE_LIBURING
    for (unsigned i = 0; i < d->nrings; i++)
        io_uring_queue_exit(&d->rings[i].ring);
#endif
    for (unsigned i = 0; i < SSD_RINGS; i++)
        pthread_mutex_destroy(&d->rings[i].mu);
    pthread_mutex_destroy(&d->rmw_mu);
    if (d->fd >= 0)
        close(d->fd);
    store_fini(&d->s);
    free(d);
}

static const struct store_ops ssd_ops = {
    .read = ssd_read, .write = ssd_write, .stats = ssd_stats, .close = ssd_close};

static int fail_open(struct ssd_store *d, const char *what, int err)
{
    uri_set_error("ssd:%.100s: %s%s%s", d->path, what, err ? ": " : "", err ? strerror(err) : "");
    ssd_close(&d->s);
    /* what the URI names cannot serve: a URI error; else the system's */
    return !err || err == ENOENT || err == EACCES || err == EISDIR || err == EINVAL ? FMEM_EURI
                                                                                   : FMEM_EIO;
}

/* Open the file; O_DIRECT if asked or (auto) if the file system has it. */
static int open_file(struct ssd_store *d, const struct node_uri *u)
{
    int flags = O_RDWR | O_CLOEXEC | (u->create ? O_CREAT : 0);
    if (u->direct != 0) {
        d->fd = open(d->path, flags | O_DIRECT, 0600);
        if (d->fd >= 0) {
            d->direct = true;
            return 0;
        }
        if (errno != EINVAL || u->direct == 1)
            return errno == EINVAL ? -1 : errno;
    }
    d->fd = open(d->path, flags, 0600);
    return d->fd >= 0 ? 0 : errno;
}

int ssd_store_open(const struct node_uri *u, uint64_t data_size, struct store **out)
{
    struct ssd_store *d = calloc(1, sizeof *d);
    if (!d)
        return FMEM_ENOMEM;
    d->fd = -1;
    d->owner = getpid();
    snprintf(d->path, sizeof d->path, "%s", u->path);
    pthread_mutex_init(&d->rmw_mu, NULL);
    for (unsigned i = 0; i < SSD_RINGS; i++)
        pthread_mutex_init(&d->rings[i].mu, NULL);
    store_init(&d->s, &ssd_ops, "ssd", data_size);

    int err = open_file(d, u);
    if (err == -1)
        return fail_open(d, "direct=1, but the file system does not offer O_DIRECT", 0);
    if (err)
        return fail_open(d, err == ENOENT && !u->create ? "no such file (create=0)" : "cannot open",
                         err);
    struct stat sb;
    if (fstat(d->fd, &sb) < 0)
        return fail_open(d, "cannot stat", errno);
    if (S_ISBLK(sb.st_mode)) {
        uint64_t dev = 0;
        if (ioctl(d->fd, BLKGETSIZE64, &dev) < 0)
            return fail_open(d, "cannot read the device's size", errno);
        if (dev < data_size)
            return fail_open(d, "the device is smaller than size=", 0);
        d->blockdev = true;
        /* what was on the device is not ours: treat all of it as written,
         * so a short read is an error rather than zeros */
        atomic_store(&d->written_end, data_size);
    } else if (!S_ISREG(sb.st_mode)) {
        return fail_open(d, "neither a regular file nor a block device", 0);
    } else if (ftruncate(d->fd, 0) < 0) { /* the pool is new: old bytes are garbage */
        return fail_open(d, "cannot truncate", errno);
    }

#ifdef HAVE_LIBURING
    if (u->io == 0) {
        for (unsigned i = 0; i < SSD_RINGS; i++) {
            int rc = io_uring_queue_init(SSD_DEPTH, &d->rings[i].ring, 0);
            if (rc < 0) {
                if (i == 0)
                    snprintf(d->why_sync, sizeof d->why_sync, "io_uring: %s", strerror(-rc));
                break;
            }
            d->nrings = i + 1;
        }
    } else {
        snprintf(d->why_sync, sizeof d->why_sync, "io=sync");
    }
#else
    snprintf(d->why_sync, sizeof d->why_sync, "built without liburing");
#endif
    *out = &d->s;
    return 0;
}
