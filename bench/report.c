/* report.c - the table, the JSON lines, and the comparison lines that put
 * figures of the same run side by side. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

/* The table goes to stdout, or to stderr when stdout carries JSON. */
static FILE *table(const struct bench_opts *o)
{
    return o->json ? stderr : stdout;
}

void report_header(const struct bench_opts *o)
{
    FILE *f = table(o);
    double load[1] = {-1};
    getloadavg(load, 1);
    fprintf(f,
            "fmem-bench: rtt %llu ns (%s), rpc service %llu ns, pool %llu MiB, churn size %llu B, "
            "%.2f s per configuration; %ld cores, load average %.2f\n",
            (unsigned long long)o->rtt_ns, o->rtt_mode == TP_RTT_NIC ? "nic" : "spin",
            (unsigned long long)o->rpc_service_ns, (unsigned long long)(o->pool_bytes >> 20),
            (unsigned long long)o->size, o->seconds, sysconf(_SC_NPROCESSORS_ONLN), load[0]);
    fprintf(f, "%-10s %-6s %7s %11s %9s %9s %8s %7s %7s %9s %6s %5s %5s %7s %6s %7s\n",
            "allocator", "load", "threads", "allocs/s", "avg_us", "p99_us", "free_us", "CAS/op",
            "log/op", "max_retry", "RTT/op", "cpus", "nic", "late_us", "fail", "loadavg");
    fflush(f);
}

void report_row(const struct bench_opts *o, const struct run_result *r)
{
    FILE *f = table(o);
    char free_us[16] = "-"; /* no free finished in time */
    if (r->free_calls)
        snprintf(free_us, sizeof free_us, "%.2f", r->free_avg_us);
    char nic[16] = "-", late[16] = "-";
    if (r->have_nic) {
        snprintf(nic, sizeof nic, "%.2f", r->nic_cpu);
        snprintf(late, sizeof late, "%.2f", r->nic_late_us);
    }
    double load[1] = {-1};
    getloadavg(load, 1);
    fprintf(f,
            "%-10s %-6s %7u %11.0f %9.2f %9.2f %8s %7.2f %7.2f %9llu %6.2f %5.2f %5s %7s %6llu "
            "%7.1f",
            r->alloc, r->workload, r->threads, r->ops_per_s, r->lat_avg_us, r->lat_p99_us, free_us,
            r->cas_per_op, r->log_cas_per_op, (unsigned long long)r->retries_max, r->rtt_per_op,
            r->cpu_util, nic, late, (unsigned long long)r->failed, load[0]);
    if (r->aborted)
        fprintf(f, "  (%llu calls aborted after the grace time)", (unsigned long long)r->aborted);
    if (r->errors)
        fprintf(f, "  (%llu errors)", (unsigned long long)r->errors);
    fputc('\n', f);
    fflush(f);
    if (r->have_stats_retries && r->stats_max_retries != r->retries_max_all)
        fprintf(stderr,
                "fmem-bench: warning: %s/%s/%u: max retries from the per-call trace (%llu, setup "
                "included) differ from fmem_stats (%llu)\n",
                r->alloc, r->workload, r->threads, (unsigned long long)r->retries_max_all,
                (unsigned long long)r->stats_max_retries);
    if (!o->json)
        return;
    printf("{\"allocator\":\"%s\",\"workload\":\"%s\",\"threads\":%u,\"rtt_ns\":%llu,"
           "\"rtt_mode\":\"%s\","
           "\"seconds\":%.3f,\"ops\":%llu,\"frees\":%llu,\"failed\":%llu,\"aborted\":%llu,"
           "\"errors\":%llu,\"ops_per_s\":%.1f,\"lat_avg_us\":%.3f,\"lat_p50_us\":%.3f,"
           "\"lat_p99_us\":%.3f,\"lat_max_us\":%.3f,\"free_calls\":%llu,\"free_lat_avg_us\":%.3f,"
           "\"cas_per_op_avg\":%.4f,\"log_cas_per_op\":%.4f,\"cas_retries_avg\":%.4f,"
           "\"cas_retries_max\":%llu,\"free_cas_per_op\":%.4f,\"rtt_per_op\":%.4f,"
           "\"free_rtt_per_op\":%.4f,\"cpu_util\":%.3f",
           r->alloc, r->workload, r->threads, (unsigned long long)r->rtt_ns,
           o->rtt_mode == TP_RTT_NIC ? "nic" : "spin", r->elapsed_s,
           (unsigned long long)r->allocs, (unsigned long long)r->frees,
           (unsigned long long)r->failed, (unsigned long long)r->aborted,
           (unsigned long long)r->errors, r->ops_per_s, r->lat_avg_us, r->lat_p50_us,
           r->lat_p99_us, r->lat_max_us, (unsigned long long)r->free_calls, r->free_avg_us,
           r->cas_per_op, r->log_cas_per_op,
           r->retries_per_op, (unsigned long long)r->retries_max, r->free_cas_per_op,
           r->rtt_per_op, r->free_rtt_per_op, r->cpu_util);
    printf(",\"cas_dist\":[");
    for (unsigned k = 0; k < CAS_DIST; k++)
        printf("%s%llu", k ? "," : "", (unsigned long long)r->cas_dist[k]);
    printf("]");
    if (!strcmp(r->workload, "churn"))
        printf(",\"size\":%llu", (unsigned long long)o->size);
    if (r->have_stats_retries)
        printf(",\"stats_max_retries\":%llu", (unsigned long long)r->stats_max_retries);
    if (r->have_server)
        printf(",\"server_busy\":%.4f,\"server_req_per_s\":%.1f,\"rpc_service_ns\":%llu",
               r->server_busy, r->server_req_per_s, (unsigned long long)o->rpc_service_ns);
    if (r->have_nic)
        printf(",\"nic_cpu\":%.3f,\"nic_late_avg_us\":%.3f,\"nic_wake_calls_per_req\":%.3f,"
               "\"nic_requests\":%llu",
               r->nic_cpu, r->nic_late_us, r->nic_wake_per_req,
               (unsigned long long)r->nic_requests);
    printf(",\"load_avg\":%.2f}\n", load[0]);
    fflush(stdout);
}

