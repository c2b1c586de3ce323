"""What a repository still needs: every git object and chunk reachable from a ref, a
reflog entry, the index or an interrupted operation's journal, each chunk with the first
path/tensor found using it."""

from __future__ import annotations

import os
import re
from collections.abc import Set
from dataclasses import dataclass, field
from pathlib import Path

from dulwich.objects import Blob, Commit, ShaFile, Tag, Tree
from dulwich.reflog import Entry, parse_reflog_line

from mgit.errors import CorruptObjectError, MgitError
from mgit.graph.integrity import read_object, scan_refs
from mgit.graph.names import CHUNKED_ENTRY, HEADER_ENTRY, decode_tensor_name, is_reserved
from mgit.graph.objects import Graph
from mgit.model.manifest import FileManifest, TensorManifest
from mgit.worktree import journal
from mgit.worktree.index import Index

ZERO = "0" * 40


@dataclass
class Reach:
    objects: set[str] = field(default_factory=set)  # git object ids
    chunks: dict[str, str] = field(default_factory=dict)  # chunk id → who uses it
    manifests: dict[str, str] = field(default_factory=dict)  # manifest blob id → who uses it
    missing: list[str] = field(default_factory=list)  # problems met on the way
    lacking: dict[str, str] = field(default_factory=dict)  # missing or damaged object id → who needs it
    where: dict[str, str] = field(default_factory=dict)  # object id → where it was first met


def reflog_lines(path: Path) -> tuple[list[Entry], list[int]]:
    """A reflog's entries, oldest first, and the numbers of its lines that do not parse."""
    entries, bad = [], []
    with open(path, "rb") as f:
        for n, line in enumerate(f, 1):
            try:
                entry = parse_reflog_line(line.rstrip(b"\n"))
                if not all(re.fullmatch(rb"[0-9a-f]{40}", s) for s in (entry.old_sha, entry.new_sha)):
                    raise ValueError
            except Exception:
                bad.append(n)
                continue
            entries.append(entry)
    return entries, bad


def _reflog_ids(git_dir: Path) -> set[str]:
    out = set()
    logs = git_dir / "logs"
    for dirpath, _, files in os.walk(logs):
        for name in files:
            for entry in reflog_lines(Path(dirpath) / name)[0]:
                out.update({entry.old_sha.decode(), entry.new_sha.decode()})
    out.discard(ZERO)
    return out


def damaged_reflogs(git_dir: Path) -> dict[Path, list[int]]:
    """Each reflog with lines that do not parse → their numbers."""
    out = {}
    for dirpath, _, files in os.walk(git_dir / "logs"):
        for name in files:
            bad = reflog_lines(Path(dirpath) / name)[1]
            if bad:
                out[Path(dirpath) / name] = bad
    return out


def roots(graph: Graph, index: Index | None, damaged: dict[str, str] | None = None) -> dict[str, str]:
    """Object id → where it is referenced from (refs, reflogs, index); refs that cannot be
    read go into ``damaged`` (ref → why) instead."""
    out: dict[str, str] = {}
    scan = scan_refs(graph.git_dir)
    if damaged is not None:
        damaged.update(scan.damaged)
    for ref, sha in sorted(scan.values.items(), key=lambda kv: (kv[0] == "HEAD", kv[0])):  # a branch's name first
        out.setdefault(sha, ref)
    for sha in _reflog_ids(graph.git_dir):
        out.setdefault(sha, "a reflog entry")
    plan = journal.load(graph.git_dir)  # until HEAD moves, a failed recovery's commit is named only here
    if plan is not None:
        out.setdefault(plan.target, "the interrupted operation's journal")
    if index is not None:
        for path, ie in index.entries.items():
            out.setdefault(ie.entry.oid, f"the index ({path})")
            if ie.stats:
                out.setdefault(ie.stats, f"the index ({path} statistics)")
            if ie.projection:  # a sparse working file's own header and manifests
                out.setdefault(ie.projection, f"the index ({path})")
    return out


