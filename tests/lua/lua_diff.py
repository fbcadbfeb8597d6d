"""fmem-lua against lua5.4: the same command lines, environments, stdin
and terminal sessions through both; stdout, stderr and the exit status
must be equal.

    python3 lua_diff.py LUA5.4 FMEM-LUA      (tests/lua/lua-diff.sh runs it)

Both programs run with argv[0] = "lua", so the program name in messages
is the same. Normalised before comparing: table and function addresses
(0x...), the carriage returns and escape sequences a terminal adds, and
the one line fmem-lua adds after Lua's version line ("fmem X.Y (heap:
...)"), whose presence is checked instead. Prints one line per case and
"N passed, N failed" last; exits 1 if a case differs.
"""
import os
import pty
import re
import select
import signal
import subprocess
import sys
import tempfile
import time

TIMEOUT = 120  # seconds for one step; generous, the machine may be loaded
ARGV0 = "lua"
FMEM_LINE = re.compile(rb"^fmem \d+\.\d+ \(heap: [^)]*\)\n", re.M)
VERSION_LINE = b"Lua 5.4"

SCRIPT = r"""
io.write("n=", select("#", ...), " ...=", table.concat({...}, ","), "\n")
local keys = {}
for k in pairs(arg) do keys[#keys + 1] = k end
table.sort(keys)
for _, k in ipairs(keys) do io.write("arg[", k, "]=", arg[k], "\n") end
"""

FILES = {
    "args.lua": SCRIPT,
    "err.lua": "local function f() error('boom') end\nf()\n",
    "syntax.lua": "x = = 1\n",
    "exit3.lua": "io.write('bye\\n') os.exit(3)\n",
    "init.lua": "print('init from file', ...)\n",
    "mod/greet.lua": "return {hi = function() return 'hi from greet' end}\n",
    "ret.lua": "return 1, 2\n",
}


def case(name, args, stdin=b"", env=None):
    return {"name": name, "args": args, "stdin": stdin, "env": env or {}}


def repl(name, lines, args=("-i",), env=None):
    return case(name, list(args), "".join(l + "\n" for l in lines).encode(), env)


