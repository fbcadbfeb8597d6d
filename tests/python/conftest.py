"""Shared fixtures of the fmem Python tests (run by tests/python/run-pytest.sh)."""
import gc
import os
import subprocess
import sys

import pytest

import fmem


@pytest.fixture
def pool():
    """A fresh in-process pool of 256 MiB, closed after the test."""
    p = fmem.open("mem:?size=256M")
    yield p
    gc.collect()
    p.close()


def make_region(size, cache=None, pool=None, **kw):
    """A Region, or skip the test when userfaultfd is not available."""
    try:
        return fmem.Region(size, cache, pool=pool, **kw)
    except fmem.AccessError as exc:
        pytest.skip(f"no userfaultfd here: {exc}")


# AddressSanitizer keeps freed memory in quarantine: RSS says nothing then
UNDER_ASAN = "asan" in os.environ.get("LD_PRELOAD", "")


def rss_bytes():
    """Anonymous resident memory of this process (RssAnon): the local heap.
    Pages of an in-process pool are shared memory (RssShmem) and count as
    pool space, which the tests check through Pool.stats() instead."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no RssAnon in /proc/self/status")


def run_python(code, timeout=60):
    """Run code in a fresh interpreter with the same fmem (and environment);
    returns the CompletedProcess (text output)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ))