def reachable(
    graph: Graph, index: Index | None, starts: dict[str, str] | None = None, stop: Set[str] = frozenset()
) -> Reach:
    """Everything reachable from ``starts`` (object id → where from; default: every root),
    not walking into the commits in ``stop`` (a remote already holds them)."""
    reach = Reach()
    store = graph.objects

    def get(sha: str, where: str) -> ShaFile | None:
        reach.where.setdefault(sha, where)
        try:
            return read_object(store, sha)
        except KeyError:
            reach.missing.append(f"object {sha[:12]} is missing (needed by {where})")
        except CorruptObjectError:
            reach.missing.append(f"object {sha[:12]} is damaged (needed by {where})")
        reach.lacking.setdefault(sha, where)
        return None

    def walk_tree(sha: str, path: str, label: str) -> None:
        if sha in reach.objects:
            return
        reach.objects.add(sha)
        tree = get(sha, f"{path or 'the root tree'} in {label}")
        if not isinstance(tree, Tree):
            return
        entries = [(e.path.decode("utf-8", "replace"), e.sha.decode(), e.mode) for e in tree.iteritems()]
        names = {n for n, _, _ in entries}
        for name, oid, mode in entries:
            child = f"{path}/{name}" if path else name
            if HEADER_ENTRY in names or CHUNKED_ENTRY in names:
                _walk_file_member(name, oid, path, label)
            elif mode & 0o170000 == 0o040000:
                walk_tree(oid, child, label)
            else:
                reach.objects.add(oid)
                reach.where.setdefault(oid, f"{child} in {label}")

    def _walk_file_member(name: str, oid: str, path: str, label: str) -> None:
        if oid in reach.objects:
            return
        reach.objects.add(oid)
        if name == HEADER_ENTRY:
            reach.where.setdefault(oid, f"the header of {path} in {label}")
            return
        who = f"{path} ({label})"
        if not is_reserved(name):
            who = f"tensor {decode_tensor_name(name)!r} in {path} ({label})"
        blob = get(oid, who)
        if not isinstance(blob, Blob):
            return
        reach.manifests[oid] = who
        try:
            data = blob.as_raw_string()
            chunks = (FileManifest if name == CHUNKED_ENTRY else TensorManifest).from_bytes(data).chunks
        except (MgitError, KeyError, TypeError, ValueError):
            reach.missing.append(f"manifest of {who} is not valid")
            return
        for c in chunks:
            reach.chunks.setdefault(c.id, who)

    damaged_refs: dict[str, str] = {}
    pending = list((roots(graph, index, damaged_refs) if starts is None else starts).items())
    reach.missing += [f"ref {ref} is damaged: {why}" for ref, why in sorted(damaged_refs.items())]
    if starts is None:  # a damaged reflog line may have been all that kept a commit
        for path, lines in damaged_reflogs(graph.git_dir).items():
            where = path.relative_to(graph.git_dir).as_posix()
            reach.missing.append(f"reflog {where} is damaged (line {', '.join(map(str, lines))} cannot be read)")
    seen_commits: set[str] = set(stop)
    while pending:
        sha, where = pending.pop()
        if sha in seen_commits:
            continue
        obj = get(sha, where)
        if obj is None:
            continue
        if isinstance(obj, Tag):
            reach.objects.add(sha)
            pending.append((obj.object[1].decode(), f"tag {where}"))
        elif isinstance(obj, Commit):
            seen_commits.add(sha)
            reach.objects.add(sha)
            walk_tree(obj.tree.decode(), "", f"commit {sha[:12]}")
            pending.extend((p.decode(), f"parent of {sha[:12]}") for p in obj.parents)
        elif isinstance(obj, Tree):
            # an index entry: a file tree, found under its path
            rel = where.removeprefix("the index (").removesuffix(")")
            reach.objects.add(sha)
            names = {e.path.decode("utf-8", "replace") for e in obj.iteritems()}
            if HEADER_ENTRY in names or CHUNKED_ENTRY in names:
                for e in obj.iteritems():
                    _walk_file_member(e.path.decode("utf-8", "replace"), e.sha.decode(), rel, "the index")
        else:
            reach.objects.add(sha)
    return reach
