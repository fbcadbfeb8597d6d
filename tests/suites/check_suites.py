#!/usr/bin/env python3
"""make check-suites: other projects' test suites with fmem's Python hooks.

Runs CPython's regression tests (a chosen set), numpy's test suite and
pandas' frame, groupby and reshape tests three times each, one run at a
time:

  plain   no fmem (the reference)
  pool    the arena hook and the numpy handler on fmem.open("mem:?size=8G")
  region  the same on a Region whose cache is half the working set that
          the pool run measured (the largest heap_remote_peak of any of its
          interpreters)

The hooks are installed at interpreter start-up by tests/suites/
sitecustomize.py (put on PYTHONPATH for all three runs; it does nothing in
the plain one). Test outcomes are read per test id (regrtest's JUnit XML,
a pytest plugin writing one line per test), and every test that passes
plain but not with fmem is listed; the exit status is 1 if there is one.

  check_suites.py [--suites cpython,numpy,pandas] [--configs plain,pool,region]
                  [--out DIR] [--report]

Results stay in DIR (default ./suites-out): one directory per suite and run
with the log, the outcomes and the hooks' statistics. --report prints the
tables from what is there without running anything; --configs reruns some
runs only (region needs the pool run's working set from DIR).
"""
import argparse
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
CPYTHON_TESTS = ["test_threading", "test_re", "test_multiprocessing_fork", "test_dict",
                 "test_gc", "test_weakref", "test_pickle"]
PANDAS_DIRS = ["frame", "groupby", "reshape"]
SUITES = ["cpython", "numpy", "pandas"]
CONFIGS = ["plain", "pool", "region"]
POOL_URI = "mem:?size=8G"
REGION_POOL_URI = "mem:?size=12G"      # room for the region's chunks and more
REGION_SIZE = 8 << 30
MIB = 1 << 20


def say(msg):
    print("check-suites: " + msg, flush=True)


def probe(py, code):
    """Run code in the interpreter under test; its stdout, or None on failure."""
    r = subprocess.run([py, "-c", code], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


def dpkg_has(pkg):
    r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg],
                       capture_output=True, text=True)
    return r.returncode == 0 and "ok installed" in r.stdout


def missing(py, suite):
    """Why the suite cannot run here, or None."""
    if suite == "cpython":
        ver = probe(py, "import sys; print('%d.%d' % sys.version_info[:2])")
        code = ("import importlib.util as u, sys; "
                "sys.exit(any(u.find_spec('test.' + n) is None for n in %r))" % CPYTHON_TESTS)
        if probe(py, code) is None:
            return ("CPython's regression tests are not installed "
                    "(Debian: libpython%s-testsuite; scripts/deps.sh --suites)" % ver)
        return None
    need = [("pytest", "python3-pytest"), ("hypothesis", "python3-hypothesis"),
            (suite, "python3-" + suite)]
    for mod, pkg in need:
        if probe(py, "import " + mod) is None:
            return "%s cannot import %s (Debian: %s; scripts/deps.sh --suites)" % (py, mod, pkg)
    tests = probe(py, "import os, %s as m; print(os.path.join(os.path.dirname(m.__file__), "
                      "'tests' if m.__name__ == 'pandas' else 'core/tests'))" % suite)
    if not tests or not os.path.isdir(tests):
        return "%s's tests are not installed (%s)" % (suite, tests)
    return None


def command(py, suite, rundir):
    """The command line of one run, and the name of its outcome file."""
    if suite == "cpython":
        xml = os.path.join(rundir, "junit.xml")
        return ([py, "-m", "test", "-j1", "--timeout", "1800", "--junit-xml", xml]
                + CPYTHON_TESTS), xml
    log = os.path.join(rundir, "tests.jsonl")
    plug = ["-p", "fmem_suite_log", "-p", "no:cacheprovider"]
    if suite == "numpy":
        # numpy's own runner: its warning filters, -m "not slow", --pyargs numpy
        code = ("import sys, numpy; "
                "sys.exit(0 if numpy.test(label='fast', verbose=1, extra_argv=%r) else 1)" % plug)
        return [py, "-c", code], log
    base = probe(py, "import os, pandas; print(os.path.dirname(pandas.__file__))")
    return ([py, "-m", "pytest", "-q", *plug, "-m", "not slow and not network and not db"]
            + [os.path.join(base, "tests", d) for d in PANDAS_DIRS]), log


