"""Everything a set of starting objects reaches in the graph: git objects and the chunks their
tensor manifests name, each with where it was first met (for messages naming who needs a
missing object). What the starts are — refs, reflogs, the index, a journal; or the commits a
push sends — is the caller's business (maintenance.reach, remote.transfer)."""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass, field

from dulwich.objects import Blob, Commit, ShaFile, Tag, Tree

from mgit.errors import CorruptObjectError
from mgit.graph.integrity import read_object
from mgit.graph.names import CHUNKED_ENTRY, HEADER_ENTRY, decode_tensor_name, is_reserved
from mgit.graph.objects import Graph
from mgit.model.manifest import FileManifest, TensorManifest


@dataclass
class Reach:
    objects: set[str] = field(default_factory=set)  # git object ids
    chunks: dict[str, str] = field(default_factory=dict)  # chunk id → who uses it
    manifests: dict[str, str] = field(default_factory=dict)  # manifest blob id → who uses it
    missing: list[str] = field(default_factory=list)  # problems met on the way
    lacking: dict[str, str] = field(default_factory=dict)  # missing or damaged object id → who needs it
    invalid: set[str] = field(default_factory=set)  # manifest blob ids that are no valid manifest
    where: dict[str, str] = field(default_factory=dict)  # object id → where it was first met


def walk(graph: Graph, starts: Mapping[str, str], stop: Set[str] = frozenset()) -> Reach:  # noqa: C901 (one walk over commits, trees and manifests; split it with care)
    """Everything reachable from ``starts`` (object id → where from), not walking into the
    commits in ``stop`` (a remote already holds them)."""
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
        what = f"the manifest {oid[:12]} of {who}"
        try:
            data = blob.as_raw_string()
            chunks = (FileManifest if name == CHUNKED_ENTRY else TensorManifest).from_bytes(data, what).chunks
        except CorruptObjectError as exc:  # named once here; fsck's check of the files skips it
            reach.invalid.add(oid)
            reach.missing.append(str(exc).removesuffix("; run `mgit fsck`"))
            return
        for c in chunks:
            reach.chunks.setdefault(c.id, who)

    pending = list(starts.items())
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
