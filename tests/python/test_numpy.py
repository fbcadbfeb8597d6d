"""numpy's data handler: arrays of many sizes made inside the block live in
far memory, stay valid after it and are freed into the heap later."""
import gc
import threading

import numpy as np
import pytest

import fmem
from conftest import make_region

SIZES = [0, 1, 3, 7, 8, 100, 511, 512, 4095, 4096, 4097, 16383, 16384, 16385, 65536,
         100_000, 1 << 20, (1 << 20) + 1, 5_000_000]


def handler_name():
    return np.core.multiarray.get_handler_name()


@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.float64, np.complex128])
def test_many_sizes_round_trip(pool, dtype):
    ctx = fmem.numpy_arrays(pool)
    with ctx:
        assert handler_name() == "fmem"
        arrays = [np.arange(n, dtype=dtype) for n in SIZES]
    assert handler_name() != "fmem"
    for n, a in zip(SIZES, arrays):
        assert np.core.multiarray.get_handler_name(a) == "fmem"
        if a.nbytes:
            assert pool.owns(a), n
        assert a.size == n
        assert np.array_equal(a, np.arange(n, dtype=dtype))
        a += 1  # still writable after the block
        assert np.array_equal(a, np.arange(1, n + 1).astype(dtype))
    s = ctx.stats()
    assert s["heap_objects"] == len(SIZES) and s["spills"] == 0
    del arrays, a
    gc.collect()
    assert ctx.stats()["heap_objects"] == 0


def test_operations_inside_allocate_in_the_heap(pool):
    with fmem.numpy_arrays(pool):
        a = np.random.default_rng(1).random(200_000)
        b = np.sqrt(a) * 3 + a
        c = np.concatenate([a, b])
        d = c.reshape(2, -1).T.copy()
        e = np.sort(a)
    plain = np.random.default_rng(1).random(200_000)
    assert np.array_equal(a, plain)
    assert np.allclose(b, np.sqrt(plain) * 3 + plain)
    assert all(pool.owns(x) for x in (a, b, c, d, e))
    assert not pool.owns(plain)
    assert d.shape == (200_000, 2) and np.array_equal(d[:, 0], a)
    assert e[0] <= e[-1]


def test_arrays_from_outside_are_not_touched(pool):
    outside = np.arange(1000.0)
    with fmem.numpy_arrays(pool):
        inside = outside * 2
        del outside  # freed by its own (default) handler inside the block
    assert pool.owns(inside) and inside[-1] == 1998.0


def test_resize_reallocates_in_the_heap(pool):
    ctx = fmem.numpy_arrays(pool)
    with ctx:
        a = np.arange(10.0)
    a.resize(1_000_000, refcheck=False)  # realloc through the array's handler
    assert a[9] == 9.0 and a[-1] == 0.0 and pool.owns(a)
    a.resize(3, refcheck=False)
    assert a.tolist() == [0.0, 1.0, 2.0]
    assert ctx.stats()["reallocs"] >= 1


def test_nested_blocks_and_reuse(pool):
    other = fmem.open("mem:?size=64M")
    outer = fmem.numpy_arrays(pool)
    with outer:
        a = np.ones(1000)
        with fmem.numpy_arrays(other):
            b = np.ones(1000)
        c = np.ones(1000)
        with pytest.raises(fmem.BusyError):
            outer.__enter__()
    assert outer.active is False
    with outer:  # the same object again
        d = np.ones(1000)
    assert pool.owns(a) and pool.owns(c) and pool.owns(d)
    assert other.owns(b) and not pool.owns(b)
    other.close()  # b keeps the pool's memory until it goes
    assert b.sum() == 1000
    del b


def test_the_handler_is_per_thread(pool):
    seen = {}

    def worker():
        seen["name"] = handler_name()
        seen["owned"] = pool.owns(np.ones(10_000))

    with fmem.numpy_arrays(pool):
        t = threading.Thread(target=worker)
        t.start()
        t.join()
        assert pool.owns(np.ones(10_000))
    assert seen == {"name": "default_allocator", "owned": False}


