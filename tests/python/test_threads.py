"""Thread safety: concurrent allocation and free, closing a pool under
other threads, and the GIL released while libfmem works."""
import threading
import time

import pytest

import fmem


def run_threads(fn, n):
    errors = []

    def wrap(k):
        try:
            fn(k)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=wrap, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_concurrent_alloc_free(pool):
    used = pool.stats()["allocated_bytes"]

    def work(k):
        mine = []
        for i in range(2000):
            b = pool.alloc(4096 << (i % 4))
            b[0] = k
            mine.append(b)
            if len(mine) > 16:
                victim = mine.pop(i % len(mine))
                assert victim[0] == k
                victim.free()
        for b in mine:
            b.free()

    assert run_threads(work, 4) == []
    assert pool.stats()["allocated_bytes"] == used


def test_shared_buffer_free_race(pool):
    """Threads race to free and read the same buffers: one free wins, the
    others get DoubleFreeError / ClosedError / BufferInUseError."""
    for _ in range(200):
        b = pool.alloc(1 << 21)  # copies of it run without the GIL
        outcomes = []

        def racer(k):
            try:
                if k % 2:
                    b.free()
                    outcomes.append("freed")
                else:
                    b.read()
                    outcomes.append("read")
            except (fmem.DoubleFreeError, fmem.ClosedError, fmem.BufferInUseError) as exc:
                outcomes.append(type(exc).__name__)

        assert run_threads(racer, 4) == []
        assert b.closed or outcomes.count("freed") == 0
        assert outcomes.count("freed") <= 1
        b.close()


def test_close_while_other_threads_allocate():
    for _ in range(20):
        p = fmem.open("mem:?size=64M")
        started = threading.Barrier(4)

        def work(k):
            started.wait()
            try:
                while True:
                    p.alloc(4096)
            except fmem.ClosedError:
                pass

        threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
        for t in threads:
            t.start()
        started.wait()
        time.sleep(0.002)
        p.close()
        for t in threads:
            t.join()
        assert p.closed


def test_gil_released_during_blocking_calls():
    # every pool operation waits 20 ms and an alloc makes about ten: one
    # holding the GIL would stall this thread for some 200 ms
    p = fmem.open("mem:?size=16M&rtt_ns=20000000")
    done = threading.Event()

    def alloc():
        p.alloc(4096).free()
        done.set()

    t = threading.Thread(target=alloc)
    t.start()
    worst, last = 0.0, time.monotonic()
    while not done.is_set():
        time.sleep(0.001)
        now = time.monotonic()
        worst, last = max(worst, now - last), now
    t.join()
    p.close()
    assert worst < 0.1, f"this thread stalled for {worst * 1000:.0f} ms"


@pytest.mark.parametrize("n", [2, 4])
def test_numpy_handler_blocks_in_threads(pool, n):
    np = pytest.importorskip("numpy")

    def work(k):
        with fmem.numpy_arrays(pool):
            for i in range(200):
                a = np.arange(1000 + i) * k
                assert pool.owns(a) and a[-1] == (999 + i) * k

    assert run_threads(work, n) == []
