"""fmem.release_empty_pools() and fmem.compact() on the arena allocator:
the pages of pymalloc's empty pools go back to the pool's file, every live
object stays intact, pools are reused afterwards. Each case runs in a fresh
interpreter (the arena allocator is installed once per process)."""
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


def run(code):
    out = subprocess.run([sys.executable, "-c", PRELUDE + code], capture_output=True,
                         text=True, env=os.environ, timeout=300)
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
