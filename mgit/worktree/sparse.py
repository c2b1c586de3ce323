"""Sparse checkouts: which tensors the working tree holds, as fnmatch patterns on names.

The patterns live in ``.mgit/sparse.json`` and apply to every checkout until changed; no file
means a full checkout. What a sparse working file holds is recorded per index entry (its
*projection*, see :mod:`mgit.model.projection`), so the patterns only decide what the next
checkout writes, never how a file already on disk is read back.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

from mgit.errors import BadInputError, CorruptObjectError
from mgit.graph.objects import Graph
from mgit.model.projection import tensor_count
from mgit.worktree.index import Index

SPARSE_FILE = "sparse.json"
SCHEMA = "mgit.sparse/1"


@dataclass(frozen=True)
class SparsePatterns:
    """Tensors selected: those matching some include (any, when none is given) and no exclude."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    def selects(self, name: str) -> bool:
        if self.include and not any(fnmatchcase(name, p) for p in self.include):
            return False
        return not any(fnmatchcase(name, p) for p in self.exclude)

    def describe(self) -> str:
        """The patterns as a user typed them, for status lines and errors."""
        parts = [f"--include {p!r}" for p in self.include] + [f"--exclude {p!r}" for p in self.exclude]
        return " ".join(parts)


def make_patterns(include: Iterable[str] | None, exclude: Iterable[str] | None) -> SparsePatterns:
    """Validated patterns from user input (an empty pattern is surely a mistake)."""
    inc, exc = tuple(include or ()), tuple(exclude or ())
    for p in inc + exc:
        if not isinstance(p, str) or not p:
            raise BadInputError(f"tensor patterns must be non-empty strings, got {p!r}")
    if not inc and not exc:
        raise BadInputError("a sparse checkout needs at least one --include or --exclude pattern")
    return SparsePatterns(inc, exc)


def load_patterns(git_dir: Path) -> SparsePatterns | None:
    """The persisted patterns, or None for a full checkout."""
    path = git_dir / SPARSE_FILE
    if not path.exists():
        return None
    try:
        obj = json.loads(path.read_text("utf-8"))
        if obj.get("schema") != SCHEMA:
            raise ValueError
        inc, exc = obj["include"], obj["exclude"]
        if not all(isinstance(p, str) and p for p in [*inc, *exc]) or not (inc or exc):
            raise ValueError
    except (ValueError, KeyError, TypeError, AttributeError):
        raise CorruptObjectError(
            f"{path} is damaged; delete it and run `mgit checkout HEAD --full` (or with --include) to set it again"
        ) from None
    return SparsePatterns(tuple(inc), tuple(exc))


def save_patterns(git_dir: Path, patterns: SparsePatterns | None) -> None:
    """Persist the patterns (None: back to a full checkout), replacing the file atomically."""
    path = git_dir / SPARSE_FILE
    if patterns is None:
        path.unlink(missing_ok=True)
        return
    obj = {"schema": SCHEMA, "include": list(patterns.include), "exclude": list(patterns.exclude)}
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2) + "\n", "utf-8")
    os.replace(tmp, path)


@dataclass(frozen=True)
class SparseSummary:
    """What ``status`` says of a sparse checkout: its patterns, and how many of the tracked
    tensors the working tree holds."""

    patterns: SparsePatterns
    tensors_present: int
    tensors_total: int


def summarize(graph: Graph, index: Index, patterns: SparsePatterns) -> SparseSummary:
    """Count the tensors of every tracked safetensors file, and those checked out."""
    present = total = 0
    for ie in index.entries.values():
        if ie.entry.kind != "safetensors":
            continue
        total += tensor_count(graph, ie.entry.oid)
        if not ie.skip_worktree:
            present += tensor_count(graph, ie.worktree.oid)
    return SparseSummary(patterns, present, total)