CASES = [
    # -e, -v, -W and option syntax
    case("-e", ["-e", "print(1 + 1)"]),
    case("-e joined", ["-eprint('joined')"]),
    case("two -e in order", ["-e", "x = 2", "-e", "print(x * 21)"]),
    case("-e runtime error", ["-e", "error('boom')"]),
    case("-e syntax error", ["-e", "x ="]),
    case("-e error object", ["-e", "error({})"]),
    case("-e error __tostring",
         ["-e", "error(setmetatable({}, {__tostring = function() return 'custom' end}))"]),
    case("-e os.exit code", ["-e", "os.exit(7)"]),
    case("-e os.exit false", ["-e", "os.exit(false)"]),
    case("-v", ["-v"]),
    case("-v -e", ["-v", "-e", "print('after version')"]),
    case("-W warnings on", ["-W", "-e", "warn('hello')"]),
    case("warnings off", ["-e", "warn('hello')"]),
    case("-W then @off", ["-W", "-e", "warn('@off') warn('hidden')"]),
    case("unrecognized option", ["-x"]),
    case("unrecognized long option", ["--help"]),
    case("-v with extra letters", ["-vx"]),
    case("-E with extra letters", ["-Ex"]),
    case("-W with extra letters", ["-Wall"]),
    case("-i with extra letters", ["-ix"]),
    case("-e needs an argument", ["-e"]),
    case("-l needs an argument", ["-l"]),
    case("-e followed by an option", ["-e", "-i"]),
    case("bad option after a good one", ["-v", "-q"]),
    case("bad option after the script is the script's", ["args.lua", "-q"]),
    # -l
    case("-l mod", ["-l", "string", "-e", "print(string == _G.string)"]),
    case("-l joined", ["-lstring", "-e", "print(type(string))"]),
    case("-l g=mod", ["-l", "s=string", "-e", "print(s == string, s.rep('ab', 2))"]),
    case("-l from LUA_PATH", ["-l", "g=greet", "-e", "print(g.hi())"],
         env={"LUA_PATH": "mod/?.lua"}),
    case("-l missing module", ["-l", "nosuchmod"]),
    case("-l stops at the first failure", ["-l", "nosuchmod", "-e", "print('not run')"]),
    # environment: LUA_INIT*, LUA_PATH, LUA_CPATH and -E
    case("LUA_INIT", ["-e", "print(x)"], env={"LUA_INIT": "x = 'from init'"}),
    case("LUA_INIT_5_4 first", ["-e", "print(x)"],
         env={"LUA_INIT": "x = 'plain'", "LUA_INIT_5_4": "x = 'versioned'"}),
    case("LUA_INIT @file", ["-e", "print('then -e')"], env={"LUA_INIT": "@init.lua"}),
    case("LUA_INIT @missing file", ["-e", "print(1)"], env={"LUA_INIT": "@nofile.lua"}),
    case("LUA_INIT error", ["-e", "print(1)"], env={"LUA_INIT": "error('in init')"}),
    case("-E ignores LUA_INIT", ["-E", "-e", "print(x)"], env={"LUA_INIT": "x = 1"}),
    case("-E ignores LUA_INIT_5_4", ["-E", "-e", "print(x)"], env={"LUA_INIT_5_4": "x = 1"}),
    case("LUA_PATH and LUA_CPATH", ["-e", "print(package.path) print(package.cpath)"],
         env={"LUA_PATH": "/p/?.lua;;", "LUA_CPATH": "/c/?.so;;"}),
    case("-E ignores LUA_PATH and LUA_CPATH", ["-E", "-e", "print(package.path, package.cpath)"],
         env={"LUA_PATH": "/p/?.lua", "LUA_CPATH": "/c/?.so",
              "LUA_PATH_5_4": "/p54/?.lua", "LUA_CPATH_5_4": "/c54/?.so"}),
    case("-E and -l from LUA_PATH", ["-E", "-l", "greet"], env={"LUA_PATH": "mod/?.lua"}),
    # scripts, arg and ...
    case("script and arguments", ["args.lua", "a", "b c", ""]),
    case("negative arg indices", ["-W", "-e", "y=1", "args.lua", "x"]),
    case("arg without a script", ["-e", "for i = -3, 1 do print(i, arg[i]) end", "-W"]),
    case("... comes from arg", ["-e", "arg[1] = 'changed'; arg[3] = 'added'", "args.lua", "a", "b"]),
    case("... after arg shrinks", ["-e", "arg[2] = nil", "args.lua", "a", "b", "c"]),
    case("arg is not a table", ["-e", "arg = 42", "args.lua", "a"]),
    case("-- stops options", ["--", "args.lua", "-e", "-v"]),
    case("-- then -i is a script", ["--", "-i"]),
    case("- runs stdin", ["-", "x", "y"], stdin=SCRIPT.encode()),
    case("-e then - runs stdin", ["-e", "z = 5", "-"], stdin=b"print(z)\n"),
    case("-- - is a file named -", ["--", "-"]),
    case("stdin when not a terminal", [], stdin=b"print('from stdin', ...)\n"),
    case("stdin syntax error", [], stdin=b"print(\n"),
    case("stdin runtime error", [], stdin=b"local t = nil\nprint(t.x)\n"),
    case("-- alone reads stdin", ["--"], stdin=b"print('dashdash')\n"),
    case("script reads stdin", ["-e", "print(io.read('l'), io.read('n'))"], stdin=b"line\n42\n"),
    case("missing script", ["nofile.lua"]),
    case("script error and traceback", ["err.lua"]),
    case("script syntax error", ["syntax.lua"]),
    case("script os.exit", ["exit3.lua"]),
    case("script results are dropped", ["ret.lua"]),
    case("stack overflow", ["-e", "local function f() return f() + 1 end f()"]),
    # the REPL on a non-terminal stdin (readline echoes prompt and line)
    repl("repl expressions", ["1 + 1", "'a', 'b', nil", "nil", "x = 10", "x", "=x * 2"]),
    repl("repl =expr only on the first line", ["=1", "for i = 1, 1 do", "=2", "end"]),
    repl("repl return;", ["1;", "return 3", "local a = 5 return a"]),
    repl("repl statements", ["for i = 1, 3 do io.write(i, ' ') end print()"]),
    repl("repl continuation", ["function f(a,", "b)", "return a + b", "end", "f(2, 3)"]),
    repl("repl continuation of a string", ["s = [[one", "two]]", "s"]),
    repl("repl errors", ["error('e')", "error({})", "x =", "nil + 1", "print('still here')"]),
    repl("repl print error", [
        "t = setmetatable({}, {__tostring = function() error('no string') end})", "t"]),
    repl("repl print replaced", ["print = nil", "1"]),
    repl("repl _PROMPT", ["_PROMPT = 'lua% '", "_PROMPT2 = '...  '", "if true then",
                          "end", "_PROMPT = 42", "_PROMPT2 = false", "do", "end",
                          "_PROMPT = nil", "1"]),
    repl("repl _PROMPT table", ["_PROMPT = {}", "1"]),
    repl("repl _PROMPT __tostring",
         ["_PROMPT = setmetatable({}, {__tostring = function() return '$ ' end})", "2"]),
    repl("repl end of input inside a statement", ["for i = 1, 2 do"]),
    repl("repl end of input inside a statement (_PROMPT2)", ["_PROMPT2 = 'more> '",
                                                             "while true do"]),
    repl("repl empty lines", ["", "", "1", ""]),
    repl("repl long line", ["x = '" + "y" * 1500 + "'", "#x"]),
    repl("repl os.exit", ["os.exit(4)", "print('not reached')"]),
    repl("repl after script", ["n"], args=["-i", "-e", "n = 99"]),
    repl("repl after a script file", ["arg[0], arg[1]"], args=["-i", "args.lua", "p"]),
    repl("repl -v -i", ["1"], args=["-v", "-i"]),
    repl("repl after a failing -e is skipped", ["1"], args=["-i", "-e", "error('x')"]),
    repl("repl ... is the script's", ["..."], args=["-i"]),
]


