/* runner.c - one configuration: open the allocator, start the worker
 * threads (small stacks, so that hundreds are cheap), run the workload's
 * setup with the injected delay off, measure for --seconds, aggregate. */
#include <errno.h>
#include <link.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

/* Stack a worker may use; its thread's static TLS comes on top. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define WORKER_STACK (1024 * 1024) /* sanitizers need more stack */
#else
#define WORKER_STACK (64 * 1024)
#endif
#define IDLE_MIN_NS 50000u    /* first back-off of an idle worker */
#define IDLE_MAX_NS 20000000u /* longest */

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u), .tv_nsec = (long)(ns % 1000000000u)};
    while (nanosleep(&ts, &ts))
        ;
}

static int add_tls(struct dl_phdr_info *info, size_t size, void *sum)
{
    (void)size;
    for (unsigned i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_TLS)
            *(size_t *)sum += info->dlpi_phdr[i].p_memsz + info->dlpi_phdr[i].p_align;
    return 0;
}

/* glibc carves a thread's static TLS out of its stack: add the TLS of the
 * loaded modules so that WORKER_STACK stays usable whatever they hold. */
static size_t worker_stack_size(void)
{
    size_t tls = 0, page = (size_t)sysconf(_SC_PAGESIZE);
    dl_iterate_phdr(add_tls, &tls);
    size_t size = (WORKER_STACK + tls + page - 1) / page * page;
    return size < (size_t)PTHREAD_STACK_MIN ? (size_t)PTHREAD_STACK_MIN : size;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct run_shared *sh = w->sh;
    rng_seed(&w->rng, sh->o->seed ^ ((uint64_t)(w->index + 1) << 32));
    sh->wl->setup(w);
    pthread_barrier_wait(&sh->barrier); /* setup done */
    pthread_barrier_wait(&sh->barrier); /* go */
    w->measuring = true;
    /* A thread with nothing to do (paper: the pool is at its fill level and
     * it holds nothing to free) backs off, sleeping longer each time: at
     * hundreds of threads, spinning or frequent wake-ups of idle threads
     * would take the cores from the ones doing work. */
    uint64_t idle_ns = IDLE_MIN_NS;
    while (!atomic_load_explicit(&sh->stop, memory_order_relaxed)) {
        if (sh->wl->step(w)) {
            idle_ns = IDLE_MIN_NS;
            continue;
        }
        sleep_ns(idle_ns);
        idle_ns = idle_ns * 2 > IDLE_MAX_NS ? IDLE_MAX_NS : idle_ns * 2;
    }
    w->r.t_end = bench_now_ns();
    atomic_fetch_add(&sh->done, 1);
    return NULL;
}

static void aggregate(const struct worker *ws, unsigned n, uint64_t t0, struct hist *lat,
                      struct run_result *out)
{
    uint64_t cas = 0, log_cas = 0, retries = 0, free_cas = 0, free_ns = 0, free_calls = 0,
             rtts = 0, free_rtts = 0, t_end = t0;
    for (unsigned i = 0; i < n; i++) {
        const struct thread_result *r = &ws[i].r;
        hist_merge(lat, r->lat);
        out->allocs += r->allocs;
        out->frees += r->frees;
        out->failed += r->failed;
        out->aborted += r->aborted;
        out->errors += r->errors;
        cas += r->cas;
        log_cas += r->log_cas;
        retries += r->retries;
        free_cas += r->free_cas;
        rtts += r->rtts;
        for (unsigned k = 0; k < CAS_DIST; k++)
            out->cas_dist[k] += r->cas_dist[k];
        free_rtts += r->free_rtts;
        free_ns += r->free_ns;
        free_calls += r->free_calls;
        if (r->retries_max > out->retries_max)
            out->retries_max = r->retries_max;
        if (r->retries_max_all > out->retries_max_all)
            out->retries_max_all = r->retries_max_all;
        if (r->t_end > t_end)
            t_end = r->t_end;
        if (r->errors && r->first_error)
            fprintf(stderr, "fmem-bench: %s/%s/%u: thread %u: %llu errors, first: %s: %s\n",
                    out->alloc, out->workload, n, i, (unsigned long long)r->errors,
                    r->first_error_what, fmem_strerror(r->first_error));
    }
    double calls = (double)lat->count;
    out->elapsed_s = (double)(t_end - t0) / 1e9;
    out->ops_per_s = out->elapsed_s > 0 ? (double)out->allocs / out->elapsed_s : 0;
    out->lat_avg_us = calls ? (double)lat->sum / calls / 1e3 : 0;
    out->lat_p50_us = hist_quantile(lat, 0.50) / 1e3;
    out->lat_p99_us = hist_quantile(lat, 0.99) / 1e3;
    out->lat_max_us = (double)lat->max / 1e3;
    out->free_calls = free_calls;
    out->free_avg_us = free_calls ? (double)free_ns / (double)free_calls / 1e3 : 0;
    out->cas_per_op = calls ? (double)(cas - log_cas) / calls : 0;
    out->log_cas_per_op = calls ? (double)log_cas / calls : 0;
    out->retries_per_op = calls ? (double)retries / calls : 0;
    out->free_cas_per_op = free_calls ? (double)free_cas / (double)free_calls : 0;
    out->rtt_per_op = calls ? (double)rtts / calls : 0;
    out->free_rtt_per_op = free_calls ? (double)free_rtts / (double)free_calls : 0;
}

