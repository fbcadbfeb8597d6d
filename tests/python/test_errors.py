"""Misuse gives clean exceptions, never a crash: use after free, double
free, bad sizes and types, live exports, closed pools, full pools."""
import numpy as np
import pytest

import fmem


def test_exception_hierarchy():
    pairs = {
        fmem.OutOfMemoryError: MemoryError, fmem.SizeError: ValueError,
        fmem.InvalidArgumentError: ValueError, fmem.DoubleFreeError: ValueError,
        fmem.BadHandleError: ValueError, fmem.URIError: ValueError,
        fmem.ClosedError: ValueError, fmem.RangeError: IndexError,
        fmem.BufferInUseError: BufferError, fmem.CorruptPoolError: OSError,
        fmem.TransportError: OSError, fmem.NotSupportedError: OSError,
        fmem.BusyError: OSError, fmem.QuotaError: OSError, fmem.AccessError: PermissionError,
        fmem.StaleHandleError: OSError,
    }
    for cls, builtin in pairs.items():
        assert issubclass(cls, fmem.Error) and issubclass(cls, builtin), cls
        assert cls.__doc__
    assert issubclass(fmem.Error, Exception)


def test_use_after_free_raises(pool):
    b = pool.alloc(4096)
    b.free()
    for op in (lambda: len(b), lambda: b[0], lambda: b[0:2], lambda: memoryview(b),
               lambda: np.frombuffer(b, dtype=np.uint8), lambda: bytes(b), lambda: b.read(),
               lambda: b.write(b"x"), lambda: b.size, lambda: b.address,
               lambda: b.__setitem__(0, 1), lambda: b.__enter__()):
        with pytest.raises(fmem.ClosedError):
            op()
    assert b.closed and b.exports == 0
    with pytest.raises(fmem.ClosedError):
        pool.owns(b)


def test_double_free(pool):
    b = pool.alloc(4096)
    b.free()
    with pytest.raises(fmem.DoubleFreeError) as info:
        b.free()
    assert isinstance(info.value, ValueError)


def test_free_with_live_exports_is_refused(pool):
    b = pool.alloc(4096)
    m = memoryview(b)
    a = np.frombuffer(b, dtype=np.uint8)
    with pytest.raises(fmem.BufferInUseError, match="views"):
        b.free()
    with pytest.raises(BufferError):
        b.close()
    with pytest.raises(fmem.BufferInUseError):
        with b:
            pass
    m.release()
    with pytest.raises(fmem.BufferInUseError):
        b.free()
    del a
    b.free()


@pytest.mark.parametrize("n", [0, -1, -(1 << 40), 1 << 40, (1 << 63) - 1, 1 << 63, 1 << 64,
                               10 ** 30, -(10 ** 30)])
def test_bad_sizes(pool, n):
    with pytest.raises(fmem.SizeError) as info:
        pool.alloc(n)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("n", ["10", 1.5, None, b"1", object(), [1]])
def test_wrong_types(pool, n):
    with pytest.raises(TypeError):
        pool.alloc(n)


def test_wrong_argument_types_elsewhere(pool):
    with pytest.raises(TypeError):
        fmem.open(42)
    with pytest.raises(TypeError):
        fmem.Region("big")
    with pytest.raises(TypeError):
        fmem.Region(1 << 20, pool="nope")
    with pytest.raises(TypeError):
        fmem.numpy_arrays(42)
    with pytest.raises(TypeError):
        fmem.install_arena_allocator("x")
    with pytest.raises(TypeError):
        fmem.Buffer()
    with pytest.raises(TypeError):
        pool.owns("not a buffer")
    with pytest.raises(TypeError):
        fmem.unlink(3)
    with pytest.raises(TypeError):
        fmem.size_round(1.0)
    with pytest.raises(fmem.SizeError):
        fmem.size_round(-1)
    with pytest.raises(fmem.SizeError):
        fmem.size_round(1 << 63)
    assert fmem.size_round((1 << 63) - 1) == 1 << 63
    assert fmem.size_round(5000) == 8192


def test_bad_uris():
    with pytest.raises(fmem.URIError) as info:
        fmem.open("nonsense:/x")
    assert info.value.code < 0 and fmem.strerror(info.value.code) in str(info.value)
    with pytest.raises(fmem.Error):
        fmem.open("mem:?size=banana")
    with pytest.raises(ValueError):
        fmem.connect("mem:")
    with pytest.raises(fmem.TransportError):
        fmem.connect("unix:/nonexistent/fmemd.sock")


def test_closed_pool(pool):
    p = fmem.open("mem:?size=16M")
    p.close()
    p.close()
    with pytest.raises(fmem.ClosedError):
        p.alloc(10)
    with pytest.raises(fmem.ClosedError):
        p.stats()
    with pytest.raises(fmem.ClosedError):
        with p:
            pass
    with pytest.raises(fmem.ClosedError):
        fmem.Region(1 << 20, pool=p)
    with pytest.raises(fmem.ClosedError):
        with fmem.numpy_arrays(p):
            pass


def test_out_of_memory_is_a_memory_error():
    with fmem.open("mem:?size=4M") as p:
        held = []
        with pytest.raises(fmem.OutOfMemoryError) as info:
            for _ in range(10):
                held.append(p.alloc(1 << 20))
        assert isinstance(info.value, MemoryError)
        assert len(held) >= 2
        assert p.stats()["failed_allocs"] >= 1
        del held


def test_region_argument_errors(pool):
    for bad in (dict(size=0), dict(size=-5), dict(size=1 << 20, cache=0.0),
                dict(size=1 << 20, cache=1.5), dict(size=1 << 20, cache=-1),
                dict(size=1 << 20, fetch_unit=3000), dict(size=1 << 20, fetch_unit=1 << 20)):
        with pytest.raises(fmem.SizeError):
            fmem.Region(pool=pool, **bad)
    with pytest.raises(ValueError):
        fmem.Region(1 << 20, pool=pool, prefetch=-1)


@pytest.mark.parametrize("uri,named", [
    ("mem:?siz=1M", "unknown parameter 'siz'"),
    ("mem:?size=12Q", "bad value size='12Q'"),
    ("nfs:/x", "unknown scheme"),
])
def test_uri_errors_name_the_bad_part(uri, named):
    with pytest.raises(fmem.URIError) as e:
        fmem.open(uri)
    assert named in str(e.value), str(e.value)
