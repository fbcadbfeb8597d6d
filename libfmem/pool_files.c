/* pool_files.c - the two files of a named pool (shm:/NAME, file:/PATH):
 * the metadata at PATH, the data at PATH.data.
 *
 * Creating: both files are made with O_EXCL, so a file or a symbolic link
 * someone left at either name is never reused, truncated or followed.
 * Their space is reserved before anything is written (fallocate), so a
 * filesystem without room is an error now (ENOSPC) instead of a SIGBUS
 * in whichever process first touches a page the filesystem cannot hold.
 * On hugetlbfs, fallocate would allocate and clear every huge page up
 * front; the kernel reserves huge pages for a shared mapping instead, so
 * there the transport's mmap is the check (ENOMEM). On any failure the
 * files made are removed.
 *
 * Opening: never through a symbolic link (O_NOFOLLOW), regular files only;
 * a daemon also refuses files another user owns or others may write (such
 * a user could read and rewrite every block of the pool). */
#include "pool_files.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "fmem.h"

#define OPEN_FLAGS (O_RDWR | O_CLOEXEC | O_NOFOLLOW)

static int data_path_of(const char *path, char *out, size_t cap)
{
    return snprintf(out, cap, "%s.data", path) < (int)cap ? 0 : FMEM_EINVAL;
}

/* The directory holding `path` ("/" for "/x", "." for "x"). */
static void dir_of(const char *path, char *out, size_t cap)
{
    snprintf(out, cap, "%s", path);
    char *slash = strrchr(out, '/');
    if (!slash)
        snprintf(out, cap, ".");
    else
        *(slash == out ? slash + 1 : slash) = 0;
}

static bool is_hugetlbfs(const char *dir)
{
    struct statfs sf;
    return statfs(dir, &sf) == 0 && sf.f_type == HUGETLBFS_MAGIC;
}

/* Refuse at once (ENOSPC) a pool the filesystem cannot hold, before any
 * file is made: a huge size then costs nothing. A filesystem that reports
 * no limit is left to the reservation. */
static int check_room(const char *dir, uint64_t bytes)
{
    struct statvfs sv;
    if (statvfs(dir, &sv) < 0 || sv.f_blocks == 0)
        return 0;
    uint64_t bsize = sv.f_frsize ? sv.f_frsize : sv.f_bsize;
    if (bsize && (uint64_t)sv.f_bavail < bytes / bsize + 1) {
        errno = ENOSPC;
        return FMEM_EIO;
    }
    return 0;
}

int pool_files_check(int fd, bool check_owner, uid_t owner)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return FMEM_EIO;
    if (!S_ISREG(st.st_mode))
        return FMEM_ECORRUPT; /* a directory, device or pipe is no pool */
    if (!check_owner)
        return 0;
    if (st.st_uid != owner && st.st_uid != geteuid()) {
        errno = EPERM;
        return FMEM_EIO;
    }
    /* a file without a name (memfd) cannot be opened by others whatever
     * its mode says */
    if (st.st_nlink > 0 && (st.st_mode & (S_IWGRP | S_IWOTH))) {
        errno = EPERM;
        return FMEM_EIO;
    }
    return 0;
}

void pool_files_unlink(const char *path)
{
    char data_path[PATH_MAX + 8];
    unlink(path);
    if (data_path_of(path, data_path, sizeof data_path) == 0)
        unlink(data_path);
}

/* Make the data file. A data file already there while we made the
 * metadata file can only be left over from a creator that died (or a
 * half-removed pool): reuse its name if it is ours and plain, never if it
 * is a link or someone else's. */
static int make_data(const char *data_path)
{
    for (int tries = 0;; tries++) {
        int fd = open(data_path, OPEN_FLAGS | O_CREAT | O_EXCL, 0600);
        if (fd >= 0 || errno != EEXIST || tries > 0)
            return fd;
        struct stat st;
        if (lstat(data_path, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
            st.st_nlink != 1 || unlink(data_path) < 0) {
            errno = EEXIST;
            return -1;
        }
    }
}

/* Size a new file and reserve its space. */
static int reserve(int fd, uint64_t len, bool huge)
{
    if (huge) /* the mapping reserves the huge pages (see the top) */
        return ftruncate(fd, (off_t)len) < 0 ? FMEM_EIO : 0;
    int e = posix_fallocate(fd, 0, (off_t)len);
    if (e) {
        errno = e;
        return FMEM_EIO;
    }
    return 0;
}

/* 0 (both files made, sized and reserved), LOST_RACE (another process
 * made the metadata file first: open it) or FMEM_E* with nothing left. */
#define LOST_RACE 1
static int create_files(const struct shm_params *p, const char *data_path, int *mfd, int *dfd)
{
    char dir[PATH_MAX];
    dir_of(p->path, dir, sizeof dir);
    bool huge = is_hugetlbfs(dir);
    if (!huge && check_room(dir, p->meta_size + p->data_size))
        return FMEM_EIO;
    *mfd = open(p->path, OPEN_FLAGS | O_CREAT | O_EXCL, 0600);
    if (*mfd < 0)
        return errno == EEXIST ? LOST_RACE : FMEM_EIO;
    int rc = 0;
    *dfd = make_data(data_path);
    if (*dfd < 0)
        rc = FMEM_EIO;
    if (rc == 0)
        rc = reserve(*mfd, p->meta_size, huge);
    if (rc == 0)
        rc = reserve(*dfd, p->data_size, huge);
    if (rc) {
        int e = errno;
        unlink(p->path);
        if (*dfd >= 0) {
            unlink(data_path);
            close(*dfd);
        }
        close(*mfd);
        *mfd = *dfd = -1;
        errno = e;
    }
    return rc;
}

static uint64_t file_size(int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 ? (uint64_t)st.st_size : 0;
}

int pool_files_open(const struct shm_params *p, int *meta_fd, int *data_fd, int *made)
{
    char data_path[PATH_MAX + 8];
    if (data_path_of(p->path, data_path, sizeof data_path))
        return FMEM_EINVAL;
    *made = 0;
    int mfd = open(p->path, OPEN_FLAGS), dfd = -1, rc;
    if (mfd < 0 && errno == ENOENT && p->create && p->meta_size) {
        rc = create_files(p, data_path, &mfd, &dfd);
        if (rc == 0) {
            *made = 1;
            goto done;
        }
        if (rc != LOST_RACE)
            return rc;
        mfd = open(p->path, OPEN_FLAGS);
    }
    if (mfd < 0)
        return FMEM_EIO; /* ELOOP: a symbolic link */
    if ((rc = pool_files_check(mfd, p->check_owner, p->owner)) != 0) {
        close(mfd);
        return rc;
    }
    /* the creator makes the data file right after the (still empty)
     * metadata file; a sized metadata file without one is no pool */
    for (int i = 0; (dfd = open(data_path, OPEN_FLAGS)) < 0 && errno == ENOENT &&
                    file_size(mfd) == 0 && i < 200;
         i++)
        usleep(10000);
    if (dfd < 0) {
        int e = errno;
        close(mfd);
        errno = e;
        return e == ENOENT ? FMEM_ECORRUPT : FMEM_EIO;
    }
    if ((rc = pool_files_check(dfd, p->check_owner, p->owner)) != 0) {
        int e = errno;
        close(mfd);
        close(dfd);
        errno = e;
        return rc;
    }
done:
    *meta_fd = mfd;
    *data_fd = dfd;
    return 0;
}
