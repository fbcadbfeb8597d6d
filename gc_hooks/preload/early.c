/* early.c - a named pool's small blocks write-protected before the fork.
 *
 * The lazy fork (lazy.c) write-protects each small block's shared mapping
 * so that the parent's first write after the fork remaps it. Protecting
 * changes every page table entry of the block, about a plain fork's work
 * per page plus a few microseconds per block, so it is done here ahead of
 * the fork for blocks that have been live for a while (by the allocating
 * thread, fp_early_step, and by the fault thread between faults,
 * fp_early_pass); the fork then protects only the blocks written or
 * allocated since (snap.c). A write to a block protected early stops like
 * one after a fork, but no fork child reads its pool pages yet: the fault
 * thread only lifts the protection (fp_snap_fault) and the block is left
 * to the next fork. */
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "preload.h"

/* Record i, if it holds an object an early protection may take: live,
 * still shared, never looked at by a fork, small; else NULL. */
static struct fp_obj *early_candidate(struct fp_arena *a, size_t i)
{
    uint64_t e = atomic_load_explicit(&a->table[i], memory_order_relaxed);
    struct fp_obj *o = &a->objs[i];
    if (!(e & FP_E_LIVE) || (e & (FP_E_CACHED | FP_E_PRIVATE | FP_E_COPY)) || o->since ||
        !fp_snap_small(o))
        return NULL;
    return o;
}

/* Write-protect o early (block lock held exclusively, and fp_lazy_lock()). */
static void early_protect(struct fp_arena *a, struct fp_obj *o)
{
    if (fp_lazy_protect(fp_obj_ptr(a, o), fp_obj_len(o)) != 0) {
        o->lazy = FP_LAZY_HOT; /* not again */
        return;
    }
    o->lazy = FP_LAZY_EARLY;
    atomic_fetch_add_explicit(&fp_stats.protected_early, fp_obj_len(o), memory_order_relaxed);
}

/* One record for an early pass: 1 if it is to be protected at a later
 * pass. */
static int early_one(struct fp_arena *a, size_t i)
{
    struct fp_obj *o = early_candidate(a, i);
    if (!o)
        return 0;
    if (o->lazy == FP_LAZY_NONE) {
        o->lazy = FP_LAZY_SEEN;
        return 1;
    }
    if (o->lazy == FP_LAZY_SEEN)
        early_protect(a, o);
    return 0;
}

/* Objects handed out recently, oldest first: the allocating thread
 * protects those older than EARLY_AGE_MS itself (fp_early_step), so
 * that the protection keeps up with a program that allocates without a
 * pause (and with a fault thread that gets no processor). Overflow drops
 * the oldest: the fault thread's passes or the fork take them. */
#define EARLY_RING 1024
#define EARLY_AGE_MS 20
#define EARLY_STEP_MAX 4
static struct {
    uint32_t rec, ms;
} ring[EARLY_RING];
static uint32_t ring_head, ring_tail; /* under ring_mu */
static pthread_mutex_t ring_mu = PTHREAD_MUTEX_INITIALIZER;

static uint32_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint32_t)((uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000);
}

void fp_early_handed_out(struct fp_arena *a, struct fp_obj *o)
{
    if (!fp_snap_small(o))
        return;
    pthread_mutex_lock(&ring_mu);
    if (ring_tail - ring_head == EARLY_RING)
        ring_head++;
    ring[ring_tail % EARLY_RING].rec = (uint32_t)(o - a->objs);
    ring[ring_tail % EARLY_RING].ms = now_ms();
    ring_tail++;
    pthread_mutex_unlock(&ring_mu);
}

void fp_early_step(void)
{
    struct fp_arena *a = atomic_load(&fp_current);
    if (!a || !a->shared || !a->pool)
        return;
    uint32_t now = now_ms();
    pthread_mutex_lock(&ring_mu);
    int due = ring_tail != ring_head && now - ring[ring_head % EARLY_RING].ms >= EARLY_AGE_MS;
    pthread_mutex_unlock(&ring_mu);
    if (!due || fp_trylock_all() != 0)
        return;
    if (atomic_load(&fp_current) == a) {
        fp_lazy_lock();
        pthread_mutex_lock(&ring_mu);
        for (int n = 0; n < EARLY_STEP_MAX && ring_tail != ring_head &&
                        now - ring[ring_head % EARLY_RING].ms >= EARLY_AGE_MS; n++) {
            struct fp_obj *o = early_candidate(a, ring[ring_head++ % EARLY_RING].rec);
            if (o && (o->lazy == FP_LAZY_NONE || o->lazy == FP_LAZY_SEEN))
                early_protect(a, o);
        }
        pthread_mutex_unlock(&ring_mu);
        fp_lazy_unlock();
    }
    fp_unlock_all();
}

