"""Path helpers the operations share: the paths a pathspec names, the directories a removal
leaves empty, the model directories of a snapshot."""

from __future__ import annotations

import posixpath
from collections.abc import Iterable

from mgit.dirs import prune_dirs as prune_dirs  # shared with the reflogs; imported from here by the ops
from mgit.graph.snapshot import Snapshot


def under(paths: Iterable[str], rel: str) -> list[str]:
    """The paths at or below ``rel`` ('' is the root)."""
    return [p for p in paths if not rel or p == rel or p.startswith(rel + "/")]


def models(snap: Snapshot) -> dict[str, list[str]]:
    """Model directory ('' is the root) → its safetensors files."""
    found: dict[str, list[str]] = {}
    for path, entry in sorted(snap.items()):
        if entry.kind == "safetensors":
            found.setdefault(posixpath.dirname(path), []).append(path)
    return found
