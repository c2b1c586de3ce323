"""A pack is written to the disk while it grows (durable.Writeback), and a failed background
flush fails the seal instead of being lost."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest

from mgit import durable
from mgit.durable import Writeback
from mgit.store import pack
from mgit.store.pack import PackWriter, idx_path
from mgit.store.record import encode


def _records(n: int, size: int):
    return [encode(f"{i:064x}", os.urandom(size), 0) for i in range(n)]


def test_a_growing_file_is_flushed_in_the_background_one_flush_at_a_time(tmp_path: Path, monkeypatch) -> None:
    calls: list[tuple[int, str]] = []
    release = threading.Event()
    path = tmp_path / "f"
    f = open(path, "wb")

    def slow_sync(fd: int) -> None:
        calls.append((fd, threading.current_thread().name))
        release.wait(5)

    monkeypatch.setattr(durable, "_datasync", slow_sync)
    wb = Writeback(f.fileno, f.flush, every=1000)
    for i in range(1, 11):
        f.write(b"x" * 500)
        wb.wrote(500 * i)
    assert len(calls) == 1  # the first flush still runs: no second one is queued behind it
    assert calls[0][0] == f.fileno() and calls[0][1].startswith("mgit-writeback")
    assert path.stat().st_size >= 1000  # the buffered bytes reached the kernel before the flush started
    release.set()
    wb.finish()
    f.write(b"y" * 2000)
    wb.wrote(7000)  # a new flush may start after the last one ended
    wb.finish()
    assert len(calls) == 2
    f.close()


def test_a_small_file_starts_no_thread(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(durable, "_datasync", lambda fd: pytest.fail("flushed"))
    with open(tmp_path / "f", "wb") as f:
        wb = Writeback(f.fileno, f.flush, every=1 << 20)
        f.write(b"x" * 1000)
        wb.wrote(1000)
        wb.finish()
    assert not any(t.name.startswith("mgit-writeback") for t in threading.enumerate())


def test_a_pack_is_flushed_while_it_grows_and_seals_whole(tmp_path: Path, monkeypatch) -> None:
    synced: list[str] = []
    monkeypatch.setattr(durable, "_datasync", lambda fd: synced.append(threading.current_thread().name))
    monkeypatch.setattr(pack, "WRITEBACK_EVERY", 64 << 10)
    w = PackWriter(tmp_path)
    recs = _records(40, 16 << 10)
    for r in recs:
        w.append(r)
    sealed = w.seal()
    assert sealed is not None and idx_path(sealed).exists()
    assert synced and all(name.startswith("mgit-writeback") for name in synced)  # flushed while it grew
    assert sorted(pack.PackIndex(idx_path(sealed)).ids()) == sorted(x.cid for x in recs)


def test_a_failed_background_flush_fails_the_seal_naming_the_pack(tmp_path: Path, monkeypatch) -> None:
    def failing(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(durable, "_datasync", failing)
    monkeypatch.setattr(pack, "WRITEBACK_EVERY", 64 << 10)
    w = PackWriter(tmp_path)
    with pytest.raises(OSError) as exc:
        for r in _records(40, 16 << 10):
            w.append(r)  # a later append may see the failure first
        w.seal()
    assert exc.value.errno == errno.EIO and exc.value.filename == str(w.path)
    assert not list(tmp_path.glob("*.idx"))  # never made visible
    w.abort()  # what the store does next: the pack goes, the failure is not raised twice
    assert not list(tmp_path.glob("pack-*"))
