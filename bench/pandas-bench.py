#!/usr/bin/env python3
"""A pandas workload on plain memory and in a far-memory Region, in one run.

The workload (the same for every configuration, its result checked):
  load     pandas.read_csv of a CSV of --rows rows (a key, a category
           string, three numeric columns), written once before the runs
  groupby  per-key sum / mean / max / count
  merge    the rows joined with a per-key dimension table, and with the
           group aggregates
  sort     the merged frame sorted by two columns
The result is a checksum of the sorted frame and of the aggregates; every
configuration must give the plain run's checksum.

Configurations, each in a fresh interpreter, alternating over --rounds
rounds (each keeps its best time):
  plain       numpy / pandas as they are
  region      array data (fmem.numpy_arrays) in a Region whose cache holds
              the whole working set (nothing is evicted): what the paging
              machinery costs by itself
  region50    cache = 50 % of the working set (the plain run's peak RSS
              beyond that of the interpreter with numpy and pandas loaded
              and no data, or the region's pool peak if larger)
  region25    the same with 25 %
With --vs-swap (root only): plain in a memory cgroup limited to what a
region run keeps locally (the bare interpreter's cgroup charge, the working
set beyond the array data, and the same 50 % / 25 % of the working set),
swapping to zram (lz4), next to the regions; a run the kernel's OOM killer
ends is reported as killed.

The ratio is plain time / configuration time (1.0: as fast as plain), on
wall time and on CPU time (the process's, every thread, the region's
handler and writer included): on a loaded machine the CPU-time ratio is
the steadier of the two. Wall time is not comparable under --vs-swap
alone: a swapping process waits for the kernel, which CPU time does not
show, so fmem against kernel swap is given on wall time.

    bindings/python/pyrun bench/pandas-bench.py [--rows 3000000 | --quick]
        [--rounds 2] [--vs-swap] [--json FILE]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, resource, sys, time
import numpy as np
import pandas as pd
mode, csv, cache = sys.argv[1], sys.argv[2], int(sys.argv[3])
region = None
block = None
if mode.startswith("region"):
    import fmem
    region = fmem.Region(16 << 30, cache=cache, pool=fmem.open("mem:?size=12G"))
    block = fmem.numpy_arrays(region)

def workload():
    t = {}
    t0 = time.perf_counter()
    df = pd.read_csv(csv, dtype={"key": np.int64, "cat": "category", "a": np.float64,
                                  "b": np.float64, "c": np.int64})
    t["load"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    agg = df.groupby("key").agg(a_sum=("a", "sum"), b_mean=("b", "mean"),
                                c_max=("c", "max"), n=("a", "size"))
    t["groupby"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    keys = np.arange(int(df["key"].max()) + 1)
    dim = pd.DataFrame({"key": keys, "weight": (keys % 7 + 1).astype(np.float64)})
    m = df.merge(dim, on="key", how="left").merge(agg, left_on="key", right_index=True)
    m["x"] = m["a"] * m["weight"] - m["b_mean"]
    t["merge"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    s = m.sort_values(["cat", "x"], kind="mergesort")
    t["sort"] = time.perf_counter() - t0
    # the checksum: order-sensitive over the sorted frame, plus the aggregates
    w = np.arange(1, len(s) + 1, dtype=np.float64) % 1013
    check = [float(np.dot(s["x"].to_numpy(), w)), int(s["c"].to_numpy()[::97].sum()),
             float(agg["a_sum"].sum()), int(agg["n"].sum()), len(s)]
    return t, check

def cpu():
    ru = resource.getrusage(resource.RUSAGE_SELF)  # every thread: the region's too
    return ru.ru_utime + ru.ru_stime

def peak_rss():
    # VmHWM, not ru_maxrss: a child inherits its parent's ru_maxrss over
    # fork and exec, so the bare interpreter reported the bench's own peak
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

c0 = cpu()
if mode == "idle":  # the interpreter with numpy and pandas, no data
    print(json.dumps({"maxrss": peak_rss()}))
    sys.exit(0)
if block is not None:
    with block:
        times, check = workload()
else:
    times, check = workload()
out = {"seconds": sum(times.values()), "cpu_seconds": cpu() - c0, "phases": times,
       "check": check,
       "maxrss": peak_rss()}
if region is not None:
    out["region"] = region.stats()
    out["heap_peak"] = block.stats()["heap_remote_peak"]  # the array data's peak
print(json.dumps(out))
"""


