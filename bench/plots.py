#!/usr/bin/env python3
"""Draw the benchmark figures of the docs from the benchmarks' JSON output.

    python3 bench/plots.py [DATADIR [IMGDIR]]     (make plots)

DATADIR (default docs/data) holds what bench/collect.sh wrote; IMGDIR
(default docs/img) gets:

  alloc-threads.png   fmem-bench churn: allocations/s and p99 latency of
                      fmem and its baselines against client threads
  region-cache.png    fmem-regionbench: scan throughput as a ratio to local
                      memory against the local cache size, sequential and
                      random, and (--vs-swap) Linux swapping to zram with
                      the same local memory
  pandas-cache.png    pandas-bench.py: the pandas workload's speed against
                      plain memory (wall and CPU time) in a region whose
                      cache holds the working set, 50 % and 25 % of it,
                      and (--vs-swap) under kernel swap with as much memory
  runtime-ratios.png  numpy, pymalloc arenas, Lua and the LD_PRELOAD
                      interposer: speed against the same program on plain
                      memory (1 = as fast; Lua: fmem-lua with glibc
                      malloc, and the stock lua5.4 for reference), and the
                      object allocator against glibc malloc

Every figure names the machine and load the data were taken at
(machine.json). A missing input file leaves its figure out, with a note.
"""
import json
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {"fmem": ("tab:blue", "o"), "free-array": ("tab:orange", "s"),
         "rpc": ("tab:green", "^"), "mmap": ("tab:gray", "x")}


def load_lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.startswith("{")]


def load(path):
    with open(path) as f:
        return json.load(f)


def machine_note(data_dir):
    try:
        m = load(os.path.join(data_dir, "machine.json"))
    except OSError:
        return ""
    return (f"{m['cores']} vCPU VM, kernel {m['kernel']}, load average {m['load_before']}"
            f" before, {m['load_after']} after ({m['date']})")


def save(fig, out, name, note):
    if note:
        fig.text(0.01, 0.005, note, fontsize=7, color="dimgray", ha="left", va="bottom")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    path = os.path.join(out, name)
    # no timestamps in the file: the same data give the same PNG
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)
    print(f"plots: {path}")