static const struct run_result *find(const struct run_result *rs, size_t n, const char *alloc,
                                     const char *wl, unsigned threads)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(rs[i].alloc, alloc) && !strcmp(rs[i].workload, wl) &&
            rs[i].threads == threads)
            return &rs[i];
    return NULL;
}

static double ratio(double a, double b)
{
    return b > 0 ? a / b : 0;
}

static void size_label(const struct bench_opts *o, const char *wl, char *buf, size_t len)
{
    if (strcmp(wl, "churn"))
        snprintf(buf, len, "%s sizes", wl);
    else if (o->size >= (1u << 20))
        snprintf(buf, len, "%llu MiB", (unsigned long long)(o->size >> 20));
    else
        snprintf(buf, len, "%llu KiB", (unsigned long long)(o->size >> 10));
}

/* "X vs free-array" latency lines at the largest thread count both ran. */
static void vs_freearray(FILE *f, const struct bench_opts *o, const struct run_result *rs,
                         size_t n, const char *mine, const char *wl)
{
    unsigned best = 0;
    for (unsigned t = 0; t < o->nthreads; t++)
        if (o->threads[t] > best && find(rs, n, mine, wl, o->threads[t]) &&
            find(rs, n, "free-array", wl, o->threads[t]))
            best = o->threads[t];
    if (!best)
        return;
    const struct run_result *a = find(rs, n, mine, wl, best), *b = find(rs, n, "free-array", wl, best);
    fprintf(f,
            "%s vs free-array p99 latency ratio at %u threads (%s): %.3gx (%.1f us vs %.1f us); "
            "avg %.3gx; CAS/alloc %.2f vs %.2f; max retries %llu vs %llu\n",
            mine, best, wl, ratio(b->lat_p99_us, a->lat_p99_us), a->lat_p99_us, b->lat_p99_us,
            ratio(b->lat_avg_us, a->lat_avg_us), a->cas_per_op, b->cas_per_op,
            (unsigned long long)a->retries_max, (unsigned long long)b->retries_max);
}

