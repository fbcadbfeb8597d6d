/* session_table.c - the memory node's table of live service sessions (see
 * session_table.h). */
#include "session_table.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fmem.h"

#define SESS_MAGIC "FMEMSESS"
#define SESS_VERSION 1

struct sess_hdr {
    char magic[8];
    uint32_t version;
    uint32_t hdr_size;
    uint64_t nusers;
    uint64_t pad;
};

static size_t table_bytes(uint64_t nusers, size_t align)
{
    size_t b = sizeof(struct sess_hdr) + 8 * nusers;
    return (b + align - 1) / align * align;
}

static bool header_ok(const struct sess_hdr *h, uint64_t nusers)
{
    return !memcmp(h->magic, SESS_MAGIC, 8) && h->version == SESS_VERSION &&
           h->hdr_size == sizeof *h && h->nusers == nusers;
}

/* The named table: a regular file of ours that no one else may write. */
static int open_named(const char *pool_path, int *fd, int *ro_fd)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s%s", pool_path, SESSION_SUFFIX) >= (int)sizeof path)
        return FMEM_EINVAL;
    *fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (*fd < 0)
        return errno == ELOOP ? FMEM_EACCES : FMEM_EIO;
    struct stat st;
    if (fstat(*fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
        (st.st_mode & 022)) {
        close(*fd);
        return FMEM_EACCES;
    }
    *ro_fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (*ro_fd < 0) {
        close(*fd);
        return FMEM_EIO;
    }
    return 0;
}

int session_table_open(const char *pool_path, uint64_t nusers, struct session_table **out)
{
    struct session_table *t = calloc(1, sizeof *t);
    if (!t)
        return FMEM_ENOMEM;
    t->fd = t->ro_fd = -1;
    t->nusers = nusers;
    int rc = 0;
    if (pool_path) {
        rc = open_named(pool_path, &t->fd, &t->ro_fd);
    } else {
        t->fd = memfd_create("fmem-sessions", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        rc = t->fd < 0 ? FMEM_EIO : 0;
    }
    struct stat st;
    if (rc == 0 && fstat(t->fd, &st) < 0)
        rc = FMEM_EIO;
    if (rc) {
        session_table_close(t);
        return rc;
    }
    /* hugetlbfs wants whole huge pages: its block size says how big */
    t->map_len = table_bytes(nusers, st.st_blksize > 4096 ? (size_t)st.st_blksize : 4096);
    bool fresh = (uint64_t)st.st_size != t->map_len;
    if (fresh && ftruncate(t->fd, (off_t)t->map_len) < 0)
        rc = FMEM_EIO;
    if (rc == 0) {
        t->map = mmap(NULL, t->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, t->fd, 0);
        if (t->map == MAP_FAILED) {
            t->map = NULL;
            rc = FMEM_EIO;
        }
    }
    if (rc) {
        session_table_close(t);
        return rc;
    }
    struct sess_hdr *h = t->map;
    t->words = (_Atomic uint64_t *)((char *)t->map + sizeof *h);
    if (fresh || !header_ok(h, nusers)) {
        memset(t->map, 0, t->map_len);
        struct sess_hdr nh = {.version = SESS_VERSION, .hdr_size = sizeof nh, .nusers = nusers};
        memcpy(nh.magic, SESS_MAGIC, 8);
        *h = nh;
    }
    if (!pool_path) {
        /* nobody else may ever write it: existing mappings (ours) go on */
        if (fcntl(t->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE |
                                          F_SEAL_SEAL) < 0) {
            session_table_close(t);
            return FMEM_EIO;
        }
        t->ro_fd = t->fd;
    }
    *out = t;
    return 0;
}

void session_table_close(struct session_table *t)
{
    if (!t)
        return;
    if (t->map)
        munmap(t->map, t->map_len);
    if (t->ro_fd >= 0 && t->ro_fd != t->fd)
        close(t->ro_fd);
    if (t->fd >= 0)
        close(t->fd);
    free(t);
}

uint64_t session_begin(struct session_table *t, unsigned uid)
{
    if (uid == 0 || uid >= t->nusers)
        return 0;
    uint64_t s = 0;
    while (s == 0)
        if (getrandom(&s, sizeof s, 0) != sizeof s)
            s = ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid() ^ ((uint64_t)uid << 48);
    atomic_store(&t->words[uid], s);
    return s;
}

uint64_t session_get(const struct session_table *t, unsigned uid)
{
    return uid && uid < t->nusers ? atomic_load(&t->words[uid]) : 0;
}

bool session_end(struct session_table *t, unsigned uid)
{
    if (uid == 0 || uid >= t->nusers)
        return false;
    return atomic_exchange(&t->words[uid], 0) != 0;
}

int session_map(int fd, const _Atomic uint64_t **words, uint64_t *nusers, void **map, size_t *len)
{
    struct stat st;
    if (fstat(fd, &st) < 0 || st.st_size < (off_t)sizeof(struct sess_hdr))
        return FMEM_ECORRUPT;
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        return FMEM_EIO;
    const struct sess_hdr *h = m;
    if (memcmp(h->magic, SESS_MAGIC, 8) || h->version != SESS_VERSION ||
        h->hdr_size != sizeof *h ||
        h->nusers > ((uint64_t)st.st_size - sizeof *h) / 8) {
        munmap(m, (size_t)st.st_size);
        return FMEM_ECORRUPT;
    }
    *words = (const _Atomic uint64_t *)((const char *)m + sizeof *h);
    *nusers = h->nusers;
    *map = m;
    *len = (size_t)st.st_size;
    return 0;
}

/* Clear (fence) or read uid's word of the table next to pool_path.
 * Returns the word it held, 0 if there is no such table. */
static uint64_t word_at_path(const char *pool_path, unsigned uid, bool clear)
{
    char path[PATH_MAX];
    if (!pool_path ||
        snprintf(path, sizeof path, "%s%s", pool_path, SESSION_SUFFIX) >= (int)sizeof path)
        return 0;
    int fd = open(path, (clear ? O_RDWR : O_RDONLY) | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return 0; /* no table: no service ever registered on this pool */
    uint64_t was = 0;
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= (off_t)sizeof(struct sess_hdr)) {
        int prot = PROT_READ | (clear ? PROT_WRITE : 0);
        void *m = mmap(NULL, (size_t)st.st_size, prot, MAP_SHARED, fd, 0);
        if (m != MAP_FAILED) {
            struct sess_hdr *h = m;
            if (!memcmp(h->magic, SESS_MAGIC, 8) && h->version == SESS_VERSION &&
                h->hdr_size == sizeof *h && uid < h->nusers &&
                h->nusers <= ((uint64_t)st.st_size - sizeof *h) / 8) {
                _Atomic uint64_t *w = (_Atomic uint64_t *)((char *)m + sizeof *h);
                was = clear ? atomic_exchange(&w[uid], 0) : atomic_load(&w[uid]);
            }
            munmap(m, (size_t)st.st_size);
        }
    }
    close(fd);
    return was;
}

bool session_fence_path(const char *pool_path, unsigned uid)
{
    return word_at_path(pool_path, uid, true) != 0;
}

uint64_t session_read_path(const char *pool_path, unsigned uid)
{
    return word_at_path(pool_path, uid, false);
}

void session_grace(void)
{
    struct timespec ts = {SESSION_GRACE_MS / 1000, (long)(SESSION_GRACE_MS % 1000) * 1000000};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}
