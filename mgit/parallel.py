"""Run work on every core while keeping results in order and memory bounded.

Hashing (blake3), zstd and numpy release the GIL, so threads use both cores.
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TypeVar, cast

T = TypeVar("T")
R = TypeVar("R")

WORKERS = max(2, os.cpu_count() or 2)


# glibc mallopt parameters (malloc.h): a block at least this large is mmap'd on its own, and free
# memory above this much at the top of a heap is given back to the kernel.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 * 2**20  # above every chunk-sized buffer (chunks are at most 4 MiB)
TRIM_THRESHOLD = 64 * 2**20  # a few chunks' buffers per thread stay ready for the next chunk


def _libc(name: str, argtypes: list[type], restype: type) -> Callable[..., int] | None:
    """A function of the C library by name, typed; None where it has none (not glibc)."""
    try:
        fn = getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError, TypeError):
        return None
    fn.argtypes, fn.restype = argtypes, restype
    return cast("Callable[..., int]", fn)


@functools.cache
def keep_freed_buffers() -> bool:
    """Let the next chunk's few-MiB buffers (read, grouped, compressed, decoded) reuse the memory
    the previous chunk's freed, instead of each being a fresh mapping whose pages the kernel
    faults in and zeroes: glibc's default mmaps blocks of this size, or trims them back to the
    kernel on free, so a 0.97 GB checkout took ~340k page faults and 1-2 s of system time
    (17k faults and 0.4-0.5 s with these settings). Once per process; False where the C
    library has no glibc mallopt (other platforms keep their allocator's defaults)."""
    mallopt = _libc("mallopt", [ctypes.c_int, ctypes.c_int], ctypes.c_int)
    if mallopt is None:
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) & bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))


def give_back_freed_memory() -> bool:
    """Return the memory freed buffers left in glibc's heaps to the kernel (``malloc_trim``).

    :func:`keep_freed_buffers` keeps a few hundred MB of them across threads' arenas for reuse;
    before one large allocation (TIES ranking a whole embedding: 5 to 16 bytes per element) they
    would only add to its peak. False where the C library has no glibc ``malloc_trim``."""
    trim = _libc("malloc_trim", [ctypes.c_size_t], ctypes.c_int)
    if trim is None:
        return False
    trim(0)
    return True


def make_pool() -> ThreadPoolExecutor:
    keep_freed_buffers()
    return ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="mgit")


def ordered_map(pool: ThreadPoolExecutor, fn: Callable[[T], R], items: Iterable[T], window: int = 0) -> Iterator[R]:
    """Like pool.map, but with at most ``window`` tasks in flight (results held in memory)."""
    window = window or 2 * WORKERS
    pending: deque[Future[R]] = deque()
    try:
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) >= window:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for f in pending:
            f.cancel()
        # an error or Ctrl-C here must not leave workers writing to files the caller is about
        # to close (and whose descriptors the next open would reuse): let the running ones end
        wait(pending)
