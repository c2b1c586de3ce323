"""Path helpers the operations share: the paths a pathspec names, the directories a removal
leaves empty, the model directories of a snapshot, a few paths named in a message."""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from pathlib import Path

from mgit.graph.snapshot import Snapshot


def under(paths: Iterable[str], rel: str) -> list[str]:
    """The paths at or below ``rel`` ('' is the root)."""
    return [p for p in paths if not rel or p == rel or p.startswith(rel + "/")]


def prune_dirs(root: Path, rel: str) -> None:
    """Remove directories left empty by deleting ``rel``."""
    parent = (root / rel).parent
    while parent != root:
        try:
            parent.rmdir()
        except OSError:
            return
        parent = parent.parent


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
