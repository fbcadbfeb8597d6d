/* fork.c - fork() with blocks in a pool.
 *
 * A private pool (mem:, the default) is private anonymous memory: the
 * kernel gives the child a copy-on-write snapshot of the pool, its blocks
 * and the block table, so the child goes on using it as its own and no
 * page is copied until one side writes it; no handler work beyond the
 * lock. A named pool (shm:, file:) is a MAP_SHARED mapping, so without
 * help a child would share its large blocks with the parent (each seeing
 * the other's writes) and allocate from the pool under the parent's user
 * id. Instead:
 *   prepare  take the block lock exclusively (no block is being allocated
 *            or freed while the child's view is made), lock a new fork
 *            generation and remap the live blocks MAP_PRIVATE (snap.c)
 *   child    mark them private, forget the parent's pool, open a pool of
 *            its own (a user id of its own) on its next large request
 *   parent   close its copy of the generation's lock
 * Nothing is copied: both sides see the blocks as of the fork through the
 * kernel's copy-on-write. Without a lock the parent copies its blocks into
 * private memory before the fork; only a block that could be neither
 * remapped nor copied there is copied by the child while the parent waits
 * (the wait makes the copy a snapshot). vfork() and posix_spawn() skip it
 * all. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include "../../libfmem/fork.h"
#include "preload.h"

static int done_pipe[2] = {-1, -1};

static int current_shared(void)
{
    struct fp_arena *a = atomic_load(&fp_current);
    return a && a->shared;
}

static void prepare(void)
{
    struct fp_arena *a = atomic_load(&fp_current);
    /* the fault thread is started outside the block lock (it may allocate) */
    int lazy = a && a->shared && atomic_load(&a->live) && fp_lazy_usable();
    fp_lock_all();
    fp_lazy_lock(); /* no remap by the fault thread until after the fork */
    if (current_shared() && fp_snap_prepare(lazy) && pipe2(done_pipe, O_CLOEXEC))
        done_pipe[0] = done_pipe[1] = -1;
}

static void parent(void)
{
    fp_snap_parent();
    fp_lazy_unlock();
    if (done_pipe[0] >= 0) {
        close(done_pipe[1]);
        char c;
        /* one byte when the child is done; end of file if it died or fork
         * failed */
        while (read(done_pipe[0], &c, 1) < 0 && errno == EINTR)
            ;
        close(done_pipe[0]);
        done_pipe[0] = done_pipe[1] = -1;
    }
    fp_unlock_all();
}

static void child(void)
{
    fp_lazy_child();
    fp_childmap_child();
    fp_early_child();
    fp_blocks_orphan_current();
    fp_childmap_arm();
    if (done_pipe[0] >= 0) {
        close(done_pipe[0]);
        ssize_t w = write(done_pipe[1], "", 1);
        (void)w;
        close(done_pipe[1]);
        done_pipe[0] = done_pipe[1] = -1;
    }
    fp_lock_reinit();
}

/* The handlers must be in place before any thread can take the block lock
 * or the open lock: a fork during the first pool open would otherwise give
 * the child both locks held by a thread it does not have, and its first
 * large request would wait for ever. The library's constructor registers
 * them before the program has threads; fp_block_alloc() calls this again
 * in case another library's constructor makes a large request first. */
void fp_fork_register(void)
{
    static _Atomic int registered;
    if (!atomic_exchange(&registered, 1)) {
        fork_register(); /* libfmem's first: its gate closes after our lock */
        pthread_atfork(prepare, parent, child);
    }
}
