/* stats.c - counters of large blocks, printed at exit with
 * FMEM_PRELOAD_STATS as one line of key=value pairs. */
#include <fcntl.h>
#include <unistd.h>

#include "preload.h"

struct fp_stats fp_stats;

void fp_stats_add(uint64_t bytes)
{
    atomic_fetch_add_explicit(&fp_stats.allocs, 1, memory_order_relaxed);
    uint64_t live = atomic_fetch_add_explicit(&fp_stats.live_bytes, bytes, memory_order_relaxed) + bytes;
    uint64_t peak = atomic_load_explicit(&fp_stats.peak_bytes, memory_order_relaxed);
    while (live > peak && !atomic_compare_exchange_weak(&fp_stats.peak_bytes, &peak, live))
        ;
}

void fp_stats_sub(uint64_t bytes)
{
    atomic_fetch_add_explicit(&fp_stats.frees, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&fp_stats.live_bytes, bytes, memory_order_relaxed);
}

void fp_stats_resize(uint64_t old_bytes, uint64_t new_bytes)
{
    if (new_bytes >= old_bytes) {
        fp_stats_add(new_bytes - old_bytes);
        atomic_fetch_sub_explicit(&fp_stats.allocs, 1, memory_order_relaxed);
    } else {
        atomic_fetch_sub_explicit(&fp_stats.live_bytes, old_bytes - new_bytes, memory_order_relaxed);
    }
}

__attribute__((destructor)) static void report(void)
{
    if (!fp_cfg.enabled || !fp_cfg.stats)
        return;
    int fd = fp_cfg.stats_path
                 ? open(fp_cfg.stats_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644)
                 : fp_cfg.stats_fd;
    if (fd < 0)
        return;
    fp_say_fd(fd, "pid=%ld threshold=%zu large_allocs=%llu large_frees=%llu fallbacks=%llu "
           "live_bytes=%llu peak_bytes=%llu copied_at_fork=%llu remapped_at_fork=%llu reused=%llu "
           "no_room=%llu grown=%llu protected_at_fork=%llu remapped_on_write=%llu "
           "protected_early=%llu written_early=%llu",
           (long)getpid(), fp_cfg.threshold, (unsigned long long)fp_stats.allocs,
           (unsigned long long)fp_stats.frees, (unsigned long long)fp_stats.fallbacks,
           (unsigned long long)fp_stats.live_bytes, (unsigned long long)fp_stats.peak_bytes,
           (unsigned long long)fp_stats.copied_at_fork,
           (unsigned long long)fp_stats.remapped_at_fork, (unsigned long long)fp_stats.reused,
           (unsigned long long)fp_stats.no_room, (unsigned long long)fp_stats.grown,
           (unsigned long long)fp_stats.protected_at_fork,
           (unsigned long long)fp_stats.remapped_on_write,
           (unsigned long long)fp_stats.protected_early,
           (unsigned long long)fp_stats.written_early);
    if (fp_cfg.stats_path)
        close(fd);
}
