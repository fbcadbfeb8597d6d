#!/usr/bin/env python3
"""A small-object-heavy Python workload with and without the obmalloc arena
hook (fmem.install_arena_allocator), in one run.

Each measurement is a fresh interpreter (the hook stays for the life of a
process) that runs the workload --runs times and reports the best time;
configurations alternate (regions: one interpreter, one run). Configurations:
  plain     pymalloc's own arenas (mmap)
  pool      arenas from a heap on a directly mapped in-process pool
  region50  arenas in a far-memory Region, cache = 50 % of the arena peak
  region25  the same with 25 %
The ratio is plain time / config time (1.0: as fast as without the hook);
"faults" are the interpreter's minor page faults.

    bindings/python/pyrun bench/arena-bench.py [--objects 1000000] [--rounds 3]
"""
import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import gc, json, resource, sys, time
mode, n, runs, cache = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
target = None
if mode != "plain":
    import fmem
    if mode == "pool":
        target = fmem.install_arena_allocator(fmem.open("mem:?size=4G"))
    else:
        region = fmem.Region(4 << 30, cache=cache, pool=fmem.open("mem:?size=8G"))
        target = fmem.install_arena_allocator(region)

def workload(n):
    # dicts of tuples, strings and small lists: ~6 small objects per item
    d = {i: (i, str(i), [i, i + 1]) for i in range(n)}
    total = sum(len(v[1]) + v[2][1] for v in d.values())
    keys = sorted(d, key=lambda k: -k)[: n // 2]
    for k in keys:              # churn: drop half, make new ones
        del d[k]
    d.update({-i: (str(i) * 2, float(i)) for i in range(n // 2)})
    total += len(d) + sum(1 for v in d.values() if isinstance(v[0], str))
    del d, keys
    gc.collect()
    return total

best = float("inf")
for _ in range(runs):
    t = time.perf_counter()
    r = workload(n)
    best = min(best, time.perf_counter() - t)
out = {"seconds": best, "result": r,
       "minor_faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt}
if target is not None:
    out["stats"] = fmem.arena_allocator_stats()
    if mode != "pool":
        out["region"] = region.stats()
print(json.dumps(out))
"""


def measure(mode, n, runs, cache=0):
    proc = subprocess.run([sys.executable, "-c", CHILD, mode, str(n), str(runs), str(cache)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"arena-bench: {mode} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--objects", type=int, default=1_000_000, help="items per workload run")
    ap.add_argument("--rounds", type=int, default=3, help="interpreters per configuration")
    ap.add_argument("--runs", type=int, default=2, help="workload runs per interpreter")
    ap.add_argument("--no-regions", action="store_true")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()

    first = measure("pool", args.objects, 1)
    peak = first["stats"]["heap_remote_peak"]
    modes = {"plain": 0, "pool": 0}
    if not args.no_regions:
        modes.update({"region50": peak // 2, "region25": peak // 4})
    results = {m: [] for m in modes}
    for rnd in range(args.rounds):
        for mode in (list(modes) if rnd % 2 == 0 else list(modes)[::-1]):
            paged = mode.startswith("region")
            if paged and rnd > 0:
                continue  # paging dominates: one interpreter, one run is enough
            results[mode].append(measure(mode, args.objects, 1 if paged else args.runs,
                                         modes[mode]))

    base = min(r["seconds"] for r in results["plain"])
    expect = results["plain"][0]["result"]
    print(f"arena-bench: {args.objects} items (~{6 * args.objects / 1e6:.0f} M small objects)"
          f" per run, arena peak {peak / (1 << 20):.0f} MiB, best of {args.rounds} x"
          f" {args.runs}; load average {os.getloadavg()[0]:.1f}")
    print(f"{'config':9s} {'seconds':>8s} {'ratio':>6s} {'faults':>8s}  arenas in far memory"
          " / freed")
    summary = {}
    for mode, rs in results.items():
        assert all(r["result"] == expect for r in rs), f"{mode}: wrong result"
        t = min(r["seconds"] for r in rs)
        summary[mode] = {"seconds": t, "ratio": base / t}
        st = rs[-1].get("stats")
        extra = f"  {st['mallocs']} / {st['frees']}" if st else ""
        if "region" in rs[-1]:
            reg = rs[-1]["region"]
            extra += (f"; cache {reg['cache_bytes'] >> 20} MiB, fetched"
                      f" {reg['bytes_fetched'] >> 20} MiB, written {reg['bytes_written'] >> 20} MiB")
        faults = min(r["minor_faults"] for r in rs)
        print(f"{mode:9s} {t:8.3f} {base / t:6.3f} {faults:8d}{extra}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"objects": args.objects, "arena_peak": peak, "summary": summary}, f,
                      indent=1)


if __name__ == "__main__":
    main()
