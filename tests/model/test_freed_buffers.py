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


def test_freed_memory_goes_back_through_malloc_trim(monkeypatch):
    calls: list[int] = []

    class Trim:
        def __init__(self) -> None:
            def malloc_trim(pad: int) -> int:
                calls.append(pad)
                return 1

            self.malloc_trim = malloc_trim

    monkeypatch.setattr(ctypes, "CDLL", lambda name: Trim())
    assert parallel.give_back_freed_memory() is True
    assert calls == [0]
    monkeypatch.setattr(ctypes, "CDLL", lambda name: object())
    assert parallel.give_back_freed_memory() is False


def test_a_large_magnitude_sort_gives_freed_memory_back_first(monkeypatch):
    """TIES sorting a whole embedding needs 16 bytes per element on top of what the process holds:
    the heap's freed buffers go back before, not after (small sorts skip it). Only where it sorts:
    here sort_select is switched off, as it is where it does not reproduce torch."""
    import torch

    import mgit.merge.sparsify as sparsify

    trims: list[int] = []
    monkeypatch.setattr(sparsify, "give_back_freed_memory", lambda: trims.append(1) or True)
    monkeypatch.setattr(sparsify, "SELECT_FROM", 2**62)
    small = torch.randn(1000).to(torch.bfloat16)
    sparsify.magnitude_sparsity(small, 0.5)
    assert trims == []
    large = torch.randn(sparsify._TRIM_BEFORE_SORTING // sparsify._SORT_SCRATCH_PER_ELEMENT).to(torch.bfloat16)
    sparsify.magnitude_sparsity(large, 0.5, overwrite=True)
    assert trims == [1]
