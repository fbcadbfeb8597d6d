"""The public surface: every name documented, the stub file in step with
the module."""
import ast
import inspect
import os

import fmem


def stub_names():
    path = os.path.join(os.path.dirname(fmem.__file__), "__init__.pyi")
    tree = ast.parse(open(path).read())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign):
            names.add(node.target.id)
    return names


def test_stub_covers_the_module():
    helpers = {"_PoolStats", "_NodeStats", "_RegionStats", "_RegionPath", "_HeapStats", "_ArenaStats", "_Handle",
               "__version__"}
    assert stub_names() - helpers == set(fmem.__all__)


def test_everything_has_a_docstring():
    assert fmem.__doc__ and fmem._fmem.__doc__
    for name in fmem.__all__:
        obj = getattr(fmem, name)
        if isinstance(obj, (int, str)):
            continue
        assert obj.__doc__, name
        if inspect.isclass(obj) and not issubclass(obj, BaseException):
            for attr, member in vars(obj).items():
                if not attr.startswith("_") or attr in ("__enter__", "__exit__"):
                    assert member.__doc__, f"{name}.{attr}"


def test_version():
    assert fmem.__version__ == fmem.LIBRARY_VERSION == "0.1"
