"""Directories left empty: removed after a file (a working file, a reflog) is deleted or moved
away, as git removes them, so that nothing stands where a later file or directory of that name
must go. Shared by every layer: the working tree (mgit.ops) and the reflogs (mgit.graph)."""

from __future__ import annotations

import os
from pathlib import Path


def prune_dirs(root: Path, rel: str | os.PathLike[str]) -> None:
    """Remove the directories between ``root`` and ``root / rel`` that deleting ``rel`` left
    empty, deepest first; ``root`` itself stays, and so does the first directory not empty."""
    root = Path(root)
    parent = (root / rel).parent
    while parent != root and root in parent.parents:
        try:
            parent.rmdir()
        except OSError:
            return
        parent = parent.parent
