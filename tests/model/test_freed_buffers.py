"""The worker pool asks glibc's malloc to keep chunk-sized buffers for reuse (no fresh, faulted-in
mapping per buffer), once per process, and does without where there is no glibc mallopt."""

from __future__ import annotations

import ctypes
import platform
import subprocess
import sys

import pytest

from mgit import parallel


class FakeLibc:
    def __init__(self, calls: list[tuple[int, int]], result: int = 1):
        def mallopt(param: int, value: int) -> int:
            calls.append((param, value))
            return result

        self.mallopt = mallopt
        self.mallopt.argtypes = self.mallopt.restype = None  # type: ignore[attr-defined]


def test_the_pool_sets_both_thresholds_once(monkeypatch):
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(ctypes, "CDLL", lambda name: FakeLibc(calls))
    parallel.keep_freed_buffers.cache_clear()
    try:
        parallel.make_pool().shutdown()
        parallel.make_pool().shutdown()
        assert calls == [(-3, parallel.MMAP_THRESHOLD), (-1, parallel.TRIM_THRESHOLD)]
        assert parallel.MMAP_THRESHOLD > 4 * 2**20  # above the largest chunk
    finally:
        parallel.keep_freed_buffers.cache_clear()


def test_no_glibc_mallopt_is_no_error(monkeypatch):
    class NoMallopt:
        pass

    monkeypatch.setattr(ctypes, "CDLL", lambda name: NoMallopt())
    parallel.keep_freed_buffers.cache_clear()
    try:
        assert parallel.keep_freed_buffers() is False
        parallel.make_pool().shutdown()
    finally:
        parallel.keep_freed_buffers.cache_clear()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_glibc_takes_the_settings():
    code = "from mgit.parallel import keep_freed_buffers; print(keep_freed_buffers())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