int run_config(const struct bench_opts *o, const struct allocator *a, const struct workload *wl,
               unsigned threads, struct run_result *out)
{
    *out = (struct run_result){.alloc = a->name, .workload = wl->name, .threads = threads,
                               .rtt_ns = o->rtt_ns};
    struct run_shared *sh = calloc(1, sizeof *sh);
    struct worker *ws = calloc(threads, sizeof *ws);
    pthread_t *tids = calloc(threads, sizeof *tids);
    struct hist *lat = calloc(1, sizeof *lat);
    if (!sh || !ws || !tids || !lat) {
        fprintf(stderr, "fmem-bench: out of memory\n");
        exit(1);
    }
    sh->o = o;
    sh->a = a;
    sh->wl = wl;
    sh->threads = threads;
    sh->pool_target = (uint64_t)(o->occupancy * (double)o->pool_bytes);
    struct alloc_params ap = {.pool_bytes = o->pool_bytes, .rtt_ns = o->rtt_ns,
                              .rtt_mode = o->rtt_mode, .rpc_service_ns = o->rpc_service_ns,
                              .threads = threads, .abort = &sh->abort};
    int rc = a->open(&ap, &sh->self);
    if (rc) {
        fprintf(stderr, "fmem-bench: %s: cannot open: %s\n", a->name, fmem_strerror(rc));
        free(sh), free(ws), free(tids), free(lat);
        return -1;
    }
    a->set_rtt(sh->self, 0); /* setup is not measured: do it fast */
    pthread_barrier_init(&sh->barrier, NULL, threads + 1);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, worker_stack_size());
    for (unsigned i = 0; i < threads; i++) {
        ws[i].sh = sh;
        ws[i].index = i;
        ws[i].r.lat = calloc(1, sizeof *ws[i].r.lat);
        int e = ws[i].r.lat ? pthread_create(&tids[i], &attr, worker_main, &ws[i]) : ENOMEM;
        if (e) {
            fprintf(stderr, "fmem-bench: cannot start thread %u of %u: %s\n", i + 1, threads,
                    strerror(e));
            exit(1);
        }
    }
    pthread_attr_destroy(&attr);
    pthread_barrier_wait(&sh->barrier);
    a->set_rtt(sh->self, o->rtt_ns);
    struct alloc_totals before = {0}, after = {0};
    if (a->totals)
        a->totals(sh->self, &before);
    struct nic_stats nic0, nic1;
    nic_get_stats(&nic0);
    uint64_t t0 = bench_now_ns(), cpu0 = bench_cpu_ns();
    pthread_barrier_wait(&sh->barrier);
    sleep_ns((uint64_t)(o->seconds * 1e9));
    atomic_store(&sh->stop, true);
    /* calls in flight finish; a baseline that overstays the grace time is
     * told to give up (those calls count as aborted, not measured) */
    uint64_t deadline = bench_now_ns() + 2000000000u + (uint64_t)(2 * o->seconds * 1e9);
    while (atomic_load(&sh->done) < threads && bench_now_ns() < deadline)
        sleep_ns(1000000);
    atomic_store(&sh->abort, true);
    for (unsigned i = 0; i < threads; i++)
        pthread_join(tids[i], NULL);
    uint64_t cpu1 = bench_cpu_ns();
    nic_get_stats(&nic1);
    aggregate(ws, threads, t0, lat, out);
    if (out->elapsed_s > 0)
        out->cpu_util = (double)(cpu1 - cpu0) / 1e9 / out->elapsed_s;
    if (nic1.requests > nic0.requests && out->elapsed_s > 0) {
        uint64_t req = nic1.requests - nic0.requests;
        out->have_nic = true;
        out->nic_requests = req;
        out->nic_cpu = (double)(nic1.cpu_ns - nic0.cpu_ns) / 1e9 / out->elapsed_s;
        out->nic_late_us = (double)(nic1.late_ns - nic0.late_ns) / (double)req / 1e3;
        out->nic_wake_per_req = (double)(nic1.wake_calls - nic0.wake_calls) / (double)req;
    }
    if (a->totals) {
        a->totals(sh->self, &after);
        out->have_stats_retries = after.have_max_retries;
        out->stats_max_retries = after.max_retries;
        out->have_server = after.have_server;
        if (after.have_server && out->elapsed_s > 0) {
            out->server_busy = (double)(after.server_busy_ns - before.server_busy_ns) / 1e9 /
                               out->elapsed_s;
            out->server_req_per_s =
                (double)(after.server_requests - before.server_requests) / out->elapsed_s;
        }
    }
    a->close(sh->self);
    pthread_barrier_destroy(&sh->barrier);
    for (unsigned i = 0; i < threads; i++) {
        free(ws[i].r.lat);
        free(ws[i].live);
    }
    free(sh), free(ws), free(tids), free(lat);
    return 0;
}
