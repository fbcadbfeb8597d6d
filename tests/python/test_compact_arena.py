"""fmem.release_empty_pools() and fmem.compact() on the arena allocator:
the pages of pymalloc's empty pools, and the free pages of its used pools,
go back to the pool's file, every live object stays intact, pools are
reused afterwards. Each case runs in a fresh interpreter (the arena
allocator is installed once per process); the page-release cases run both
with plain pymalloc and with its debug hooks (PYTHONMALLOC=pymalloc_debug:
every block carries guard bytes that are checked when it is freed)."""
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(sys.version_info[:2] != (3, 11),
                                reason="pymalloc's pool layout is checked for CPython 3.11 only")

PRELUDE = r"""
import gc, os, sys
import fmem
name = "fmem-compact-arena-py-%d" % os.getpid()
uri = "shm:/" + name
pool = fmem.open(uri + "?size=1G")
import atexit
atexit.register(lambda: os.path.exists("/dev/shm/%s.data" % name) and fmem.unlink(uri))
def file_bytes():
    return os.stat("/dev/shm/%s.data" % name).st_blocks * 512
def build(tag, n=150000, keep=1000):
    d = {("k%s-%d" % (tag, i)): (i, str(i), [i]) for i in range(n)}
    kept = {k: v for j, (k, v) in enumerate(d.items()) if j % keep == 0}
    del d
    gc.collect()
    return kept
def check(kept):
    for k, (i, s, l) in kept.items():
        assert k.endswith("-%d" % i) and s == str(i) and l == [i], k
"""


