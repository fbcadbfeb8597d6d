"""fmem.compact(): sparse slabs of the heap numpy arrays use are merged, the
arrays keep their data and addresses, the stats count the bytes given back."""
import gc
import os
import random

import numpy as np
import pytest

import fmem
from conftest import make_region


@pytest.fixture
def shm_pool():
    """A shm pool (only those can be compacted: a chunk is mapped twice)."""
    uri = f"shm:/fmem-compact-py-{os.getpid()}"
    p = fmem.open(uri + "?size=256M")
    yield p
    gc.collect()
    p.close()
    fmem.unlink(uri)


def fragment(pool, n=20000, keep=0.15):
    rng = random.Random(7)
    with fmem.numpy_arrays(pool):
        arrays = [np.full(rng.choice([8, 16, 32, 64, 128]), i, dtype=np.int64)
                  for i in range(n)]
    kept = {i: a for i, a in enumerate(arrays) if rng.random() < keep}
    del arrays
    gc.collect()
    return kept


def test_compact_keeps_arrays_and_gives_bytes_back(shm_pool):
    kept = fragment(shm_pool)
    ctx = fmem.numpy_arrays(shm_pool)
    before = ctx.stats()
    addresses = {i: a.__array_interface__["data"][0] for i, a in kept.items()}
    got = fmem.compact(shm_pool)
    after = ctx.stats()
    assert got > 0
    assert after["heap_reclaimed_bytes"] - before["heap_reclaimed_bytes"] == got
    assert after["heap_merges"] > before["heap_merges"]
    assert after["heap_remote_bytes"] <= before["heap_remote_bytes"] - got
    for i, a in kept.items():
        assert a.__array_interface__["data"][0] == addresses[i]
        assert np.all(a == i), i
        a += 1  # writable through the same address
        assert np.all(a == i + 1)
    del kept, a
    gc.collect()
    assert ctx.stats()["heap_objects"] == 0


def test_compact_with_budget_and_without_target(shm_pool):
    kept = fragment(shm_pool)
    assert fmem.compact(shm_pool, budget=1) == 0  # not even one slab's objects
    assert fmem.compact() >= 0  # the default pool and arena heaps, if any
    assert fmem.compact(shm_pool) > 0
    for i, a in kept.items():
        assert np.all(a == i)


def test_compact_bad_arguments(shm_pool, pool):
    with pytest.raises(TypeError):
        fmem.compact("shm:/x")
    with pytest.raises(ValueError):
        fmem.compact(shm_pool, budget=-1)
    assert fmem.compact(pool) == 0  # no heap on it yet
    with fmem.numpy_arrays(pool):
        a = np.zeros(10)
    with pytest.raises(fmem.NotSupportedError):
        fmem.compact(pool)  # a private mem: pool cannot map a chunk twice
    del a


def test_compact_region_heap_refused():
    r = make_region(8 << 20)
    with fmem.numpy_arrays(r):
        a = np.zeros(10)
    with pytest.raises(fmem.NotSupportedError):
        fmem.compact(r)
    del a
    gc.collect()
    r.close()
