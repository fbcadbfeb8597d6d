#!/usr/bin/env python3
"""What fork() costs with a heap in far memory, in one run.

Each configuration is a fresh interpreter holding HEAP bytes (default
1 GiB) of numpy arrays - 64 arrays, every page written - and then forking
--forks times. Measured per fork (medians):
  start   from just before os.fork() in the parent to the child's first
          Python statement (CLOCK_MONOTONIC, the same clock in both)
  pause   how long os.fork() took to return in the parent
Configurations:
  plain     the arrays in local memory (numpy's own allocator)
  pool      the arrays in a heap on an in-process pool (numpy_arrays(pool))
  region25  the arrays in a Region whose cache is 25 % of HEAP
  shmpool   the arrays in a heap on a named shm: pool (shared by design:
            the child gets copies of its blocks at the fork)
The target line compares each start with 2 x plain + the time to copy
what is resident locally (memcpy of the configuration's resident bytes,
measured here: HEAP for the pools, the cache for the region).

    bindings/python/pyrun bench/fork-bench.py [--heap 1G] [--forks 5] [--json FILE]
"""
import argparse
import json
import os
import subprocess
import sys
import time

CHILD = r"""
import json, os, statistics, sys, time
import numpy as np
mode, heap, forks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ctx = None
if mode != "plain":
    import fmem
    if mode == "pool":
        target = fmem.open("mem:?size=%d" % (heap * 2 + (256 << 20)))
    elif mode == "shmpool":
        target = fmem.open("shm:/fmem-fork-bench-%d?size=%d" % (os.getpid(), heap * 2 + (256 << 20)))
    else:
        target = fmem.Region(heap * 2, cache=heap // 4,
                             pool=fmem.open("mem:?size=%d" % (heap * 3)))
    ctx = fmem.numpy_arrays(target)
    ctx.__enter__()
n = 64
arrays = [np.full(heap // n // 8, float(i)) for i in range(n)]
if ctx:
    ctx.__exit__(None, None, None)
starts, pauses = [], []
for _ in range(forks):
    r, w = os.pipe()
    t0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    pid = os.fork()
    if pid == 0:
        t1 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        os.write(w, str(t1).encode())
        os._exit(0)
    t2 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    os.close(w)
    t1 = int(os.read(r, 64))
    os.close(r)
    os.waitpid(pid, 0)
    starts.append(t1 - t0)
    pauses.append(t2 - t0)
ok = all(a[0] == float(i) and a[-1] == float(i) for i, a in enumerate(arrays))
if mode == "shmpool":
    fmem.unlink("shm:/fmem-fork-bench-%d" % os.getpid())
print(json.dumps({"mode": mode, "start_us": statistics.median(starts) / 1e3,
                  "pause_us": statistics.median(pauses) / 1e3, "ok": ok}))
"""

COPY = r"""
import sys, time
import numpy as np
n = int(sys.argv[1])
a = np.ones(n // 8); b = np.empty_like(a); b[:] = 0.0
best = float("inf")
for _ in range(3):
    t = time.perf_counter(); b[:] = a; best = min(best, time.perf_counter() - t)
print(best * 1e6)
"""


def size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heap", type=size, default=1 << 30)
    ap.add_argument("--forks", type=int, default=5)
    ap.add_argument("--modes", default="plain,pool,region25,shmpool")
    ap.add_argument("--json")
    args = ap.parse_args()
    rows = []
    for mode in args.modes.split(","):
        proc = subprocess.run([sys.executable, "-c", CHILD, mode, str(args.heap), str(args.forks)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"{mode}: failed\n{proc.stderr}", file=sys.stderr)
            continue
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    copy_us = {}
    for n in {args.heap, args.heap // 4}:
        out = subprocess.run([sys.executable, "-c", COPY, str(n)], capture_output=True, text=True)
        copy_us[n] = float(out.stdout)
    plain = next((r for r in rows if r["mode"] == "plain"), None)
    print(f"fork with {args.heap >> 20} MiB of numpy arrays, median of {args.forks} forks "
          f"(load {os.getloadavg()[0]:.1f})")
    print(f"{'mode':10} {'start us':>10} {'pause us':>10} {'resident':>9} {'target us':>10}  ok")
    for r in rows:
        resident = 0 if r["mode"] == "plain" else (args.heap // 4 if r["mode"] == "region25" else args.heap)
        r["resident_bytes"] = resident
        r["copy_us"] = copy_us.get(resident, 0.0)
        r["target_us"] = 2 * plain["start_us"] + r["copy_us"] if plain else None
        tgt = f"{r['target_us']:10.0f}" if r["target_us"] is not None else f"{'-':>10}"
        print(f"{r['mode']:10} {r['start_us']:10.0f} {r['pause_us']:10.0f} {resident >> 20:8}M "
              f"{tgt}  {'yes' if r['ok'] else 'NO'}")
    if plain:
        for r in rows:
            if r["mode"] != "plain":
                verdict = "within" if r["start_us"] <= r["target_us"] else "ABOVE"
                print(f"{r['mode']}: child starts {r['start_us'] / plain['start_us']:.2f}x plain, "
                      f"{verdict} the target (2 x plain + copy of {r['resident_bytes'] >> 20} MiB "
                      f"= {r['target_us']:.0f} us)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"heap": args.heap, "forks": args.forks, "rows": rows,
                       "load": os.getloadavg()[0]}, f, indent=1)


if __name__ == "__main__":
    main()