def environment(args, suite, config, rundir, cache):
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("FMEM_SUITE"):
            del env[k]
    env["PYTHONPATH"] = os.pathsep.join([args.stage, HERE] +
                                        ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.setdefault("GLIBC_TUNABLES", "glibc.rtld.optional_static_tls=0x20000")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["FMEM_SUITE_LOG"] = os.path.join(rundir, "tests.jsonl")
    if config == "plain":
        return env
    env["FMEM_SUITE_HOOKS"] = config
    env["FMEM_SUITE_STATS"] = os.path.join(rundir, "stats")
    env["FMEM_SUITE_NUMPY"] = "0" if suite == "cpython" else "1"
    if config == "pool":
        env["FMEM_SUITE_POOL"] = POOL_URI
    else:
        env["FMEM_SUITE_POOL"] = REGION_POOL_URI
        env["FMEM_SUITE_REGION_SIZE"] = str(REGION_SIZE)
        env["FMEM_SUITE_CACHE"] = str(cache)
    return env


# ---- outcomes -------------------------------------------------------------

RANK = {"failed": 3, "error": 2, "passed": 1, "skipped": 0}


def read_pytest(path):
    """{test id: passed|failed|error|skipped}, and the test running at the end."""
    out, running = {}, None
    if not os.path.exists(path):
        return out, None
    recs = []
    with open(path) as f:
        for line in f:
            try:
                recs.append(json.loads(line))
            except ValueError:
                pass            # a line cut short by a crash
    # a test ends with its "finish" line (logs written before that line
    # existed: with its first outcome)
    finish = "finish" if any(r["ev"] == "finish" for r in recs) else "result"
    for rec in recs:
        tid = rec["id"]
        if rec["ev"] == "start":
            running = tid
            continue
        if tid == running and rec["ev"] == finish:
            running = None
        if rec["ev"] == "result":
            o = rec["outcome"]
            if rec["when"] in ("setup", "teardown", "collect") and o == "failed":
                o = "error"
            prev = out.get(tid)
            if prev is None or RANK[o] > RANK[prev]:
                out[tid] = o
    return out, running


def read_junit(path):
    out = {}
    if not os.path.exists(path):
        return out
    for case in ET.parse(path).getroot().iter("testcase"):
        cls, name = case.get("classname"), case.get("name", "")
        tid = "%s.%s" % (cls, name) if cls else name
        kinds = {c.tag for c in case}
        o = ("failed" if "failure" in kinds else "error" if "error" in kinds
             else "skipped" if "skipped" in kinds else "passed")
        out[tid] = o
    return out


def regrtest_files(logpath):
    """regrtest's verdict per test file: 'passed', 'failed', 'crashed (Exit code -11)' ..."""
    res = {}
    if os.path.exists(logpath):
        with open(logpath, errors="replace") as f:
            for line in f:
                m = re.search(r"\[\s*\d+/\d+(?:/\d+)?\] (test_\w+) (.*)", line)
                if m:
                    res[m.group(1)] = m.group(2).strip()
    return res


def read_stats(rundir):
    procs = []
    for p in glob.glob(os.path.join(rundir, "stats", "*.json")):
        try:
            with open(p) as f:
                procs.append(json.load(f))
        except (OSError, ValueError):
            pass
    return procs


# ---- one run --------------------------------------------------------------

def run(args, suite, config, cache=None):
    rundir = os.path.join(args.out, suite, config)
    shutil.rmtree(rundir, ignore_errors=True)
    os.makedirs(os.path.join(rundir, "stats"))
    os.makedirs(os.path.join(rundir, "cwd"))
    cmd, outcomes = command(args.py, suite, rundir)
    env = environment(args, suite, config, rundir, cache)
    logpath = os.path.join(rundir, "log.txt")
    what = config + (" (cache %.1f MiB)" % (cache / MIB) if cache else "")
    say("%s %s: running (log %s)" % (suite, what, logpath))
    t0 = time.monotonic()
    timed_out = False
    with open(logpath, "w") as log:
        log.write("$ %s\n" % " ".join(cmd))
        log.flush()
        p = subprocess.Popen(cmd, cwd=os.path.join(rundir, "cwd"), env=env, stdout=log,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True)
        try:
            rc = p.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(p.pid, signal.SIGKILL)
            rc = p.wait()
    elapsed = time.monotonic() - t0
    shutil.rmtree(os.path.join(rundir, "cwd"), ignore_errors=True)
    res = {"suite": suite, "config": config, "rc": rc, "seconds": round(elapsed, 1),
           "timed_out": timed_out, "cache": cache, "command": cmd}
    if suite == "cpython":
        res["tests"] = read_junit(outcomes)
        res["files"] = regrtest_files(logpath)
        res["running"] = None
    else:
        res["tests"], res["running"] = read_pytest(outcomes)
    procs = read_stats(rundir)
    res["interpreters"] = len(procs)
    res["working_set"] = max((p["heap"]["heap_remote_peak"] for p in procs if p.get("heap")),
                             default=0)
    res["spills"] = sum(p["heap"]["spills"] for p in procs if p.get("heap"))
    with open(os.path.join(rundir, "result.json"), "w") as f:
        json.dump(res, f)
    c = counts(res)
    say("%s %s: %d passed, %d failed, %d errors, %d skipped in %.0f s (exit %s%s)"
        % (suite, config, c["passed"], c["failed"], c["error"], c["skipped"], elapsed, rc,
           ", timed out" if timed_out else ""))
    return res


def load(args, suite, config):
    try:
        with open(os.path.join(args.out, suite, config, "result.json")) as f:
            res = json.load(f)
    except (OSError, ValueError):
        return None
    paging = {k: 0 for k in ("faults", "evictions", "writebacks", "bytes_fetched")}
    for proc in read_stats(os.path.join(args.out, suite, config)):
        for k in paging:
            paging[k] += proc.get("region", {}).get(k, 0)
    res["paging"] = paging
    if suite != "cpython":  # read again: the outcome log is the record
        res["tests"], res["running"] = read_pytest(
            os.path.join(args.out, suite, config, "tests.jsonl"))
    return res


def counts(res):
    c = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
    for o in res["tests"].values():
        c[o] += 1
    return c


# ---- the report -------------------------------------------------------------

def report(args, suites, skipped):
    regressions = 0
    compared = set()
    void = []
    for suite in suites:
        if suite in skipped:
            print("\n== %s: skipped: %s" % (suite, skipped[suite]))
            continue
        runs = {c: load(args, suite, c) for c in CONFIGS}
        title = {"cpython": "CPython regression tests: " + " ".join(CPYTHON_TESTS),
                 "numpy": "numpy.test() (not slow)",
                 "pandas": "pandas tests/" + ", tests/".join(PANDAS_DIRS)}[suite]
        print("\n== %s: %s" % (suite, title))
        pool, region = runs["pool"], runs["region"]
        if pool:
            print("   working set (largest heap_remote_peak of %d interpreters, pool run): "
                  "%.1f MiB; spills: %d" % (pool["interpreters"], pool["working_set"] / MIB,
                                            pool["spills"]))
        if region:
            print("   region: %d GiB with a cache of %.1f MiB; region run's working set "
                  "%.1f MiB; spills: %d" % (REGION_SIZE >> 30, region["cache"] / MIB,
                                            region["working_set"] / MIB, region["spills"]))
            pg = region["paging"]
            print("   region run's paging (all interpreters): %d faults, %d evictions, "
                  "%d write-backs, %.0f MiB fetched%s" % (
                      pg["faults"], pg["evictions"], pg["writebacks"], pg["bytes_fetched"] / MIB,
                      "" if pg["evictions"] else " (the cache never filled: nothing was paged out)"))
        print("   %-7s %8s %8s %8s %8s %9s" % ("run", "passed", "failed", "errors",
                                                 "skipped", "time"))
        for c in CONFIGS:
            r = runs[c]
            if r is None:
                print("   %-7s %s" % (c, "not run"))
                continue
            n = counts(r)
            note = " (timed out)" if r["timed_out"] else ""
            if r.get("running"):
                note += " (died in %s)" % r["running"]
            print("   %-7s %8d %8d %8d %8d %8.0fs%s" % (c, n["passed"], n["failed"], n["error"],
                                                       n["skipped"], r["seconds"], note))
        plain = runs["plain"]
        if plain is None:
            continue
        if not plain["tests"]:
            print("   plain: no test outcomes: nothing to compare with")
            void.append(suite)
            continue
        for c in ("pool", "region"):
            r = runs[c]
            if r is None:
                continue
            if suite == "cpython":
                bad_files = {f: v for f, v in r["files"].items()
                             if not v.startswith("passed") and plain["files"].get(f, "").startswith("passed")}
                for f, v in sorted(bad_files.items()):
                    print("   %s: %s %s (plain: %s)" % (c, f, v, plain["files"][f]))
            compared.add(suite)
            lost = sorted(t for t, o in plain["tests"].items()
                          if o == "passed" and r["tests"].get(t) != "passed")
            regressions += len(lost)
            if not lost:
                print("   %s: passes everything the plain run passes" % c)
                continue
            print("   %s: %d tests pass plain and not with fmem:" % (c, len(lost)))
            for t in lost[:args.list]:
                print("     %-8s %s" % (r["tests"].get(t, "missing"), t))
            if len(lost) > args.list:
                print("     ... %d more (%s)" % (len(lost) - args.list,
                                                 os.path.join(args.out, suite, c, "result.json")))
    print()
    ran = ", ".join(s for s in suites if s in compared) or "none"
    left = [s for s in suites if s not in compared]
    scope = "(compared: %s%s)" % (ran, "; not compared: " + ", ".join(left) if left else "")
    if void:
        say("the plain run of %s gave no outcomes %s" % (", ".join(void), scope))
    elif regressions:
        say("%d tests pass plain and fail with fmem %s" % (regressions, scope))
    elif not compared:
        say("no fmem run to compare %s" % scope)
    else:
        say("every fmem run passed everything the plain run passed %s" % scope)
    return 1 if regressions or void else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--suites", default=",".join(SUITES))
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--out", default="suites-out")
    ap.add_argument("--stage", default=os.environ.get("FMEM_PYSTAGE", "bindings/python/stage"))
    ap.add_argument("--python", dest="py", default=os.environ.get("FMEM_PYTHON", "/usr/bin/python3"))
    ap.add_argument("--timeout", type=float, default=4 * 3600, help="seconds per run")
    ap.add_argument("--list", type=int, default=40, help="failed tests listed per run")
    ap.add_argument("--cache-fraction", type=float, default=0.5,
                    help="region cache / the pool run's working set")
    ap.add_argument("--report", action="store_true", help="print the stored results only")
    args = ap.parse_args()
    # a shell that starts make in the background ignores SIGINT; the suites
    # would inherit that (test_threading's interrupt_main tests fail): catch
    # it here, so that exec gives the runs the default disposition
    signal.signal(signal.SIGINT, signal.default_int_handler)
    args.out = os.path.abspath(args.out)
    args.stage = os.path.abspath(args.stage)
    suites = [s for s in args.suites.split(",") if s]
    configs = [c for c in args.configs.split(",") if c]
    for s in suites:
        if s not in SUITES:
            ap.error("unknown suite %r (%s)" % (s, ", ".join(SUITES)))
    for c in configs:
        if c not in CONFIGS:
            ap.error("unknown run %r (%s)" % (c, ", ".join(CONFIGS)))
    if not os.path.exists(os.path.join(args.stage, "fmem", "__init__.py")):
        say("no staged fmem package in %s (run make first)" % args.stage)
        return 2
    skipped = {}
    for s in suites:
        why = missing(args.py, s)
        if why:
            skipped[s] = why
            say("%s: skipped: %s" % (s, why))
    if not args.report:
        for s in suites:
            if s in skipped:
                continue
            for c in configs:
                cache = None
                if c == "region":
                    pool = load(args, s, "pool")
                    if not pool or not pool["working_set"]:
                        say("%s region: no working set measured (run the pool run first): "
                            "skipped" % s)
                        continue
                    # half the working set, in whole 16 KiB fetch units
                    cache = int(pool["working_set"] * args.cache_fraction) // 16384 * 16384
                    cache = max(cache, 1 << 20)
                run(args, s, c, cache)
    return report(args, suites, skipped)


if __name__ == "__main__":
    sys.exit(main())
