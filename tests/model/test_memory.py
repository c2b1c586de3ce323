"""The memory policy (mgit/memory.py): per-thread scratch buffers reused by name, kept up to a
stated cap, dropped for every thread by one release; glibc's allocator tuned only on request (the
`mgit` command asks, a library does not), and freed memory trimmed only where it was tuned."""

from __future__ import annotations

import ctypes
import platform
import subprocess
import sys
import threading

import pytest

from mgit import memory


class FakeLibc:
    """Stands in for ``ctypes.CDLL(None)``: records what mallopt and malloc_trim are called with."""

    def __init__(self, calls: list[tuple[str, int, ...]], result: int = 1):
        def mallopt(param: int, value: int) -> int:
            calls.append(("mallopt", param, value))
            return result

        def malloc_trim(pad: int) -> int:
            calls.append(("malloc_trim", pad))
            return 1

        self.mallopt, self.malloc_trim = mallopt, malloc_trim


@pytest.fixture
def libc(monkeypatch) -> list[tuple]:
    calls: list[tuple] = []
    monkeypatch.setattr(ctypes, "CDLL", lambda name: FakeLibc(calls))
    memory.tune_allocator.cache_clear()
    yield calls
    memory.tune_allocator.cache_clear()


def test_tuning_sets_both_thresholds_once(libc):
    assert memory.tune_allocator() is True
    assert memory.tune_allocator() is True
    assert libc == [("mallopt", -3, memory.MMAP_THRESHOLD), ("mallopt", -1, memory.TRIM_THRESHOLD)]
    assert memory.MMAP_THRESHOLD > 4 * 2**20  # above the largest chunk


def test_freed_memory_is_trimmed_only_where_the_allocator_was_tuned(libc):
    assert memory.give_back_freed_memory() is False
    memory.release()
    assert libc == []  # not opted in: the allocator is left alone
    memory.tune_allocator()
    assert memory.give_back_freed_memory() is True
    memory.release()
    assert libc[2:] == [("malloc_trim", 0), ("malloc_trim", 0)]


def test_no_glibc_is_no_error(monkeypatch):
    monkeypatch.setattr(ctypes, "CDLL", lambda name: object())
    memory.tune_allocator.cache_clear()
    try:
        assert memory.tune_allocator() is False
        assert memory.give_back_freed_memory() is False
    finally:
        memory.tune_allocator.cache_clear()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_glibc_takes_the_settings():
    code = "from mgit import memory; print(memory.allocator_tuned(), memory.tune_allocator(), memory.allocator_tuned())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True", "True"]


def test_a_buffer_is_reused_by_name_and_grows_when_asked_for_more():
    memory.release()
    a = memory.scratch("test a", 1000)
    assert memory.scratch("test a", 500) is a
    assert memory.scratch("test b", 1000) is not a
    bigger = memory.scratch("test a", 5000)
    assert len(bigger) >= 5000 and bigger is not a
    assert memory.held_bytes() == 5000 + 1000
    memory.release()
    assert memory.held_bytes() == 0


def test_a_thread_keeps_no_more_than_the_cap():
    memory.release()
    cap = memory.CAP_PER_THREAD
    kept = memory.scratch("test big", cap // 2)
    assert memory.scratch("test big", cap // 2) is kept
    past = memory.scratch("test other", cap // 2 + 1)  # would pass the cap: made for this use only
    assert len(past) == cap // 2 + 1
    assert memory.scratch("test other", 10) is not past
    assert memory.held_bytes() <= cap
    memory.release()


def test_one_release_drops_every_threads_buffers():
    memory.release()
    ready, done = threading.Event(), threading.Event()
    held: list[int] = []

    def worker() -> None:
        memory.scratch("test worker", 4096)
        ready.set()
        done.wait()
        held.append(memory.held_bytes())

    t = threading.Thread(target=worker)
    t.start()
    ready.wait()
    memory.release()  # from this thread
    done.set()
    t.join()
    assert held == [0]


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