def normalize(data):
    data = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b"", data)
    data = data.replace(b"\r", b"")
    return re.sub(rb"0x[0-9a-f]+", b"0x?", data)


def strip_fmem_line(out):
    """fmem-lua's stdout without its fmem line; None if the line is not
    right after Lua's version line (or there without a version line)."""
    lines = out.splitlines(keepends=True)
    kept, i = [], 0
    while i < len(lines):
        kept.append(lines[i])
        if lines[i].startswith(VERSION_LINE):
            if i + 1 >= len(lines) or not FMEM_LINE.match(lines[i + 1]):
                return None
            i += 1
        elif FMEM_LINE.match(lines[i]):
            return None
        i += 1
    return b"".join(kept)


def base_env(extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("LUA_") and k not in ("TERM",)}
    env["TERM"] = "dumb"
    env.update(extra)
    return env


def run_pipe(prog, c, cwd):
    p = subprocess.run([ARGV0] + c["args"], executable=prog, input=c["stdin"],
                       capture_output=True, cwd=cwd, env=base_env(c["env"]), timeout=TIMEOUT)
    return p.stdout, p.stderr, p.returncode


class Pty:
    """A program on a pseudo-terminal (stdin and stdout; stderr a pipe)."""

    def __init__(self, prog, args, cwd, env):
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen([ARGV0] + args, executable=prog, stdin=slave,
                                     stdout=slave, stderr=subprocess.PIPE, cwd=cwd,
                                     env=base_env(env), start_new_session=True)
        os.close(slave)
        self.out = b""

    def _read(self, deadline):
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no output in {TIMEOUT}s; have {self.out[-200:]!r}")
        r, _, _ = select.select([self.master], [], [], left)
        if r:
            try:
                chunk = os.read(self.master, 4096)
            except OSError:  # the program is gone (EIO)
                chunk = b""
            if not chunk:
                raise EOFError
            self.out += chunk

    def expect(self, text):
        """Wait until the output after what was seen so far contains text."""
        start, text = len(self.out), text.encode()
        deadline = time.monotonic() + TIMEOUT
        while text not in normalize(self.out[start:]):
            self._read(deadline)
        # the prompt may not be the last thing yet: give readline its turn
        time.sleep(0.05)

    def send(self, line):
        os.write(self.master, line.encode() + b"\n")

    def finish(self):
        deadline = time.monotonic() + TIMEOUT
        try:
            while True:
                self._read(deadline)
        except EOFError:
            pass
        err = self.proc.stderr.read()
        rc = self.proc.wait(timeout=TIMEOUT)
        os.close(self.master)
        return self.out, err, rc


def session_interrupts(prog, cwd):
    """On a terminal: the version, prompts, Ctrl-C while code runs gives
    "interrupted!" and the prompt back, Ctrl-C at the prompt ends it.
    Each wait is for output only the program's answer contains (the echo
    of "x > 1" contains "> " too), so no line is typed before the prompt."""
    t = Pty(prog, [], cwd, {})
    t.expect("\n> ")
    t.send("x = 1")
    t.expect("x = 1\n> ")
    t.send("io.write('go\\n') while true do x = x + 1 end")
    t.expect("go\n")
    t.proc.send_signal(signal.SIGINT)
    t.expect("> ")
    t.send("x > 1")
    t.expect("true\n> ")
    t.send("for i = 1, 2 do")
    t.expect(">> ")
    t.send("end")
    t.expect("end\n> ")
    t.proc.send_signal(signal.SIGINT)
    return t.finish()


