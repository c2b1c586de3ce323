"""Path helpers the operations share: the paths a pathspec names, the directories a removal
leaves empty, the removals that must come before a write, the model directories of a
snapshot, a few paths named in a message."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Collection, Iterable
from pathlib import Path

from mgit.dirs import prune_dirs as prune_dirs  # shared with the reflogs; imported from here by the ops
from mgit.graph.snapshot import Snapshot


def under(paths: Iterable[str], rel: str) -> list[str]:
    """The paths at or below ``rel`` ('' is the root)."""
    return [p for p in paths if not rel or p == rel or p.startswith(rel + "/")]


def parents(rel: str) -> list[str]:
    """The directories above ``rel``: ``a/b/c`` → ``a``, ``a/b``."""
    parts = rel.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def blocking(writes: Iterable[str], removes: Iterable[str]) -> list[str]:
    """The removed paths in a write's way, which must go before it: a file where a written
    file's directory goes (a file replaced by a directory), or a file inside a directory that a
    written file replaces (a directory replaced by a file)."""
    written = set(writes)
    directories = {d for w in written for d in parents(w)}
    return sorted(r for r in removes if r in directories or not written.isdisjoint(parents(r)))


def holds_only(root: Path, rel: str, paths: Collection[str]) -> bool:
    """Whether every file (or link) in the directory ``rel`` is one of ``paths``: the tracked
    files an operation removes, so the directory can make way for a file."""
    for top, dirs, files in os.walk(root / rel):
        here = Path(top).relative_to(root).as_posix()
        names = files + [d for d in dirs if (Path(top) / d).is_symlink()]
        if any(f"{here}/{name}" not in paths for name in names):
            return False
    return True


def models(snap: Snapshot) -> dict[str, list[str]]:
    """Model directory ('' is the root) → its safetensors files."""
    found: dict[str, list[str]] = {}
    for path, entry in sorted(snap.items()):
        if entry.kind == "safetensors":
            found.setdefault(posixpath.dirname(path), []).append(path)
    return found


def listed(paths: list[str], shown: int = 5) -> str:
    """The first ``shown`` paths and how many more, for a one-line message."""
    return ", ".join(paths[:shown]) + (f" and {len(paths) - shown} more" if len(paths) > shown else "")
