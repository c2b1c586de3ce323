"""Staging and committing: add (files into the index, delta-encoded against a base), rm,
commit (the index as a commit; the branch moves last, by compare-and-swap) and
commit_state_dict (tensors straight from memory, the working tree following)."""

from __future__ import annotations

import math
import os
import posixpath
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from mgit.context import Context
from mgit.errors import BadInputError, DirtyWorktreeError, MgitError
from mgit.graph import records
from mgit.graph.snapshot import Entry, Snapshot, read_snapshot, validate_path, write_snapshot
from mgit.model.dtypes import DType, lookup
from mgit.model.filetree import StoredSafetensors, chunked_parents, load_safetensors
from mgit.model.ingest import Ingestor, changed_while_read
from mgit.model.manifest import FileManifest, TensorManifest
from mgit.model.projection import combine
from mgit.model.safetensors_file import build_header
from mgit.model.shards import (
    SHARD_INDEX,
    ModelFiles,
    TensorSize,
    plan_shards,
    removals,
    shard_index,
    tied_aliases,
    ties_embeddings,
)
from mgit.ops import checkout, workfiles
from mgit.ops.paths import models, prune_dirs, under
from mgit.ops.workfiles import CheckoutResult, WorkForm, clean, shown
from mgit.progress import byte_progress
from mgit.worktree.index import Index, IndexEntry, StatKey
from mgit.worktree.journal import Journal, Write
from mgit.worktree.scan import Ignorer, walk
from mgit.worktree.sparse import load_patterns

if TYPE_CHECKING:
    import torch


@dataclass
class AddResult:
    added: list[str] = field(default_factory=list)  # new or changed paths staged
    removed: list[str] = field(default_factory=list)  # paths unstaged because their file is gone
    logical_bytes: int = 0
    stored_bytes: int = 0  # bytes newly written to the chunk store
    new_chunks: int = 0


def add(ctx: Context, paths: Iterable[str | os.PathLike[str]] = (".",), base: str | None = None) -> AddResult:
    """Mirror the given paths into the index: new, changed and deleted files.

    Changed tensors are delta-encoded against the same tensors in ``base`` where that is
    smaller, and their per-chunk change norms are recorded.

    Args:
        paths: Files or directories, absolute or relative to the root (default: everything).
        base: The revision whose tensors changed ones are delta-encoded against (default: HEAD).

    Returns:
        The paths staged and unstaged, and the bytes read and newly stored.

    Raises:
        BadInputError: A path outside the repository, a special file, a file changing while
            read, or a damaged safetensors file.
        LockedError: Another mgit process holds the repository.
    """
    result = AddResult()
    snap = ctx.snapshot(base) if base else ctx.head_snapshot()
    parents, parent_files = parent_lookup(ctx, snap), chunked_parents(ctx.graph, snap)
    with ctx.writing():
        index = ctx.index()
        ingestor = stage_into(ctx, index, paths, parents, result, parent_files)
        ctx.store.seal()  # chunks become visible before anything refers to them
        index.save()
    s = ingestor.stats
    result.logical_bytes, result.stored_bytes, result.new_chunks = s.logical_bytes, s.stored_bytes, s.new_chunks
    return result


