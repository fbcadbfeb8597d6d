"""The extension module fmem._fmem for setuptools (metadata: pyproject.toml).

    pip install --no-build-isolation ./bindings/python

It links libfmem_hooks_python, libfmem_hooks and libfmem as installed
(make install), found with pkg-config (fmem-hooks-python; set
PKG_CONFIG_PATH for another prefix). The module gets a run path only when
that library directory is not one the dynamic loader searches anyway, so it
never points into a build or source tree. For development against an
uninstalled build tree, set FMEM_BUILDDIR=DIR: the module then links the
tree's libraries with no run path and needs LD_LIBRARY_PATH=DIR/.libs
(bindings/python/pyrun does this for you without installing anything).

Without numpy's C headers the module builds without fmem.numpy_arrays
(fmem.HAVE_NUMPY is 0): a warning says so at build time (pip shows the
build's output with -v).
"""
import atexit
import glob
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
SRCDIR = os.path.abspath(os.path.join(HERE, "..", ".."))
# build products stay out of the source tree, in a directory of this build
# alone (distutils rebuilds by timestamps only: a shared one would hand out
# objects compiled with other flags)
SCRATCH = tempfile.mkdtemp(prefix="fmem-python-build-")
atexit.register(shutil.rmtree, SCRATCH, ignore_errors=True)
LIBS = ["fmem_hooks_python", "fmem_hooks", "fmem"]


def warn(*lines):
    bar = "*" * 72
    print("\n".join([bar] + [f"* WARNING: {line}" for line in lines] + [bar]), file=sys.stderr,
          flush=True)


def pkg_config(*args):
    try:
        out = subprocess.run(["pkg-config", *args], check=True, capture_output=True,
                             text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return shlex.split(out)


def loader_dirs():
    """Directories the dynamic loader searches without a run path."""
    dirs = {"/lib", "/usr/lib", "/lib64", "/usr/lib64"}
    for conf in glob.glob("/etc/ld.so.conf.d/*.conf") + ["/etc/ld.so.conf"]:
        try:
            with open(conf) as f:
                dirs.update(line.strip() for line in f if line.startswith("/"))
        except OSError:
            pass
    return {os.path.realpath(d) for d in dirs}


def library_flags():
    """(include_dirs, library_dirs, runtime_library_dirs)."""
    builddir = os.environ.get("FMEM_BUILDDIR")
    if builddir:
        built = os.path.join(os.path.abspath(builddir), ".libs")
        if not os.path.exists(os.path.join(built, "libfmem_hooks_python.so")):
            raise SystemExit(f"setup.py: FMEM_BUILDDIR={builddir} has no built libraries "
                             "(run make there first)")
        warn(f"linking the uninstalled libraries of {built} without a run path:",
             f"the module needs LD_LIBRARY_PATH={built} until they are installed")
        includes = [os.path.join(SRCDIR, d) for d in ("libfmem/include", "gc_hooks/include")]
        return includes, [built], []
    flags = pkg_config("--cflags", "--libs", "fmem-hooks-python")
    if flags is None:
        raise SystemExit("setup.py: libfmem is not installed (pkg-config finds no "
                         "fmem-hooks-python): run make install in the fmem source tree, "
                         "set PKG_CONFIG_PATH, or set FMEM_BUILDDIR to a build tree")
    incs = [f[2:] for f in flags if f.startswith("-I")]
    dirs = [f[2:] for f in flags if f.startswith("-L")]
    # with a staged install (make install DESTDIR=D, PKG_CONFIG_SYSROOT_DIR=D)
    # the libraries will be found at run time without the D prefix
    sysroot = os.environ.get("PKG_CONFIG_SYSROOT_DIR", "").rstrip("/")
    final = [d[len(sysroot):] if sysroot and d.startswith(sysroot + "/") else d for d in dirs]
    searched = loader_dirs()
    rpath = [d for d in final if os.path.realpath(d) not in searched]
    return incs, dirs, rpath


def numpy_flags():
    try:
        import numpy
        inc = numpy.get_include()
    except ImportError:
        inc = None
    if not inc or not os.path.exists(os.path.join(inc, "numpy", "arrayobject.h")):
        warn("numpy's C headers were not found (Debian: apt-get install python3-numpy):",
             "building fmem WITHOUT fmem.numpy_arrays (fmem.HAVE_NUMPY == 0)")
        return [], []
    return [inc], [("FMEM_HAVE_NUMPY", "1")]


includes, libdirs, rpath = library_flags()
np_includes, np_macros = numpy_flags()

setup(
    ext_modules=[
        Extension(
            "fmem._fmem",
            sources=sorted(glob.glob(os.path.join("src", "*.c"))),
            depends=[os.path.join("src", "fmempy.h")],
            include_dirs=includes + np_includes,
            define_macros=[("_GNU_SOURCE", "1")] + np_macros,
            library_dirs=libdirs,
            runtime_library_dirs=rpath,
            libraries=LIBS,
            extra_compile_args=["-std=c11", "-Wall", "-Wextra", "-fvisibility=hidden"],
        )
    ],
    options={"build": {"build_base": SCRATCH}, "egg_info": {"egg_base": SCRATCH}},
)