def run(code, malloc=None):
    env = dict(os.environ)
    if malloc:
        env["PYTHONMALLOC"] = malloc
    out = subprocess.run([sys.executable, "-c", PRELUDE + code], capture_output=True,
                         text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_empty_pools_go_back_and_objects_stay():
    out = run(r"""
assert fmem.release_empty_pools() == 0  # no arena hook yet
fmem.install_arena_allocator(pool)
kept = build("a")
f0 = file_bytes()
got = fmem.release_empty_pools()
f1 = file_bytes()
assert got > 1 << 20, got
assert 0 < f0 - f1 <= got, (f0, f1, got)  # those pages left the file (all of them
# where the file was fully allocated, as shm: pools' files are here)
check(kept)
assert fmem.release_empty_pools() == 0  # released ones are skipped until reused
more = build("b")  # reuses the released pools: fresh zero pages, new free lists
check(kept)
check(more)
got2 = fmem.compact()  # compact() releases too
assert got2 > 0, got2
check(kept)
check(more)
del kept, more
gc.collect()
print("ok", got, got2)
fmem.unlink(uri)
""")
    assert out.startswith("ok")


def test_fork_child_releases_nothing():
    out = run(r"""
fmem.install_arena_allocator(pool)
kept = build("a")
pid = os.fork()
if pid == 0:
    os._exit(0 if fmem.release_empty_pools() == 0 else 1)
_, status = os.waitpid(pid, 0)
assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
assert fmem.release_empty_pools() > 0
check(kept)
print("ok")
fmem.unlink(uri)
""")
    assert out.startswith("ok")


def test_thread_stacks_are_left_alone():
    """CPython takes its threads' frame stacks from the arena allocator too;
    releasing while deep frames live in them must not touch them."""
    out = run(r"""
import threading
fmem.install_arena_allocator(pool)
kept = build("a", n=60000, keep=500)
errors = []
def deep(n, acc):
    a, b, c, d = n, str(n), [n] * 3, (n, n)
    if n == 0:
        fmem.release_empty_pools()
        gc.collect()
        fmem.release_empty_pools()
    else:
        deep(n - 1, acc)
    if (a, b, c, d) != (n, str(n), [n] * 3, (n, n)):
        errors.append(n)
def worker():
    for _ in range(20):
        deep(600, [])
        junk = [str(i) * 3 for i in range(20000)]  # pools filled and emptied
        del junk
sys.setrecursionlimit(5000)
ts = [threading.Thread(target=worker) for _ in range(4)]
for t in ts:
    t.start()
for _ in range(50):
    fmem.release_empty_pools()
for t in ts:
    t.join()
assert not errors, errors[:10]
check(kept)
print("ok")
fmem.unlink(uri)
""")
    assert out.startswith("ok")


MALLOCS = pytest.mark.parametrize("malloc", [None, "pymalloc_debug"])


@MALLOCS
def test_free_pages_of_used_pools_go_back(malloc):
    """Survivors 1 in 1000 leave most pools used but sparse: after the empty
    pools are released, compact() still gives back pages of used pools."""
    out = run(r"""
fmem.install_arena_allocator(pool)
kept = build("a")
more = build("b")
fmem.release_empty_pools()
assert fmem.release_empty_pools() == 0
f0 = file_bytes()
got = fmem.compact()
f1 = file_bytes()
assert f0 - f1 >= 2 << 20, (f0, f1, got)  # pages of used pools left the file
assert got >= f0 - f1, (got, f0, f1)
check(kept)
check(more)
# a second pass finds nothing new, and nothing comes back by itself
f2 = file_bytes()
fmem.compact()
assert file_bytes() <= f2
check(kept)
check(more)
print("ok", f0 - f1)
fmem.unlink(uri)
""", malloc)
    assert out.startswith("ok"), out


@MALLOCS
def test_all_size_classes_keep_working(malloc):
    """20 rounds: objects of every pymalloc size class (list item arrays of 1
    to 64 pointers are 16 to 512 bytes, plus bytes, str, tuples, floats and
    ints), 1 in 50 kept at random, the rest freed, gc, compact(); then some
    survivors of earlier rounds freed. Every survivor is checked after each
    compaction, and allocation goes on in the pools whose pages went."""
    out = run(r"""
import random
fmem.install_arena_allocator(pool)
rng = random.Random(18)
def make(r, i):
    k = 1 + i % 64
    return (r, i, [i] * k, b"x" * (i % 700), "s%d" % i, float(i), (i, r), i * 1000003)
def ok(v):
    r, i, l, b, s, f, t, n = v
    return (l == [i] * (1 + i % 64) and b == b"x" * (i % 700) and s == "s%d" % i
            and f == float(i) and t == (i, r) and n == i * 1000003)
live = []
total = pages = 0
for r in range(20):
    objs = [make(r, i) for i in range(30000)]
    live.extend(v for v in objs if rng.random() < 0.02)
    del objs
    gc.collect()
    fmem.release_empty_pools()
    f0 = file_bytes()
    total += fmem.compact()
    pages += f0 - file_bytes()  # pages of used pools
    assert all(ok(v) for v in live), r
    rng.shuffle(live)
    del live[: len(live) // 3]  # frees into pools whose pages went
    gc.collect()
assert total > 1 << 20, total
assert pages > 1 << 20, pages
assert all(ok(v) for v in live)
del live
gc.collect()
fmem.compact()
again = [make(99, i) for i in range(30000)]
assert all(ok(v) for v in again)
print("ok", total, pages)
fmem.unlink(uri)
""", malloc)
    assert out.startswith("ok"), out


@MALLOCS
def test_pool_with_all_free_blocks_on_released_pages(malloc):
    """Pools filled with floats, then only the floats whose blocks lie on the
    header's page kept: each such pool's free blocks are all on its other
    pages, so page release leaves it with none and no tail, and it must be
    taken out of pymalloc's used pools as full. New floats must then never
    land on the released pages; frees put it back in use; once it empties,
    compact() rebuilds it and all its pages are used again."""
    out = run(r"""
fmem.install_arena_allocator(pool)
P, PAGE, HEAD = 16384, 4096, 48
floats = [float(i) + 0.5 for i in range(300000)]
ids = sorted(id(f) for f in floats)
stride = min(b - a for a, b in zip(ids, ids[1:]) if b // P == a // P and b > a)
lead = (ids[0] % P - HEAD) % stride  # debug hooks: the object starts after a header
nblocks = (P - HEAD) // stride
def block(f):
    return (id(f) % P - lead - HEAD) // stride
per_pool = {}
for f in floats:
    per_pool[id(f) // P] = per_pool.get(id(f) // P, 0) + 1
# pools where every block is one of ours, in far memory (arenas made before
# the hook are pymalloc's own mappings)
ranges = [tuple(int(x, 16) for x in line.split()[0].split("-"))
          for line in open("/proc/self/maps") if line.rstrip().endswith(name + ".data")]
full = {p for p, n in per_pool.items()
        if n == nblocks and any(lo <= p * P < hi for lo, hi in ranges)}
assert len(full) > 100, (len(full), stride)
def on_head_page(f):
    return HEAD + (block(f) + 1) * stride <= PAGE
kept = [f for f in floats if id(f) // P in full and on_head_page(f)]
from array import array
values = array("d", kept)  # not in pymalloc (and floats are not kept alive)
del floats, per_pool
gc.collect()
# float's own free list kept up to 100 of them allocated for pymalloc: take
# them (and some more) for good, and leave the pools they are in out
pad = [float(i) + 0.1 for i in range(300)]
full -= {id(f) // P for f in pad}
assert len(full) > 100, len(full)
fmem.release_empty_pools()
f0 = file_bytes()
fmem.compact()
f1 = file_bytes()
assert f0 - f1 >= len(full) * (P - PAGE) * 9 // 10, (f0 - f1, len(full))
def released(x):
    return id(x) // P in full and not on_head_page(x)
def check_kept():
    assert len(kept) == len(values) and all(a == b for a, b in zip(kept, values))
check_kept()
new = [float(i) + 0.25 for i in range(300000)]
assert not any(released(x) for x in new), "a float on a released page"
assert all(x == float(i) + 0.25 for i, x in enumerate(new))
check_kept()
# frees into the full pools relink them; new floats use those blocks only
del kept[::2], values[::2]
newer = [float(i) + 0.125 for i in range(len(kept) * 2)]
assert any(id(x) // P in full for x in newer)
assert not any(released(x) for x in newer)
assert all(x == float(i) + 0.125 for i, x in enumerate(newer))
check_kept()
fmem.compact()
check_kept()
assert all(x == float(i) + 0.125 for i, x in enumerate(newer))
# emptied and rebuilt: the whole pool is carved again
del kept, newer, new
gc.collect()
fmem.compact()
last = [float(i) + 0.75 for i in range(600000)]
assert any(released(x) for x in last), "released pages never used again"
assert all(x == float(i) + 0.75 for i, x in enumerate(last))
print("ok", len(full), f0 - f1)
fmem.unlink(uri)
""", malloc)
    assert out.startswith("ok"), out


# 4 KiB mappings of the pool's data file: one per page shared into another
# pool's page (an arena is one mapping per pool block otherwise)
MAPS = r"""
def alias_maps():
    n = 0
    for line in open("/proc/self/maps"):
        if line.rstrip().endswith(name + ".data"):
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            n += hi - lo == 4096
    return n
"""


@MALLOCS
def test_shared_pages_keep_every_object(malloc):
    """Sparse used pools (1 in 1000 values kept): after page release,
    compact() merges pages of different pools into one physical page (4 KiB
    alias mappings appear, more bytes leave the file). Every kept object
    stays intact; 30 rounds of new objects of the same size classes (into
    the pools whose pages are shared) and frees of old ones never overwrite
    a partner's object; compaction after each round; everything freed:
    compact() undoes the sharing of the pools left without objects (most
    alias pages go) and their arenas go back, and new objects still work. Fails
    on the code before page sharing (compact() has no share_pages, and no
    page is mapped twice)."""
    out = run(MAPS + r"""
import random
fmem.install_arena_allocator(pool)
kept = build("a")
more = build("b")
fmem.compact(share_pages=False)
assert alias_maps() == 0
f0 = file_bytes()
got = fmem.compact()
f1 = file_bytes()
assert alias_maps() > 50, alias_maps()
assert f0 - f1 >= 50 * 4096 and got >= f0 - f1, (f0, f1, got)
check(kept)
check(more)
rng = random.Random(18)
live = []
for r in range(30):
    objs = [(r, i, str(i) * (1 + i % 9), [i] * (1 + i % 40), float(i)) for i in range(20000)]
    live.extend(v for v in objs if rng.random() < 0.03)
    del objs
    if r % 3 == 0:  # frees into pools with shared pages
        for k in list(kept)[r::7]:
            del kept[k]
    gc.collect()
    fmem.compact()
    check(kept)
    check(more)
    for r2, i, s, l, f in live:
        assert s == str(i) * (1 + i % 9) and l == [i] * (1 + i % 40) and f == float(i), (r2, i)
    rng.shuffle(live)
    del live[: len(live) // 2]
st = fmem.arena_allocator_stats()
arenas, shared = st["heap_large"], st["shared_pages"]
assert shared > 50, shared
del kept, more, live
gc.collect()
fmem.compact()  # pools left without objects stop sharing and empty
st = fmem.arena_allocator_stats()
left = st["heap_large"]
assert st["shared_pages"] < shared // 2, (st["shared_pages"], shared)
assert left < arenas, (left, arenas)  # their arenas were freed
again = build("c", n=100000, keep=10)
check(again)
print("ok", got, alias_maps(), shared, st["shared_pages"], arenas, left)
fmem.unlink(uri)
""", malloc)
    assert out.startswith("ok"), out


def test_fork_child_sees_shared_pages():
    """A fork child after pages were shared reads every object as it was,
    allocates, frees and writes in its own copies, and compact() gives
    nothing there; the parent's objects do not change."""
    out = run(MAPS + r"""
fmem.install_arena_allocator(pool)
kept = build("a")
fmem.compact()
assert alias_maps() > 50, alias_maps()
pid = os.fork()
if pid == 0:
    try:
        check(kept)
        for k, (i, s, l) in list(kept.items())[::2]:
            l.append(-1)  # writes into objects on shared pages
            del kept[k]
        junk = build("child", n=50000, keep=5)
        check(junk)
        for (i, s, l) in kept.values():
            assert l == [i], l
        ok = fmem.compact() == 0
    except BaseException as e:
        print(e)
        os._exit(2)
    os._exit(0 if ok else 1)
_, status = os.waitpid(pid, 0)
assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
check(kept)
print("ok")
fmem.unlink(uri)
""")
    assert out.startswith("ok"), out
