"""fmem.connect(): a memory node and an allocation service of this build
(tools/fmem-mnode, tools/fmemd) started for the test."""
import errno
import os
import subprocess
import time

import numpy as np
import pytest

import fmem

BUILD = os.environ.get("FMEM_BUILDDIR", "")


def wait_for(path, proc, seconds=10.0):
    end = time.monotonic() + seconds
    while not os.path.exists(path):
        if proc.poll() is not None or time.monotonic() > end:
            pytest.fail(f"{proc.args[0]} did not start: {proc.stderr.read().decode()}")
        time.sleep(0.02)


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    mnode_bin = os.path.join(BUILD, "tools", "fmem-mnode")
    fmemd_bin = os.path.join(BUILD, "tools", "fmemd")
    if not (os.access(mnode_bin, os.X_OK) and os.access(fmemd_bin, os.X_OK)):
        pytest.skip("tools/fmem-mnode and tools/fmemd are not built")
    d = tmp_path_factory.mktemp("svc")
    pool_uri = f"shm:/fmem-pytest-svc-{os.getpid()}?size=64M"
    msock, dsock = str(d / "mnode.sock"), str(d / "fmemd.sock")
    procs = []
    try:
        procs.append(subprocess.Popen([mnode_bin, "--pool", pool_uri, "--socket", msock],
                                      stderr=subprocess.PIPE))
        wait_for(msock, procs[0])
        procs.append(subprocess.Popen([fmemd_bin, "--mnode", msock, "--socket", dsock,
                                       "--workers", "1"], stderr=subprocess.PIPE))
        wait_for(dsock, procs[1])
        uri = "unix:" + dsock
        end = time.monotonic() + 10
        while True:  # the socket exists before fmemd serves it
            try:
                fmem.connect(uri).close()
                break
            except fmem.TransportError:
                if time.monotonic() > end or procs[1].poll() is not None:
                    raise
                time.sleep(0.05)
        yield uri
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        try:
            fmem.unlink(pool_uri)
        except fmem.Error:
            pass


def test_connect_alloc_and_buffers(service):
    with fmem.connect(service) as client:
        assert isinstance(client, fmem.Client) and isinstance(client, fmem.Pool)
        with client.alloc(10_000) as b:
            m = memoryview(b)
            m[:5] = b"hello"
            a = np.frombuffer(b, dtype=np.uint8)
            assert bytes(a[:5]) == b"hello" and b.read(0, 5) == b"hello"
            del a
            m.release()
        s = client.stats()
        assert s["allocs"] >= 1 and s["frees"] >= 1 and s["capacity_bytes"] == 64 << 20


def test_service_numpy_heap(service):
    client = fmem.connect(service)
    with fmem.numpy_arrays(client):
        a = np.arange(500_000)
    assert client.owns(a) and a.sum() == 500_000 * 499_999 // 2
    del a
    client.close()


def test_service_errors(service):
    client = fmem.connect(service)
    b = client.alloc(4096)
    b.free()
    with pytest.raises(fmem.DoubleFreeError):
        b.free()
    with pytest.raises(fmem.SizeError):
        client.alloc(1 << 40)
    client.close()


def test_buffer_of_a_dead_service_is_stale(tmp_path):
    """fmemd is killed: once the memory node has reclaimed its blocks, the
    buffers it handed out raise StaleHandleError instead of freeing (or
    reaching) memory that may be another application's."""
    mnode_bin = os.path.join(BUILD, "tools", "fmem-mnode")
    fmemd_bin = os.path.join(BUILD, "tools", "fmemd")
    if not (os.access(mnode_bin, os.X_OK) and os.access(fmemd_bin, os.X_OK)):
        pytest.skip("tools/fmem-mnode and tools/fmemd are not built")
    pool = tmp_path / "pool"
    msock, dsock = str(tmp_path / "mnode.sock"), str(tmp_path / "fmemd.sock")
    mnode = subprocess.Popen([mnode_bin, "--pool", f"file:{pool}?size=16M", "--socket", msock],
                             stderr=subprocess.PIPE)
    fmemd = None
    try:
        wait_for(msock, mnode)
        fmemd = subprocess.Popen([fmemd_bin, "--mnode", msock, "--socket", dsock,
                                  "--workers", "1"], stderr=subprocess.PIPE)
        wait_for(dsock, fmemd)
        end = time.monotonic() + 10
        while True:
            try:
                client = fmem.connect("unix:" + dsock)
                break
            except fmem.TransportError:
                if time.monotonic() > end:
                    raise
                time.sleep(0.05)
        b = client.alloc(1 << 20)
        b.write(b"mine")
        fmemd.kill()
        fmemd.wait()
        with fmem.open(f"file:{pool}?create=0") as observer:  # the pool itself
            end = time.monotonic() + 10
            while observer.stats()["allocated_bytes"] and time.monotonic() < end:
                time.sleep(0.05)
            assert observer.stats()["allocated_bytes"] == 0, "not reclaimed"
        with pytest.raises(fmem.StaleHandleError) as info:
            b.free()
        assert isinstance(info.value, OSError) and info.value.errno == errno.ESTALE
        assert "gone" in str(info.value)
        client.close()
    finally:
        for p in (fmemd, mnode):
            if p and p.poll() is None:
                p.terminate()
                p.wait(10)
