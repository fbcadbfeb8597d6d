"""Start-up hook of make check-suites (tests/suites/check_suites.py).

This directory is put on PYTHONPATH for every run of a suite, plain or not,
so that Python imports this file at start-up in the suite's interpreter and
in every child interpreter that inherits the environment (regrtest workers,
subprocesses started without -I or -E). What it does is chosen by
FMEM_SUITE_HOOKS:

  unset or ""  nothing (the plain run; fmem is not even imported)
  "pool"       fmem.install_arena_allocator() and, with FMEM_SUITE_NUMPY=1,
               a numpy_arrays block entered for the main context and never
               left, both on fmem.open(FMEM_SUITE_POOL)
  "region"     the same on fmem.Region(FMEM_SUITE_REGION_SIZE,
               cache=FMEM_SUITE_CACHE) carved from that pool

With FMEM_SUITE_STATS=DIR each interpreter writes DIR/<pid>.json at exit:
the heap's counters (heap_remote_peak is the working set) and, for a
region, the region's. Nothing is printed: tests compare the output of
child interpreters. Debian's own sitecustomize (the next one on sys.path)
runs afterwards.
"""
import os
import sys


def _next_sitecustomize():
    import importlib.machinery
    import importlib.util
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)


def _write_stats(path, target, arrays):
    import json
    import fmem
    st = {"pid": os.getpid(), "argv": " ".join(sys.argv)[-160:],
          "heap": fmem.arena_allocator_stats()}
    if arrays is not None:
        st["numpy"] = arrays.stats()
    if isinstance(target, fmem.Region):
        st["region"] = target.stats()
    with open(os.path.join(path, "%d.json" % os.getpid()), "w") as f:
        json.dump(st, f)


def _install(mode):
    import atexit
    import fmem
    pool = fmem.open(os.environ.get("FMEM_SUITE_POOL", "mem:?size=8G"))
    if mode == "pool":
        target = pool
    elif mode == "region":
        target = fmem.Region(int(os.environ["FMEM_SUITE_REGION_SIZE"]),
                             cache=int(os.environ["FMEM_SUITE_CACHE"]), pool=pool)
    else:
        raise SystemExit("sitecustomize: FMEM_SUITE_HOOKS=%r: not pool or region" % mode)
    fmem.install_arena_allocator(target)
    arrays = None
    if os.environ.get("FMEM_SUITE_NUMPY") == "1":
        arrays = fmem.numpy_arrays(target)
        arrays.__enter__()          # for the main context, for good
    stats = os.environ.get("FMEM_SUITE_STATS")
    if stats:
        # registered first, so it runs after every other exit handler
        atexit.register(_write_stats, stats, target, arrays)


_mode = os.environ.get("FMEM_SUITE_HOOKS")
if _mode:
    _install(_mode)
del _mode
_next_sitecustomize()
