"""Type stubs of the fmem package (the names re-exported from fmem._fmem)."""
import sys
from types import TracebackType
from typing import Any, Literal, TypedDict, final

# Debian 12's mypy and typing_extensions (4.4) have no Buffer: use typeshed's
from _typeshed import ReadableBuffer as _BufferLike
from typing_extensions import Self

CHUNK_SIZE: int
SPAN_SIZE: int
SECTION_SIZE: int
DEFAULT_POOL_SIZE: int
HAVE_NUMPY: int
LIBRARY_VERSION: str
__version__: str

# ---- errors -----------------------------------------------------------------

class Error(Exception):
    code: int  # libfmem error code (negative), 0 for the binding's own errors

class OutOfMemoryError(Error, MemoryError): ...
class SizeError(Error, ValueError): ...
class InvalidArgumentError(Error, ValueError): ...
class DoubleFreeError(Error, ValueError): ...
class BadHandleError(Error, ValueError): ...
class URIError(Error, ValueError): ...
class ClosedError(Error, ValueError): ...
class RangeError(Error, IndexError): ...
class BufferInUseError(Error, BufferError): ...
class CorruptPoolError(Error, OSError): ...
class TransportError(Error, OSError): ...
class NotSupportedError(Error, OSError): ...
class BusyError(Error, OSError): ...
class QuotaError(Error, OSError): ...
class AccessError(Error, PermissionError): ...
class StaleHandleError(Error, OSError): ...

# ---- statistics ---------------------------------------------------------------
# (stub-only names: at run time these are plain dicts)

class _PoolStats(TypedDict):
    capacity_bytes: int
    allocated_bytes: int
    metadata_bytes: int
    nodes: int
    user_id: int
    allocs: int
    frees: int
    failed_allocs: int
    cas_ops: int
    cas_failures: int
    reads: int
    writes: int
    round_trips: int
    log_flushes: int
    max_retries: int
    size_class_allocs: list[int]
    live_buffers: int

class _NodeStats(TypedDict):
    kind: str
    detail: str
    capacity_bytes: int
    held_bytes: int
    stored_bytes: int
    compression_ratio: float
    reads: int
    writes: int
    bytes_read: int
    bytes_written: int
    read_ns: int
    write_ns: int
    read_mb_s: float
    write_mb_s: float
    read_lat_us: float
    write_lat_us: float
    errors: int
    last_error: str

class _RegionPath(TypedDict):
    node: int
    placing: int
    bytes_fetched: int
    bytes_written: int
    ops: int
    busy_ns: int
    bandwidth: int
    chunks: int

class _RegionStats(TypedDict):
    faults: int
    missing_faults: int
    wp_faults: int
    hits: int
    fetches: int
    prefetches: int
    zero_fills: int
    evictions: int
    writebacks: int
    bytes_fetched: int
    bytes_written: int
    remote_bytes: int
    remote_peak: int
    cached_bytes: int
    cache_bytes: int
    releases: int
    alloc_failures: int
    paths: int
    stripe_width: int
    io_width: int
    prefetch_units: int
    fault_rate: int
    seq_pct: int
    write_pct: int
    refault_pct: int
    refault_dist: int
    fetch_units: int
    fetch_max: int
    tier_moves: int
    ahead_unused: int
    ahead_window: int
    path_stats: list[_RegionPath]

class _HeapStats(TypedDict):
    mallocs: int
    frees: int
    reallocs: int
    foreign_frees: int
    fallback_allocs: int
    spills: int
    heap_objects: int
    heap_slabs: int
    heap_large: int
    heap_remote_bytes: int
    heap_remote_peak: int
    heap_double_frees: int
    heap_bad_frees: int
    heap_merges: int
    heap_reclaimed_bytes: int

class _ArenaStats(_HeapStats):
    shared_pages: int

class _Handle(TypedDict):
    node: int
    addr: int
    length: int
    rkey: int

# ---- pools and buffers ----------------------------------------------------------

