#!/usr/bin/env python3
"""A pandas DataFrame whose column buffers live in far memory.

The data (by default 4 million rows, 5 columns, 153 MiB) is created
inside ``fmem.numpy_arrays(region)``: every array numpy and pandas
allocate for it lives in an fmem Region whose local cache (32 MiB) is
much smaller than the data, so most of it is remote at any time and pages
move in and out as the group-by runs. The script prints where each column
lives and the region's statistics, checks the aggregates against the same
computation on plain arrays, and plots local (cached) against remote
bytes over the run into a PNG.

    bindings/python/pyrun examples/dataframe/dataframe.py [--rows N]
        [--cache-mib M] [--out dataframe.png]
"""
import argparse
import threading
import time

import matplotlib
import numpy as np
import pandas as pd

import fmem

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)

MiB = 1 << 20


class Sampler:
    """Samples the region's local and remote bytes every `period` seconds
    from a thread (region.stats() releases the GIL), with phase marks."""

    def __init__(self, region, period=0.02):
        self.region, self.period = region, period
        self.t0 = time.monotonic()
        self.samples, self.phases = [], []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def sample(self):
        st = self.region.stats()
        self.samples.append((time.monotonic() - self.t0, st["cached_bytes"], st["remote_bytes"]))

    def run(self):
        while not self.stop.wait(self.period):
            self.sample()

    def phase(self, name):
        self.sample()
        self.phases.append((time.monotonic() - self.t0, name))
        print(f"[{self.phases[-1][0]:6.2f} s] {name}")

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        self.sample()


def build_frame(rows, seed):
    """The data set: a key column with 1000 groups and four value columns."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "key": rng.integers(0, 1000, rows, dtype=np.int64),
        "price": rng.gamma(2.0, 50.0, rows),
        "qty": rng.integers(1, 100, rows).astype(np.float64),
        "score": rng.normal(0.0, 1.0, rows),
        "weight": rng.random(rows),
    })


def aggregate(df):
    g = df.groupby("key")
    return pd.DataFrame({
        "price_sum": g["price"].sum(),
        "qty_mean": g["qty"].mean(),
        "score_max": g["score"].max(),
        "weight_min": g["weight"].min(),
        "rows": g.size(),
    })


def reference(rows, seed):
    """The same aggregates on plain (local) arrays, with numpy alone."""
    df = build_frame(rows, seed)
    k = df["key"].to_numpy()
    n = np.bincount(k, minlength=1000)
    out = {
        "price_sum": np.bincount(k, df["price"].to_numpy(), 1000),
        "qty_mean": np.bincount(k, df["qty"].to_numpy(), 1000) / n,
        "score_max": np.full(1000, -np.inf),
        "weight_min": np.full(1000, np.inf),
        "rows": n,
    }
    np.maximum.at(out["score_max"], k, df["score"].to_numpy())
    np.minimum.at(out["weight_min"], k, df["weight"].to_numpy())
    return out


def describe_columns(df, region):
    print("where the columns live:")
    for col in df.columns:
        arr = df[col].to_numpy()
        place = "far memory (fmem region)" if region.contains(arr) else "local memory"
        print(f"  {col:7s} {arr.nbytes / MiB:7.1f} MiB at {arr.ctypes.data:#x}: {place}")


def print_stats(region):
    st = region.stats()
    print("region statistics:")
    print(f"  address space  {region.size / MiB:9.1f} MiB at {region.address:#x}")
    print(f"  local cache    {st['cached_bytes'] / MiB:9.1f} MiB of {st['cache_bytes'] / MiB:.1f}"
          " MiB budget")
    print(f"  remote (pool)  {st['remote_bytes'] / MiB:9.1f} MiB now,"
          f" {st['remote_peak'] / MiB:.1f} MiB peak")
    print(f"  faults {st['faults']}, fetches {st['fetches']}, prefetches {st['prefetches']},"
          f" evictions {st['evictions']}, writebacks {st['writebacks']}")
    print(f"  read from pool {st['bytes_fetched'] / MiB:.1f} MiB,"
          f" written to pool {st['bytes_written'] / MiB:.1f} MiB")
    return st


def plot(sampler, cache_bytes, data_bytes, path):
    t = [s[0] for s in sampler.samples]
    local = [s[1] / MiB for s in sampler.samples]
    remote = [s[2] / MiB for s in sampler.samples]
    fig, ax = plt.subplots(figsize=(9, 4.8), dpi=110)
    ax.fill_between(t, remote, step="post", alpha=0.25, color="tab:orange")
    ax.step(t, remote, where="post", color="tab:orange", label="remote bytes (pool)")
    ax.step(t, local, where="post", color="tab:blue", label="local bytes (region cache)")
    ax.axhline(cache_bytes / MiB, color="tab:blue", ls="--", lw=1, label="local cache budget")
    ax.axhline(data_bytes / MiB, color="gray", ls=":", lw=1, label="DataFrame size")
    top = max(remote + [data_bytes / MiB]) * 1.15
    for when, name in sampler.phases:
        ax.axvline(when, color="gray", lw=0.6)
        ax.text(when, top * 0.98, " " + name, rotation=90, va="top", ha="left", fontsize=8,
                color="dimgray")
    ax.set_ylim(0, top)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("MiB")
    ax.set_title("pandas DataFrame in an fmem far-memory region: local vs remote bytes")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=4, fontsize=8,
              frameon=False)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--cache-mib", type=int, default=32, help="local cache budget")
    ap.add_argument("--out", default="dataframe.png", help="PNG of local vs remote bytes")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()

    data_bytes = args.rows * 5 * 8
    pool = fmem.open(f"mem:?size={max(1024, 4 * data_bytes // MiB)}M")
    region = fmem.Region(4 * data_bytes + 256 * MiB, cache=args.cache_mib * MiB, pool=pool)
    print(f"DataFrame of {args.rows} rows ({data_bytes / MiB:.0f} MiB) in a region with a"
          f" {args.cache_mib} MiB local cache")

    with Sampler(region) as sampler:
        sampler.phase("build")
        with fmem.numpy_arrays(region) as heap:
            df = build_frame(args.rows, args.seed)
            sampler.phase("group-by")
            result = aggregate(df)
            sampler.phase("second pass")
            spread = (df["price"] * df["qty"]).groupby(df["key"]).sum()
        sampler.phase("done")

    describe_columns(df, region)
    st = print_stats(region)
    hs = heap.stats()
    print(f"heap: {hs['heap_objects']} live objects, {hs['heap_remote_bytes'] / MiB:.1f} MiB;"
          f" {hs['mallocs']} allocations through numpy's handler, {hs['spills']} spilled")

    ref = reference(args.rows, args.seed)
    for col in ("price_sum", "qty_mean", "score_max", "weight_min", "rows"):
        assert np.allclose(result[col].to_numpy(), ref[col]), col
    assert spread.size == 1000 and np.isfinite(spread.to_numpy()).all()
    print("group-by aggregates (first groups), checked against plain numpy:")
    print(result.head(5).to_string())

    plot(sampler, st["cache_bytes"], data_bytes, args.out)
    print(f"wrote {args.out}")
    assert st["remote_bytes"] > st["cache_bytes"], "the data should not fit in the cache"


if __name__ == "__main__":
    main()
