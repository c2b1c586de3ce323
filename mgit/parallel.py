"""Run work on every core while keeping results in order and memory bounded.

Hashing (blake3), zstd and numpy release the GIL, so threads use both cores.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

WORKERS = max(2, os.cpu_count() or 2)


def make_pool() -> ThreadPoolExecutor:
    """The worker pool; it leaves the allocator alone (:mod:`mgit.memory` says who tunes it)."""
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
