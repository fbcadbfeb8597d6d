/* test_flush_rdma.c - the allocation's log flush over verbs is posted
 * without waiting (redolog.c, tp_post): an allocation costs fewer round
 * trips, and a block is still freed correctly by a thread on another queue
 * pair at once (its free finds the entry flushed, or flushes it from the
 * header), and the full log is complete after close (verifier).
 *   FMEM_TEST_RDMA="HOST PORT TOKEN_FILE" (tests/rdma/vm-check.sh) */
#include <criterion/criterion.h>
#include <fmem.h>
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "transport.h"
#include "verbs/transport_verbs.h"

#include "node_env.h"

static void setup(void)
{
    node_from_env("FMEM_TEST_RDMA");
}

TestSuite(flush_rdma, .init = setup, .timeout = 300);

Test(flush_rdma, allocation_takes_fewer_than_two_round_trips)
{
    fmem_pool *p;
    cr_assert_eq(fmem_open(node, &p), 0);
    enum { N = 64 };
    fmem_handle h[N];
    struct tp_trace before = tp_trace;
    struct verbs_prof vb, va;
    verbs_transport_thread_prof(&vb);
    for (int i = 0; i < N; i++)
        cr_assert_eq(fmem_alloc(p, 4096, &h[i]), 0);
    verbs_transport_thread_prof(&va);
    uint64_t rt = tp_trace.round_trips - before.round_trips,
             logcas = tp_trace.log_cas - before.log_cas, posts = va.posts - vb.posts;
    fprintf(stderr, "flush_rdma: %.2f ibv_post_send calls, %.2f work requests per allocation\n",
            (double)posts / N, (double)(va.wrs - vb.wrs) / N);
    /* the flush is held and goes out in front of the next chain: one
     * ibv_post_send (a system call on soft-RoCE) per chain */
    cr_assert_leq(posts, rt, "%llu posts for %llu chains", (unsigned long long)posts,
                  (unsigned long long)rt);
    fprintf(stderr, "flush_rdma: %d allocations of 4 KiB: %.2f round trips, %.2f log CAS each\n",
            N, (double)rt / N, (double)logcas / N);
    /* the commit chain is one round trip; the flush no longer adds one
     * (waiting for it: 2 per allocation, plus span claims) */
    cr_assert_lt(rt, (uint64_t)N * 3 / 2, "%llu round trips for %d allocations",
                 (unsigned long long)rt, N);
    cr_assert_geq(logcas, (uint64_t)N * 9 / 10, "the allocations' logs were not flushed");
    /* the commit chain of an allocation in the span of the thread's last
     * one is the commit CAS alone, behind the previous allocation's flush:
     * 2 work requests (redolog.c, span_snap: the block's log entry and its
     * key known from the span's snapshot; 3.1-3.8 when every commit read
     * the key, 4.1-4.6 when it read the log entry too) */
    cr_assert_lt(va.wrs - vb.wrs, (uint64_t)N * 26 / 10, "%.2f work requests per allocation",
                 (double)(va.wrs - vb.wrs) / N);
    /* and the keys so handed out are the live ones */
    for (int i = 0; i < N; i++) {
        uint64_t w = 0x5eed0000u + (uint64_t)i, r = 0;
        cr_assert_eq(fmem_write(p, &h[i], 0, &w, 8), 0, "write through key %d", i);
        cr_assert_eq(fmem_read(p, &h[i], 0, &r, 8), 0);
        cr_assert_eq(r, w);
    }
    for (int i = 0; i < N; i++)
        cr_assert_eq(fmem_free(p, &h[i]), 0);
    fmem_close(p);
}

/* Keys from a span's snapshot (redolog.c) while another application
 * allocates and frees in the same spans: every key handed out works and
 * no block is handed out twice (each keeps what its owner wrote). */