void fp_early_child(void)
{
    static const pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    memcpy(&ring_mu, &fresh, sizeof ring_mu); /* another thread's, perhaps */
    ring_head = ring_tail = 0; /* the parent's objects */
}

/* An object alive for a whole pass interval is likely to stay unwritten;
 * protecting it here, off the fork's path, is what makes the fork itself
 * cheap (the protection costs one page table entry change per page). The
 * block lock is taken for one group of records at a time, and only if it
 * is free: the thread that holds it may be waiting for this thread to
 * handle a write fault. Only groups marked fresh hold objects no fork has
 * looked at. */
int fp_early_pass(void)
{
    struct fp_arena *a = atomic_load(&fp_current);
    if (!a || !a->shared || !a->pool || atomic_load(&a->live) == 0)
        return 0;
    size_t nchunks = atomic_load(&a->cap) >> FP_CHUNK_SHIFT;
    int more = 0;
    for (size_t w = 0; w < a->fresh_words; w++) {
        for (uint64_t left = atomic_load_explicit(&a->fresh[w], memory_order_relaxed); left;
             left &= left - 1) {
            size_t first = (w * 64 + (size_t)__builtin_ctzll(left)) * 64;
            if (fp_trylock_all() != 0)
                return 1;
            if (atomic_load(&fp_current) != a) { /* closed at exit */
                fp_unlock_all();
                return 0;
            }
            fp_lazy_lock();
            for (size_t i = first; i < first + 64 && i < nchunks; i++)
                more |= early_one(a, i);
            fp_lazy_unlock();
            fp_unlock_all();
        }
    }
    return more;
}

/* A program that writes many long-lived blocks one after the other (a
 * pass over its data) would stop at each, and each stop costs a wake-up of
 * the fault thread, which on a busy machine waits for a processor: once
 * STREAK_MIN writes stopped in objects protected early within STREAK_MS,
 * the next UNPROTECT_BATCH such objects (in address order) after the one
 * written lose their early protection as well, once the writer goes on
 * (fp_early_after_fault), so that such a pass stops about once per batch
 * (a write now and then to one block costs the others nothing). Lifting a
 * protection never exposes a pool page a fork child reads (those are
 * protected since a fork, FP_LAZY_FORK), and the next fork protects the
 * objects again. fp_lazy_lock() held: an object protected early is
 * unmapped under it (fp_snap_unmap, fp_obj_release). */
#define UNPROTECT_BATCH 256
#define UNPROTECT_SCAN (UNPROTECT_BATCH * 64)
#define STREAK_MIN 8
#define STREAK_MS 100
static size_t lift_from; /* record + 1; 0: none. Under fp_lazy_lock() */
static uint32_t streak_start, streak_n; /* likewise */

void fp_early_written(size_t k)
{
    uint32_t now = now_ms();
    if (now - streak_start > STREAK_MS) {
        streak_start = now;
        streak_n = 0;
    }
    if (++streak_n >= STREAK_MIN)
        lift_from = k + 1; /* the next ones, once the writer goes on */
}

void fp_early_after_fault(void)
{
    fp_lazy_lock();
    size_t k = lift_from;
    lift_from = 0;
    struct fp_arena *a = atomic_load(&fp_current);
    if (!k || !a || !a->shared || !a->pool) {
        fp_lazy_unlock();
        return;
    }
    size_t nchunks = atomic_load(&a->cap) >> FP_CHUNK_SHIFT;
    int done = 0;
    for (size_t i = k; i < nchunks && i < k + UNPROTECT_SCAN && done < UNPROTECT_BATCH; i++) {
        uint64_t e = atomic_load_explicit(&a->table[i], memory_order_acquire);
        struct fp_obj *o = &a->objs[i];
        if (!(e & FP_E_LIVE) || (e & FP_E_CACHED) || o->lazy != FP_LAZY_EARLY)
            continue;
        o->lazy = FP_LAZY_HOT;
        if (fp_lazy_unprotect(fp_obj_ptr(a, o), fp_obj_len(o)) == 0)
            done++;
    }
    fp_lazy_unlock();
}
