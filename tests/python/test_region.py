"""fmem.Region from Python: the buffer protocol over paged far memory."""
import os

import numpy as np
import pytest

import fmem
from conftest import make_region

MiB = 1 << 20


def test_region_is_a_writable_buffer_larger_than_its_cache(pool):
    r = make_region(16 * MiB, cache=2 * MiB, pool=pool)
    assert len(r) == r.size == 16 * MiB and r.unit == 16384
    m = memoryview(r)
    assert not m.readonly and m.nbytes == r.size
    data = os.urandom(MiB)
    for off in range(0, r.size, MiB):
        m[off:off + MiB] = data
    for off in range(0, r.size, MiB):
        assert m[off:off + MiB] == data
    st = r.stats()
    assert st["cache_bytes"] == 2 * MiB
    assert st["cached_bytes"] <= 2 * MiB and st["evictions"] > 0
    assert st["writebacks"] > 0 and st["bytes_fetched"] > 0
    # units written and still cached hold pool space only once written
    # back (a scan evicts its own units first and may leave them cached)
    assert st["remote_bytes"] <= 16 * MiB
    r.flush()
    assert r.stats()["remote_bytes"] == 16 * MiB
    assert r.contains(m[100:200]) and r.contains(r.address) and not r.contains(np.ones(3))
    m.release()
    r.close()


def test_cache_arguments(pool):
    assert make_region(8 * MiB, 0.5, pool=pool).stats()["cache_bytes"] == 4 * MiB
    assert make_region(8 * MiB, MiB, pool=pool).stats()["cache_bytes"] == MiB
    assert make_region(2 * MiB, pool=pool).stats()["cache_bytes"] == 2 * MiB  # None: <= size
    small = make_region(8 * MiB, 4096, pool=pool, fetch_unit=4096, prefetch=0)
    assert small.unit == 4096 and small.stats()["cache_bytes"] == 16 * 4096  # 16 units min


def test_release_and_flush(pool):
    r = make_region(4 * MiB, cache=MiB, pool=pool)
    m = memoryview(r)
    m[:] = b"\x07" * r.size
    r.flush()
    assert r.stats()["remote_bytes"] == 4 * MiB
    r.release(0, 2 * MiB)
    assert r.stats()["remote_bytes"] == 2 * MiB
    assert m[0] == 0 and m[2 * MiB] == 7
    with pytest.raises(fmem.InvalidArgumentError):
        r.release(1, 4096)
    with pytest.raises(fmem.RangeError):
        r.release(0, 8 * MiB)
    with pytest.raises(fmem.SizeError):
        r.release(-4096, 4096)
    m.release()
    r.close()


def test_close_rules(pool):
    r = make_region(MiB, pool=pool)
    m = memoryview(r)
    with pytest.raises(fmem.BufferInUseError):
        r.close()
    with pytest.raises(BufferError):
        with r:
            pass
    m.release()
    with r:
        pass
    assert r.closed and repr(r) == "<fmem.Region closed>"
    r.close()
    for op in (lambda: memoryview(r), lambda: len(r), r.flush, r.stats, lambda: r.address,
               lambda: r.release(0, 4096)):
        with pytest.raises(fmem.ClosedError):
            op()


def test_region_keeps_its_pool_open():
    p = fmem.open("mem:?size=64M")
    r = make_region(8 * MiB, pool=p)
    p.close()
    assert "closing" in repr(p) and r.pool is p
    memoryview(r)[:4] = b"abcd"
    assert bytes(memoryview(r)[:4]) == b"abcd"
    r.close()
    assert "closing" not in repr(p)


def test_default_pool_backs_regions():
    r = make_region(MiB)
    assert r.pool is fmem.default_pool()
    r.close()


def test_stats_show_paths_and_parameters():
    """A region over four memory nodes behind emulated links spreads its
    units over all four; stats() shows the bytes per path and the
    parameters in force."""
    striped = fmem.Pool("mem:?size=16M&nodes=4&bw=4G")
    r = make_region(8 * MiB, cache=MiB, pool=striped)
    m = memoryview(r)
    data = os.urandom(MiB)
    for off in range(0, r.size, MiB):
        m[off:off + MiB] = data
    for off in range(0, r.size, MiB):
        assert m[off:off + MiB] == data
    st = r.stats()
    assert st["paths"] == 4 and st["stripe_width"] == 4
    assert 1 <= st["io_width"] <= 16 and st["prefetch_units"] >= 0
    # the fetch size: a power of two up to the largest the region allows
    fu, fm = st["fetch_units"], st["fetch_max"]
    assert fm >= 1 and 1 <= fu <= fm and fu & (fu - 1) == 0, (fu, fm)
    assert st["tier_moves"] == 0  # memory nodes only: no tiers
    paths = st["path_stats"]
    assert [p["node"] for p in paths] == [0, 1, 2, 3]
    assert all(p["chunks"] > 0 and p["bytes_written"] > 0 for p in paths)
    assert sum(p["bytes_written"] for p in paths) == st["bytes_written"]
    assert sum(p["bytes_fetched"] for p in paths) == st["bytes_fetched"]
    assert all(p["bandwidth"] > 0 for p in paths)
    m.release()
    r.close()
    striped.close()


def test_node_stats_per_backend():
    """Pool.node_stats(i) reports each node's backend and this process's
    I/O on it: a region over a mem: and a zmem: node writes to both, and
    the zmem: node shows the bytes it took and holds compressed."""
    pool = fmem.Pool("mem:?size=16M;zmem:?size=16M")
    r = make_region(4 * MiB, cache=MiB, pool=pool)
    m = memoryview(r)
    for off in range(0, r.size, 4096):
        m[off:off + 8] = (off // 4096 + 1).to_bytes(8, "little")
    r.flush()
    mem, z = pool.node_stats(0), pool.node_stats(1)
    assert mem["kind"] == "mem" and z["kind"] == "zmem"
    assert mem["capacity_bytes"] == 16 * MiB
    assert z["writes"] > 0 and z["bytes_written"] > 0 and z["held_bytes"] > 0
    assert z["compression_ratio"] > 1.0, z
    assert z["errors"] == 0 and z["last_error"] == ""
    assert isinstance(z["read_mb_s"], float) and isinstance(z["detail"], str)
    for off in range(0, r.size, 4096):
        assert int.from_bytes(m[off:off + 8], "little") == off // 4096 + 1
    with pytest.raises(fmem.Error):
        pool.node_stats(2)
    with pytest.raises((OverflowError, ValueError)):
        pool.node_stats(-1)
    m.release()
    r.close()
    pool.close()
