"""The obmalloc arena hook, in fresh interpreters (it stays for the life of
the process): installed after start-up, under a workload that creates and
drops well over a million small objects."""
import json

from conftest import run_python

WORKLOAD = r"""
import gc, json, sys
import fmem

TARGET
before = [str(i) for i in range(50_000)]        # arenas of the old allocator
target = fmem.install_arena_allocator(ARG)
try:
    fmem.install_arena_allocator()
    second = "no error"
except fmem.BusyError:
    second = "BusyError"
total = 0
for rnd in range(ROUNDS):
    objs = [(i, str(i), [i]) for i in range(250_000)]  # 1M objects per round
    total += sum(t[0] + len(t[1]) + t[2][0] for t in objs)
    del objs
    gc.collect()
del before                                       # freed the old way
gc.collect()
st = fmem.arena_allocator_stats()
print(json.dumps({"total": total, "second": second, "stats": st,
                  "target": type(target).__name__}))
"""


def run(target_setup, arg, rounds):
    code = (WORKLOAD.replace("TARGET", target_setup).replace("ARG", arg)
            .replace("ROUNDS", str(rounds)))
    proc = run_python(code, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def expected(rounds):
    n = 250_000
    return rounds * sum(i + len(str(i)) + i for i in range(n))


def test_arena_hook_on_a_pool():
    out = run("pool = None", "", 2)
    assert out["total"] == expected(2)
    assert out["second"] == "BusyError"
    assert out["target"] == "Pool"
    st = out["stats"]
    assert st["mallocs"] >= 20            # ~80 MB of small objects per round
    assert st["frees"] >= st["mallocs"] // 2  # empty arenas go back
    assert st["foreign_frees"] >= 1       # arenas from before the hook
    assert st["spills"] == 0


def test_arena_hook_on_a_region():
    setup = ("try:\n"
             "    region = fmem.Region(512 << 20, cache=64 << 20)\n"
             "except fmem.AccessError:\n"
             "    print(json.dumps({'skip': 1})); sys.exit(0)")
    out = run(setup, "region", 1)
    if out.get("skip"):
        return
    assert out["total"] == expected(1) and out["target"] == "Region"
    assert out["stats"]["mallocs"] >= 10


def test_stats_before_install():
    proc = run_python("import fmem; print(fmem.arena_allocator_stats())")
    assert proc.returncode == 0 and proc.stdout.strip() == "None"