def session_end_of_input(prog, cwd):
    """On a terminal with -i: a script first, then the REPL until EOF (^D)."""
    t = Pty(prog, ["-i", "args.lua", "q"], cwd, {})
    t.expect("arg[1]=q\n> ")
    t.send("=#arg")
    t.expect("1\n> ")
    t.send("error('x')")
    t.expect("')\n> ")
    os.write(t.master, b"\x04")
    return t.finish()


def session_script_interrupt(prog, cwd):
    """Ctrl-C in a running script: the error and exit status 1."""
    p = subprocess.Popen([ARGV0, "-e", "io.write('go\\n') io.flush() while true do end"],
                         executable=prog, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL, cwd=cwd, env=base_env({}))
    line = p.stdout.readline()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=TIMEOUT)
    return line + out, err, p.returncode


def session_script_interrupt_twice(prog, cwd):
    """Ctrl-C caught by pcall: the script goes on; the second Ctrl-C, while
    no Lua code is interruptible (the handler is reset until the next
    protected call from the interpreter), kills the program. The marker is
    written inside the pcall, so the first signal always lands there."""
    code = ("while true do "
            "local ok, e = pcall(function() io.write('go\\n') io.flush() while true do end end) "
            "io.write(e:match('interrupted!') or e, '\\n') io.flush() end")
    p = subprocess.Popen([ARGV0, "-e", code], executable=prog, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd=cwd,
                         env=base_env({}))
    first = p.stdout.readline()
    p.send_signal(signal.SIGINT)
    second = p.stdout.readline() + p.stdout.readline()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=TIMEOUT)
    return first + second + out, err, p.returncode


SESSIONS = [
    ("tty: Ctrl-C interrupts code, then ends the REPL", session_interrupts),
    ("tty: -i after a script, end of input", session_end_of_input),
    ("Ctrl-C in a script", session_script_interrupt),
    ("Ctrl-C caught by pcall, a second one", session_script_interrupt_twice),
]


# A Ctrl-C sent once the marker line is read may still land inside the
# io.write or io.flush that wrote it: their frame in the traceback, and the
# position the error gets (none when the hook fires as a C function
# returns), depend on that timing alone.
MARKER_FRAMES = re.compile(rb"\t\[C\]: in function 'io\.(write|flush)'\n"
                           rb"|(?:\(command line\)|stdin):\d+: (?=interrupted!)")


def compare(name, want, got):
    w_out, w_err, w_rc = want
    g_out, g_err, g_rc = got
    w_err, g_err = MARKER_FRAMES.sub(b"", w_err), MARKER_FRAMES.sub(b"", g_err)
    g_out = normalize(g_out)
    w_out = normalize(w_out)
    stripped = strip_fmem_line(g_out)
    problems = []
    if stripped is None:
        problems.append("fmem's line is missing after the version line, or misplaced")
    elif stripped != w_out:
        problems.append(f"stdout:\n  lua5.4:   {w_out!r}\n  fmem-lua: {stripped!r}")
    if normalize(w_err) != normalize(g_err):
        problems.append(f"stderr:\n  lua5.4:   {normalize(w_err)!r}\n"
                        f"  fmem-lua: {normalize(g_err)!r}")
    if w_rc != g_rc:
        problems.append(f"exit status: lua5.4 {w_rc}, fmem-lua {g_rc}")
    if problems:
        print(f"FAIL: {name}")
        for p in problems:
            print("    " + p.replace("\n", "\n    "))
        return False
    print(f"ok: {name} (exit {w_rc})")
    return True


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    lua, host = sys.argv[1], sys.argv[2]
    passed = failed = 0
    with tempfile.TemporaryDirectory() as cwd:
        for path, text in FILES.items():
            os.makedirs(os.path.dirname(os.path.join(cwd, path)), exist_ok=True)
            with open(os.path.join(cwd, path), "w") as f:
                f.write(text)
        runs = [(c["name"], lambda prog, c=c: run_pipe(prog, c, cwd)) for c in CASES]
        runs += [(name, lambda prog, fn=fn: fn(prog, cwd)) for name, fn in SESSIONS]
        for name, run in runs:
            try:
                ok = compare(name, run(lua), run(host))
            except (TimeoutError, subprocess.TimeoutExpired) as exc:
                print(f"FAIL: {name}: {exc}")
                ok = False
            passed += ok
            failed += not ok
    print(f"lua-diff: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