# the region's counters kept in --json output: where a region run's time went
REGION_STATS = ("faults", "missing_faults", "wp_faults", "fetches", "prefetches", "zero_fills",
                "evictions", "writebacks", "releases", "bytes_fetched", "bytes_written",
                "remote_peak")


def write_csv(path, rows, seed=7):
    import numpy as np
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, 50000, rows)
    cats = np.array(["red", "green", "blue", "cyan", "magenta", "yellow", "black", "white"])
    with open(path, "w") as f:
        f.write("key,cat,a,b,c\n")
        step = 500000
        for i in range(0, rows, step):
            n = min(step, rows - i)
            k = keys[i:i + n]
            c = cats[rng.integers(0, len(cats), n)]
            a = np.round(rng.gamma(2.0, 50.0, n), 3)
            b = np.round(rng.normal(0.0, 1.0, n), 4)
            cc = rng.integers(0, 1000, n)
            f.write("\n".join(f"{x},{y},{z},{u},{v}" for x, y, z, u, v in zip(k, c, a, b, cc)))
            f.write("\n")


# ---- kernel swap anchor (root): zram + a memory cgroup -----------------------
ZRAM = "/sys/block/zram0"


class Swap:
    def __init__(self, disk):
        self.ours = False
        self.ok = False
        if os.geteuid() != 0:
            print("--vs-swap: needs root (a memory cgroup and zram swap); skipped",
                  file=sys.stderr)
            return
        with open("/proc/swaps") as f:
            if any(line.startswith("/dev/zram0") for line in f):
                self.ok = True  # someone's zram swap: use it as it is
                return
        if not os.path.exists(ZRAM):
            subprocess.run(["modprobe", "zram", "num_devices=1"], check=False)
        try:
            with open(ZRAM + "/disksize") as f:
                if int(f.read()) != 0:
                    raise OSError("zram0 is in use")
            with open(ZRAM + "/comp_algorithm", "w") as f:
                f.write("lz4")
            with open(ZRAM + "/disksize", "w") as f:
                f.write(str(disk))
            subprocess.run(["mkswap", "/dev/zram0"], check=True, stdout=subprocess.DEVNULL)
            subprocess.run(["swapon", "/dev/zram0"], check=True)
            self.ours = self.ok = True
        except (OSError, subprocess.CalledProcessError) as e:
            print(f"--vs-swap: zram swap: {e}; skipped", file=sys.stderr)

    def cgroup(self, limit):
        """A memory cgroup under ours, limited to `limit` bytes: cgroup v1's
        memory controller where it is mounted, else the unified (v2)
        hierarchy. The limit file must be the kernel's: a directory made on
        a plain file system (no cgroup mounted there) limits nothing."""
        v1 = os.path.isdir("/sys/fs/cgroup/memory")
        own = "/"
        with open("/proc/self/cgroup") as f:
            for line in f:
                line = line.strip()
                if (":memory:" in line) if v1 else line.startswith("0::"):
                    own = line.rsplit(":", 1)[1]
        root = "/sys/fs/cgroup/memory" if v1 else "/sys/fs/cgroup"
        d = f"{root}{own if own != '/' else ''}/fmem-pandas-bench-{os.getpid()}"
        os.makedirs(d, exist_ok=True)
        knob = d + ("/memory.limit_in_bytes" if v1 else "/memory.max")
        if not os.path.exists(knob):
            os.rmdir(d)
            raise OSError(f"{d} is no memory cgroup")
        with open(knob, "w") as f:
            f.write(str(limit))
        return d

    def done(self):
        if self.ours:
            subprocess.run(["swapoff", "/dev/zram0"], check=False)
            with open(ZRAM + "/reset", "w") as f:
                f.write("1")


def cgroup_peak(d):
    """The most memory the cgroup's processes used (v1 or v2), or None."""
    for name in ("memory.max_usage_in_bytes", "memory.peak"):
        try:
            with open(f"{d}/{name}") as f:
                return int(f.read())
        except (OSError, ValueError):
            pass
    return None


