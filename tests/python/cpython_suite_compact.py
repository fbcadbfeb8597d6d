#!/usr/bin/env python3
"""CPython's own tests with pymalloc's arenas in far memory and fmem.compact()
forced often: the arena allocator on a shm pool, and a gc callback that runs
fmem.compact() (slab merges, pool and page release, pages shared between
pools) after every N-th
collection, with the GIL held, outside pymalloc. Exit status: regrtest's.

    bindings/python/pyrun tests/python/cpython_suite_compact.py [--every N] \
        [test_gc test_dict test_weakref test_threading ...]

Needs CPython's test package (Debian: libpython3.11-testsuite)."""
import gc
import os
import sys

import fmem


def main():
    args = sys.argv[1:]
    every = 5
    if args[:1] == ["--every"]:
        every, args = int(args[1]), args[2:]
    tests = args or ["test_gc", "test_dict", "test_weakref", "test_threading"]
    name = "fmem-cpython-suite-compact-%d" % os.getpid()
    pool = fmem.open("shm:/%s?size=4G" % name)
    fmem.unlink("shm:/" + name)
    fmem.install_arena_allocator(pool)
    runs = {"collections": 0, "compactions": 0, "bytes": 0, "shared": 0}

    def compact_sometimes(phase, info):
        if phase != "stop":
            return
        runs["collections"] += 1
        if runs["collections"] % every == 0:
            runs["compactions"] += 1
            runs["bytes"] += fmem.compact()
            shared = fmem.arena_allocator_stats()["shared_pages"]
            runs["shared"] = max(runs["shared"], shared)

    gc.callbacks.append(compact_sometimes)
    from test.libregrtest.main import main as regrtest
    del sys.argv[1:]  # regrtest reads them too
    try:
        regrtest(tests, verbose=False)
    finally:
        s = fmem.arena_allocator_stats()
        print("cpython-suite-compact: %d collections, %d compactions, %d bytes given back, "
              "at most %d pages shared between pools at once, %d arenas in far memory at the "
              "end" % (runs["collections"], runs["compactions"], runs["bytes"], runs["shared"],
                       s["heap_large"]),
              file=sys.stderr)


if __name__ == "__main__":
    main()
