"""Shared fixtures of the fmem Python tests (run by tests/python/run-pytest.sh)."""
import gc
import os
import subprocess
import sys

import pytest

import fmem


# Addresses inside the pools the fixture opened: their mappings are pool
# space, not the local heap (see rss_bytes).
POOL_ADDRESSES = set()


@pytest.fixture
def pool():
    """A fresh in-process pool of 256 MiB, closed after the test."""
    p = fmem.open("mem:?size=256M")
    with p.alloc(4096) as probe:
        where = probe.address
    POOL_ADDRESSES.add(where)
    yield p
    gc.collect()
    p.close()
    POOL_ADDRESSES.discard(where)


def make_region(size, cache=None, pool=None, **kw):
    """A Region, or skip the test when userfaultfd is not available."""
    try:
        return fmem.Region(size, cache, pool=pool, **kw)
    except fmem.AccessError as exc:
        pytest.skip(f"no userfaultfd here: {exc}")


# AddressSanitizer keeps freed memory in quarantine: RSS says nothing then
UNDER_ASAN = "asan" in os.environ.get("LD_PRELOAD", "")


def rss_bytes():
    """Anonymous resident memory of this process (RssAnon) less the pages of
    the fixture's pools: the local heap. An in-process pool (mem:) is
    private anonymous memory, so its pages count in RssAnon; they are pool
    space, which the tests check through Pool.stats() instead."""
    anon = None
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                anon = int(line.split()[1]) * 1024
    if anon is None:
        raise RuntimeError("no RssAnon in /proc/self/status")
    in_pool = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(None, 1)[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                in_pool = any(lo <= a < hi for a in POOL_ADDRESSES)
            elif in_pool and head == "Anonymous:":
                anon -= int(line.split()[1]) * 1024
    return anon


def run_python(code, timeout=60):
    """Run code in a fresh interpreter with the same fmem (and environment);
    returns the CompletedProcess (text output)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ))
