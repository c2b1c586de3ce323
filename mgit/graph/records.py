"""The reserved per-commit records (``.mgit-stats``, ``.mgit-plan``, ``.mgit-sketch``), written and
read in one place.

They travel with the commit, so every clone reads them; only this module knows their names,
schemas and where in the tree they sit (docs/format.md; docs/design.md, "Notes from the code").
"""

from __future__ import annotations

import json
from typing import Any

from mgit.graph.objects import MODE_FILE, Graph, canonical_json

STATS_ENTRY = ".mgit-stats"  # reserved root entry: relative chunk statistics of a commit
STATS_SCHEMA = "mgit.stats/1"
FILE_STATS_SCHEMA = "mgit.filestats/1"
PLAN_ENTRY = ".mgit-plan"  # reserved root entry: a merge commit's plan record
SKETCH_ENTRY = ".mgit-sketch"  # reserved root entry: a sketch commit's record

RootEntry = tuple[str, int, str]  # (name, mode, blob id), as write_snapshot takes extra root entries
Triples = list[Any]  # [[chunk id, parent chunk id, l2], ...] of one file


def put_file_stats(graph: Graph, chunks: Triples) -> str | None:
    """The blob of one staged file's statistics (None when there are none): the index keeps
    its id until the commit gathers them into the commit's record."""
    if not chunks:
        return None
    return graph.put_blob(canonical_json({"schema": FILE_STATS_SCHEMA, "chunks": chunks}))


def file_stats(graph: Graph, blob: str) -> Triples:
    """The statistics a staged file's blob (see :func:`put_file_stats`) holds."""
    chunks: Triples = json.loads(graph.blob(blob))["chunks"]
    return chunks


def stats_entries(graph: Graph, files: dict[str, Triples]) -> list[RootEntry]:
    """The reserved root entry holding a commit's statistics (``files``: path → triples),
    none when no file has any."""
    files = {p: s for p, s in files.items() if s}
    if not files:
        return []
    blob = graph.put_blob(canonical_json({"schema": STATS_SCHEMA, "files": files}))
    return [(STATS_ENTRY, MODE_FILE, blob)]


def plan_entries(graph: Graph, record: dict[str, Any]) -> list[RootEntry]:
    """The reserved root entry holding a merge commit's plan record."""
    return [(PLAN_ENTRY, MODE_FILE, graph.put_blob(canonical_json(record)))]


def sketch_entries(graph: Graph, record: dict[str, Any]) -> list[RootEntry]:
    """The reserved root entry holding a sketch commit's record."""
    return [(SKETCH_ENTRY, MODE_FILE, graph.put_blob(canonical_json(record)))]


def _read(graph: Graph, tree: str, entry: str) -> Any:
    for name, _, oid in graph.tree(tree):
        if name == entry:
            return json.loads(graph.blob(oid))
    return None


def read_stats(graph: Graph, tree: str) -> dict[str, Triples]:
    """path → triples recorded in a commit's root ``tree`` ({} when it has none)."""
    record = _read(graph, tree, STATS_ENTRY)
    files: dict[str, Triples] = {} if record is None else record["files"]
    return files


def read_plan(graph: Graph, tree: str) -> dict[str, Any] | None:
    """The plan record in a commit's root ``tree`` (None: not a merge commit mgit made)."""
    record: dict[str, Any] | None = _read(graph, tree, PLAN_ENTRY)
    return record


def read_sketch(graph: Graph, tree: str) -> dict[str, Any] | None:
    """The sketch record in a sketch commit's root ``tree`` (None: not a sketch commit)."""
    record: dict[str, Any] | None = _read(graph, tree, SKETCH_ENTRY)
    return record
