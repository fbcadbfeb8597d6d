"""The package as users meet it: pip install of bindings/python (offline,
against an installed libfmem), the stubs against the module (mypy's
stubtest), signatures for inspect, and errno on the OSError exceptions."""
import errno
import fcntl
import inspect
import os
import shutil
import socket
import subprocess
import sys
import sysconfig

import pytest

import fmem
from conftest import UNDER_ASAN

SRCDIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILDDIR = os.environ.get("FMEM_BUILDDIR", SRCDIR)
PYDIR = os.path.join(SRCDIR, "bindings", "python")


# ---- errno and the OSError subclasses ---------------------------------------------


def test_missing_shm_pool_is_file_not_found():
    with pytest.raises(FileNotFoundError) as info:
        fmem.open("shm:/fmem-test-no-such-pool?create=0")
    e = info.value
    assert isinstance(e, fmem.TransportError) and isinstance(e, fmem.Error)
    assert e.errno == errno.ENOENT and e.code < 0
    # the message stays fmem's, with the system's reason
    assert str(e).startswith("shm:/fmem-test-no-such-pool?create=0: ")
    assert "No such file or directory" in str(e)
    assert type(e).__name__ == "TransportError"


def test_except_transport_error_still_catches():
    try:
        fmem.open("file:/nonexistent-dir-fmem/pool?size=4M")
    except fmem.TransportError as e:
        assert e.errno == errno.ENOENT
    else:
        pytest.fail("no error")


def test_unlink_missing_pool():
    with pytest.raises(FileNotFoundError) as info:
        fmem.unlink("shm:/fmem-test-no-such-pool-either")
    assert info.value.errno == errno.ENOENT


def test_connection_refused(tmp_path):
    path = str(tmp_path / "dead.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)  # as fmemd
    s.bind(path)  # a socket file nobody listens on
    try:
        with pytest.raises(ConnectionRefusedError) as info:
            fmem.connect("unix:" + path)
        assert isinstance(info.value, fmem.TransportError)
        assert info.value.errno == errno.ECONNREFUSED
    finally:
        s.close()


def test_corrupt_pool_has_errno(tmp_path):
    f = tmp_path / "notapool"
    f.write_bytes(b"x" * 8192)
    with pytest.raises(fmem.CorruptPoolError) as info:
        fmem.open(f"file:{f}?size=8K&create=0")
    assert info.value.errno == errno.EUCLEAN
    assert not isinstance(info.value, FileNotFoundError)


def test_busy_error_has_errno(pool):
    block = fmem.numpy_arrays(pool)
    with block:
        with pytest.raises(fmem.BusyError) as info:
            block.__enter__()
    assert info.value.errno == errno.EBUSY and info.value.code == 0


def test_value_errors_have_no_errno(pool):
    b = pool.alloc(4096)
    b.free()
    with pytest.raises(fmem.DoubleFreeError) as info:
        b.free()
    assert not hasattr(info.value, "errno")


# ---- signatures and stubs -----------------------------------------------------------------


def public_callables():
    for name in fmem.__all__:
        obj = getattr(fmem, name)
        if isinstance(obj, type):
            if issubclass(obj, BaseException):
                continue
            if obj is not fmem.Buffer:  # made by Pool.alloc only
                yield name, obj
            for attr, value in vars(obj).items():
                if callable(value) and (not attr.startswith("_")
                                        or attr in ("__enter__", "__exit__")):
                    yield f"{name}.{attr}", getattr(obj, attr)
        elif callable(obj):
            yield name, obj


def test_every_function_has_a_signature():
    seen = 0
    for name, obj in public_callables():
        sig = inspect.signature(obj)  # ValueError without a text signature
        assert obj.__text_signature__, name
        seen += 1
        assert str(sig) != "(*args, **kwargs)", name
    assert seen >= 30


def test_signatures_match_calls(pool):
    assert str(inspect.signature(fmem.open)) == "(uri=None)"
    assert str(inspect.signature(fmem.Region)) == \
        "(size, cache=None, *, pool=None, fetch_unit=0, prefetch=None)"
    b = pool.alloc(100)
    assert str(inspect.signature(b.read)) == "(offset=0, size=-1)"
    assert str(inspect.signature(fmem.Buffer.read)) == "(self, /, offset=0, size=-1)"
    assert str(inspect.signature(pool.alloc)) == "(nbytes, /)"
    # the signature is the truth: keyword use works where it says so
    b.write(data=b"abc", offset=1)
    assert b.read(offset=1, size=3) == b"abc"
    b.free()


def test_stubtest(tmp_path):
    pytest.importorskip("mypy", reason="python3-mypy is not installed (scripts/deps.sh)")
    # the fmem under test, wherever the tests run from; mypy's cache in tmp
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(fmem.__file__)),
               MYPY_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, "-m", "mypy.stubtest", "fmem"], capture_output=True,
                       text=True, timeout=600, cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Success" in r.stdout


# ---- pip install --------------------------------------------------------------------------


def have(tool):
    return shutil.which(tool) is not None


def source_listing():
    out = set()
    for root, dirs, files in os.walk(PYDIR):
        out.update(os.path.relpath(os.path.join(root, f), PYDIR) for f in files + dirs)
    return out