/* Throughput at the most threads over throughput at 4 threads (or the
 * fewest run), and the peak. */
static void scaling(FILE *f, const struct bench_opts *o, const struct run_result *rs, size_t n,
                    const char *alloc, const char *wl)
{
    const struct run_result *lo = find(rs, n, alloc, wl, 4), *hi = NULL, *peak = NULL;
    unsigned runs = 0;
    for (unsigned t = 0; t < o->nthreads; t++) {
        const struct run_result *r = find(rs, n, alloc, wl, o->threads[t]);
        if (!r)
            continue;
        runs++;
        if (!hi || r->threads > hi->threads)
            hi = r;
        if (!peak || r->ops_per_s > peak->ops_per_s)
            peak = r;
        if (!find(rs, n, alloc, wl, 4) && (!lo || r->threads < lo->threads))
            lo = r;
    }
    if (runs < 2 || !lo || !hi || lo == hi)
        return;
    fprintf(f,
            "%s scaling (%s): allocs/s at %u threads / allocs/s at %u threads: %.2f "
            "(%.0f vs %.0f; peak %.0f at %u threads)",
            alloc, wl, hi->threads, lo->threads, ratio(hi->ops_per_s, lo->ops_per_s),
            hi->ops_per_s, lo->ops_per_s, peak->ops_per_s, peak->threads);
    if (hi->have_server) /* is the single server thread the limit? */
        fprintf(f, "; server busy %.0f%% at %u threads, %.0f%% at %u", 100 * hi->server_busy,
                hi->threads, 100 * lo->server_busy, lo->threads);
    fputc('\n', f);
}

void report_comparisons(const struct bench_opts *o, const struct run_result *rs, size_t n)
{
    FILE *f = table(o);
    fputc('\n', f);
    for (unsigned w = 0; w < o->nworkloads; w++) {
        const char *wl = o->workloads[w]->name;
        for (unsigned a = 0; a < o->nallocs; a++) {
            const char *name = o->allocs[a]->name;
            if (strcmp(name, "free-array") && strcmp(name, "mmap"))
                vs_freearray(f, o, rs, n, name, wl);
        }
        for (unsigned a = 0; a < o->nallocs; a++)
            scaling(f, o, rs, n, o->allocs[a]->name, wl);
        /* fmem against rpc throughput at the most threads both ran */
        for (int t = (int)o->nthreads - 1; t >= 0; t--) {
            const struct run_result *a = find(rs, n, "fmem", wl, o->threads[t]);
            const struct run_result *b = find(rs, n, "rpc", wl, o->threads[t]);
            if (a && b) {
                fprintf(f, "fmem vs rpc allocs/s at %u threads (%s): %.2fx (%.0f vs %.0f)\n",
                        o->threads[t], wl, ratio(a->ops_per_s, b->ops_per_s), a->ops_per_s,
                        b->ops_per_s);
                break;
            }
        }
        /* fmem against the local kernel, at zero delay only */
        if (o->rtt_ns == 0)
            for (unsigned t = 0; t < o->nthreads; t++) {
                const struct run_result *a = find(rs, n, "fmem", wl, o->threads[t]);
                const struct run_result *b = find(rs, n, "mmap", wl, o->threads[t]);
                if (!a || !b)
                    continue;
                char label[32];
                size_label(o, wl, label, sizeof label);
                double x = (a->lat_avg_us + a->free_avg_us) * 1e3,
                       y = (b->lat_avg_us + b->free_avg_us) * 1e3;
                fprintf(f,
                        "%s alloc+free (%u thread%s): fmem %.0f ns vs mmap+munmap %.0f ns "
                        "(ratio %.2f)\n",
                        label, o->threads[t], o->threads[t] == 1 ? "" : "s", x, y, ratio(y, x));
            }
    }
    fflush(f);
}
