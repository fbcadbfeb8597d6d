"""fork() with far memory in use, as real programs fork: multiprocessing's
fork start method and os.fork, with pymalloc's arenas and numpy arrays in
a pool and in a region. Each side must see its own data: the child a
snapshot as of the fork, the parent its own later writes; both go on
allocating and exit cleanly. Every case runs in a fresh interpreter (the
arena hook stays for the life of a process)."""
import json

import pytest

from conftest import run_python

# target: "pool" (a new in-process pool), "shm" (a named pool other
# processes share: the child gets copies of its blocks) or "region" (a
# region on an in-process pool, with a cache of a quarter of its size)
SETUP = r"""
import gc, json, os, sys
import multiprocessing as mp
import fmem
KIND = "KIND_"
def make_target():
    if KIND == "pool":
        return fmem.open("mem:?size=512M")
    if KIND == "shm":                   # a pool other processes share
        import atexit
        uri = "shm:/fmem-pytest-fork-%d" % os.getpid()
        atexit.register(fmem.unlink, uri)
        return fmem.open(uri + "?size=512M")
    try:
        return fmem.Region(256 << 20, cache=0.25)
    except fmem.AccessError:
        print(json.dumps({"skip": "no userfaultfd"}))
        sys.exit(0)
"""


def run(kind, body, timeout=180):
    proc = run_python(SETUP.replace("KIND_", kind) + body, timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if "skip" in out:
        pytest.skip(out["skip"])
    return out


ARENA_MP = r"""
target = fmem.install_arena_allocator(make_target())
table = {i: (str(i) * 3, [i, i + 1]) for i in range(200_000)}   # arenas in far memory

def work(k):
    # the child reads the parent's table as of the fork, then rebuilds
    # dicts of small objects on top of it (reusing freed arena space)
    s = sum(len(v[0]) + v[1][1] for key, v in table.items() if key % 7)
    for key in range(0, 200_000, 7):
        table[key] = ("child", k)
    d = {str(i): [i] * 3 for i in range(50_000)}
    return s + sum(len(v) for v in d.values()) + sum(1 for v in table.values() if v[0] == "child")

ctx = mp.get_context("fork")
with ctx.Pool(2) as p:
    got = p.map(work, range(6))
for key in range(0, 200_000, 5):                # the parent writes after the fork
    table[key] = ("parent", key)
gc.collect()
ok_parent = all(v[0] == "parent" for k, v in table.items() if k % 5 == 0) and \
    all(v[0] == str(k) * 3 for k, v in table.items() if k % 5)
print(json.dumps({"got": got, "ok_parent": ok_parent,
                  "stats": fmem.arena_allocator_stats()}))
"""


def expected_work():
    s = sum(len(str(i) * 3) + i + 1 for i in range(200_000) if i % 7)
    return s + 50_000 * 3 + len(range(0, 200_000, 7))


@pytest.mark.parametrize("kind", ["pool", "shm", "region"])
def test_multiprocessing_with_the_arena_hook(kind):
    out = run(kind, ARENA_MP)
    assert out["got"] == [expected_work()] * 6
    assert out["ok_parent"]
    assert out["stats"]["mallocs"] > 0


NUMPY_MP = r"""
import numpy as np
target = make_target()
with fmem.numpy_arrays(target):
    big = np.arange(4_000_000, dtype=np.float64)          # 32 MB
    small = [np.full(13 + i % 50, float(i)) for i in range(3000)]
expect_big = float(big.sum())
expect_small = float(sum(a.sum() for a in small))

def work(k):
    s = float(big.sum()) + float(sum(a.sum() for a in small))
    big[:] = -1.0                                  # the child's copy only
    for a in small:
        a += 1
    with fmem.numpy_arrays(target):                # new arrays in the child
        c = np.ones(1_000_000) * k
    return s, float(c.sum()), float(big.sum())

ctx = mp.get_context("fork")
with ctx.Pool(2, maxtasksperchild=1) as p:       # a fresh fork for each task
    got = p.map(work, range(4))
big[::2] = 7.0                                     # the parent writes after
after = float(big.sum())
print(json.dumps({"got": got, "expect": expect_big + expect_small,
                  "parent_small": float(sum(a.sum() for a in small)),
                  "expect_small": expect_small, "after": after,
                  "want_after": float(7.0 * 2_000_000 + np.arange(1, 4_000_000, 2).sum()),
                  "n": big.size}))
"""


@pytest.mark.parametrize("kind", ["pool", "shm", "region"])
def test_multiprocessing_with_numpy_arrays(kind):
    pytest.importorskip("numpy")
    out = run(kind, NUMPY_MP)
    for k, (s, c, b) in enumerate(out["got"]):
        assert s == out["expect"]
        assert c == 1_000_000 * k
        assert b == -out["n"]
    assert out["parent_small"] == out["expect_small"]
    assert out["after"] == out["want_after"]


OS_FORK = r"""
target = fmem.install_arena_allocator(make_target())
objs = [{"k": i, "v": str(i), "l": [i] * 4} for i in range(100_000)]
del objs[::2]                                   # free lists in the snapshot
gc.collect()
results = []
for round in range(5):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            ok = all(o["v"] == str(o["k"]) for o in objs)
            for o in objs:                         # rebuild the dicts here
                o["v"] = "c" * (o["k"] % 17)
                o["new"] = {"x": [o["k"]]}
            big = [{"i": i} for i in range(200_000)]
            ok = ok and sum(len(o["v"]) for o in objs) == sum(o["k"] % 17 for o in objs)
            os.write(w, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(w)
    for o in objs[::3]:                            # the parent goes on too
        o["l"].append(round)
    extra = [{"p": i} for i in range(50_000)]
    del extra
    msg = os.read(r, 1)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    results.append(msg == b"1" and status == 0)
ok_parent = all(o["v"] == str(o["k"]) and "new" not in o for o in objs)
print(json.dumps({"results": results, "ok_parent": ok_parent}))
"""


@pytest.mark.parametrize("kind", ["pool", "shm", "region"])
def test_os_fork_rebuilding_dicts(kind):
    out = run(kind, OS_FORK)
    assert out["results"] == [True] * 5
    assert out["ok_parent"]


PANDAS_BOOL = r"""
import pandas as pd
target = make_target()
with fmem.numpy_arrays(target):
    df = pd.DataFrame({"k": [1, 1, 2, 2, 3],
                       "b": pd.array([True, None, False, True, None], dtype="boolean")})
    last = df.groupby("k").last()
print(json.dumps({"dtype": str(last["b"].dtype),
                  "values": [None if v is pd.NA else bool(v) for v in last["b"]]}))
"""


def test_pandas_nullable_boolean_keeps_its_dtype():
    pytest.importorskip("pandas")
    out = run("pool", PANDAS_BOOL)
    assert out["dtype"] == "boolean"
    assert out["values"] == [True, True, None]
