#!/usr/bin/env python3
"""CPython fragmenting workload on the arena hook, with and without
fmem.compact(): far-memory bytes held at the end.

Each configuration is a fresh interpreter with install_arena_allocator() on
a shm pool (compactable heap). The workload builds large dicts of small
objects, keeps every k-th value and drops the dicts, --rounds times. At the
end "off" reads the pool's allocated bytes; "on" calls
fmem.compact(share_pages=False) first (and reports what it gave back and
how long it took); "shared" calls fmem.compact(), which then also merges
pages of different pools whose live bytes do not overlap into one
physical page; "empty" calls only fmem.release_empty_pools() (what
compact() gave back before it also released pages of used pools). Every
kept object is checked after compaction. The arena hook holds
pymalloc's arenas (1 MiB, or 256 KiB before Python 3.10), each one a large
heap object, not slab objects: what compaction can merge there is shown
here as measured. The last line gives pymalloc's own account at the end
(sys._debugmallocstats): the bytes in its allocated blocks bound what any
reclaim that leaves objects at their addresses can give back.
fmem.compact() also gives the pages of empty pymalloc pools back to the
pool's data file in /dev/shm (release_empty_pools), and the 4 KiB pages of
used pools that hold no live block, inside blocks that stay allocated:
"given back" is what the file's allocated size shrank by during
compact(), "held" the pool's allocated bytes minus that. Each pool's
first page (its header) stays, so page release without sharing ends at or
above a quarter of the arenas' bytes: that bound is printed too.

    bindings/python/pyrun bench/arena-compact.py [--objects 200000] [--rounds 5] [--json FILE]
"""
import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import gc, json, os, sys, time
import fmem
n, rounds, keep, mode = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
name = "fmem-arena-compact-%d" % os.getpid()
uri = "shm:/" + name
pool = fmem.open(uri + "?size=2G")
import atexit
atexit.register(lambda: os.path.exists("/dev/shm/%s.data" % name) and fmem.unlink(uri))
def file_bytes():  # the memory the pool's data file holds
    return os.stat("/dev/shm/%s.data" % name).st_blocks * 512
fmem.install_arena_allocator(pool)
kept = []
for r in range(rounds):
    d = {("k%d-%d" % (r, i)): (i, str(i), [i]) for i in range(n)}
    kept.extend(v for j, v in enumerate(d.values()) if j % keep == 0)
    del d
    gc.collect()
before = pool.stats()["allocated_bytes"]
file_before = file_bytes()
got, ms = 0, 0.0
if mode != "off":
    t = time.perf_counter()
    if mode == "empty":
        got = fmem.release_empty_pools()
    else:  # "on": pages of pools released; "shared": then pages shared too
        got = fmem.compact(share_pages=mode == "shared")
    ms = (time.perf_counter() - t) * 1e3
after = pool.stats()["allocated_bytes"]
file_after = file_bytes()
for i, si, li in kept:  # every kept object still reads as it was built
    assert si == str(i) and li == [i], (i, si, li)
fmem.unlink(uri)
s = fmem.arena_allocator_stats()
# pymalloc's own account (sys._debugmallocstats writes it to C stderr)
import tempfile
with tempfile.TemporaryFile("w+") as f:
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(f.fileno(), 2)
    try:
        sys._debugmallocstats()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    f.seek(0)
    text = f.read()
pm = {}
for line in text.splitlines():
    key, _, val = line.partition("=")
    val = val.strip().replace(",", "")
    if "unused pools" in key:
        pm["empty_pools"] = int(key.split()[0])
    elif key.startswith("# bytes in allocated blocks"):
        pm["block_bytes"] = int(val)
    elif key.startswith("# arenas allocated current"):
        pm["arenas"] = int(val)
print(json.dumps({"before": before, "after": after, "got": got, "ms": ms,
                  "file_before": file_before, "file_after": file_after,
                  "merges": s["heap_merges"], "kept": len(kept), "shared_pages": s["shared_pages"],
                  "large": s["heap_large"], "slabs": s["heap_slabs"], "pymalloc": pm}))
"""


def run(args, mode):
    out = subprocess.run([sys.executable, "-c", CHILD, str(args.objects), str(args.rounds),
                          str(args.keep), mode], capture_output=True, text=True, check=True,
                         env=os.environ)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--objects", type=int, default=200_000, help="entries per dict")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--keep", type=int, default=8, help="keep every k-th value")
    ap.add_argument("--json", metavar="FILE", help="also write the figures to FILE")
    args = ap.parse_args()
    off, empty, on, shared = (run(args, m) for m in ("off", "empty", "on", "shared"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"bench": "arena-compact", "objects": args.objects, "rounds": args.rounds,
                       "keep": args.keep, "python": sys.version.split()[0], "off": off,
                       "empty": empty, "on": on, "shared": shared}, f)
    print(f"arena-compact: {args.rounds} dicts of {args.objects} entries, every "
          f"{args.keep}th value kept ({on['kept']} objects), Python {sys.version.split()[0]}")
    for r in (off, empty, on, shared):  # pages given back to the file inside allocated blocks
        r["held"] = r["after"] - max(r["file_before"] - r["file_after"], 0)
    print(f"{'config':<8} {'pool MiB':>9} {'given back':>11} {'held MiB':>9} {'arenas':>7} "
          f"{'slabs':>6} {'merges':>7} {'compact ms':>11}")
    for name, r in (("off", off), ("empty", empty), ("on", on), ("shared", shared)):
        print(f"{name:<8} {r['after'] / 2**20:9.1f} {(r['after'] - r['held']) / 2**20:11.1f} "
              f"{r['held'] / 2**20:9.1f} {r['large']:7d} {r['slabs']:6d} {r['merges']:7d} "
              f"{r['ms']:11.2f}")
    print(f"far-memory bytes held, off / empty pools only: "
          f"{off['held'] / max(empty['held'], 1):.2f}x")
    print(f"far-memory bytes held, off / on: {off['held'] / max(on['held'], 1):.2f}x "
          f"(pool allocations alone: {off['after'] / max(on['after'], 1):.2f}x)")
    print(f"far-memory bytes held, off / shared: {off['held'] / max(shared['held'], 1):.2f}x "
          f"({shared['shared_pages']} pages mapping another pool's page)")
    pm = off.get("pymalloc", {})
    if pm.get("block_bytes"):
        # what no scheme that leaves objects where they are can beat: the
        # bytes of pymalloc's allocated blocks must stay in far memory
        print(f"pymalloc (off): {pm.get('arenas', 0)} arenas, "
              f"{pm['block_bytes'] / 2**20:.1f} MiB in allocated blocks, "
              f"{pm.get('empty_pools', 0)} empty pools; ceiling for any reclaim that "
              f"keeps objects in place: {off['after'] / pm['block_bytes']:.2f}x")
    # pymalloc's pool headers (the first 4 KiB of each 16 KiB pool) stay
    heads = on["large"] * (1 << 20) // 4
    print(f"pool header pages: {heads / 2**20:.1f} MiB; ceiling for releasing pages "
          f"of pools without sharing them: {off['held'] / max(heads, 1):.2f}x")


if __name__ == "__main__":
    main()
