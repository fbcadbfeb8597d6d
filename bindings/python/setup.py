"""Build the fmem package with setuptools, offline:

    pip install --no-build-isolation ./bindings/python

The extension links libfmem_hooks_python, libfmem_hooks and libfmem: an
installed fmem found through pkg-config (fmem-hooks-python), or else the
libraries of a build tree (FMEM_BUILDDIR, default: the tree this file is
in, after make), whose directory is then recorded as the run path.
"""
import glob
import os
import shlex
import subprocess
import tempfile

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
SRCDIR = os.path.abspath(os.path.join(HERE, "..", ".."))
# build products stay out of the source tree
SCRATCH = os.path.join(tempfile.gettempdir(), f"fmem-python-build-{os.getuid()}")


def pkg_config(*args):
    try:
        out = subprocess.run(["pkg-config", *args], check=True, capture_output=True,
                             text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return shlex.split(out)


def library_flags():
    """(include_dirs, library_dirs, runtime_library_dirs, libraries)."""
    libs = ["fmem_hooks_python", "fmem_hooks", "fmem"]
    builddir = os.environ.get("FMEM_BUILDDIR", SRCDIR)
    built = os.path.join(builddir, ".libs")
    includes = [os.path.join(SRCDIR, d) for d in ("libfmem/include", "gc_hooks/include")]
    if os.path.exists(os.path.join(built, "libfmem_hooks_python.so")):
        return includes, [built], [built], libs
    flags = pkg_config("--cflags", "--libs", "fmem-hooks-python")
    if flags is None:
        raise SystemExit("setup.py: build fmem first (make in the source tree, or install "
                         "it so that pkg-config finds fmem-hooks-python)")
    incs = [f[2:] for f in flags if f.startswith("-I")]
    dirs = [f[2:] for f in flags if f.startswith("-L")]
    return incs, dirs, dirs, libs


def numpy_flags():
    try:
        import numpy
    except ImportError:
        return [], []
    return [numpy.get_include()], [("FMEM_HAVE_NUMPY", "1")]


os.makedirs(SCRATCH, exist_ok=True)
includes, libdirs, rpath, libs = library_flags()
np_includes, np_macros = numpy_flags()

setup(
    name="fmem",
    version="0.1",
    description="fmem: remote-memory pools, far-memory regions and allocator hooks",
    packages=["fmem"],
    package_data={"fmem": ["__init__.pyi", "py.typed"]},
    ext_modules=[
        Extension(
            "fmem._fmem",
            sources=sorted(glob.glob(os.path.join("src", "*.c"))),
            depends=[os.path.join("src", "fmempy.h")],
            include_dirs=includes + np_includes,
            define_macros=[("_GNU_SOURCE", "1")] + np_macros,
            library_dirs=libdirs,
            runtime_library_dirs=rpath,
            libraries=libs,
            extra_compile_args=["-std=c11", "-Wall", "-Wextra", "-fvisibility=hidden"],
        )
    ],
    python_requires=">=3.9",
    options={"build": {"build_base": SCRATCH}, "egg_info": {"egg_base": SCRATCH}},
)