def test_threads_allocate_in_the_same_heap(pool):
    errors = []

    def worker(k):
        try:
            with fmem.numpy_arrays(pool):
                for i in range(300):
                    a = np.full(100 + 37 * i, k, dtype=np.int64)
                    assert pool.owns(a) and int(a.sum()) == k * a.size
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_arrays_outlive_the_block_and_the_pool():
    p = fmem.open("mem:?size=64M")
    with fmem.numpy_arrays(p):
        a = np.arange(100_000, dtype=np.int64)
    p.close()
    assert "closing" in repr(p)  # the heap still needs it
    assert a.sum() == 100_000 * 99_999 // 2
    del a
    gc.collect()
    assert "closing" not in repr(p)


def test_pandas_columns_in_far_memory(pool):
    pd = pytest.importorskip("pandas")
    with fmem.numpy_arrays(pool):
        df = pd.DataFrame({"k": np.arange(100_000) % 7, "v": np.ones(100_000)})
        g = df.groupby("k")["v"].sum()
    assert pool.owns(df["v"].to_numpy()) and g.sum() == 100_000


def test_region_target(pool):
    r = make_region(64 << 20, cache=4 << 20, pool=pool)
    with fmem.numpy_arrays(r):
        a = np.arange(2_000_000, dtype=np.float64)  # 16 MB > 4 MiB cache
    assert r.contains(a)
    with pytest.raises(fmem.BufferInUseError):
        memoryview(r)  # the heap owns the region
    assert a.sum() == 2_000_000 * 1_999_999 / 2
    st = r.stats()
    assert st["evictions"] > 0 and st["remote_bytes"] >= 12 << 20
    assert st["cached_bytes"] <= st["cache_bytes"]
    r.close()  # deferred: a lives in it
    assert r.closed and a[123] == 123.0
    del a
    gc.collect()
    assert repr(r) == "<fmem.Region closed>"


def test_frombuffer_on_region(pool):
    r = make_region(8 << 20, cache=1 << 20, pool=pool)
    a = np.frombuffer(r, dtype=np.int32)
    a[:] = np.arange(a.size, dtype=np.int32)
    assert int(a[::1024].sum()) == int(np.arange(a.size, dtype=np.int64)[::1024].sum())
    with pytest.raises(fmem.BufferInUseError):
        with fmem.numpy_arrays(r):
            pass  # views exist: no heap may own the region
    del a
    r.close()


@pytest.mark.parametrize("where", ["pool", "region"])
def test_arrays_never_touch(pool, where):
    # numpy runs its vector loops only where input and output do not
    # overlap, and takes arrays that touch as overlapping
    target = pool if where == "pool" else make_region(256 << 20, cache=256 << 20, pool=pool)
    sizes = [8, 64, 96, 128, 4096, 16384, 65536, 131072, 1 << 20, 4 << 20]
    with fmem.numpy_arrays(target):
        arrays = [np.empty(n // 8) for n in sizes for _ in range(6)]
    spans = sorted((a.ctypes.data, a.ctypes.data + a.nbytes) for a in arrays)
    touching = [(e0, s1) for (_, e0), (s1, _) in zip(spans, spans[1:]) if e0 >= s1]
    assert not touching, f"{len(touching)} of {len(spans)} arrays touch the next one"
    del arrays


def test_ufunc_results_do_not_depend_on_placement(pool):
    # np.log10 on 8 values, against the same on plain memory, bit for bit
    x = np.array([1.0, 0.0, -1.0, np.pi / 2] * 2)
    with np.errstate(all="ignore"):
        want = np.log10(x)
        with fmem.numpy_arrays(pool):
            differ = 0
            for _ in range(300):
                a = x.copy()
                differ += not np.array_equal(np.log10(a), want, equal_nan=True)
    assert differ == 0, f"{differ} of 300 differ"