@pytest.fixture(scope="module")
def installed_lib(tmp_path_factory):
    """libfmem installed into a staging directory (make install DESTDIR=),
    with the environment pkg-config and the loader need to use it."""
    if not have("pkg-config") or not os.path.exists(os.path.join(BUILDDIR, "Makefile")):
        pytest.skip("needs pkg-config and a configured build tree")
    if UNDER_ASAN:  # make, gcc and pip would all run with libasan preloaded
        pytest.skip("packaging is checked by make check, not under AddressSanitizer")
    dest = tmp_path_factory.mktemp("destdir")
    # one make install at a time in this tree (tests/lua/luarocks.sh does
    # one too: concurrent libtool relinks would share file names)
    with open(os.path.join(BUILDDIR, "tests", ".make-install.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        r = subprocess.run(["make", "-C", BUILDDIR, "install", f"DESTDIR={dest}"],
                           capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    pcs = list(dest.rglob("fmem-hooks-python.pc"))
    assert pcs, "make install installed no fmem-hooks-python.pc"
    libdir = next(dest.rglob("libfmem.so.0")).parent
    env = dict(os.environ, PKG_CONFIG_PATH=str(pcs[0].parent), PKG_CONFIG_SYSROOT_DIR=str(dest),
               LD_LIBRARY_PATH=str(libdir))
    env.pop("PYTHONPATH", None)  # not the staged package of the build tree
    env.pop("FMEM_BUILDDIR", None)
    return env


def pip_install(env, root, *flags):
    before = source_listing()
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-v", "--no-index",
                        "--no-build-isolation", "--root", str(root), *flags, PYDIR],
                       capture_output=True, text=True, timeout=1200, env=env)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert source_listing() == before, "the build left files in bindings/python"
    return r


def installed_module(root):
    mods = list(root.rglob("_fmem*.so"))
    assert len(mods) == 1, mods
    return mods[0]


def run_installed(env, pkgdir, code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=dict(env, PYTHONPATH=str(pkgdir)), cwd="/")


def runpath(module):
    out = subprocess.run(["readelf", "-d", str(module)], capture_output=True, text=True,
                         check=True).stdout
    return [line for line in out.splitlines() if "RUNPATH" in line or "RPATH" in line]


@pytest.mark.skipif(not have("readelf"), reason="needs readelf (binutils)")
@pytest.mark.parametrize("layout,prefix,want", [
    ("default", [], os.path.join("usr", "local", "lib",
                                 f"python3.{sys.version_info.minor}", "dist-packages")),
    ("deb_system", ["--prefix", "/usr"], os.path.join("usr", "lib", "python3", "dist-packages")),
])
def test_pip_install(installed_lib, tmp_path, layout, prefix, want):
    if not sys.executable.startswith("/usr/bin/") or "deb_system" not in \
            sysconfig.get_scheme_names():
        pytest.skip("the install locations checked are Debian's python3's")
    env = dict(installed_lib)
    flags = list(prefix)
    if layout == "deb_system":  # how Debian's own packaging installs
        env["DEB_PYTHON_INSTALL_LAYOUT"] = "deb_system"
        flags.append("--use-pep517")
    # else pip's default: the system prefix, which Debian's python3 maps to
    # /usr/local (as `pip install --break-system-packages` would install)
    pip_install(env, tmp_path, *flags)
    module = installed_module(tmp_path)
    pkgdir = module.parent.parent
    assert str(pkgdir).endswith(want), pkgdir
    assert (module.parent / "__init__.pyi").exists() and (module.parent / "py.typed").exists()
    # a run path only to the installed libdir (not one the loader searches
    # anyway, e.g. make distcheck's prefix), never into a build or source tree
    libdir = env["LD_LIBRARY_PATH"][len(env["PKG_CONFIG_SYSROOT_DIR"]):]
    for line in runpath(module):
        assert line.split("[", 1)[1].rstrip("]") == libdir and \
            not libdir.startswith(("/usr/lib", "/usr/local/lib", "/lib")), \
            f"an installed module needs no run path into a tree: {line}"
    r = run_installed(env, pkgdir, "import fmem; p = fmem.open('mem:?size=8M'); "
                      "b = p.alloc(10); print(fmem.__file__, fmem.__version__, fmem.HAVE_NUMPY)")
    assert r.returncode == 0, r.stderr
    file, version, numpy_ok = r.stdout.split()
    assert file.startswith(str(pkgdir)) and version == fmem.LIBRARY_VERSION
    assert numpy_ok == str(fmem.HAVE_NUMPY)


@pytest.mark.skipif(not have("readelf"), reason="needs readelf (binutils)")
def test_pip_install_without_numpy_warns(installed_lib, tmp_path):
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "numpy.py").write_text("raise ImportError('numpy hidden by the test')\n")
    env = dict(installed_lib, PYTHONPATH=str(hide))
    r = pip_install(env, tmp_path / "root")
    out = r.stdout + r.stderr
    assert "WARNING: numpy's C headers were not found" in out
    assert "WITHOUT fmem.numpy_arrays" in out
    module = installed_module(tmp_path / "root")
    r = run_installed(installed_lib, module.parent.parent, "import fmem; print(fmem.HAVE_NUMPY)")
    assert r.returncode == 0 and r.stdout.strip() == "0", r.stdout + r.stderr


def test_version_matches_pyproject():
    with open(os.path.join(PYDIR, "pyproject.toml")) as f:
        text = f.read()
    assert f'version = "{fmem.LIBRARY_VERSION}"' in text
    assert 'build-backend = "setuptools.build_meta"' in text