def stage_into(
    ctx: Context,
    index: Index,
    paths: Iterable[str | os.PathLike[str]],
    parents: Callable[[str], dict[str, Any]],
    result: AddResult,
    parent_files: Callable[[str], FileManifest | None] | None = None,
) -> Ingestor:
    """``add``'s work on ``index`` (not saved here: stash stages into a copy): each path's new,
    changed and deleted files, the changed ones ingested (chunks written to the store, left
    for the caller to seal; tensors delta-encoded against ``parents``, large non-tensor files
    against ``parent_files``). Returns the ingestor, whose stats say what was read and stored."""
    ignorer = Ignorer(ctx.root)
    todo: dict[str, os.stat_result] = {}
    special: list[str] = []  # FIFOs, sockets, devices: never read
    for p in paths:
        rel = ctx.relpath(p)
        full = ctx.root / rel
        known = under(index.entries, rel)
        if not full.exists():
            if not known:
                raise BadInputError(f"pathspec {str(p)!r} did not match any files")
            found = {}
        elif full.is_file() and not known and ignorer.is_ignored(rel):  # tracked files are never ignored, as in git
            raise BadInputError(f"{rel} is ignored by .mgitignore; remove the pattern to track it")
        else:
            found = walk(ctx.root, rel, ignorer, special, tracked=index.entries)
        _refuse_special([r for r in special if r == rel or r in index.entries])
        for r in known:
            # A sparse file missing from disk is taken as not checked out (a checkout may
            # have been interrupted): only `mgit rm` drops tensors a sparse checkout holds.
            held = index.entries[r]
            if r not in found and not held.skip_worktree and not held.projection:
                del index.entries[r]
                result.removed.append(r)
        for r, st in found.items():
            ie = index.entries.get(r)
            if ie is None or not ie.matches(st):
                todo[validate_path(r)] = st
    total = sum(st.st_size for st in todo.values())
    since = index.read_clock(todo.values()) if todo else None  # before the files are read, their stats taken
    with byte_progress("add", total) as bar:
        ingestor = Ingestor(ctx.graph, ctx.store, ctx.pool, bar, parents, parent_files)
        for rel, st in sorted(todo.items()):
            # Unchanged chunks dedup inside the store, so re-ingesting a touched but
            # unchanged file writes nothing new and yields the same entry.
            got = ingestor.file(ctx.root / rel, rel)
            after = _unchanged_since(ctx.root / rel, rel, st)
            old = index.entries.get(rel)
            entry, stats = got, records.put_file_stats(ctx.graph, ingestor.file_stats)
            if old is not None and old.projection and got.kind == "safetensors":
                entry, stats = _unproject(ctx, rel, old, got, stats)
            projection = got.oid if entry != got else None
            index.set(rel, entry, after, stats, projection, since)
            if old is None or old.entry != entry:
                result.added.append(rel)
    return ingestor


def _unproject(ctx: Context, rel: str, old: IndexEntry, got: Entry, stats: str | None) -> tuple[Entry, str | None]:
    """(full entry, statistics) to stage for a sparse working file now holding ``got``:
    the staged entry as it was if the file is as checked out, else its tensors plus
    those the sparse checkout left out, unchanged."""
    if got == old.worktree:
        return old.entry, old.stats
    return combine(ctx.graph, old.entry, got, rel), stats


def rm(ctx: Context, paths: Iterable[str | os.PathLike[str]], cached: bool = False) -> list[str]:
    """Stop tracking paths, as ``git rm`` does.

    Args:
        paths: Tracked files or directories.
        cached: Keep the working files (only the index forgets them).

    Returns:
        The repository-relative paths no longer tracked.

    Raises:
        BadInputError: A path that is not tracked, or outside the repository.
    """
    removed = []
    with ctx.lock:
        index = ctx.index()
        for p in paths:
            rel = ctx.relpath(p)
            known = under(index.entries, rel)
            if not known:
                raise BadInputError(f"pathspec {str(p)!r} did not match any tracked file")
            for r in known:
                del index.entries[r]
                removed.append(r)
                if not cached:
                    (ctx.root / r).unlink(missing_ok=True)
                    prune_dirs(ctx.root, r)
        index.save()
    return removed