Test(flush_rdma, span_key_snapshot_hands_out_live_keys)
{
    fmem_pool *p, *q;
    cr_assert_eq(fmem_open(node, &p), 0);
    cr_assert_eq(fmem_open(node, &q), 0); /* another connection: other queue pairs */
    enum { N = 160 };
    static fmem_handle h[N], g[N];
    unsigned ng = 0;
    for (int i = 0; i < N; i++) {
        cr_assert_eq(fmem_alloc(p, 4096, &h[i]), 0, "alloc %d", i);
        uint64_t w = 0xab000000u + (uint64_t)i, r = 0;
        cr_assert_eq(fmem_write(p, &h[i], 0, &w, 8), 0, "write through key %d", i);
        cr_assert_eq(fmem_read(p, &h[i], 0, &r, 8), 0);
        cr_assert_eq(r, w);
        if (i % 3 == 0) { /* the other application moves the spans' headers */
            fmem_handle x;
            cr_assert_eq(fmem_alloc(q, 4096, &x), 0);
            if (i % 2) { /* kept, checked and freed below */
                uint64_t w2 = 0xcd000000u + (uint64_t)ng;
                cr_assert_eq(fmem_write(q, &x, 0, &w2, 8), 0);
                g[ng++] = x;
            } else
                cr_assert_eq(fmem_free(q, &x), 0);
        }
    }
    /* the other application's blocks kept their data, ours ours */
    for (unsigned j = 0; j < ng; j++) {
        uint64_t r = 0;
        cr_assert_eq(fmem_read(q, &g[j], 0, &r, 8), 0);
        cr_assert_eq(r, 0xcd000000u + (uint64_t)j, "other block %u overwritten", j);
        cr_assert_eq(fmem_free(q, &g[j]), 0);
    }
    for (int i = 0; i < N; i++) {
        uint64_t r = 0;
        cr_assert_eq(fmem_read(p, &h[i], 0, &r, 8), 0, "read through key %d", i);
        cr_assert_eq(r, 0xab000000u + (uint64_t)i, "block %d overwritten", i);
        cr_assert_eq(fmem_free(p, &h[i]), 0, "free %d", i);
    }
    fprintf(stderr, "flush_rdma: %d keys handed out beside another application's %u, all live\n",
            N, ng);
    fmem_close(q);
    fmem_close(p);
}

/* One thread allocates, another frees each block as soon as it is handed
 * over: the free runs on another queue pair than the posted flush. */
enum { HANDOFF = 400, RING = 8 };
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    fmem_handle ring[RING];
    unsigned head, tail;
    fmem_pool *p;
    int bad_free;
} ho = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void *freer(void *arg)
{
    (void)arg;
    for (unsigned i = 0; i < HANDOFF; i++) {
        pthread_mutex_lock(&ho.mu);
        while (ho.tail == ho.head)
            pthread_cond_wait(&ho.cv, &ho.mu);
        fmem_handle h = ho.ring[ho.tail++ % RING];
        pthread_cond_broadcast(&ho.cv);
        pthread_mutex_unlock(&ho.mu);
        int rc = fmem_free(ho.p, &h);
        if (rc && !ho.bad_free)
            ho.bad_free = rc;
    }
    return NULL;
}

Test(flush_rdma, freed_at_once_by_another_thread)
{
    cr_assert_eq(fmem_open(node, &ho.p), 0);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, freer, NULL), 0);
    for (unsigned i = 0; i < HANDOFF; i++) {
        fmem_handle h;
        int rc;
        while ((rc = fmem_alloc(ho.p, i % 2 ? 4096 : 65536, &h)) == FMEM_ENOMEM) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL); /* quarantined blocks come back */
        }
        cr_assert_eq(rc, 0, "alloc: %s", fmem_strerror(rc));
        pthread_mutex_lock(&ho.mu);
        while (ho.head - ho.tail == RING)
            pthread_cond_wait(&ho.cv, &ho.mu);
        ho.ring[ho.head++ % RING] = h;
        pthread_cond_broadcast(&ho.cv);
        pthread_mutex_unlock(&ho.mu);
    }
    pthread_join(th, NULL);
    cr_assert_eq(ho.bad_free, 0, "a free failed: %s", fmem_strerror(ho.bad_free));
    fmem_close(ho.p);
}

/* A thread freeing blocks it allocated itself knows their key and log
 * entries from the allocation: each free is one chain of one waited CAS
 * (alloc.c, own_free), not the checks plus the quarantine chain. */
