#!/usr/bin/env python3
"""Generate fmem's manual pages from the sources they describe, so that they
cannot drift from them:

  gen-man.py program NAME SECTION PROGRAM [HELP-OPTION]  > NAME.SECTION
      the OPTIONS section is PROGRAM's own --help text; the rest (what it
      is, environment, files) is the short prose in PAGES below
  gen-man.py library VERSION HEADER...  > libfmem.3
      one subsection per public function (every `FMEM_API` declaration of
      the headers) with its declaration and the comment above it
  gen-man.py functions HEADER...
      the names of the documented functions, one a line (for the
      .so links man3/fmem_open.3 -> libfmem.3 and for the tests)
"""
import re
import subprocess
import sys

DATE = "2026"
SEE_ALSO = {
    "fmem": "fmemd(8), fmem-mnode(8), fmem-lua(1), libfmem(3)",
    "fmemd": "fmem(1), fmem-mnode(8), libfmem(3)",
    "fmem-mnode": "fmem(1), fmemd(8), libfmem(3)",
    "fmem-lua": "lua5.4(1), fmem(1), libfmem(3)",
}
PAGES = {
    "fmem": {
        "summary": "administer fmem pools and services",
        "description": """\
fmem reports on, checks and repairs fmem pools: remote-memory pools whose
blocks (4 KiB x 2^k, aligned to their size) are allocated with one-sided
operations only. \\fBstatus\\fR prints space, fragmentation, services and
applications of a pool file or of a running daemon (\\fB--json\\fR: as one
JSON object; \\fB--map\\fR: an occupancy map as PNG); \\fBverify\\fR checks a
pool's headers against its redo logs; \\fBrecover\\fR takes back the blocks
of a user id whose process is gone. \\fBmnode\\fR and \\fBdaemon\\fR run
fmem-mnode(8) and fmemd(8) in the foreground.
.PP
Sizes everywhere take K, M, G or T (either case), optionally followed by B
or iB; all are powers of 1024.""",
        "exit": "0 success; 1 failure (the message says why, with the system's "
                "error text where there is one); 2 a bad command line or URI; "
                "3 (verify) incomplete: sections kept changing.",
        "environment": [("FMEM_URI", "the pool or service of status without a URI"),
                        ("FMEM_STATS_DIR", "where processes publish their live far-memory "
                         "figures and status --processes reads them (default /dev/shm); "
                         "libfmem also reads FMEM_STATS=0 (publish nothing) and "
                         "FMEM_STATS_INTERVAL_MS (how often the figures are rewritten, "
                         "default 250)")],
    },
    "fmemd": {
        "summary": "fmem allocation service of a compute node",
        "description": """\
fmemd allocates from one or more memory nodes (fmem-mnode(8)) on behalf of
the applications of its machine, which connect to its socket with
fmem_open("unix:PATH") (libfmem(3)). It runs in the foreground; the systemd
unit fmemd.service runs it as the user fmem with the settings of
/etc/default/fmem.""",
        "exit": "0 after SIGTERM or SIGINT; 1 on a failure to start; 2 a bad command line.",
        "files": [("/etc/default/fmem", "FMEMD_SOCKET and FMEMD_ARGS of the systemd unit")],
    },
    "fmem-mnode": {
        "summary": "fmem memory node daemon",
        "description": """\
fmem-mnode serves one pool (shm: or file:) to fmemd(8) services: over a
local socket, or over RDMA verbs with \\fB--rdma\\fR. It checks services'
heartbeats, recovers the blocks of a service that died, and regenerates
keys. It runs in the foreground; the systemd unit fmem-mnode.service runs
it as the user fmem with the settings of /etc/default/fmem.""",
        "exit": "0 after SIGTERM or SIGINT; 1 on a failure to start; 2 a bad command line.",
        "files": [("/etc/default/fmem",
                   "FMEM_POOL, FMEM_MNODE_SOCKET and FMEM_MNODE_ARGS of the systemd unit")],
    },
    "fmem-lua": {
        "summary": "Lua 5.4 interpreter whose heap is in fmem far memory",
        "description": """\
fmem-lua is the standalone Lua 5.4 interpreter (the same options, the same
interactive mode as lua5.4(1)) whose main state allocates its whole heap
from an fmem pool, with the module fmem (require "fmem") linked in.""",
        "exit": "as lua5.4(1): 0 success, 1 an error in the script or a bad option.",
        "environment": [
            ("FMEM_LUA_BACKING", "the heap: shm (default: a private shared-memory pool), "
             "region:CACHE[:SIZE] (a far-memory region with a local cache of CACHE, a "
             "percentage or a size), or libc"),
            ("FMEM_LUA_STATS", "set and not 0: print the heap's statistics on stderr at exit"),
            ("FMEM_LUA_READLINE", "0: no line editing in interactive mode"),
            ("FMEM_URI", "the pool of fmem.open() without a URI"),
            ("LUA_INIT, LUA_PATH, LUA_CPATH", "as for lua5.4(1) (ignored with -E)"),
        ],
    },
}


def esc(text):
    """Plain text as roff: backslashes, and lines that would be requests."""
    out = []
    for line in text.replace("\\", "\\e").split("\n"):
        if line.startswith((".", "'")):
            line = "\\&" + line
        out.append(line)
    return "\n".join(out)


def header(name, section, summary, version):
    return (f'.TH {name.upper()} {section} "{DATE}" "fmem {version}" "fmem manual"\n'
            f".SH NAME\n{name} \\- {summary}\n")