def commit(ctx: Context, message: str, allow_empty: bool = False, sketch: str | float | None = None) -> str:
    """Commit the index; the current branch moves last, by compare-and-swap.

    Args:
        message: The commit message (not empty).
        allow_empty: Commit even when the index matches HEAD.
        sketch: A share (``"10%"``, ``0.1``) of the change to the parent to sketch for
            budgeted merges (mgit.ops.sketch; kind: config ``sketch.kind``). Default: config
            ``sketch.share``, else no sketch.

    Returns:
        The new commit's id.

    Raises:
        BadInputError: An empty message.
        MgitError: Nothing to commit, or the commit was made but its sketch failed.
        RefUpdateError: The branch moved meanwhile (another process committed).
    """
    if not message.strip():
        raise BadInputError("empty commit message; pass -m MESSAGE")
    share = sketch if sketch is not None else ctx.config_get("sketch.share")
    if share is not None:
        from mgit.merge.sketch.record import parse_share
        from mgit.ops import sketch as sketches

        parse_share(share)  # a bad share or kind is refused before anything is committed
        kind = sketches.configured_kind(ctx)
    made = _commit_index(ctx, message, allow_empty)
    if share is not None and ctx.graph.commit(made).parents:
        try:
            sketches.sketch(ctx, made, share=share, kind=kind)
        except MgitError as e:
            raise MgitError(f"committed {made[:12]}, but its sketch failed: {e} (run `mgit sketch` again)") from e
    return made


def _commit_index(ctx: Context, message: str, allow_empty: bool) -> str:
    with ctx.lock:
        index = ctx.index()
        head = ctx.refs.head()
        head_snap = ctx.head_snapshot()
        if head and not allow_empty and index.snapshot() == head_snap:
            # compared as files, not trees: HEAD's tree also holds its own stats record,
            # which a commit of the same files would drop (a commit of nothing)
            raise MgitError("nothing to commit: the index matches HEAD (stage changes with `mgit add`)")
        return _commit_tree(ctx, index_tree(ctx, index, head_snap), head, message, allow_empty)


def index_tree(ctx: Context, index: Index, head_snap: Snapshot) -> str:
    """The root tree of what ``index`` stages, with the statistics of the files that differ
    from ``head_snap`` (the commit's ``.mgit-stats`` record)."""
    stats = {
        p: records.file_stats(ctx.graph, ie.stats)
        for p, ie in index.entries.items()
        if ie.stats and ie.entry != head_snap.get(p)
    }
    return write_snapshot(ctx.graph, index.snapshot(), records.stats_entries(ctx.graph, stats))


def parent_lookup(ctx: Context, snap: Snapshot) -> Callable[[str], dict[str, Any]]:
    """File path → tensors (by name) of the same model directory in ``snap``."""
    cache: dict[str, dict[str, Any]] = {}

    def lookup(rel: str) -> dict[str, Any]:
        model_dir = posixpath.dirname(rel)
        if model_dir not in cache:
            tensors: dict[str, Any] = {}
            for path in models(snap).get(model_dir, []):
                for name, m in load_safetensors(ctx.graph, snap[path].oid, path).manifests.items():
                    tensors.setdefault(name, m)
            cache[model_dir] = tensors
        return cache[model_dir]

    return lookup


def _commit_tree(ctx: Context, tree: str, head: str | None, message: str, allow_empty: bool = False) -> str:
    if not allow_empty:
        if head and ctx.graph.commit(head).tree == tree:
            raise MgitError("nothing to commit: the index matches HEAD (stage changes with `mgit add`)")
        if not head and not ctx.graph.tree(tree):
            raise MgitError("nothing to commit: the index is empty (stage files with `mgit add`)")
    who = ctx.identity()
    commit = ctx.graph.put_commit(tree, [head] if head else [], message, who, who)
    kind = "commit" if head else "commit (initial)"
    ctx.refs.advance_head(head, commit, f"{kind}: {message.strip().splitlines()[0]}")
    return commit


