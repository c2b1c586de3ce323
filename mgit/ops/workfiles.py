"""The working tree as the operations see it: how a tracked file shows there (its form, in
a sparse checkout a projection), whether a working file holds an entry, and the steps that
complete a journaled operation once its files are written (removals, index, patterns,
HEAD), and the refusal of an operation that would overwrite uncommitted changes. Checkout,
reset, recovery, merges, stash apply and commits from memory share them."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from mgit.context import Context
from mgit.errors import BadInputError, DirtyWorktreeError, RefUpdateError
from mgit.graph.snapshot import Entry, Snapshot
from mgit.model.projection import project, tensor_count
from mgit.ops.paths import holds_only, listed, prune_dirs
from mgit.worktree import journal
from mgit.worktree.cost import CheckoutCost
from mgit.worktree.index import Index, IndexEntry
from mgit.worktree.journal import Journal, Staged
from mgit.worktree.sparse import SparsePatterns, save_patterns
from mgit.worktree.status import working_matches


@dataclass
class CheckoutResult:
    commit: str | None
    written: list[str] = field(default_factory=list)
    patched: list[str] = field(default_factory=list)  # of those written, the files patched in place
    removed: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)  # sparse: safetensors files with no tensor selected
    chunks_read: int = 0
    bytes_read: int = 0  # stored bytes read from the chunk store
    bytes_fetched: int = 0  # bytes received from the remote (a partial clone)
    cost: CheckoutCost | None = None  # the price checked against a budget (read, fetch)
    detached: bool = False


@dataclass(frozen=True)
class WorkForm:
    """How a tracked file shows in the working tree: ``entry`` is what the file holds (the
    committed entry, or its sparse projection); not ``written``: no tensor of it is selected."""

    entry: Entry
    written: bool = True

    def projection(self, full: Entry) -> str | None:
        """The index's record of a sparse working file (None: it holds ``full`` itself)."""
        return None if self.entry == full else self.entry.oid


def form(ctx: Context, entry: Entry, rel: str, patterns: SparsePatterns | None) -> WorkForm:
    """How ``entry`` appears in the working tree under ``patterns``."""
    if patterns is None or entry.kind != "safetensors":
        return WorkForm(entry)
    shown_entry = project(ctx.graph, entry, patterns.selects, rel)
    if shown_entry == entry:
        return WorkForm(entry)
    return WorkForm(shown_entry, tensor_count(ctx.graph, shown_entry.oid) > 0)


def shown(ie: IndexEntry) -> WorkForm:
    """How the index says the working tree shows an entry now."""
    return WorkForm(ie.worktree, not ie.skip_worktree)


def clean(ctx: Context, rel: str, want: Entry, index: Index) -> bool:
    """Does the working file hold ``want`` (stat cache first, content if needed)? The
    stat cache vouches for what the file holds: its projection in a sparse checkout. A
    file whose content is compared and found to hold the entry gets its stat refreshed (in
    ``index``: a caller that saves it spares the next command the hashing)."""
    path = ctx.root / rel
    if not path.is_file():
        return False
    ie = index.entries.get(rel)
    if ie is None or ie.worktree != want:
        return working_matches(ctx.graph, ctx.pool, path, rel, want)[0]
    seen = os.stat(path)
    if ie.matches(seen):
        return True
    since = index.read_clock([seen])  # before the stat recorded and the content read
    st = os.stat(path)
    same = working_matches(ctx.graph, ctx.pool, path, rel, want)[0]
    if same and since is not None:
        index.refresh(rel, ie, st, since)
    return same


def refuse_local_changes(
    ctx: Context, index: Index, head_snap: Snapshot, paths: set[str], what: str, kept: str = "nothing was changed"
) -> None:
    """Refuse, before anything is written, an operation (``what``: "merge of b", "stash apply
    of stash@{0}") that would overwrite uncommitted changes, staged or not, in the ``paths`` it
    writes: a staged change or deletion, an unstaged change or deletion, an untracked file (or
    symlink) where it writes one, a file where a sparse checkout left none. Changes elsewhere
    stay as they are, as git leaves them. A directory where a file goes is in the way unless it
    holds only tracked files the operation removes. ``kept``: what the message says is left as
    it was."""
    dirty = []
    for p in sorted(paths):
        ie, path = index.entries.get(p), ctx.root / p
        if ie is None:
            if p in head_snap or _untracked_in_the_way(ctx, p, head_snap, paths):
                dirty.append(p)  # a staged deletion, or an untracked file in the way
        elif ie.entry != head_snap.get(p):
            dirty.append(p)  # a staged change
        elif ie.skip_worktree:
            if path.is_file():
                dirty.append(p)  # a file where a sparse checkout left none
        elif not clean(ctx, p, ie.worktree, index):
            dirty.append(p)  # an unstaged change or deletion
    if dirty:
        raise DirtyWorktreeError(
            f"{what} would overwrite uncommitted changes in {listed(dirty)}; commit or discard them first ({kept})"
        )


