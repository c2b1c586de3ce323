"""Small branchy histories for the three-way merge tests: files written (text, bytes, or tiny
safetensors files), committed, and two branches diverging from a base."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from safetensors.torch import save_file

from helpers.models import touch_later
from mgit import Repository
from mgit.graph.snapshot import Entry, write_snapshot

Files = dict[str, Any]  # path → str / bytes (a plain file), {name: tensor} or ({...}, metadata)


def put(root: Path, rel: str, data: Any) -> None:
    """Write one file: text, bytes, or a safetensors file (with metadata when given a pair)."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, dict):
        save_file(data, path)
    elif isinstance(data, tuple):
        save_file(data[0], path, metadata=data[1])
    else:
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
    touch_later(path)


def commit_files(repo: Repository, files: Files, message: str, remove: Iterable[str] = ()) -> str:
    """Write ``files``, remove ``remove`` (tracked paths), commit; the commit id."""
    for rel, data in files.items():
        put(repo.root, rel, data)
    removed = list(remove)
    if removed:
        repo.rm(removed)
    if files:
        repo.add(list(files))
    return repo.commit(message)


def diverge(
    repo: Repository,
    base: Files,
    ours: Files,
    theirs: Files,
    ours_removes: Iterable[str] = (),
    theirs_removes: Iterable[str] = (),
) -> str:
    """main: ``base``, then ``ours``; feat (from the base): ``theirs``; main checked out. The
    base commit's id."""
    first = commit_files(repo, base, "base")
    repo.checkout(create_branch="feat")
    commit_files(repo, theirs, "theirs", theirs_removes)
    repo.checkout("main")
    commit_files(repo, ours, "ours", ours_removes)
    return first


def commit_snapshot(repo: Repository, parent: str, changes: dict[str, Entry | None], message: str) -> str:
    """A commit on ``parent`` whose tree is the parent's with ``changes`` (None: removed), made
    without the working tree (for trees add would not make: a file turned into a directory)."""
    snap = dict(repo.snapshot(parent))
    for path, entry in changes.items():
        if entry is None:
            snap.pop(path, None)
        else:
            snap[path] = entry
    who = repo.identity()
    return repo.graph.put_commit(write_snapshot(repo.graph, snap), [parent], message, who, who)


def blob(repo: Repository, data: bytes) -> Entry:
    return Entry("blob", repo.graph.put_blob(data))