def commit_state_dict(
    ctx: Context,
    state_dict: Mapping[str, torch.Tensor],
    model: str = "model",
    message: str = "",
    metadata: dict[str, str] | None = None,
    base: str | None = None,
    branch: str | None = None,
    delete: Iterable[str] = (),
    replace: bool = False,
) -> str:
    """Commit tensors straight from memory (a training loop's checkpoint) into a model.

    The state dict updates the model; it need not hold all of it: each tensor given replaces
    the one of its name in the shard file that holds it, a name the model lacks joins the
    single file (or the last shard), and every tensor not given stays as it is, as do the files
    holding none of the given ones (byte for byte, the same tree entries). A shard left empty
    is removed; a sharded model's index.json follows when a tensor joins, leaves or changes
    size. A tied output embedding (``lm_head.weight`` sharing storage with, or equal to, the
    input embedding) is not added to a model saved without it (mgit.model.shards.tied_aliases).
    On the checked-out branch, the model files in the working tree are rewritten to match (as a
    checkout writes them) and the index follows, so status is clean; files absent from disk
    stay not checked out. On another branch, the working tree and index are left as they are.

    Args:
        state_dict: Tensor name → tensor.
        model: The model's directory, relative to the root.
        message: The commit message.
        metadata: The header metadata of the files written (default: what each had).
        base: The revision changed tensors are delta-encoded against (default: the branch's tip).
        branch: The branch to commit on (default: HEAD, the checked-out branch or a detached HEAD).
        delete: Names of tensors to remove from the model.
        replace: The state dict is the whole model: every tensor not given is removed.

    Returns:
        The new commit's id.

    Raises:
        BadInputError: An empty message, an unknown branch, a tensor to delete the model
            lacks, or a name both given and deleted.
        MgitError: Nothing to commit: the tensors are what the branch holds already.
        DirtyWorktreeError: Uncommitted changes in the model files it would rewrite.
        RefUpdateError: The branch moved meanwhile.
    """
    if not message.strip():
        raise BadInputError("empty commit message")
    for name in state_dict:
        if not isinstance(name, str):
            raise BadInputError(f"tensor names must be strings, got {name!r}")
    if isinstance(delete, str):
        raise BadInputError("delete takes a list of tensor names, not one string")
    with ctx.writing():
        checked_out = branch is None or branch == ctx.refs.current_branch()
        if checked_out:
            tip = ctx.refs.head()
        elif branch in ctx.refs.branches():
            tip = ctx.refs.branches()[branch]
        else:
            raise BadInputError(f"branch {branch!r} not found; create it first with `mgit branch {branch}`")
        before = read_snapshot(ctx.graph, ctx.graph.commit(tip).tree) if tip else {}
        update = ModelUpdate(ctx.relpath(model), list(delete), replace, metadata)
        snap, stats = ingest_state_dict(ctx, state_dict, dict(before), update, base)
        touched = {p for p in set(before) | set(snap) if before.get(p) != snap.get(p)}
        if tip and not touched:  # compared as files, not trees: the tree also holds its stats record
            raise MgitError("nothing to commit: these tensors are what the branch holds already")
        index = ctx.index() if checked_out else None
        if index is not None:
            _refuse_state_dict_overwrites(ctx, index, before, touched)
        ctx.store.seal()
        tree = write_snapshot(ctx.graph, snap, records.stats_entries(ctx.graph, stats))
        commit = _new_commit(ctx, tree, tip, message)
        summary = f"{'commit' if tip else 'commit (initial)'}: {message.strip().splitlines()[0]}"
        if index is None:
            assert branch is not None and tip is not None
            ctx.refs.advance_branch(branch, tip, commit, summary)
            return commit
        # working files and index first, the branch last: a failure in between leaves the
        # checkpoint staged (never a stale file that a later commit would take back); journaled,
        # so a killed run's working files, index and branch are finished by the next command
        plan = Journal("commit", "tensors from memory", commit, head="advance", old_head=tip, message=summary)
        result = _follow_state_dict(ctx, index, commit, snap, touched, plan)
        workfiles.complete(ctx, plan, index, result)
        return commit


@dataclass(frozen=True)
class ModelUpdate:
    """What a commit from memory does to the model: its directory, the tensors it deletes by
    name, whether the state dict replaces the whole model, the header metadata it writes."""

    model_dir: str
    delete: list[str]
    replace: bool
    metadata: dict[str, str] | None