def plot_alloc(data_dir, out, note):
    rows = [r for r in load_lines(os.path.join(data_dir, "alloc.jsonl"))
            if r.get("workload") == "churn"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for alloc in sorted({r["allocator"] for r in rows}, key=list(STYLE).index):
        pts = sorted((r["threads"], r["ops_per_s"], r["lat_p99_us"]) for r in rows
                     if r["allocator"] == alloc)
        color, marker = STYLE.get(alloc, ("black", "."))
        t = [p[0] for p in pts]
        ax1.plot(t, [p[1] for p in pts], marker=marker, color=color, label=alloc)
        ax2.plot(t, [p[2] for p in pts], marker=marker, color=color, label=alloc)
    rtt = rows[0]["rtt_ns"] / 1000 if rows else 0
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("client threads")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    ax1.set_ylabel("allocations / s")
    ax1.set_title(f"4 KiB churn, {rtt:g} us round trip: throughput")
    ax2.set_yscale("log")
    ax2.set_ylabel("p99 latency of one allocation (us)")
    ax2.set_title("p99 latency")
    save(fig, out, "alloc-threads.png", note)


def plot_region(data_dir, out, note):
    rows = load_lines(os.path.join(data_dir, "region.jsonl"))
    # fmem-regionbench --json names its own machine and load (it may be
    # collected apart from the other benchmarks)
    m = next((r for r in rows if r.get("workload") == "machine"), None)
    if m:
        note = (f"{m['cores']} vCPU VM, kernel {m['kernel']}, load average {m['load_before']}"
                f" before, {m['load_after']} after")
    fig, ax = plt.subplots(figsize=(6.5, 4))
    # ratios: each figure is against a local scan run just before it (the
    # machine's load moves the absolute figures)
    for pattern, color in (("seq", "tab:blue"), ("rand", "tab:red")):
        for workload, style, what in (("region", "-", "fmem region"),
                                      ("region-swap", ":", "kernel swap (zram, lz4)")):
            pts = sorted((r["cache_pct"], r["ratio_vs_local"]) for r in rows
                         if r.get("pattern") == pattern and r.get("workload") == workload)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o" if style == "-"
                        else "x", linestyle=style, color=color, label=f"{what}, {pattern}")
    ax.axhline(1.0, color="black", linewidth=0.8, label="local memory")
    sizes = [r["size"] for r in rows if "size" in r]
    size = sizes[0] >> 20 if sizes else 0
    ax.set_yscale("log")
    ax.set_xlabel("local memory (% of the data)")
    ax.set_ylabel("scan throughput / local memory's")
    ax.set_title(f"{size} MiB scanned in 4 KiB blocks: fmem region and kernel swap",
                 fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    save(fig, out, "region-cache.png", note)


def plot_pandas(data_dir, out, note):
    lines = load_lines(os.path.join(data_dir, "pandas.jsonl"))
    rows = [r for r in lines if r.get("workload") == "pandas" and r["config"] != "plain"]
    m = next((r for r in lines if r.get("workload") == "machine"), None)
    if m:  # the benchmark names its own machine and load
        note = (f"{m['cores']} vCPU VM, kernel {m['kernel']}, load average {m['load_before']}"
                f" before, {m['load_after']} after")
    order = ["region", "region50", "region25", "swap50", "swap25"]
    rows.sort(key=lambda r: order.index(r["config"]) if r["config"] in order else 99)
    names = {"region": "region, cache\nholds all", "region50": "region\n50 %",
             "region25": "region\n25 %", "swap50": "kernel swap\n50 %",
             "swap25": "kernel swap\n25 %"}
    fig, ax = plt.subplots(figsize=(6.5, 4))
    x = range(len(rows))
    wall = [r["ratio_vs_plain"] for r in rows]
    cpu = [r.get("cpu_ratio_vs_plain", 0) for r in rows]
    ax.bar([i - 0.2 for i in x], wall, width=0.4, color="tab:blue", label="wall time")
    ax.bar([i + 0.2 for i in x], cpu, width=0.4, color="tab:gray", label="CPU time")
    for i in x:
        ax.annotate(f"{wall[i]:.2f}", (i - 0.2, wall[i]), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(list(x))
    ax.set_xticklabels([names.get(r["config"], r["config"]) for r in rows], fontsize=8)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_ylabel("speed / plain memory's (1 = as fast)")
    rows_n = rows[0]["rows"] if rows else 0
    ws = rows[0]["working_set"] >> 20 if rows else 0
    ax.set_title(f"pandas: CSV load, groupby, merge, sort of {rows_n} rows "
                 f"(working set {ws} MiB)", fontsize=10)
    vs = sorted((r["cache_pct"], r["fmem_vs_swap"]) for r in lines
                if r.get("workload") == "pandas-swap")
    if vs:  # the anchor: fmem against kernel swap with the same memory, wall time
        ax.text(0.99, 0.90, "fmem / kernel swap (wall): " +
                ", ".join(f"{v:.2f}x at {pct} %" for pct, v in vs),
                transform=ax.transAxes, ha="right", va="top", fontsize=7)
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(True, axis="y", alpha=0.3)
    save(fig, out, "pandas-cache.png", note)


def bars(ax, labels, values, title, ylabel):
    colors = ["tab:blue" if v >= 0.95 else "tab:orange" if v >= 0.5 else "tab:red"
              for v in values]
    ax.bar(range(len(values)), values, color=colors)
    ax.set_xticks(range(len(values)))
    ax.set_xticklabels(labels, rotation=20, ha="right", fontsize=8)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(ylabel, fontsize=8)
    for i, v in enumerate(values):
        ax.annotate(f"{v:.2f}", (i, v), ha="center", va="bottom", fontsize=7)


def plot_runtimes(data_dir, out, note):
    panels = []
    try:
        s = load(os.path.join(data_dir, "numpy.json"))["summary"]
        keys = [k for k in ("shm", "region50", "region25") if k in s]
        panels.append(("numpy: plain time / fmem time (geometric mean)",
                       [f"{k} {part}" for k in keys for part in ("reductions", "elementwise")],
                       [s[k][part] for k in keys for part in ("reductions", "elementwise")]))
    except OSError as e:
        print(f"plots: no numpy data ({e})")
    try:
        s = load(os.path.join(data_dir, "arena.json"))["summary"]
        keys = [k for k in s if k != "plain"]
        panels.append(("pymalloc arenas: plain time / fmem time", keys,
                       [s[k]["ratio"] for k in keys]))
    except OSError as e:
        print(f"plots: no arena data ({e})")
    try:
        # against the same binary with glibc malloc: only the heap differs
        c = load(os.path.join(data_dir, "lua-gc.json"))["configs"]
        base = next(r for r in c if r["name"] == "fmem-lua libc")
        rows = [r for r in c if r is not base]
        panels.append(("Lua GC workload: time with glibc malloc / time",
                       [r["name"] for r in rows], [base["wall"] / r["wall"] for r in rows]))
    except OSError as e:
        print(f"plots: no Lua data ({e})")
    try:
        p = load(os.path.join(data_dir, "preload.json"))["programs"]
        panels.append(("LD_PRELOAD: CPU time plain / preloaded", [r["name"] for r in p],
                       [r["cpu_plain"] / r["cpu_preload"] for r in p]))
    except OSError as e:
        print(f"plots: no preload data ({e})")
    try:
        rows = load_lines(os.path.join(data_dir, "malloc.jsonl"))
        rows = [r for r in rows if r["allocator"] == "fmem"]
        panels.append(("fmem_heap vs glibc malloc (ops/s ratio)", [r["workload"] for r in rows],
                       [r["ratio_vs_glibc"] for r in rows]))
    except OSError as e:
        print(f"plots: no malloc data ({e})")
    if not panels:
        return
    cols = 3
    nrows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(13, 4 * nrows), squeeze=False)
    for ax, (title, labels, values) in zip(axes.flat, panels):
        bars(ax, labels, values, title, "speed relative to the baseline (1 = as fast)")
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    save(fig, out, "runtime-ratios.png", note)


def main():
    top = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
    data_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(top, "docs", "data")
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(top, "docs", "img")
    os.makedirs(out, exist_ok=True)
    note = machine_note(data_dir)
    for name, fn in (("alloc.jsonl", plot_alloc), ("region.jsonl", plot_region),
                     ("pandas.jsonl", plot_pandas)):
        if os.path.exists(os.path.join(data_dir, name)):
            fn(data_dir, out, note)
        else:
            print(f"plots: no {name} in {data_dir}: figure skipped")
    plot_runtimes(data_dir, out, note)


if __name__ == "__main__":
    main()
