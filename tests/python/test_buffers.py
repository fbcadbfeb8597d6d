"""Pools and buffers: the buffer protocol without copies, indexing and
slicing, freeing, context managers, statistics."""
import os

import numpy as np
import pytest

import fmem


def test_alloc_sizes_and_rounding(pool):
    for n in (1, 100, 4096, 4097, 70000, 1 << 20, 3 << 20):
        with pool.alloc(n) as b:
            assert len(b) == b.size == n
            assert b.capacity == fmem.size_round(n) >= max(n, fmem.CHUNK_SIZE)
            assert b.capacity & (b.capacity - 1) == 0
            assert b.handle["addr"] % b.capacity == 0  # aligned to its size


def test_sizes_may_be_any_integer(pool):
    with pool.alloc(np.int64(5000)) as b, pool.alloc(True) as one:
        assert len(b) == 5000 and len(one) == 1


def test_memoryview_is_the_pool_memory(pool):
    b = pool.alloc(10000)
    m = memoryview(b)
    assert m.nbytes == 10000 and not m.readonly and m.contiguous and m.format == "B"
    m[:5] = b"hello"
    assert b[:5] == b"hello"
    b[5:11] = b" world"
    assert bytes(m[:11]) == b"hello world"
    assert b.exports == 1
    m.release()
    assert b.exports == 0
    b.free()


def test_numpy_frombuffer_shares_memory(pool):
    b = pool.alloc(8 * 1000)
    a = np.frombuffer(b, dtype=np.float64)
    assert a.flags.writeable and a.size == 1000
    assert a.__array_interface__["data"][0] == b.address  # no copy
    a[:] = np.arange(1000)
    assert bytes(b[8:16]) == np.float64(1).tobytes()
    b[0:8] = np.float64(42).tobytes()
    assert a[0] == 42
    assert pool.owns(a) and pool.owns(b) and pool.owns(b.address + 100)
    assert not pool.owns(np.zeros(10))
    del a
    b.free()


def test_bytes_and_bytearray_copy_the_contents(pool):
    data = os.urandom(5000)
    with pool.alloc(5000) as b:
        b[:] = data
        assert bytes(b) == data
        assert bytearray(b) == data
        assert b.read() == data and b.read(10, 20) == data[10:30]
        assert b.write(b"xyz", 4997) == 3
        assert b[-3:] == b"xyz"


def test_indexing_and_slicing_like_mmap(pool):
    with pool.alloc(256) as b:
        for i in range(256):
            b[i] = i
        assert b[0] == 0 and b[255] == 255 and b[-1] == 255 and b[-256] == 0
        assert b[10:14] == bytes([10, 11, 12, 13])
        assert b[::64] == bytes([0, 64, 128, 192])
        assert b[250:300] == bytes(range(250, 256))
        assert b[5:2] == b""
        b[0:8:2] = b"\xff\xff\xff\xff"
        assert b[0:8] == bytes([255, 1, 255, 3, 255, 5, 255, 7])
        with pytest.raises(IndexError):
            b[256]
        with pytest.raises(IndexError):
            b[-257] = 1
        with pytest.raises(ValueError):
            b[0] = 256
        with pytest.raises(TypeError):
            b[0] = "a"
        with pytest.raises(IndexError):
            b[0:4] = b"abc"
        with pytest.raises(TypeError):
            b["x"]
        with pytest.raises(TypeError):
            del b[0]


def test_large_copies_release_the_gil_and_stay_correct(pool):
    n = 4 << 20
    data = os.urandom(n)
    with pool.alloc(n) as b:
        b[:] = data
        assert b[:] == data and b.read() == data
        assert b.exports == 0  # the pin of the copy is gone


def test_context_manager_frees(pool):
    before = pool.stats()["allocated_bytes"]
    with pool.alloc(1 << 20) as b:
        assert pool.stats()["allocated_bytes"] == before + (1 << 20)
    assert b.closed
    assert pool.stats()["allocated_bytes"] == before


def test_close_is_idempotent_free_is_not(pool):
    b = pool.alloc(100)
    b.close()
    b.close()
    with pytest.raises(fmem.DoubleFreeError):
        b.free()


def test_garbage_buffers_are_freed(pool):
    before = pool.stats()["allocated_bytes"]
    bufs = [pool.alloc(64 << 10) for _ in range(20)]
    assert pool.stats()["live_buffers"] == 20
    del bufs
    assert pool.stats()["allocated_bytes"] == before
    assert pool.stats()["live_buffers"] == 0


def test_pool_context_manager_frees_unexported_buffers():
    with fmem.open("mem:?size=64M") as p:
        b = p.alloc(4096)
        kept = p.alloc(4096)
        view = memoryview(kept)
        view[0] = 7
    assert p.closed and "closing" in repr(p)
    assert b.closed  # freed by close()
    with pytest.raises(fmem.ClosedError):
        b[0]
    assert view[0] == 7 and not kept.closed  # exported: still valid
    with pytest.raises(fmem.ClosedError):
        p.alloc(10)
    view.release()
    kept.free()
    assert "closed" in repr(p) and "closing" not in repr(p)


def test_stats_dict(pool):
    s = pool.stats()
    for key in ("capacity_bytes", "allocated_bytes", "metadata_bytes", "nodes", "user_id",
                "allocs", "frees", "cas_ops", "round_trips", "size_class_allocs",
                "live_buffers"):
        assert key in s
    assert s["capacity_bytes"] == 256 << 20
    assert len(s["size_class_allocs"]) == 32
    with pool.alloc(8192):
        assert pool.stats()["size_class_allocs"][1] == s["size_class_allocs"][1] + 1


def test_attributes_and_repr(pool):
    b = pool.alloc(5000)
    assert b.pool is pool
    h = b.handle
    assert set(h) == {"node", "addr", "length", "rkey"} and h["length"] == 8192
    assert "5000 bytes" in repr(b) and "fmem.Pool" in repr(pool)
    b.free()
    assert repr(b) == "<fmem.Buffer freed>"
    assert pool.uri == "mem:?size=256M" and not pool.closed


def test_named_shm_pool_shared_between_opens():
    uri = f"shm:/fmem-pytest-{os.getpid()}?size=16M"
    try:
        with fmem.open(uri) as a, fmem.open(uri) as b:
            buf = a.alloc(4096)
            assert b.stats()["allocated_bytes"] == 4096  # one pool, two users
            buf.free()
    finally:
        fmem.unlink(uri)


def test_default_pool_is_shared_and_reopens():
    p = fmem.default_pool()
    assert fmem.default_pool() is p
    assert p.uri is None
    p.close()
    q = fmem.default_pool()
    assert q is not p and not q.closed