def ingest_state_dict(
    ctx: Context, state_dict: Mapping[str, torch.Tensor], snap: Snapshot, update: ModelUpdate, base: str | None
) -> tuple[Snapshot, dict[str, list[Any]]]:
    """Store the tensors into the safetensors files of the model in ``snap`` (changed in place
    and returned, with the statistics of each file written): only the files that gain, lose or
    change a tensor are written; the others keep their entries."""
    from mgit.model.torch_io import dtype_name, tensor_bytes

    parents = parent_lookup(ctx, ctx.snapshot(base) if base else snap)
    stored = {p: load_safetensors(ctx.graph, snap[p].oid, p) for p in models(snap).get(update.model_dir, [])}
    saved = {p: [t.name for t in s.layout.tensors] for p, s in stored.items()}
    held = {name: s for s in stored.values() for name in s.manifests}  # tensor → the file holding it
    config = snap.get(posixpath.join(update.model_dir, "config.json"))
    tied = ties_embeddings(ctx.graph.blob(config.oid) if config is not None and config.kind == "blob" else None)
    aliases = tied_aliases(state_dict, held.keys(), tied)
    given = {n: t for n, t in state_dict.items() if n not in aliases}
    drop = removals(held, given.keys(), update.delete, update.replace, update.model_dir)
    new_home = max(saved, default=posixpath.join(update.model_dir, "model.safetensors"))
    shards = plan_shards(saved, given, new_home, drop)
    sizes = {n: TensorSize(m.nbytes, math.prod(m.shape)) for n, m in _manifests(held).items()}
    before = ModelFiles(saved, sizes)
    sizes = {n: z for n, z in sizes.items() if n not in drop}
    sizes.update((n, TensorSize(t.numel() * t.element_size(), t.numel())) for n, t in given.items())
    dtypes = {n: cast(DType, lookup(dtype_name(t.dtype))) for n, t in given.items()}
    stats = {}
    with byte_progress("commit", sum(sizes[n].nbytes for n in given)) as bar:
        ingestor = Ingestor(ctx.graph, ctx.store, ctx.pool, bar, parents)
        for path in sorted(shards.written):
            names = shards.files[path]
            if not names:
                del snap[path]
                continue
            ingestor.begin_file(path)
            specs, ids = [], {}
            for name in names:
                if name in given:  # one tensor at a time: a GPU tensor's CPU copy is freed before the next
                    t = given[name]
                    specs.append((name, dtypes[name], tuple(t.shape)))
                    raw = tensor_bytes(t)
                    read = lambda o, n, r=raw: r[o : o + n]  # noqa: E731
                    ids[name] = ingestor.tensor(name, dtypes[name], tuple(t.shape), len(raw), read)
                else:
                    m = held[name].manifests[name]  # kept as it is: no chunk read
                    specs.append((name, cast(DType, lookup(m.dtype)), m.shape))
                    ids[name] = held[name].manifest_ids[name]
            header = _header(specs, update.metadata, stored.get(path))
            snap[path] = Entry("safetensors", ingestor.safetensors_tree(header, ids))
            stats[path] = ingestor.file_stats
    _update_shard_index(ctx, snap, update.model_dir, before, ModelFiles(shards.files, sizes))
    return snap, stats


def _header(
    specs: list[tuple[str, DType, tuple[int, ...]]], metadata: dict[str, str] | None, old: StoredSafetensors | None
) -> bytes:
    """The header of a file written from memory: the file's own header, byte for byte, while
    its tensors keep their dtypes and shapes (and the metadata is not replaced), else a new
    one (with the file's metadata unless ``metadata`` is given)."""
    if old is None:
        return build_header(specs, metadata)
    if metadata in (None, old.layout.metadata) and specs == [(t.name, t.dtype, t.shape) for t in old.layout.tensors]:
        return old.layout.header
    return build_header(specs, old.layout.metadata if metadata is None else metadata)


def _manifests(held: dict[str, StoredSafetensors]) -> dict[str, TensorManifest]:
    return {name: file.manifests[name] for name, file in held.items()}


