"""Reading a repository: status, show, diff, and the tensors of a model (state_dict,
the models of a revision). Nothing here writes, except the stat cache status refreshes
(and a journaled operation status finds interrupted, finished by taking the lock)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mgit.context import Context
from mgit.errors import BadInputError, DirtyWorktreeError, LockedError, MgitError, chunks_of
from mgit.graph import records
from mgit.graph.objects import CommitInfo
from mgit.graph.revisions import diff_pair
from mgit.graph.snapshot import Snapshot, read_snapshot
from mgit.model.filetree import load_chunked, load_safetensors
from mgit.ops.paths import models as models_of
from mgit.ops.workfiles import clean
from mgit.parallel import ordered_map
from mgit.worktree import journal
from mgit.worktree.index import Index, IndexEntry
from mgit.worktree.scan import walk
from mgit.worktree.sparse import load_patterns, summarize
from mgit.worktree.status import Status, collapse_untracked, compare_snapshots, worktree_changes

if TYPE_CHECKING:  # diff machinery is imported where used: light commands (status, log) skip it
    import torch

    from mgit.diff.model import ModelDiff
    from mgit.diff.sources import Side


@dataclass
class FileInfo:
    path: str
    kind: str
    tensors: int
    logical_bytes: int
    stored_bytes: int


@dataclass
class ShowInfo:
    commit: CommitInfo
    files: list[FileInfo]
    logical_bytes: int
    stored_bytes: int  # unique chunks of this commit as stored


def status(ctx: Context) -> Status:
    """What is staged, changed and untracked, as ``git status`` shows it.

    Files the index's stat cache vouches for are not read; an interrupted checkout is finished
    first when the lock is free.

    Returns:
        The branch and HEAD, the staged and unstaged changes, untracked files and paths not
        checked out (a sparse checkout's summary too); ``.clean`` when there is nothing.
    """
    if journal.exists(ctx.git_dir):  # an interrupted checkout: finish it first (taking the lock does)
        try:
            with ctx.lock:
                pass
        except (LockedError, OSError):
            pass  # its holder is finishing it, or we may not write here: show what is there
    index = ctx.index()
    seen = dict(index.entries)
    head_snap = ctx.head_snapshot()
    status = Status(ctx.refs.current_branch(), ctx.refs.head())
    status.staged = compare_snapshots(ctx.graph, head_snap, index.snapshot())
    files = walk(ctx.root, tracked=index.entries)
    status.unstaged, status.untracked, status.not_checked_out, refreshed = worktree_changes(
        ctx.graph, ctx.pool, ctx.root, index, files
    )
    status.untracked_collapsed = collapse_untracked(status.untracked, index.entries)
    patterns = load_patterns(ctx.git_dir)
    if patterns is not None:
        status.sparse = summarize(ctx.graph, index, patterns)
    if refreshed:
        _save_refreshed(ctx, seen, index)
    return status


def _save_refreshed(ctx: Context, seen: dict[str, IndexEntry], index: Index) -> None:
    """Save the stat cache status refreshed, into the index as it is now under the lock:
    an entry another command changed since status read it is left as that command made it."""
    fresh = {p: ie for p, ie in index.entries.items() if seen.get(p) != ie}
    try:
        with ctx.lock:
            current = ctx.index()
            for p, ie in fresh.items():
                if current.entries.get(p) == seen.get(p):
                    current.entries[p] = ie
            current.save()
    except (MgitError, OSError):
        pass  # another process writes, or the disk is full: the cache is refreshed next time


def show(ctx: Context, rev: str = "HEAD") -> ShowInfo:
    """A commit and its files with their sizes, logical and as stored (``mgit show``).

    Args:
        rev: The revision to show.

    Returns:
        The commit, each file's kind, tensor count and sizes, and the totals (chunks shared
        between files counted once).

    Raises:
        RevisionError: ``rev`` names no commit.
    """
    info = ctx.graph.commit(ctx.refs.resolve(rev))
    files, seen = [], set()
    total_logical = total_stored = 0
    for path, entry in sorted(read_snapshot(ctx.graph, info.tree).items()):
        if entry.kind == "blob":
            size = len(ctx.graph.blob(entry.oid))
            files.append(FileInfo(path, "file", 0, size, size))
            total_logical += size
            total_stored += size
            continue
        if entry.kind == "safetensors":
            stored = load_safetensors(ctx.graph, entry.oid, path)
            chunks = [c for m in stored.manifests.values() for c in m.chunks]
            ntensors, logical = len(stored.manifests), stored.file_size
        else:
            chunks = list(load_chunked(ctx.graph, entry.oid).chunks)
            ntensors, logical = 0, sum(c.size for c in chunks)
        stored_bytes = 0
        for c in {c.id for c in chunks}:
            size = ctx.store.stored_size(c) if ctx.store.has(c) else 0
            stored_bytes += size
            if c not in seen:
                seen.add(c)
                total_stored += size
        files.append(FileInfo(path, entry.kind, ntensors, logical, stored_bytes))
        total_logical += logical
    return ShowInfo(info, files, total_logical, total_stored)


def refuse_dirty(ctx: Context, what: str) -> None:
    now = status(ctx)
    dirty = [f.path for f in now.staged + now.unstaged]
    if dirty:
        raise DirtyWorktreeError(f"cannot {what} with uncommitted changes ({', '.join(dirty[:3])}); commit them first")


def diff(
    ctx: Context,
    a: str | None = None,
    b: str | None = None,
    *,
    staged: bool = False,
    numeric: bool = True,
    patterns: Iterable[str] = (),
    model: str | None = None,
) -> ModelDiff:
    """Compare two sides tensor by tensor; unchanged tensors cost no data read.

    Args:
        a: The old side: a revision (default HEAD), or with ``b`` None a range: ``A..B``
            compares A with B, ``A...B`` the merge base of A and B with B.
        b: The new side: a revision (default: the working tree, or the index if ``staged``).
        staged: Compare with the index rather than the working tree.
        numeric: Compute the change statistics (streamed over the changed chunks only).
        patterns: fnmatch patterns on tensor names: only those.
        model: Only the model in this directory.

    Returns:
        The tensors added, removed and changed (with statistics if ``numeric``), and the files.

    Raises:
        BadInputError: No model in ``model``, or no tensor matches ``patterns``.
        RevisionError: A side names no commit.
    """
    from mgit.diff.sources import snapshot_side

    model_key = ctx.relpath(model) if model is not None else None
    label_a, label_b = a or "HEAD", b or ""
    pair = diff_pair(ctx.refs, ctx.graph, a) if a is not None and b is None else None
    if pair is not None:  # A..B, A...B
        (a, label_a), (b, label_b) = pair
    snap_a = ctx.snapshot(a) if a else ctx.head_snapshot()
    side_a = snapshot_side(ctx.graph, ctx.store, snap_a, label_a, model_key)
    if b is not None:
        side_b = snapshot_side(ctx.graph, ctx.store, ctx.snapshot(b), label_b, model_key)
    elif staged:
        side_b = snapshot_side(ctx.graph, ctx.store, ctx.index().snapshot(), "index", model_key)
    else:
        side_b = _worktree_side(ctx, side_a, model_key)
    if model_key is not None and not any(m == model_key for m, _ in side_a.tensors | side_b.tensors):
        raise BadInputError(f"no model (safetensors files) in {model!r} on either side of the diff")
    return _compare(ctx, side_a, side_b, list(patterns), numeric)


def _compare(ctx: Context, side_a: Side, side_b: Side, patterns: list[str], numeric: bool) -> ModelDiff:
    from mgit.diff.model import ModelDiff, compare_models
    from mgit.diff.sources import file_diffs

    tensors = compare_models(side_a.tensors, side_b.tensors, patterns, numeric, ctx.pool)
    if patterns and not tensors:
        raise BadInputError(f"no tensor matches {', '.join(map(repr, patterns))}")
    return ModelDiff(side_a.label, side_b.label, tensors, file_diffs(side_a, side_b, tensors), numeric)


def changes(ctx: Context, rev: str = "HEAD") -> ModelDiff:
    """What a commit changed against its first parent, for ``log --stat`` and ``show --stat``.

    Read from manifests and small files only: no tensor data is read.

    Args:
        rev: The commit (a merge: compared with its base; a root commit: everything added).

    Returns:
        The diff, per tensor and file, without statistics.

    Raises:
        RevisionError: ``rev`` names no commit.
    """
    from mgit.diff.sources import snapshot_side

    info = ctx.graph.commit(ctx.refs.resolve(rev))
    parent = info.parents[0] if info.parents else None
    before = read_snapshot(ctx.graph, ctx.graph.commit(parent).tree) if parent else {}
    side_a = snapshot_side(ctx.graph, ctx.store, before, parent[:12] if parent else "(none)", None)
    side_b = snapshot_side(ctx.graph, ctx.store, read_snapshot(ctx.graph, info.tree), info.id[:12], None)
    return _compare(ctx, side_a, side_b, [], False)


def _worktree_side(ctx: Context, like: Side, model: str | None) -> Side:
    """The working tree; files the stat cache vouches for are read from the index
    (their manifests), so only modified files are hashed. A file not checked out (a
    sparse checkout left it out) is as the index has it; a sparse file, as checked out,
    is the whole file, and once changed, it still holds the tensors it left out."""
    from mgit.diff.sources import Side, snapshot_side, worktree_side

    index = ctx.index()
    files = walk(ctx.root, tracked=index.entries)
    known = {p: ie.entry for p, ie in index.entries.items() if ie.skip_worktree and p not in files}
    for p, st in files.items():
        ie = index.entries.get(p)
        if ie is not None and (ie.matches(st) or (ie.projection and clean(ctx, p, ie.worktree, index))):
            known[p] = ie.entry
    vouched = snapshot_side(ctx.graph, ctx.store, known, "working tree", model)
    hashed = worktree_side(ctx.root, {p: st for p, st in files.items() if p not in known}, ctx.pool, like, model)
    tensors = vouched.tensors | hashed.tensors
    for p in hashed.files:
        ie = index.entries.get(p)
        if ie is not None and ie.projection:
            shown = load_safetensors(ctx.graph, ie.projection, p).manifests
            whole = snapshot_side(ctx.graph, ctx.store, {p: ie.entry}, "working tree", model).tensors
            tensors |= {k: t for k, t in whole.items() if k[1] not in shown and k not in tensors}
    contents, readers = vouched.files | hashed.files, vouched.read_file | hashed.read_file
    chunked = vouched.chunked | hashed.chunked
    return Side("working tree", tensors, contents, readers, vouched.modes | hashed.modes, chunked)


def commit_stats(ctx: Context, rev: str = "HEAD") -> dict[str, list[Any]]:
    """The per-chunk change norms a commit recorded (what budgeted merges rank chunks by).

    Args:
        rev: The commit.

    Returns:
        path → ``[[chunk id, parent chunk id, ‖Δ‖₂], ...]``.

    Raises:
        RevisionError: ``rev`` names no commit.
    """
    return records.read_stats(ctx.graph, ctx.graph.commit(ctx.refs.resolve(rev)).tree)


def models(ctx: Context, rev: str = "HEAD") -> dict[str, list[str]]:
    """The models of a revision: each directory that holds safetensors files.

    Args:
        rev: The revision.

    Returns:
        Model directory (``''``: the root) → its safetensors files.

    Raises:
        RevisionError: ``rev`` names no commit.
    """
    return models_of(ctx.snapshot(rev))


def pick_model(ctx: Context, snap: Snapshot, model: str | None) -> tuple[str, list[str]]:
    found = models_of(snap)
    if model is not None:
        key = ctx.relpath(model)
        if key not in found:
            raise BadInputError(f"no model (safetensors files) in directory {model!r}")
        return key, found[key]
    if len(found) != 1:
        if not found:
            raise BadInputError("this revision holds no safetensors model")
        names = ", ".join(m or "." for m in found)
        raise BadInputError(f"this revision holds several models ({names}); choose one with model=/--model")
    return next(iter(found.items()))


def state_dict(
    ctx: Context, rev: str = "HEAD", names: Iterable[str] | None = None, model: str | None = None
) -> dict[str, torch.Tensor]:
    """Tensors of a model at a revision, read without checking it out.

    Only the chunks of the requested tensors are read (and, in a partial clone, fetched).

    Args:
        rev: The revision.
        names: The tensors to read (default: all of the model's).
        model: The model's directory (needed when the revision holds several models).

    Returns:
        Tensor name → tensor.

    Raises:
        BadInputError: No model, several models and no ``model``, or a name the model lacks.
        RevisionError: ``rev`` names no commit.
        CorruptObjectError: A chunk fails verification against its id.
    """
    from mgit.model.torch_io import tensor_from_bytes

    snap = ctx.snapshot(rev)
    _, files = pick_model(ctx, snap, model)
    where: dict[str, tuple[str, Any]] = {}
    for path in files:
        stored = load_safetensors(ctx.graph, snap[path].oid, path)
        for name, manifest in stored.manifests.items():
            where[name] = (path, manifest)
    wanted = list(where) if names is None else list(names)
    missing = [n for n in wanted if n not in where]
    if missing:
        raise BadInputError(f"tensor(s) not in this model: {', '.join(missing[:5])}")
    out = {}
    for name in wanted:
        path, manifest = where[name]
        buf = bytearray(manifest.nbytes)
        offset = 0
        with chunks_of(f"tensor {name!r} in {path}"):
            for data in ordered_map(ctx.pool, lambda chunk: ctx.store.get(chunk.id), manifest.chunks):
                buf[offset : offset + len(data)] = data
                offset += len(data)
        out[name] = tensor_from_bytes(buf, manifest.dtype, manifest.shape)
    return out
