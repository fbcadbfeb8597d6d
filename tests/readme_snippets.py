"""Every ```c, ```python, ```lua and ```sh block of README.md compiles and
runs as shown, against this build tree (make check: tests/readme-snippets.sh).

    python3 tests/readme_snippets.py SRCDIR BUILDDIR

  c       compiled with cc against libfmem/include and BUILDDIR/.libs
          (what `cc app.c $(pkg-config --cflags --libs fmem)` gives once
          installed) and run
  python  run by bindings/python/pyrun (the staged package)
  lua     run by lua5.4 with the build's module first on package.cpath
  sh      run by sh -e with the build's programs first on PATH

A block runs in a scratch directory and must exit 0. A "--> VALUE"
comment in a Lua block (the README's way to show output) must match a
line the block printed. A block preceded by the line
<!-- readme-test: skip (REASON) --> is skipped with that reason: only
blocks that need root, daemons or the whole build (the README's quick
start, service mode and build-by-hand blocks) carry it. Prints one line
per block and "N passed, N failed, N skipped".
"""
import os
import re
import subprocess
import sys
import tempfile

FENCE = re.compile(r"^```(\w*)\s*$")
SKIP = re.compile(r"^<!--\s*readme-test:\s*skip\s*\((.+)\)\s*-->\s*$")
TIMEOUT = 600


def blocks(text):
    """(language, code, first line number, skip reason or None)"""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        lang, start = m.group(1), i + 1
        j = start
        while j < len(lines) and lines[j].strip() != "```":
            j += 1
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        skip = SKIP.match(lines[k]) if k >= 0 else None
        yield lang, "\n".join(lines[start:j]) + "\n", start, skip.group(1) if skip else None
        i = j + 1


def run(cmd, cwd, env):
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, build = (os.path.abspath(a) for a in sys.argv[1:])
    libs = os.path.join(build, ".libs")
    env = dict(os.environ, LD_LIBRARY_PATH=libs + os.pathsep + os.environ.get(
        "LD_LIBRARY_PATH", ""), FMEM_BUILDDIR=build)
    env.pop("FMEM_URI", None)  # the README's defaults, as a reader has them
    with open(os.path.join(src, "README.md")) as f:
        text = f.read()
    passed = failed = skipped = 0
    for lang, code, line, skip in blocks(text):
        if lang not in ("c", "python", "lua", "sh"):
            continue
        name = f"README.md:{line} ({lang})"
        if skip:
            print(f"skip: {name}: {skip}")
            skipped += 1
            continue
        with tempfile.TemporaryDirectory() as tmp:
            if lang == "c":
                with open(os.path.join(tmp, "app.c"), "w") as f:
                    f.write(code)
                cc = os.environ.get("CC", "cc")
                r = run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror",
                         "-I" + os.path.join(src, "libfmem", "include"), "app.c",
                         "-L" + libs, "-lfmem", "-o", "app"], tmp, env)
                if r.returncode == 0:
                    r = run(["./app"], tmp, env)
            elif lang == "python":
                r = run([os.path.join(src, "bindings", "python", "pyrun"), "-c", code], tmp, env)
            elif lang == "lua":
                lenv = dict(env, LUA_CPATH=os.path.join(build, "bindings", "lua", ".libs",
                                                        "?.so") + ";;")
                r = run([os.environ.get("LUA_INTERP", "lua5.4"), "-e", code], tmp, lenv)
            else:
                senv = dict(env, PATH=os.pathsep.join(
                    [build, os.path.join(build, "tools"), os.path.join(build, "bindings", "lua"),
                     env.get("PATH", "")]))
                r = run(["sh", "-e", "-c", code], tmp, senv)
        problem = None
        if r.returncode != 0:
            problem = f"exit {r.returncode}\n{r.stdout}{r.stderr}"
        elif lang == "lua":
            printed = r.stdout.split("\n")
            for want in re.findall(r"-->\s*(.+)$", code, re.M):
                if want.strip() not in (p.strip() for p in printed):
                    problem = f"printed {r.stdout!r}, the README shows --> {want.strip()}"
        if problem:
            print(f"FAIL: {name}: {problem}")
            failed += 1
        else:
            print(f"ok: {name}")
            passed += 1
    if passed == 0:
        print("FAIL: no runnable block found in README.md")
        failed += 1
    print(f"readme: {passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