class Pool:
    """An opened fmem pool; a context manager that closes it."""
    def __new__(cls, uri: str | None = None) -> Self: ...
    @property
    def uri(self) -> str | None: ...
    @property
    def closed(self) -> bool: ...
    def alloc(self, nbytes: int, /) -> Buffer: ...
    def close(self) -> None: ...
    def stats(self) -> _PoolStats: ...
    def node_stats(self, node: int, /) -> _NodeStats: ...
    def owns(self, obj: int | _BufferLike, /) -> bool: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, t: type[BaseException] | None, v: BaseException | None,
                 tb: TracebackType | None, /) -> None: ...

@final
class Client(Pool):
    """A pool reached through an allocation service (fmemd)."""
    def __new__(cls, uri: str = "fmem://") -> Self: ...

@final
class Buffer:
    """A block of pool memory with the buffer protocol (writable bytes)."""
    @property
    def size(self) -> int: ...
    @property
    def capacity(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    @property
    def exports(self) -> int: ...
    @property
    def pool(self) -> Pool: ...
    @property
    def address(self) -> int | None: ...
    @property
    def handle(self) -> _Handle: ...
    def free(self) -> None: ...
    def close(self) -> None: ...
    def read(self, offset: int = 0, size: int = -1) -> bytes: ...
    def write(self, data: _BufferLike, offset: int = 0) -> int: ...
    def __len__(self) -> int: ...
    def __getitem__(self, key: int | slice, /) -> Any: ...  # int for an index, bytes for a slice
    def __setitem__(self, key: int | slice, value: int | _BufferLike, /) -> None: ...
    if sys.version_info >= (3, 12):
        def __buffer__(self, flags: int, /) -> memoryview: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, t: type[BaseException] | None, v: BaseException | None,
                 tb: TracebackType | None, /) -> None: ...

# ---- regions ------------------------------------------------------------------------

@final
class Region:
    """A far-memory region paged through a bounded local cache."""
    def __new__(cls, size: int, cache: int | float | None = None, *, pool: Pool | None = None,
                fetch_unit: int = 0, prefetch: int | None = None) -> Self: ...
    @property
    def size(self) -> int: ...
    @property
    def address(self) -> int: ...
    @property
    def unit(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    @property
    def pool(self) -> Pool: ...
    def close(self) -> None: ...
    def flush(self) -> None: ...
    def release(self, offset: int, length: int, /) -> None: ...
    def stats(self) -> _RegionStats: ...
    def contains(self, obj: int | _BufferLike, /) -> bool: ...
    def __len__(self) -> int: ...
    if sys.version_info >= (3, 12):
        def __buffer__(self, flags: int, /) -> memoryview: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, t: type[BaseException] | None, v: BaseException | None,
                 tb: TracebackType | None, /) -> None: ...

# ---- hooks ------------------------------------------------------------------------------

@final
class numpy_arrays:
    """with numpy_arrays(target): new numpy array data goes to far memory."""
    def __new__(cls, target: Pool | Region | None = None) -> Self: ...
    @property
    def target(self) -> Pool | Region: ...
    @property
    def active(self) -> bool: ...
    def stats(self) -> _HeapStats: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, t: type[BaseException] | None, v: BaseException | None,
                 tb: TracebackType | None, /) -> Literal[False] | None: ...

def install_arena_allocator(target: Pool | Region | None = None) -> Pool | Region: ...
def arena_allocator_stats() -> _ArenaStats | None: ...
def compact(target: Pool | Region | None = None, budget: int = 0, share_pages: bool = True) -> int: ...
def release_empty_pools() -> int: ...

# ---- functions -------------------------------------------------------------------------

def open(uri: str | None = None) -> Pool: ...
def connect(uri: str = "fmem://") -> Client: ...
def default_pool() -> Pool: ...
def unlink(uri: str, /) -> None: ...
def size_round(nbytes: int, /) -> int: ...
def strerror(code: int, /) -> str: ...
