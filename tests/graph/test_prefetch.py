"""Prefetching loose objects is only a hint to the kernel: it asks for the files of the objects
named (once each, not those already read), changes no result, and leaves a missing or damaged
object for the read that follows to name."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import mgit.graph.objects as objects
from mgit.errors import CorruptObjectError
from mgit.graph.objects import Graph


@pytest.fixture
def advised(monkeypatch) -> list[Path]:
    """The files ``posix_fadvise(WILLNEED)`` was asked about, in order."""
    seen: list[Path] = []
    real = os.posix_fadvise

    def record(fd: int, offset: int, length: int, advice: int) -> None:
        assert (offset, length, advice) == (0, 0, os.POSIX_FADV_WILLNEED)
        seen.append(Path(os.readlink(f"/proc/self/fd/{fd}")))
        real(fd, offset, length, advice)

    monkeypatch.setattr(objects.os, "posix_fadvise", record)
    return seen


def _loose(g: Graph, sha: str) -> Path:
    return g.git_dir.resolve() / "objects" / sha[:2] / sha[2:]


def test_prefetch_asks_for_each_uncached_object_file_once(tmp_path: Path, advised: list[Path]) -> None:
    g = Graph.init(tmp_path / "g")
    blobs = [g.put_blob(b"manifest %d" % i) for i in range(5)]
    g.blob(blobs[0])  # read already: in the cache, nothing to ask for
    assert g.cached(blobs[0]) and not g.cached(blobs[1])
    g.prefetch([*blobs, *blobs])
    assert advised == [_loose(g, b) for b in blobs[1:]]
    assert [g.blob(b) for b in blobs] == [b"manifest %d" % i for i in range(5)]


def test_prefetch_leaves_missing_and_damaged_objects_to_the_read(tmp_path: Path, advised: list[Path]) -> None:
    g = Graph.init(tmp_path / "g")
    good, bad = g.put_blob(b"good"), g.put_blob(b"bad")
    path = _loose(g, bad)
    path.chmod(0o644)
    path.write_bytes(path.read_bytes()[:5])
    g.prefetch(["0" * 40, "../../HEAD", bad, good])  # no error: the absent one and the non-id are skipped
    assert advised == [path, _loose(g, good)]
    assert g.blob(good) == b"good"
    with pytest.raises(CorruptObjectError, match=bad[:12]):
        g.blob(bad)
    with pytest.raises(CorruptObjectError, match="missing"):
        g.blob("0" * 40)
