"""Walk the working tree: tracked-candidate files, honouring `.mgitignore` files.

`.mgitignore` uses gitignore syntax (dulwich's matcher); one may sit in any directory
and applies below it. Symlinks are followed (a Hugging Face snapshot is a tree of links),
with cycles cut by remembering real directory paths.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from dulwich.ignore import IgnoreFilter, read_ignore_patterns

from mgit.graph.names import is_reserved
from mgit.model.materialize import TMP_MARK

IGNORE_FILE = ".mgitignore"


@dataclass
class Ignorer:
    root: Path
    _filters: dict[str, IgnoreFilter | None] = field(default_factory=dict)

    def _filter(self, rel_dir: str) -> IgnoreFilter | None:
        if rel_dir not in self._filters:
            path = self.root / rel_dir / IGNORE_FILE
            flt = None
            if path.is_file():
                with open(path, "rb") as f:
                    flt = IgnoreFilter(list(read_ignore_patterns(f)))
            self._filters[rel_dir] = flt
        return self._filters[rel_dir]

    def is_ignored(self, rel: str, is_dir: bool = False) -> bool:
        """Deepest .mgitignore with an opinion wins, as in git."""
        parts = rel.split("/")
        verdict = None
        for depth in range(len(parts)):
            rel_dir = "/".join(parts[:depth])
            flt = self._filter(rel_dir)
            if flt is None:
                continue
            sub = "/".join(parts[depth:]) + ("/" if is_dir else "")
            v = flt.is_ignored(sub)
            if v is not None:
                verdict = v
        return bool(verdict)


def _skip_name(name: str) -> bool:
    return name in (".mgit", ".git") or is_reserved(name) or TMP_MARK in name


def walk(root: Path, start: str = "", ignorer: Ignorer | None = None) -> dict[str, os.stat_result]:
    """Every non-ignored file under ``start`` (a relative dir or ''), with its stat."""
    ignorer = ignorer or Ignorer(root)
    out: dict[str, os.stat_result] = {}
    seen_dirs: set[str] = set()

    def visit(rel_dir: str) -> None:
        full = root / rel_dir if rel_dir else root
        real = os.path.realpath(full)
        if real in seen_dirs:
            return
        seen_dirs.add(real)
        try:
            names = sorted(os.listdir(full))
        except OSError:
            return
        for name in names:
            if _skip_name(name):
                continue
            rel = f"{rel_dir}/{name}" if rel_dir else name
            try:
                st = os.stat(root / rel)  # follows symlinks
            except OSError:
                continue  # dangling symlink
            is_dir = os.path.isdir(root / rel)
            if ignorer.is_ignored(rel, is_dir):
                continue
            if is_dir:
                visit(rel)
            elif os.path.isfile(root / rel):
                out[rel] = st

    if start and not (root / start).is_dir():
        st = os.stat(root / start)
        if not ignorer.is_ignored(start):
            out[start] = st
        return out
    visit(start)
    return out
