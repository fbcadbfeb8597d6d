"""pytest plugin of make check-suites: one JSON line per test outcome.

Loaded with -p fmem_suite_log; FMEM_SUITE_LOG names the file. The file is
written and flushed test by test, so a run that dies (a crash, a timeout)
still tells which tests ended how and which one was running: a "start"
line without a "finish" line after it.
"""
import json
import os

_out = None


def _emit(**rec):
    global _out
    if _out is None:
        path = os.environ.get("FMEM_SUITE_LOG")
        if not path:
            return
        _out = open(path, "a", buffering=1)
    _out.write(json.dumps(rec) + "\n")


def pytest_runtest_logstart(nodeid, location):
    _emit(ev="start", id=nodeid)


def pytest_runtest_logfinish(nodeid, location):
    _emit(ev="finish", id=nodeid)


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        if hasattr(report, "wasxfail"):
            outcome = "skipped" if report.skipped else "passed"   # xfail / xpass
        elif report.when != "call" and report.failed:
            outcome = "error"
        else:
            outcome = report.outcome
        _emit(ev="result", id=report.nodeid, when=report.when, outcome=outcome,
              duration=round(report.duration, 3))


def pytest_collectreport(report):
    if report.failed:
        _emit(ev="result", id=report.nodeid or "<collection>", when="collect",
              outcome="error", duration=0)