# the kernel's paging during a swap run (system-wide counters: the only
# swap on a quiet machine is ours): pages swapped in and out, faults
SWAP_STATS = ("pswpin", "pswpout", "pgmajfault", "pgfault")


def vmstat():
    with open("/proc/vmstat") as f:
        return {k: int(v) for k, v in (line.split() for line in f)}


def rmdir_retry(d):
    """A cgroup lists an exited child for a moment after it was reaped."""
    import time
    for _ in range(50):
        try:
            os.rmdir(d)
            return
        except OSError:
            time.sleep(0.1)
    print(f"--vs-swap: cannot remove {d} (still lists a process that exited)", file=sys.stderr)


class ChildFailed(RuntimeError):
    def __init__(self, returncode, what):
        super().__init__(what)
        self.returncode = returncode


def run_child(mode, csv, cache=0, cgroup=None):
    pre = None
    if cgroup:
        def pre():
            with open(cgroup + "/cgroup.procs", "w") as f:
                f.write(str(os.getpid()))
    p = subprocess.run([sys.executable, "-c", CHILD, mode, csv, str(cache)],
                       capture_output=True, text=True, preexec_fn=pre)
    if p.returncode != 0:
        raise ChildFailed(p.returncode, f"{mode}: exit {p.returncode}: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=3_000_000)
    ap.add_argument("--quick", action="store_true", help="1 M rows, one round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--vs-swap", action="store_true")
    ap.add_argument("--json", help="write the results here (one object per line)")
    args = ap.parse_args()
    if args.quick:
        args.rows, args.rounds = 1_000_000, 1
    with open("/proc/loadavg") as f:
        load0 = " ".join(f.read().split()[:3])
    fd, csv = tempfile.mkstemp(prefix="fmem-pandas-bench-", suffix=".csv")
    os.close(fd)
    results = []
    swap = None
    try:
        write_csv(csv, args.rows)
        best = {}

        def keep(name, r):
            if name not in best or r["seconds"] < best[name]["seconds"]:
                best[name] = r

        base = None
        for rnd in range(args.rounds):
            keep("plain", run_child("plain", csv))
            keep("region", run_child("region", csv, cache=16 << 30))
            if rnd == 0:
                idle = run_child("idle", csv)["maxrss"]
            # the data's memory: the plain run's peak beyond the bare
            # interpreter's, or the region's pool peak if larger (the pool
            # peak alone undercounts: units mapped fresh and never
            # evicted take no pool space)
            ws = max(best["region"]["region"]["remote_peak"], best["plain"]["maxrss"] - idle)
            for pct in (50, 25):
                keep(f"region{pct}", run_child(f"region{pct}", csv, cache=ws * pct // 100))
            if rnd == 0:
                base = best["plain"]
        killed = {}  # swap runs the kernel ended: their cgroup limits
        if args.vs_swap:
            swap = Swap(2 * ws + (256 << 20))
            if swap.ok:
                # the interpreter with numpy and pandas besides the arrays:
                # what it charges to a memory cgroup, which is less than its
                # RSS (library pages already in the page cache are charged
                # to whoever read them first), so that the data get the same
                # 50 % / 25 % as in the regions
                try:
                    cg = swap.cgroup(1 << 40)
                    try:
                        run_child("idle", csv, cgroup=cg)
                        other = cgroup_peak(cg)
                    finally:
                        rmdir_retry(cg)
                except OSError as e:
                    print(f"--vs-swap: {e}; skipped", file=sys.stderr)
                    other = None
                if other is None:
                    other = idle
                # and what a region run keeps outside its region: the
                # working set beyond the array data (Python objects)
                other += max(0, ws - best["region"]["heap_peak"])
                for pct in (50, 25):
                    try:
                        cg = swap.cgroup(other + ws * pct // 100)
                    except OSError as e:
                        print(f"--vs-swap: {e}; skipped", file=sys.stderr)
                        break
                    try:
                        v0 = vmstat()
                        try:
                            r = run_child("plain", csv, cgroup=cg)
                        except ChildFailed as e:
                            if e.returncode != -9:  # not the kernel's OOM killer
                                raise
                            killed[f"swap{pct}"] = other + ws * pct // 100
                            print(f"--vs-swap {pct} %: {e}", file=sys.stderr)
                            continue
                        v1 = vmstat()
                        r["cgroup_limit"] = other + ws * pct // 100
                        r["cgroup_peak"] = cgroup_peak(cg)
                        r["cgroup_other"] = other
                        r["swap"] = {k: v1.get(k, 0) - v0.get(k, 0) for k in SWAP_STATS}
                        keep(f"swap{pct}", r)
                    finally:
                        rmdir_retry(cg)
        plain = best["plain"]
        print(f"pandas workload: {args.rows} rows; working set {ws / 2**20:.0f} MiB "
              f"(plain peak RSS {best['plain']['maxrss'] / 2**20:.0f} MiB - interpreter alone "
              f"{idle / 2**20:.0f} MiB; region pool peak "
              f"{best['region']['region']['remote_peak'] / 2**20:.0f} MiB); best of {args.rounds}")
        for name, r in best.items():
            ok = r["check"] == base["check"]
            ph = " ".join(f"{k} {v:.2f}" for k, v in r["phases"].items())
            extra = ""
            if "cgroup_limit" in r:
                peak = r["cgroup_peak"]
                sw = r["swap"]
                extra = (f"  cgroup limit {r['cgroup_limit'] / 2**20:.0f} MiB (outside the arrays "
                         f"{r['cgroup_other'] / 2**20:.0f} MiB), peak "
                         f"{peak / 2**20 if peak is not None else float('nan'):.0f} MiB;"
                         f" swapped in {sw['pswpin']} out {sw['pswpout']} pages,"
                         f" major faults {sw['pgmajfault']}")
            if "region" in r:
                st = r["region"]
                extra = (f"  faults {st['faults']} wp {st['wp_faults']} fetched {st['fetches']}"
                         f" prefetched {st['prefetches']} zero {st['zero_fills']}"
                         f" evicted {st['evictions']} written {st['writebacks']}"
                         f" releases {st['releases']}")
            print(f"{name:9s} {r['seconds']:7.2f} s  {plain['seconds'] / r['seconds']:6.3f} x plain"
                  f"  cpu {r['cpu_seconds']:6.2f} s {plain['cpu_seconds'] / r['cpu_seconds']:6.3f} x"
                  f"  [{ph}]  result {'ok' if ok else 'DIFFERS'}{extra}")
            results.append({"workload": "pandas", "config": name, "rows": args.rows,
                            "seconds": r["seconds"], "phases": r["phases"],
                            "ratio_vs_plain": plain["seconds"] / r["seconds"],
                            "cpu_seconds": r["cpu_seconds"],
                            "cpu_ratio_vs_plain": plain["cpu_seconds"] / r["cpu_seconds"],
                            "working_set": ws, "result_ok": ok,
                            **{k: r[k] for k in ("cgroup_limit", "cgroup_peak", "cgroup_other",
                                                 "swap") if k in r},
                            **({"region": {k: r["region"][k] for k in REGION_STATS}}
                               if "region" in r else {})})
            if not ok:
                print(f"  {name}: {r['check']} against {base['check']}", file=sys.stderr)
        for name, limit in killed.items():
            print(f"{name:9s} killed by the kernel (out of memory at a cgroup limit of "
                  f"{limit / 2**20:.0f} MiB)")
            results.append({"workload": "pandas", "config": name, "rows": args.rows,
                            "killed": True, "cgroup_limit": limit, "working_set": ws})
        for pct in (50, 25):
            if f"swap{pct}" in best:
                v = best[f"swap{pct}"]["seconds"] / best[f"region{pct}"]["seconds"]
                print(f"fmem region vs kernel swap at {pct} %: {v:.2f} x")
                results.append({"workload": "pandas-swap", "cache_pct": pct, "fmem_vs_swap": v})
        with open("/proc/loadavg") as f:
            load = " ".join(f.read().split()[:3])
        print(f"load average before: {load0}, after: {load}")
        results.append({"workload": "machine", "cores": os.cpu_count(),
                        "kernel": os.uname().release, "load_before": load0,
                        "load_after": load})
        if args.json:
            with open(args.json, "w") as f:
                for r in results:
                    f.write(json.dumps(r) + "\n")
        return 0 if all(r.get("result_ok", True) for r in results) else 1
    finally:
        os.unlink(csv)
        if swap is not None:
            swap.done()


if __name__ == "__main__":
    sys.exit(main())
