/* fork.h - fork() with libfmem's objects alive.
 *
 * After fork() both processes go on using every pool, region and heap as
 * if the memory were plain memory: the child sees a snapshot taken at the
 * fork, later writes stay on their own side. One set of pthread_atfork
 * handlers, registered when the library is loaded, makes that so:
 *
 *  - The gate. Every public call that touches an object runs between
 *    fork_gate_enter() and fork_gate_leave(). Before a fork the gate is
 *    closed and the forking thread waits until no program thread is inside;
 *    threads that arrive meanwhile wait at the gate until the fork is over.
 *    So no allocator, pool or region call is half done in the snapshot.
 *    Entering costs two thread-local stores and a load: the fence that
 *    makes this safe is the forker's (membarrier(2); a full fence on each
 *    entry where the kernel lacks it).
 *  - Watches. Objects whose state is not plain memory (threads, file
 *    descriptors, identities in a shared pool) register handlers that run
 *    by level: prepare from heaps down to pools, then parent or child from
 *    pools up to heaps. Library threads (a region's fault handler and
 *    writer) are exempt from the gate: their region's watch parks them.
 *  - Creating and destroying objects holds the watch lock, so a fork never
 *    sees one half made. Calls inside the gate never take that lock.
 *
 * docs/far-memory.md ("fork") describes what each object does. */
#ifndef FMEM_FORK_H
#define FMEM_FORK_H

#include <stdatomic.h>
#include <stdbool.h>

enum fork_level { FORK_POOL, FORK_REGION, FORK_HEAP, FORK_NLEVELS };

struct fork_watch {
    enum fork_level level;
    void (*prepare)(struct fork_watch *w); /* the gate is closed and drained */
    void (*parent)(struct fork_watch *w);
    void (*child)(struct fork_watch *w);   /* the only thread of the child */
    struct fork_watch *prev, *next;
};

/* From a prepare handler: the parent waits, before its own parent
 * handlers run, until the child has run all of its child handlers (or
 * died). For children that copy what the parent must not change first. */
void fork_sync_child(void);

/* The watch lock: held while an object is created or destroyed. */
/* libfmem's atfork handlers; idempotent (see fork.c for the order) */
void fork_register(void);
void fork_objects_lock(void);
void fork_objects_unlock(void);
/* Add or remove a watch (watch lock held). */
void fork_watch_add(struct fork_watch *w);
void fork_watch_remove(struct fork_watch *w);

/* ---- the gate ------------------------------------------------------------ */
struct fork_gate_rec {
    _Atomic unsigned depth; /* nesting of gated calls; the forker reads it */
    bool exempt;            /* a library thread, parked by its watch */
    bool in_use;
    struct fork_gate_rec *next;
};
extern __thread struct fork_gate_rec *fork_gate_self __attribute__((tls_model("initial-exec")));
extern _Atomic int fork_gate_closed;
extern bool fork_gate_fence; /* no membarrier: entering fences itself */
void fork_gate_slow(void);               /* enter: first call, or no membarrier */
void fork_gate_wait(struct fork_gate_rec *g); /* entered while the gate closed */

static inline void fork_gate_enter(void)
{
    struct fork_gate_rec *g = fork_gate_self;
    if (__builtin_expect(!g || fork_gate_fence, 0)) {
        fork_gate_slow();
        return;
    }
    unsigned d = atomic_load_explicit(&g->depth, memory_order_relaxed);
    atomic_store_explicit(&g->depth, d + 1, memory_order_relaxed);
    atomic_signal_fence(memory_order_seq_cst); /* the store before the load */
    if (__builtin_expect(d == 0 && atomic_load_explicit(&fork_gate_closed, memory_order_relaxed), 0))
        fork_gate_wait(g);
}

static inline void fork_gate_leave(void)
{
    struct fork_gate_rec *g = fork_gate_self;
    unsigned d = atomic_load_explicit(&g->depth, memory_order_relaxed);
    atomic_store_explicit(&g->depth, d - 1, memory_order_release);
}

/* The calling thread is a library thread (see above). */
void fork_gate_exempt(void);

#endif