def _untracked_in_the_way(ctx: Context, p: str, head_snap: Snapshot, paths: set[str]) -> bool:
    path = ctx.root / p
    if path.is_dir() and not path.is_symlink():
        return not holds_only(ctx.root, p, {f for f in paths if f in head_snap})
    return os.path.lexists(path)


def in_place(ctx: Context, key: str) -> bool:
    """Whether a working file may be patched in place (config ``key``: ``checkout.inPlace``,
    ``merge.inPlace``; default false: every changed file is replaced by a new one, so a reader
    never sees a mix). Opted in, a file of which at most half changes is patched, and a reader
    may see it half patched (docs/format.md §14.1); a file another process holds is replaced
    anyway (mgit.inuse)."""
    value = ctx.config_get(key)
    if value is None or value.strip().lower() in ("false", "no", "off", "0"):
        return False
    if value.strip().lower() in ("true", "yes", "on", "1"):
        return True
    raise BadInputError(f"config {key} is {value!r}: expected true or false")


def holds(ctx: Context, rel: str, form: WorkForm, index: Index) -> bool:
    """Does the working tree show ``form`` at ``rel`` (a file left out: no file there)?"""
    if not form.written:
        return not (ctx.root / rel).exists()
    return clean(ctx, rel, form.entry, index)


def complete(ctx: Context, plan: Journal, index: Index, result: CheckoutResult, clear: bool = True) -> None:
    """The steps after the working files of a journaled operation are written: removals,
    the index (with the entries ``plan.staged`` sets), the sparse patterns, HEAD; then
    (``clear``) the journal goes (each step idempotent)."""
    for p in plan.removes:
        if index.entries.pop(p, None) is not None or (ctx.root / p).exists():
            result.removed.append(p)
        remove_file(ctx.root, p)
    for p, staged in plan.staged.items():
        restage(index, p, staged)
    index.save()
    if plan.set_patterns:
        save_patterns(ctx.git_dir, plan.patterns)
    move_head(ctx, plan)
    if clear:
        journal.clear(ctx.git_dir)


def remove_file(root: Path, rel: str) -> None:
    """Remove the file ``rel`` and the directories it leaves empty: gone already, or a file
    written under its name as a directory (or in place of its directory), nothing is left to do."""
    path = root / rel
    if not path.is_dir():
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            path.unlink()
    prune_dirs(root, rel)


def restage(index: Index, rel: str, staged: Staged) -> None:
    """Set the index entry at ``rel`` to ``staged``: where the operation just wrote that entry,
    its stat stays; otherwise without one, so the next status compares the file's content."""
    held = index.entries.get(rel)
    if staged.entry is None:
        index.entries.pop(rel, None)
    elif held is not None and held.entry == staged.entry:
        index.entries[rel] = replace(held, stats=staged.stats)
    else:
        skip = held.skip_worktree if held else False
        index.entries[rel] = IndexEntry(staged.entry, stats=staged.stats, skip_worktree=skip)


def move_head(ctx: Context, plan: Journal) -> None:
    """HEAD as a journaled operation leaves it, whether or not a killed run got that far."""
    refs = ctx.refs
    if plan.head in ("create", "branch"):
        assert plan.branch is not None
        if plan.head == "create" and plan.branch not in refs.branches():
            refs.create_branch(plan.branch, plan.target)
        if not plan.switch_after and refs.current_branch() != plan.branch:
            refs.point_head_at_branch(plan.branch)
    elif plan.head == "detach":
        if refs.current_branch() is not None or refs.head() != plan.target:
            refs.detach_head(plan.target)
    elif plan.head == "advance":
        head = refs.head()
        if head != plan.target:
            if head != plan.old_head:
                raise RefUpdateError(f"HEAD moved to {str(head)[:12]} while the {plan.describe()} ran")
            refs.advance_head(plan.old_head, plan.target, plan.message)


def finish_command(plan: Journal) -> str:
    """The command that finishes a journaled operation by hand, leaving HEAD where the
    operation would: on its branch, on the advanced branch, or detached."""
    if plan.head in ("branch", "create"):
        return f"mgit checkout --force {plan.branch}"
    if plan.head == "advance":
        return f"mgit reset --hard {plan.target[:12]}"
    if plan.head == "detach":
        return f"mgit checkout --force {plan.target[:12]}"
    return "mgit checkout --force HEAD"


def undo_command(plan: Journal) -> str:
    """The command that undoes a journaled operation by hand (``plan.old_head`` is set)."""
    assert plan.old_head is not None
    if plan.head == "advance":
        return f"mgit reset --hard {plan.old_head[:12]}"
    return f"mgit checkout --force {plan.old_head[:12]}"
