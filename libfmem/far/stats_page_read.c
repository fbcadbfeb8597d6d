/* stats_page_read.c - finding and reading live-statistics pages
 * (stats_page.h). A page comes from another process, so everything in it
 * is checked before use: its owner, size, magic, version, record sizes and
 * counts, and every string is cut at its field's end. */
#include "stats_page.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* the snapshot is the file's image */
_Static_assert(offsetof(struct sp_snapshot, regions) == sizeof(struct sp_header), "layout");
_Static_assert(sizeof(struct sp_snapshot) == sizeof(struct sp_header) +
                                               SP_MAX_REGIONS * sizeof(struct sp_region) +
                                               SP_MAX_NODES * sizeof(struct sp_node),
               "layout");

const char *sp_dir(void)
{
    const char *d = getenv("FMEM_STATS_DIR");
    return d && *d ? d : "/dev/shm";
}

static bool parse_u64(const char *s, const char *end, uint64_t *out)
{
    if (s == end || end - s > 19)
        return false;
    uint64_t v = 0;
    for (; s < end; s++) {
        if (*s < '0' || *s > '9')
            return false;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *out = v;
    return true;
}

bool sp_parse_name(const char *name, uint64_t *uid, uint64_t *pid)
{
    size_t pl = strlen(SP_PREFIX);
    if (strncmp(name, SP_PREFIX, pl))
        return false;
    const char *u = name + pl, *dot = strchr(u, '.');
    if (!dot)
        return false;
    return parse_u64(u, dot, uid) && parse_u64(dot + 1, dot + 1 + strlen(dot + 1), pid) &&
           *pid > 0;
}

uint64_t sp_proc_start(uint64_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%" PRIu64 "/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    /* the command name may hold spaces and ')': fields start after the last ')' */
    char *p = strrchr(buf, ')');
    if (!p)
        return 0;
    p++;
    for (int field = 3; field < 22 && p; field++) /* p: the space before field 3 */
        p = strchr(p + 1, ' ');
    if (!p)
        return 0;
    uint64_t v = strtoull(p + 1, NULL, 10);
    return v ? v : 1; /* a process started at tick 0 still runs */
}

static void cut(char *s, size_t n)
{
    s[n - 1] = 0;
}

enum sp_state sp_read(const char *dir, const char *name, struct sp_snapshot *snap,
                      const char **why, int *err)
{
    *why = "";
    *err = 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
        *err = errno;
        if (errno == ELOOP) {
            *why = "a symbolic link";
            return SP_BAD;
        }
        return SP_UNREADABLE;
    }
    struct stat st;
    enum sp_state state = SP_BAD;
    if (fstat(fd, &st)) {
        *err = errno;
        state = SP_UNREADABLE;
        goto out;
    }
    if (st.st_uid != geteuid()) {
        state = SP_FOREIGN;
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        *why = "not a regular file";
        goto out;
    }
    if ((size_t)st.st_size < sizeof snap->h) {
        *why = "truncated (shorter than its header)";
        goto out;
    }
    /* copy until the writer's sequence counter is even and unchanged */
    for (int tries = 0;; tries++) {
        uint64_t seq0;
        if (pread(fd, &snap->h, sizeof snap->h, 0) != (ssize_t)sizeof snap->h) {
            *why = "truncated (shorter than its header)";
            goto out;
        }
        const struct sp_header *h = &snap->h;
        if (h->magic != SP_MAGIC) {
            *why = "not a stats page (wrong magic)";
            goto out;
        }
        if (h->version != SP_VERSION || h->header_bytes != sizeof(struct sp_header) ||
            h->region_bytes != sizeof(struct sp_region) ||
            h->node_bytes != sizeof(struct sp_node) || h->path_bytes != sizeof(struct sp_path) ||
            h->max_regions != SP_MAX_REGIONS || h->max_nodes != SP_MAX_NODES ||
            h->max_paths != SP_MAX_PATHS) {
            *why = "another version of the stats page";
            goto out;
        }
        if ((size_t)st.st_size < sp_file_bytes()) {
            *why = "truncated (shorter than its records)";
            goto out;
        }
        seq0 = h->seq;
        size_t rest = sp_file_bytes() - sizeof snap->h;
        char *records = (char *)snap + offsetof(struct sp_snapshot, regions);
        if (pread(fd, records, rest, sizeof snap->h) != (ssize_t)rest) {
            *why = "truncated while being read";
            goto out;
        }
        uint64_t seq1;
        if (pread(fd, &seq1, sizeof seq1, offsetof(struct sp_header, seq)) != sizeof seq1) {
            *why = "truncated while being read";
            goto out;
        }
        if (!(seq0 & 1) && seq0 == seq1)
            break;
        if (tries >= 100) {
            *why = "never steady (its writer is stuck in an update)";
            goto out;
        }
        usleep(1000);
    }
    struct sp_header *h = &snap->h;
    if (h->nregions > SP_MAX_REGIONS || h->nnodes > SP_MAX_NODES) {
        *why = "record counts out of range";
        goto out;
    }
    uint64_t name_uid, name_pid;
    if (!sp_parse_name(name, &name_uid, &name_pid) || name_pid != h->pid ||
        name_uid != h->uid) {
        *why = "its header names another process than its file name";
        goto out;
    }
    if (h->uid != (uint64_t)st.st_uid) {
        *why = "its header names another user than the file's owner";
        goto out;
    }
    cut(h->program, sizeof h->program);
    for (unsigned i = 0; i < h->nregions; i++) {
        struct sp_region *r = &snap->regions[i];
        if (r->npaths > SP_MAX_PATHS) {
            *why = "path count out of range";
            goto out;
        }
        for (unsigned k = 0; k < r->npaths; k++)
            cut(r->path[k].kind, sizeof r->path[k].kind);
    }
    for (unsigned i = 0; i < h->nnodes; i++) {
        struct sp_node *n = &snap->nodes[i];
        cut(n->kind, sizeof n->kind);
        cut(n->detail, sizeof n->detail);
        cut(n->last_error, sizeof n->last_error);
    }
    uint64_t start = sp_proc_start(h->pid);
    state = start && start == h->start_ticks ? SP_LIVE : SP_STALE;
out:
    close(fd);
    return state;
}