def program(name, section, prog, help_opt="--help"):
    page = PAGES[name]
    res = subprocess.run([prog, help_opt], capture_output=True, text=True)
    text = res.stdout or res.stderr
    text = re.sub(r"\S*/(?:\.libs/)?(?:lt-)?" + re.escape(name) + r"\b", name, text)
    ver = subprocess.run([prog, "-v" if name == "fmem-lua" else "--version"],
                         capture_output=True, text=True).stdout
    m = re.search(r"fmem\)? ?(\d+\.\d+(?:\.\d+)?)", ver)
    version = m.group(1) if m else "?"
    lines = [ln for ln in text.rstrip("\n").split("\n") if "unrecognized option" not in ln]
    synopsis = [ln for ln in lines if ln.startswith(("usage:", "       " + name))]
    out = [header(name, section, page["summary"], version), ".SH SYNOPSIS\n"]
    for ln in synopsis:
        out.append(".nf\n" + esc(re.sub(r"^(usage:)?\s*", "", ln)) + "\n.fi\n")
    out.append(".SH DESCRIPTION\n" + page["description"] + "\n")
    said = f"As printed by \\fB{name} {help_opt}\\fR" if help_opt == "--help" else \
        "The options, as lua5.4(1) has them"
    out.append(f".SH OPTIONS\n{said}:\n.PP\n.nf\n")
    out.append(esc("\n".join(ln for ln in lines if ln not in synopsis)) + "\n.fi\n")
    if name == "fmem":
        out.append(".SH COMMANDS\nEach command describes itself with \\fBfmem COMMAND "
                   "--help\\fR:\n")
        for cmd in ("status", "verify", "recover"):
            sub = subprocess.run([prog, cmd, "--help"], capture_output=True, text=True).stdout
            out.append(f".SS {cmd}\n.nf\n{esc(sub.rstrip())}\n.fi\n")
    for title, key in (("ENVIRONMENT", "environment"), ("FILES", "files")):
        if page.get(key):
            out.append(f".SH {title}\n")
            for k, v in page[key]:
                out.append(f".TP\n.B {k}\n{v}\n")
    out.append(f".SH EXIT STATUS\n{page['exit']}\n")
    out.append(f".SH SEE ALSO\n{SEE_ALSO[name]}\n")
    return "".join(out)


DECL = re.compile(r"^FMEM_API\s+(.*?)\b(fmem_\w+)\s*\(", re.S)


def declarations(path):
    """[(name, declaration, comment)] of a header, in order. A declaration
    takes the comment just above it (a #define between them is allowed);
    declarations that follow one another with no blank line and no comment
    of their own share the one before (fmem_read/fmem_write)."""
    lines = open(path).read().split("\n")
    result, comment, i, last_comment = [], None, 0, None
    while i < len(lines):
        ln = lines[i]
        s = ln.strip()
        if s.startswith("/*"):
            block = [ln]
            while "*/" not in lines[i]:
                i += 1
                block.append(lines[i])
            comment = "\n".join(block)
            i += 1
            continue
        if s.startswith("FMEM_API"):
            decl = [ln]
            while not decl[-1].rstrip().endswith(";"):
                i += 1
                decl.append(lines[i])
            text = " ".join(d.strip() for d in decl)
            m = DECL.match(text)
            if m:
                own = comment if comment is not None else last_comment
                result.append((m.group(2), text.replace("FMEM_API ", ""), own))
                last_comment = own
            comment = None
            i += 1
            continue
        if not s:
            comment, last_comment = None, None
        elif not s.startswith("#"):
            comment = None
        i += 1
    return result


def comment_text(c):
    if not c:
        return ""
    c = re.sub(r"^\s*/\*+ ?|\*/\s*$", "", c)
    return "\n".join(re.sub(r"^\s*\* ?", "", ln) for ln in c.split("\n")).strip()


def library(version, headers):
    out = [header("libfmem", 3, "fine-grained remote-memory allocation", version)]
    out.append(".SH SYNOPSIS\n.nf\n")
    for h in headers:
        out.append(f".B #include <{h.rsplit('/', 1)[-1]}>\n")
    out.append(".PP\ncc app.c $(pkg\\-config \\-\\-cflags \\-\\-libs fmem)\n.fi\n")
    out.append(""".SH DESCRIPTION
libfmem allocates blocks of remote (disaggregated) memory, 4 KiB x 2^k and
aligned to their size, with one-sided operations only. Functions that return
\\fBint\\fR return 0 or a negative FMEM_E* code that fmem_strerror() names.
Each function below is described by the comment above its declaration in the
header named; \\fBman FUNCTION\\fR opens this page.
""")
    for h in headers:
        base = h.rsplit("/", 1)[-1]
        out.append(f".SH FUNCTIONS OF {base.upper()}\n")
        for name, decl, c in declarations(h):
            out.append(f".SS {name}\n.nf\n.B {esc(decl)}\n.fi\n")
            txt = comment_text(c)
            out.append((".PP\n.nf\n" + esc(txt) + "\n.fi\n") if txt else "")
    out.append(".SH SEE ALSO\nfmem(1), fmemd(8), fmem-mnode(8), fmem-lua(1)\n")
    return "".join(out)


def main(argv):
    if len(argv) >= 5 and argv[1] == "program":
        sys.stdout.write(program(argv[2], argv[3], argv[4], *argv[5:6]))
    elif len(argv) >= 4 and argv[1] == "library":
        sys.stdout.write(library(argv[2], argv[3:]))
    elif len(argv) >= 3 and argv[1] == "functions":
        for h in argv[2:]:
            for name, _, _ in declarations(h):
                print(name)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
