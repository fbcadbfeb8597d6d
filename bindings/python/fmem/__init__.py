"""fmem: remote-memory pools, far-memory regions and allocator hooks.

``fmem.open()`` / ``fmem.connect()`` return a :class:`Pool` / :class:`Client`;
``Pool.alloc()`` returns :class:`Buffer` objects that export pool memory
through the buffer protocol; :class:`Region` is a far-memory range paged
through a local cache; ``numpy_arrays()`` puts numpy array data in far
memory; ``install_arena_allocator()`` does the same for Python's small
objects. Every error derives from :class:`fmem.Error`. See docs/python.md.
"""
try:
    from . import _fmem  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the C library build
    if "static TLS" not in str(exc):
        raise
    raise ImportError(
        f"{exc}: libfmem needs more static TLS than glibc keeps for libraries "
        "loaded at run time; start Python with "
        "GLIBC_TUNABLES=glibc.rtld.optional_static_tls=0x20000") from exc

from ._fmem import (  # noqa: F401
    CHUNK_SIZE, DEFAULT_POOL_SIZE, HAVE_NUMPY, LIBRARY_VERSION, SECTION_SIZE, SPAN_SIZE,
    AccessError, BadHandleError, Buffer, BufferInUseError, BusyError, Client,
    ClosedError, CorruptPoolError, DoubleFreeError, Error, InvalidArgumentError,
    NotSupportedError, OutOfMemoryError, Pool, QuotaError, RangeError, Region, SizeError,
    StaleHandleError, TransportError, URIError, arena_allocator_stats, compact, connect,
    default_pool, install_arena_allocator, numpy_arrays, open, release_empty_pools, size_round,
    strerror, unlink,
)

__version__ = LIBRARY_VERSION

__all__ = [
    "CHUNK_SIZE", "DEFAULT_POOL_SIZE", "HAVE_NUMPY", "LIBRARY_VERSION", "SECTION_SIZE",
    "SPAN_SIZE", "AccessError", "BadHandleError", "Buffer", "BufferInUseError", "BusyError",
    "Client", "ClosedError", "CorruptPoolError", "DoubleFreeError", "Error",
    "InvalidArgumentError", "NotSupportedError", "OutOfMemoryError", "Pool", "QuotaError",
    "RangeError",
    "Region", "SizeError", "StaleHandleError", "TransportError", "URIError",
    "arena_allocator_stats", "compact", "connect",
    "default_pool", "install_arena_allocator", "numpy_arrays", "open", "release_empty_pools",
    "size_round", "strerror", "unlink",
]
