#!/usr/bin/env python3
"""numpy on fmem-backed arrays against plain arrays, in one run.

Configurations (array data placed by fmem.numpy_arrays):
  plain       numpy's default allocator (the baseline; glibc puts large
              arrays 16 bytes into a page)
  plain4k     a control: plain memory laid out as fmem's is, arrays
              starting on a page and no transparent huge pages (numpy
              advises them for plain arrays >= 4 MiB; an shm pool, memfd
              with shmem THP off, has 4 KiB pages)
  shm         a heap on directly mapped chunks of a shm: pool
  region50    a heap in a far-memory Region, local cache = 50 % of the data
  region25    the same with 25 %

Operations on float64 arrays a, b (--mib each): reductions (sum, mean,
max, std, dot) and element-wise ones, both allocating their result (a + b,
a * b + 1, sqrt) and into a preallocated array (add out=). Every
configuration builds its own arrays; rounds alternate the configurations,
and each (configuration, operation) keeps its best time. Regions, where
every pass pages the data through the cache and noise does not matter,
run --region-rounds rounds of --region-reps timed passes each. The ratio is plain
time / fmem time: 1.0 means as fast as plain memory, the target for shm
is >= 0.95.

    bindings/python/pyrun bench/numpy-bench.py [--mib 32] [--rounds 15] [--reps 5]
        [--region-rounds 1] [--region-reps 2] [--no-regions] [--json FILE]
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

import fmem

MiB = 1 << 20

OPS = {
    "sum": lambda a, b, c: a.sum(),
    "mean": lambda a, b, c: a.mean(),
    "max": lambda a, b, c: a.max(),
    "std": lambda a, b, c: a.std(),
    "dot": lambda a, b, c: np.dot(a, b),
    "a+b": lambda a, b, c: a + b,
    "a*b+1": lambda a, b, c: a * b + 1.0,
    "sqrt": lambda a, b, c: np.sqrt(a),
    "add out=": lambda a, b, c: np.add(a, b, out=c),
}
REDUCTIONS = ("sum", "mean", "max", "std", "dot")


class Config:
    """One placement of the arrays: a numpy_arrays block (or none)."""

    def __init__(self, name, target):
        self.name, self.target = name, target
        self.ctx = fmem.numpy_arrays(target) if target is not None else None

    def block(self):
        return self.ctx if self.ctx is not None else _NoBlock()

    def make_arrays(self, n, seed):
        with self.block():
            rng = np.random.default_rng(seed)
            a = rng.random(n) + 0.5
            b = rng.random(n) + 0.5
            c = np.empty(n)
        return a, b, c

    def time_op(self, op, arrays, reps):
        best = float("inf")
        with self.block():
            op(*arrays)  # warm-up: faults, caches, heap
            for _ in range(reps):
                t = time.perf_counter()
                r = op(*arrays)
                best = min(best, time.perf_counter() - t)
                del r
        return best


class Plain4kConfig(Config):
    """Plain memory with page-aligned arrays and no huge pages."""

    def __init__(self):
        super().__init__("plain4k", None)

    def block(self):
        return _NoHugePages()

    def make_arrays(self, n, seed):
        out = []
        with self.block():
            for x in super().make_arrays(n, seed):
                raw = np.empty(n + 4096 // 8)
                skip = (-raw.ctypes.data % 4096) // 8
                view = raw[skip:skip + n]
                view[:] = x
                out.append(view)
        return tuple(out)


class _NoHugePages:
    def __enter__(self):
        self.old = np.core.multiarray._set_madvise_hugepage(False)
        return self

    def __exit__(self, *exc):
        np.core.multiarray._set_madvise_hugepage(self.old)
        return False


class _NoBlock:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def region_config(name, pool, data_bytes, fraction):
    region = fmem.Region(4 * data_bytes + 64 * MiB, cache=int(data_bytes * fraction),
                         pool=pool)
    return Config(name, region)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=32, help="MiB per array (a, b, c)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--reps", type=int, default=5, help="timed runs per op and round")
    ap.add_argument("--region-rounds", type=int, default=1)
    ap.add_argument("--region-reps", type=int, default=2)
    ap.add_argument("--no-regions", action="store_true", help="plain and shm only")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()

    n = args.mib * MiB // 8
    data_bytes = 3 * n * 8  # a, b and c: the working set the caches are sized by
    uri = f"shm:/fmem-numpy-bench-{os.getpid()}?size={max(1024, 16 * data_bytes // MiB)}M"
    shm_pool = fmem.open(uri)
    fmem.unlink(uri)  # the file goes when we exit
    far_pool = fmem.open(f"mem:?size={max(1024, 16 * data_bytes // MiB)}M")
    configs = [Config("plain", None), Plain4kConfig(), Config("shm", shm_pool)]
    try:
        if not args.no_regions:
            configs += [region_config("region50", far_pool, data_bytes, 0.50),
                        region_config("region25", far_pool, data_bytes, 0.25)]
    except fmem.AccessError as exc:
        print(f"regions skipped: {exc}", file=sys.stderr)
    arrays = {c.name: c.make_arrays(n, 1) for c in configs}
    for c in configs[2:]:  # the data really is where it should be
        where = c.target.contains if isinstance(c.target, fmem.Region) else c.target.owns
        assert all(where(x) for x in arrays[c.name]), c.name

    best = {(c.name, op): float("inf") for c in configs for op in OPS}
    for rnd in range(args.rounds):
        order = configs if rnd % 2 == 0 else configs[::-1]
        for op_name, op in OPS.items():
            for c in order:
                paged = isinstance(c.target, fmem.Region)
                if paged and rnd >= args.region_rounds:
                    continue
                t = c.time_op(op, arrays[c.name], args.region_reps if paged else args.reps)
                best[c.name, op_name] = min(best[c.name, op_name], t)

    print(f"numpy-bench: float64 arrays of {args.mib} MiB (working set {data_bytes / MiB:.0f}"
          f" MiB), best of {args.rounds} rounds x {args.reps} (regions: {args.region_rounds}"
          f" x {args.region_reps}); ratio = plain / config; load average {os.getloadavg()[0]:.1f}")
    names = [c.name for c in configs]
    print(f"{'op':10s} {'plain ms':>9s}" + "".join(f" {n:>9s}" for n in names[1:]))
    ratios = {n: {} for n in names[1:]}
    for op in OPS:
        base = best["plain", op]
        row = f"{op:10s} {base * 1e3:9.2f}"
        for name in names[1:]:
            ratios[name][op] = base / best[name, op]
            row += f" {ratios[name][op]:9.3f}"
        print(row)
    summary = {}
    for name in names[1:]:
        red = statistics.geometric_mean([ratios[name][op] for op in REDUCTIONS])
        elem = statistics.geometric_mean([ratios[name][op] for op in OPS
                                          if op not in REDUCTIONS])
        summary[name] = {"reductions": red, "elementwise": elem,
                         "all": statistics.geometric_mean(ratios[name].values())}
        print(f"{name:9s} geometric mean ratio: reductions {red:.3f}, element-wise {elem:.3f},"
              f" all {summary[name]['all']:.3f}")
    for c in configs[3:]:
        st = c.target.stats()
        print(f"{c.name}: cache {st['cache_bytes'] / MiB:.0f} MiB, remote"
              f" {st['remote_bytes'] / MiB:.0f} MiB, fetched {st['bytes_fetched'] / MiB:.0f}"
              f" MiB, written {st['bytes_written'] / MiB:.0f} MiB, faults {st['faults']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"mib": args.mib, "best_seconds": {f"{k[0]}/{k[1]}": v
                                                         for k, v in best.items()},
                       "ratios": ratios, "summary": summary}, f, indent=1)
    del arrays


if __name__ == "__main__":
    main()
