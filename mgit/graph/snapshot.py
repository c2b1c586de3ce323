"""A commit's tree as a flat map: working-tree path → Entry.

A directory is a git tree; a plain file is a blob; a safetensors file is a tree holding
``.mgit-header`` plus one manifest blob per tensor; a large non-tensor file is a tree
holding ``.mgit-chunks``. The reserved entry tells the kinds apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from mgit.errors import BadInputError, MgitError
from mgit.graph.names import CHUNKED_ENTRY, HEADER_ENTRY, is_reserved
from mgit.graph.objects import MODE_EXEC, MODE_FILE, MODE_TREE, Graph

Kind = Literal["blob", "safetensors", "chunked"]


@dataclass(frozen=True)
class Entry:
    """One tracked file: its kind, the git id of its blob or file tree, and its mode."""

    kind: Kind
    oid: str
    mode: int = MODE_FILE


Snapshot = dict[str, Entry]


def validate_path(path: str) -> str:
    """Refuse paths git trees cannot hold or that escape the repository."""
    parts = path.split("/")
    if path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise BadInputError(f"invalid path {path!r}: must be relative, without '.' or '..' components")
    for p in parts:
        if p in (".mgit", ".git") or is_reserved(p):
            raise BadInputError(f"invalid path {path!r}: names '.mgit', '.git' and '.mgit-*' are reserved")
        if "\0" in p:
            raise BadInputError(f"invalid path {path!r}: contains a NUL byte")
        try:
            p.encode("utf-8")
        except UnicodeEncodeError:
            raise BadInputError(f"invalid path {path!r}: file names must be valid UTF-8; rename the file") from None
    return path


def read_snapshot(graph: Graph, tree_sha: str | None) -> Snapshot:
    snap: Snapshot = {}
    if tree_sha is None:
        return snap

    def walk(sha: str, prefix: str) -> None:
        for name, mode, oid in graph.tree(sha):
            if is_reserved(name):
                continue  # root-level records (merge plans, stats) are not working-tree files
            path = prefix + name
            if mode != MODE_TREE:
                snap[path] = Entry("blob", oid, MODE_EXEC if mode & 0o111 else MODE_FILE)
                continue
            names = {n for n, _, _ in graph.tree(oid)}
            if HEADER_ENTRY in names:
                snap[path] = Entry("safetensors", oid)
            elif CHUNKED_ENTRY in names:
                snap[path] = Entry("chunked", oid)
            else:
                walk(oid, path + "/")

    walk(tree_sha, "")
    return snap


def write_snapshot(graph: Graph, snap: Snapshot, extra_root: Sequence[tuple[str, int, str]] = ()) -> str:
    """Build nested git trees for the snapshot; returns the root tree id. A path that is both a
    file and a directory of others is refused: a tree holding one name twice would lose one
    of them silently (git keeps the last)."""
    dirs: dict[str, list[tuple[str, int, str]]] = {"": list(extra_root)}
    for path in sorted(snap):
        entry = snap[path]
        parent, _, name = path.rpartition("/")
        mode = entry.mode if entry.kind == "blob" else MODE_TREE
        dirs.setdefault(parent, []).append((name, mode, entry.oid))
        while parent:  # make sure every ancestor directory exists
            grand, _, _ = parent.rpartition("/")
            dirs.setdefault(grand, [])
            parent = grand
    both = sorted(set(snap) & set(dirs))
    if both:
        raise MgitError(f"cannot record {both[0]!r} both as a file and as a directory of files: no tree was written")
    for d in sorted(dirs, key=lambda p: p.count("/") + (p != ""), reverse=True):
        if not d:
            continue
        sha = graph.put_tree(dirs[d])
        parent, _, name = d.rpartition("/")
        dirs[parent].append((name, MODE_TREE, sha))
    return graph.put_tree(dirs[""])


def file_tree(graph: Graph, entry: Entry) -> dict[str, str]:
    """Entry name → blob id inside a safetensors or chunked file tree."""
    return {name: oid for name, _, oid in graph.tree(entry.oid)}
