"""Loose objects are read straight from their files (not through dulwich's pack-first lookup),
and anything that is not a whole, matching loose object still goes the full way: packed ones
are found, damaged ones are named."""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest
from dulwich.object_store import DiskObjectStore

from mgit.errors import CorruptObjectError
from mgit.graph.integrity import read_object
from mgit.graph.objects import Graph


def _graph(tmp_path: Path) -> Graph:
    return Graph.init(tmp_path / "g")


def _loose_path(g: Graph, sha: str) -> Path:
    return g.git_dir / "objects" / sha[:2] / sha[2:]


def test_a_loose_object_is_read_without_the_pack_lookup(tmp_path: Path, monkeypatch) -> None:
    g = _graph(tmp_path)
    blob = g.put_blob(b"manifest bytes" * 10)
    tree = g.put_tree([("a", 0o100644, blob)])
    monkeypatch.setattr(DiskObjectStore, "__getitem__", lambda self, sha: pytest.fail("pack-first lookup"))
    assert read_object(g.objects, blob).as_raw_string() == b"manifest bytes" * 10
    assert read_object(g.objects, blob).id.decode() == blob
    assert [e.path for e in read_object(g.objects, tree).iteritems()] == [b"a"]


def test_a_packed_object_is_still_found(tmp_path: Path) -> None:
    g = _graph(tmp_path)
    blob = g.put_blob(b"packed")
    g.objects.pack_loose_objects()
    assert not _loose_path(g, blob).exists()
    assert read_object(g.objects, blob).as_raw_string() == b"packed"


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[: len(data) // 2],  # cut off
        lambda data: zlib.compress(b"blob 99\x00short"),  # header lies about the size
        lambda data: zlib.compress(b"blob 5\x00other"),  # another object's content
    ],
)
def test_a_damaged_loose_object_is_named_not_returned(tmp_path: Path, damage) -> None:
    g = _graph(tmp_path)
    blob = g.put_blob(b"hello")
    path = _loose_path(g, blob)
    data = path.read_bytes()
    path.chmod(0o644)
    path.write_bytes(damage(data))
    with pytest.raises(CorruptObjectError, match=blob[:12]):
        read_object(g.objects, blob)


def test_an_absent_object_is_a_key_error(tmp_path: Path) -> None:
    g = _graph(tmp_path)
    with pytest.raises(KeyError):
        read_object(g.objects, "0" * 40)
