"""Reference counts and leaks: allocate and free in loops, also through the
error paths; process RSS and pool usage return to their baseline."""
import gc
import sys
import weakref

import numpy as np
import pytest

import fmem
from conftest import UNDER_ASAN, make_region, rss_bytes

MiB = 1 << 20


def settle():
    gc.collect()
    return rss_bytes()


def grew(before, limit):
    """True when RSS grew by more than limit since before (never under ASan)."""
    return not UNDER_ASAN and settle() - before >= limit


def test_alloc_free_loop_returns_to_baseline(pool):
    refs = sys.getrefcount(pool)
    used = pool.stats()["allocated_bytes"]
    for n in (4096, 100_000, 2 * MiB):  # warm up caches and the heap
        pool.alloc(n).free()
    rss = settle()
    for i in range(20_000):
        b = pool.alloc(4096 << (i % 6))
        b[0] = 1
        if i % 3 == 0:
            m = memoryview(b)
            m.release()
        if i % 2:
            b.free()
        else:
            with b:
                pass
    del b
    assert sys.getrefcount(pool) == refs
    assert pool.stats()["allocated_bytes"] == used
    assert pool.stats()["live_buffers"] == 0
    assert not grew(rss, 4 * MiB)


def test_buffers_die_with_their_last_reference(pool):
    b = pool.alloc(4096)
    m = memoryview(b)
    w = weakref.ref(b)
    del b
    assert w() is not None  # the view keeps it
    m.release()
    del m
    assert w() is None
    assert pool.stats()["live_buffers"] == 0


def test_error_paths_do_not_leak(pool):
    refs = sys.getrefcount(pool)
    used = pool.stats()["allocated_bytes"]
    rss = settle()
    b = pool.alloc(4096)
    b.free()
    for _ in range(20_000):
        for bad in (-1, 0, 1 << 62):
            try:
                pool.alloc(bad)
            except fmem.SizeError:
                pass
        try:
            b.free()
        except fmem.DoubleFreeError:
            pass
        try:
            b[0]
        except fmem.ClosedError:
            pass
    del b
    assert sys.getrefcount(pool) == refs
    assert pool.stats()["allocated_bytes"] == used
    assert not grew(rss, 2 * MiB)


def test_pools_open_and_close_in_a_loop():
    rss = settle()
    for _ in range(50):
        with fmem.open("mem:?size=8M") as p:
            b = p.alloc(1 << 20)
            b[:] = bytes(1 << 20)
    assert not grew(rss, 8 * MiB)


def test_numpy_arrays_loop_returns_to_baseline(pool):
    refs = sys.getrefcount(pool)
    ctx = fmem.numpy_arrays(pool)
    used = pool.stats()["allocated_bytes"]
    with ctx:
        np.ones(MiB)  # heap warm-up
    rss = settle()
    for i in range(2_000):
        with ctx:
            a = np.full(1000 + 97 * i, 1.5)
            b = a * 2
        assert b.sum() == 3.0 * a.size
        del a, b
    s = ctx.stats()
    assert s["mallocs"] == s["frees"] and s["heap_objects"] == 0
    assert not grew(rss, 4 * MiB)
    del ctx, s
    gc.collect()
    assert sys.getrefcount(pool) == refs  # the heap let go of the pool
    assert pool.stats()["allocated_bytes"] == used


def test_regions_create_and_close_in_a_loop(pool):
    make_region(MiB, pool=pool).close()
    used = pool.stats()["allocated_bytes"]
    rss = settle()
    for _ in range(20):
        with make_region(2 * MiB, cache=MiB, pool=pool) as r:
            m = memoryview(r)
            m[::4096] = b"\x01" * (2 * MiB // 4096)
            m.release()
    assert pool.stats()["allocated_bytes"] == used
    assert not grew(rss, 8 * MiB)


@pytest.mark.parametrize("target", ["pool", "region"])
def test_heaps_release_their_owner(pool, target):
    owner = pool if target == "pool" else make_region(64 * MiB, cache=8 * MiB, pool=pool)
    refs = sys.getrefcount(owner)
    with fmem.numpy_arrays(owner):
        arrays = [np.zeros(n) for n in (10, 10_000, 1_000_000)]
    assert sys.getrefcount(owner) == refs + 1  # the heap holds it
    del arrays
    gc.collect()
    assert sys.getrefcount(owner) == refs
