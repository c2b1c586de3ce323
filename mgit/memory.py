"""The memory policy: per-thread scratch buffers with a cap and one release, and glibc's allocator
tuned only where the process asked for it (the `mgit` command does; a library user may opt in).

Fresh buffers of a few MiB cost a page fault per 4 KiB on first touch (dearer than decoding a
chunk), so codecs, statistics and merge kernels reuse this thread's buffers by name. A thread
keeps at most :data:`CAP_PER_THREAD` bytes of them; a buffer past that is made for the one use.
:func:`release` drops every thread's buffers (a merge does before a sparsifier ranks whole
tensors). Nothing here touches the allocator until :func:`tune_allocator` is called.
"""

from __future__ import annotations

import ctypes
import functools
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

# Bytes of scratch one thread keeps: a K = 16 merge's chunk buffers (18 x 4 MiB), the codec's
# planes, reads and delta bases (~60 MiB), the array kernels' and statistics' blocks (~20 MiB).
CAP_PER_THREAD = 256 * 2**20

# glibc mallopt parameters (malloc.h): a block at least this large is mmap'd on its own, and free
# memory above this much at the top of a heap is given back to the kernel.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 * 2**20  # above every chunk-sized buffer (chunks are at most 4 MiB)
TRIM_THRESHOLD = 64 * 2**20  # a few chunks' buffers per thread stay ready for the next chunk


class _Held:
    """One thread's buffers by name, and their bytes."""

    def __init__(self) -> None:
        self.buffers: dict[str, npt.NDArray[np.uint8]] = {}
        self.nbytes = 0

    def clear(self) -> None:
        self.buffers, self.nbytes = {}, 0


_local = threading.local()
_every: weakref.WeakSet[_Held] = weakref.WeakSet()  # each live thread's (a dead thread's goes with it)
_every_lock = threading.Lock()


def _held() -> _Held:
    held: _Held | None = getattr(_local, "held", None)
    if held is None:
        held = _local.held = _Held()
        with _every_lock:
            _every.add(held)
    return held


def scratch(name: str, size: int) -> npt.NDArray[np.uint8]:
    """This thread's reusable byte buffer ``name``, at least ``size`` bytes: its contents are the
    caller's until this thread asks for ``name`` again (:func:`release` only ends its reuse; the
    caller's reference keeps it alive). Past the thread's cap, a fresh buffer kept by nobody."""
    import numpy as np

    held = _held()
    buf = held.buffers.get(name)
    if buf is not None and len(buf) >= size:
        return buf
    kept = len(buf) if buf is not None else 0
    if held.nbytes - kept + size > CAP_PER_THREAD:
        return np.empty(size, dtype=np.uint8)
    buf = np.empty(size, dtype=np.uint8)
    held.buffers[name] = buf
    held.nbytes = sum(len(b) for b in held.buffers.values())  # recounted: a release may have run meanwhile
    return buf


def scratch_array(name: str, dtype: npt.DTypeLike, count: int) -> npt.NDArray[Any]:
    """:func:`scratch` as ``count`` elements of ``dtype``."""
    import numpy as np

    size = count * np.dtype(dtype).itemsize
    return scratch(name, size)[:size].view(dtype)


def held_bytes() -> int:
    """Bytes of scratch this thread keeps."""
    return _held().nbytes


def release() -> None:
    """Drop every thread's scratch buffers (the next uses allocate them again, a few ms), and give
    the freed memory back to the kernel where the allocator was tuned."""
    with _every_lock:
        for held in list(_every):
            held.clear()
    give_back_freed_memory()


def _libc(name: str, argtypes: list[type], restype: type) -> Callable[..., int] | None:
    """A function of the C library by name, typed; None where it has none (not glibc)."""
    try:
        fn = getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError, TypeError):
        return None
    fn.argtypes, fn.restype = argtypes, restype
    return cast("Callable[..., int]", fn)


@functools.cache
def tune_allocator() -> bool:
    """Opt in to the `mgit` command's allocator settings for this whole process (glibc only).

    The next chunk's few-MiB buffers (read, grouped, compressed, decoded) then reuse the memory
    the previous chunk's freed, instead of each being a fresh mapping whose pages the kernel
    faults in and zeroes (a 0.97 GB checkout: ~340k page faults and 1-2 s of system time against
    17k and 0.4-0.5 s), and large rankings give freed memory back first (:func:`give_back_freed_memory`).
    The settings are process-wide, so a library never makes them on its own. Once per process;
    False where the C library has no glibc ``mallopt``."""
    mallopt = _libc("mallopt", [ctypes.c_int, ctypes.c_int], ctypes.c_int)
    if mallopt is None:
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) & bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))


def allocator_tuned() -> bool:
    """Whether :func:`tune_allocator` has changed this process's allocator settings."""
    return tune_allocator.cache_info().currsize > 0 and tune_allocator()


def give_back_freed_memory() -> bool:
    """Return the memory freed buffers left in glibc's heaps to the kernel (``malloc_trim``), where
    :func:`tune_allocator` made the heaps keep it: before one large allocation (TIES ranking a
    whole embedding: 5 to 16 bytes per element) it would only add to the peak. False, touching
    nothing, in a process that did not opt in or has no glibc ``malloc_trim``."""
    if not allocator_tuned():
        return False
    trim = _libc("malloc_trim", [ctypes.c_size_t], ctypes.c_int)
    if trim is None:
        return False
    trim(0)
    return True