Test(flush_rdma, own_free_takes_one_round_trip)
{
    fmem_pool *p;
    cr_assert_eq(fmem_open(node, &p), 0);
    /* one size at a time: blocks of different sizes may share a slot of
     * the per-thread record (alloc.c, own_slot) and then take the checks */
    enum { N = 64 };
    fmem_handle h[N];
    uint64_t rt = 0, own = 0, wrs = 0, posts = 0;
    for (int half = 0; half < 2; half++) {
        for (int i = half * N / 2; i < (half + 1) * N / 2; i++)
            cr_assert_eq(fmem_alloc(p, half ? 65536 : 4096, &h[i]), 0);
        struct tp_trace before = tp_trace;
        struct verbs_prof vb, va;
        verbs_transport_thread_prof(&vb);
        for (int i = half * N / 2; i < (half + 1) * N / 2; i++)
            cr_assert_eq(fmem_free(p, &h[i]), 0, "free %d", i);
        verbs_transport_thread_prof(&va);
        rt += tp_trace.round_trips - before.round_trips;
        own += tp_trace.own_frees - before.own_frees;
        wrs += va.wrs - vb.wrs;
        posts += va.posts - vb.posts;
    }
    fprintf(stderr,
            "flush_rdma: %d own frees: %.2f round trips, %.2f work requests, %.2f "
            "ibv_post_send calls each, %llu in one chain\n",
            N, (double)rt / N, (double)wrs / N, (double)posts / N, (unsigned long long)own);
    cr_assert_geq(own, (uint64_t)N * 9 / 10, "only %llu of %d frees took one chain",
                  (unsigned long long)own, N);
    cr_assert_lt(rt, (uint64_t)N * 5 / 4, "%llu round trips for %d frees",
                 (unsigned long long)rt, N);
    /* the free is its key CAS; its mark is held and goes out with seven
     * others and a doorbell in one ibv_post_send (alloc.c, own_hold_mark):
     * about 2.1 work requests in 1.1 ibv_post_send calls (4 in one when
     * the chain was a guarding READ, the key CAS, the mark CAS and the
     * doorbell; 2 in 2 with the mark posted at once, which this fails) */
    cr_assert_lt(wrs, (uint64_t)N * 25 / 10, "%.2f work requests per free", (double)wrs / N);
    cr_assert_lt(posts * 2, (uint64_t)N * 3, "%.2f ibv_post_send calls per free",
                 (double)posts / N);
    /* a second free of each is refused, by the general path */
    for (int i = 0; i < N; i++) {
        int rc = fmem_free(p, &h[i]);
        cr_assert(rc == FMEM_EDOUBLEFREE || rc == FMEM_EACCES, "double free %d: %s", i,
                  fmem_strerror(rc));
    }
    fmem_close(p);
}

/* A thread freeing blocks another thread allocated uses the node's record
 * of them (alloc.c, own_records) once the allocating thread's flushes are
 * known to have executed: one waited CAS per free, as for its own blocks
 * (before: the checks, 3 READs, then the key CAS and the mark, at least 4
 * work requests in two round trips). */
enum { XT = 32 };
static struct {
    fmem_pool *p;
    fmem_handle h[XT];
    uint64_t rt, own, wrs, posts;
    int rc;
} xt;

static void *free_all_here(void *arg)
{
    (void)arg;
    struct tp_trace before = tp_trace;
    struct verbs_prof vb, va;
    verbs_transport_thread_prof(&vb);
    for (int i = 0; i < XT && !xt.rc; i++)
        xt.rc = fmem_free(xt.p, &xt.h[i]);
    verbs_transport_thread_prof(&va);
    xt.rt = tp_trace.round_trips - before.round_trips;
    xt.own = tp_trace.own_frees - before.own_frees;
    xt.wrs = va.wrs - vb.wrs;
    xt.posts = va.posts - vb.posts;
    return NULL;
}