def _refuse_state_dict_overwrites(ctx: Context, index: Index, before: Snapshot, touched: set[str]) -> None:
    """Uncommitted changes in the files a commit from memory rewrites would be lost: refuse."""
    dirty = []
    for p in sorted(touched):
        ie, path = index.entries.get(p), ctx.root / p
        if ie is None:
            if path.exists():
                dirty.append(p)  # an untracked file where the commit puts one
        elif ie.entry != before.get(p) or (path.is_file() and not clean(ctx, p, ie.worktree, index)):
            dirty.append(p)
    if dirty:
        shown = ", ".join(dirty[:5]) + (f" and {len(dirty) - 5} more" if len(dirty) > 5 else "")
        raise DirtyWorktreeError(
            f"committing tensors from memory would overwrite uncommitted changes in {shown}; "
            "commit or discard them first (nothing was committed)"
        )


def _follow_state_dict(
    ctx: Context, index: Index, commit: str, snap: Snapshot, touched: set[str], plan: Journal
) -> CheckoutResult:
    """Bring the working files and index of ``touched`` paths to ``snap`` (known clean):
    files on disk are written as a checkout writes them, absent ones stay not checked out.
    ``plan`` (the journal) gets every step and is saved before the first change on disk."""
    patterns = load_patterns(ctx.git_dir)
    todo: dict[str, Entry] = {}
    forms: dict[str, WorkForm] = {}
    for p in sorted(touched):
        ie, path = index.entries.get(p), ctx.root / p
        if p not in snap:  # a shard left without tensors
            plan.removes.append(p)
            continue
        entry = snap[p]
        form = forms[p] = workfiles.form(ctx, entry, p, patterns)
        if ie is not None and shown(ie) == form and not ie.skip_worktree:
            # the working file already shows it (a sparse file: a left-out tensor changed)
            index.entries[p] = replace(ie, entry=entry, stats=None, projection=form.projection(entry))
            plan.writes[p] = Write(entry, form.entry)  # a recovery finds it written
        elif path.is_file():
            todo[p] = entry
            plan.writes[p] = Write(entry, form.entry)
        else:
            index.entries[p] = IndexEntry(entry, skip_worktree=True, projection=form.projection(entry))
            plan.writes[p] = Write(entry, form.entry, written=False)
    result = CheckoutResult(commit)
    checkout.write_files(ctx, index, todo, result, forms=forms, plan=plan)
    return result


def _new_commit(ctx: Context, tree: str, parent: str | None, message: str) -> str:
    """A commit object of ``tree`` on ``parent`` (the caller refused a commit of nothing)."""
    who = ctx.identity()
    return ctx.graph.put_commit(tree, [parent] if parent else [], message, who, who)


def _update_shard_index(ctx: Context, snap: Snapshot, model_dir: str, before: ModelFiles, after: ModelFiles) -> None:
    """A sharded model's index.json, rewritten when the commit changes what it lists."""
    path = posixpath.join(model_dir, SHARD_INDEX)
    entry = snap.get(path)
    if entry is None or entry.kind != "blob":
        return
    doc = shard_index(ctx.graph.blob(entry.oid), model_dir, before, after)
    if doc is not None:
        snap[path] = Entry("blob", ctx.graph.put_blob(doc), entry.mode)


def _refuse_special(paths: list[str]) -> None:
    """A path named or tracked that is no regular file is refused (reading a FIFO blocks)."""
    if paths:
        raise BadInputError(
            f"cannot add {paths[0]}: not a regular file (a FIFO, socket or device); "
            "mgit tracks regular files and symlinks to them"
        )


def _unchanged_since(path: Path, rel: str, seen: os.stat_result) -> os.stat_result:
    """The file's stat after ``add`` read it; a file rewritten, replaced or touched since
    ``seen`` (its stat before the read) may have been read as a mix of two versions: refused."""
    try:
        after = os.stat(path)
    except OSError:
        after = None
    if after is None or StatKey.of(after) != StatKey.of(seen):
        raise changed_while_read(rel)
    return after
