/* users.c - what a pool knows about a user id: who holds its slot, whether
 * that process is alive, its heartbeat and session, and how much the log
 * says it owns (fmem_user_info, for `fmem recover` and tools). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "fmem_admin.h"
#include "pool_internal.h"
#include "session_table.h"
#include "../transport/transport.h"

#define LOG_BATCH 65536

/* The log's allocations by uid: the latest entry of each block. */
static int count_owned(struct node *n, unsigned uid, uint64_t *blocks, uint64_t *bytes)
{
    uint64_t *buf = malloc(8 * LOG_BATCH);
    if (!buf)
        return FMEM_ENOMEM;
    for (uint64_t base = 0; base < n->g.nchunks; base += LOG_BATCH) {
        uint64_t cnt = n->g.nchunks - base < LOG_BATCH ? n->g.nchunks - base : LOG_BATCH;
        if (tp_read(n->tp, log_off(n, base), buf, 8 * cnt) < 0) {
            free(buf);
            return FMEM_EIO;
        }
        for (uint64_t i = 0; i < cnt; i++) {
            uint64_t e = buf[i];
            if (!log_valid(e) || !log_alloc(e) || log_uid(e) != uid)
                continue;
            uint64_t chunks = log_layer(e) == LAYER_SECTION ? CHUNKS_PER_SECTION
                                                             : UINT64_C(1) << (log_log2(e) & 31);
            (*blocks)++;
            *bytes += chunks << CHUNK_SHIFT;
        }
    }
    free(buf);
    return 0;
}

bool node_fork_readers(struct node *n, unsigned uid, uint32_t gen)
{
    int fd = shm_transport_data_fd(n->tp);
    if (fd < 0 || gen == 0)
        return false;
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET,
                       .l_start = NODE_FORK_LOCK_OFF(uid, gen),
                       .l_len = NODE_FORK_LOCK_OFF(uid + 1, 0) - NODE_FORK_LOCK_OFF(uid, gen)};
    /* a lock of another description conflicts with this write probe */
    return fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
}

bool node_user_gone(struct node *n, unsigned uid, uint32_t pid)
{
    return pid && !(pid & NODE_PID_REMOTE) && kill((pid_t)(pid & ~NODE_PID_REMOTE), 0) < 0 &&
           errno == ESRCH && !node_fork_readers(n, uid, 1);
}

int fmem_user_info(fmem_pool *p, unsigned node, unsigned uid, fmem_user_info_t *out)
{
    if (!p || !out || uid == 0 || uid > MAX_UID)
        return FMEM_EINVAL;
    if (p->nnodes == 0)
        return FMEM_ENOTSUP;
    if (node >= p->nnodes)
        return FMEM_EINVAL;
    struct node *n = p->nodes[node];
    memset(out, 0, sizeof *out);
    out->in_table = uid < n->g.nusers;
    uint32_t pid = node_uid_pid(n, uid);
    out->remote = (pid & NODE_PID_REMOTE) != 0;
    out->pid = pid & ~NODE_PID_REMOTE;
    if (out->remote)
        out->alive = -1;
    else if (pid)
        out->alive = !node_user_gone(n, uid, pid);
    if (n->tp->wkeys_off && uid < WK_HB_SLOTS) {
        uint64_t pair[2];
        if (tp_read(n->tp, n->tp->wkeys_off + wk_hb_pair(n->g.nchunks, uid), pair, sizeof pair) < 0)
            return FMEM_EIO;
        /* words of an earlier holder of the slot are not this one's */
        if (pid && pair[0] >> 32 == pid) {
            out->heartbeat = pair[0];
            out->session = pair[1];
        }
    }
    if (n->path)
        out->session = session_read_path(n->path, uid);
    return count_owned(n, uid, &out->blocks, &out->bytes);
}