Test(flush_rdma, cross_thread_free_takes_one_round_trip)
{
    cr_assert_eq(fmem_open(node, &xt.p), 0);
    for (int i = 0; i < XT; i++)
        cr_assert_eq(fmem_alloc(xt.p, 4096, &xt.h[i]), 0);
    /* the last allocation's flush is held until this thread's next chain */
    fmem_handle extra;
    cr_assert_eq(fmem_alloc(xt.p, 65536, &extra), 0);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, free_all_here, NULL), 0);
    pthread_join(th, NULL);
    cr_assert_eq(xt.rc, 0, "free by another thread: %s", fmem_strerror(xt.rc));
    fprintf(stderr,
            "flush_rdma: %d frees by another thread: %.2f round trips, %.2f work requests, "
            "%.2f ibv_post_send calls each, %llu in one chain\n",
            XT, (double)xt.rt / XT, (double)xt.wrs / XT, (double)xt.posts / XT,
            (unsigned long long)xt.own);
    cr_assert_geq(xt.own, (uint64_t)XT * 9 / 10, "only %llu of %d frees took one chain",
                  (unsigned long long)xt.own, XT);
    cr_assert_lt(xt.rt, (uint64_t)XT * 5 / 4, "%llu round trips for %d frees",
                 (unsigned long long)xt.rt, XT);
    cr_assert_lt(xt.wrs, (uint64_t)XT * 25 / 10, "%.2f work requests per free",
                 (double)xt.wrs / XT);
    cr_assert_lt(xt.posts * 2, (uint64_t)XT * 3, "%.2f ibv_post_send calls per free",
                 (double)xt.posts / XT);
    /* this thread's second free of each is refused (the record is used once) */
    for (int i = 0; i < XT; i++) {
        int rc = fmem_free(xt.p, &xt.h[i]);
        cr_assert(rc == FMEM_EDOUBLEFREE || rc == FMEM_EACCES, "double free %d: %s", i,
                  fmem_strerror(rc));
    }
    cr_assert_eq(fmem_free(xt.p, &extra), 0);
    fmem_close(xt.p);
}

/* Blocks another thread freed (by their record, once the allocating
 * thread's flushes have executed, else by the checks): the allocating
 * thread's second free of each must not free anything, and its later calls
 * work. */
static fmem_pool *stale_p;
static void *free_other(void *arg)
{
    return (void *)(intptr_t)fmem_free(stale_p, arg);
}

Test(flush_rdma, stale_own_free_is_refused)
{
    cr_assert_eq(fmem_open(node, &stale_p), 0);
    enum { N = 16 };
    fmem_handle h[N];
    for (int i = 0; i < N; i++)
        cr_assert_eq(fmem_alloc(stale_p, 4096, &h[i]), 0);
    for (int i = 0; i < N; i++) { /* freed by another thread (queue pair) */
        pthread_t th;
        void *rc;
        cr_assert_eq(pthread_create(&th, NULL, free_other, &h[i]), 0);
        pthread_join(th, &rc);
        cr_assert_eq((intptr_t)rc, 0, "free by another thread: %s", fmem_strerror((int)(intptr_t)rc));
    }
    /* half at once, half once the memory node had time to destroy the old
     * windows and hand the blocks back to their layers */
    for (int i = 0; i < N; i++) {
        if (i == N / 2) {
            struct timespec ts = {0, 300000000};
            nanosleep(&ts, NULL);
        }
        int rc = fmem_free(stale_p, &h[i]);
        cr_assert(rc == FMEM_EDOUBLEFREE || rc == FMEM_EACCES, "stale free %d: %s", i,
                  fmem_strerror(rc));
    }
    for (int round = 0; round < 2; round++) {
        fmem_handle g[N];
        for (int i = 0; i < N; i++)
            cr_assert_eq(fmem_alloc(stale_p, 4096, &g[i]), 0);
        for (int i = 0; i < N; i++) {
            char b[8] = "fmemtest", r[8];
            cr_assert_eq(fmem_write(stale_p, &g[i], 0, b, 8), 0);
            cr_assert_eq(fmem_read(stale_p, &g[i], 0, r, 8), 0);
            cr_assert_eq(memcmp(b, r, 8), 0);
        }
        for (int i = 0; i < N; i++)
            cr_assert_eq(fmem_free(stale_p, &g[i]), 0);
    }
    fmem_close(stale_p);
}
