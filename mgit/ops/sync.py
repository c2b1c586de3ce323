"""Push, fetch, pull and clone: the graph and chunks travelling between this repository and
its remotes (mgit.remote.transfer does the moving), and the tracking refs and reflogs they
leave, as git writes them. The remotes' configuration is mgit.ops.remotes."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mgit.context import Context
from mgit.errors import BadInputError, NonFastForwardError, RemoteError
from mgit.graph.ids import object_id, ref_name
from mgit.graph.walks import ancestors, is_ancestor
from mgit.ops import branch_merge, checkout, opening, remotes
from mgit.ops.remotes import PARTIAL_KEY, TRACKING
from mgit.progress import byte_progress
from mgit.remote.backend import SKETCHES, Backend
from mgit.remote.open import is_url, open_backend
from mgit.remote.transfer import Transfer, chunks_of, fetch_chunks, fetch_graph, plan_push
from mgit.remote.transfer import push as send
from mgit.worktree.cost import checkout_budget
from mgit.worktree.sparse import make_patterns

if TYPE_CHECKING:
    from mgit.ops.threeway import BranchMerge


def push(
    ctx: Context,
    remote: str = "origin",
    branch: str | None = None,
    force: bool = False,
    *,
    all_branches: bool = False,
    tags: bool = False,
    delete: bool = False,
) -> Transfer:
    """Send refs and what they need to a remote; the remote's refs move by compare-and-swap.

    Chunks go first, then git objects, then the refs, so an interrupted push leaves the
    remote's refs as they were. Of several refs, each is pushed on its own: the rejected ones
    (not a fast-forward, a tag that exists there) are named after the others are pushed.

    Args:
        remote: The configured remote's name.
        branch: A branch (default, or ``HEAD``: the current one) or a tag's name; any other
            name (a commit id) is refused.
        force: Move the remote's ref even when that is not a fast-forward.
        all_branches: Every local branch (``--all``).
        tags: Every tag (an annotated one as its tag object), with ``branch`` if named.
        delete: Delete the remote's branch or tag ``branch`` instead (not the remote's default
            branch unless ``force``).

    Returns:
        What was sent and what was already there, and each ref moved (old, new).

    Raises:
        BadInputError: An unknown remote, or a name that is no branch or tag.
        NonFastForwardError: The remote's ref is not an ancestor (without ``force``); with
            several refs, raised after the others are pushed.
        RemoteError: The remote cannot be reached or refuses.
        AuthError: The remote refuses the credentials.
    """
    if delete:
        return _push_delete(ctx, remote, branch, force)
    wanted = _refs_to_push(ctx, branch, all_branches, tags)
    backend = remotes.backend(ctx, remote, create=True)
    report, rejected, pushed = Transfer(), [], []
    try:
        with ctx.lock:
            for ref, value in wanted:
                try:
                    plan = plan_push(ctx.graph, ctx.store, backend, value, ref, force)
                except NonFastForwardError as exc:
                    if len(wanted) == 1:
                        raise
                    rejected.append(f"{ref} ({exc})")
                    continue
                with byte_progress("push", plan.chunk_bytes) as bar:
                    sent = send(ctx.graph, ctx.store, backend, plan, bar)
                _gather(report, sent)
                pushed.append(ref)
                track(ctx, remote, {ref: value}, "push")
                if ref.startswith("refs/heads/"):
                    _push_sketches(ctx, backend, value, report)
    finally:
        backend.close()  # a working repository as the remote: release its lock, even after a failure
    if rejected:
        done = f"pushed {', '.join(pushed)}" if pushed else "nothing was pushed"
        raise NonFastForwardError(f"rejected {'; '.join(rejected)}; {done}")
    return report


def _refs_to_push(ctx: Context, branch: str | None, all_branches: bool, tags: bool) -> list[tuple[str, str]]:
    """(remote ref, the id it should hold) for each ref a push sends."""
    if all_branches and (branch is not None or tags):
        raise BadInputError("push --all sends every branch: name no branch, and push --tags apart")
    if all_branches:
        heads = ctx.refs.branches()
        if not heads:
            raise BadInputError("push --all: there is no branch yet (make a first commit)")
        return [(f"refs/heads/{b}", c) for b, c in sorted(heads.items())]
    wanted = []
    if branch is not None or not tags:
        branch = ctx.refs.current_branch() if branch in (None, "HEAD") else branch  # git's `push origin HEAD`
        if branch is None:
            raise BadInputError("HEAD is detached: name the branch to push")
        heads, tag_refs = ctx.refs.branches(), ctx.refs.tag_refs()
        if branch in heads:
            wanted.append((f"refs/heads/{branch}", heads[branch]))
        elif branch in tag_refs:
            wanted.append((f"refs/tags/{branch}", tag_refs[branch]))
        else:  # git: "src refspec does not match any"; a commit id would make a branch of that name
            raise BadInputError(
                f"{branch!r} is not a local branch or tag: nothing was pushed "
                f"(to push a commit, make a branch of it: `mgit branch NAME {branch}`)"
            )
    if tags:
        wanted += [(f"refs/tags/{t}", v) for t, v in sorted(ctx.refs.tag_refs().items())]
    return list(dict(wanted).items())


def _gather(report: Transfer, sent: Transfer) -> None:
    """Add what one ref's push moved to the whole push's report."""
    report.add(sent.objects, sent.chunks, sent.bytes)
    report.present_objects += sent.present_objects
    report.present_chunks += sent.present_chunks
    report.refs.update(sent.refs)


def _push_delete(ctx: Context, remote: str, name: str | None, force: bool) -> Transfer:
    """``push --delete NAME``: the remote's branch (else tag) NAME goes, by compare-and-swap
    from the value just read; its remote-tracking branch here goes too, as git's."""
    if name is None:
        raise BadInputError("push --delete needs the branch or tag to delete")
    backend = remotes.backend(ctx, remote)
    report = Transfer()
    try:
        with ctx.lock:
            theirs = backend.refs()
            ref = next((r for r in (f"refs/heads/{name}", f"refs/tags/{name}", name) if r in theirs), None)
            if ref is None:
                raise RemoteError(f"cannot delete {name!r}: the remote {remote!r} has no such branch or tag")
            if ref == f"refs/heads/{backend.head()}" and not force:
                raise BadInputError(
                    f"refusing to delete {name}, the remote's default branch (a clone checks it out); "
                    f"push --delete --force {name} deletes it anyway"
                )
            backend.check_push(ref)
            if not backend.swap_ref(ref, theirs[ref], None):
                raise NonFastForwardError(f"the remote's {ref} moved while deleting it; nothing was deleted")
            report.deleted[ref] = theirs[ref]
            untrack(ctx, remote, ref)
    finally:
        backend.close()
    return report


def untrack(ctx: Context, remote: str, ref: str) -> None:
    """Forget the remote-tracking branch of a branch the remote no longer has (ref and reflog)."""
    local = remotes.tracking_ref(remote, ref)
    if local is None or not local.startswith(TRACKING):
        return
    ctx.graph.repo.refs.remove_if_equals(ref_name(local.encode()), None)
    (ctx.git_dir / "logs" / local).unlink(missing_ok=True)


def _push_sketches(ctx: Context, backend: Backend, commit: str, report: Transfer) -> None:
    """Send the sketches (mgit.ops.sketch) of ``commit`` and its ancestors that the remote lacks
    or holds otherwise: derived data travels with what it was derived from. A partial clone
    sends only those whose chunks it holds."""
    local = {
        f"{SKETCHES}{name.decode()}": sha.decode()
        for name, sha in ctx.graph.repo.refs.as_dict(ref_name(SKETCHES.encode())).items()
    }
    if not local:
        return
    theirs = backend.refs()
    history = ancestors(ctx.graph, commit)
    for ref, sketch in sorted(local.items()):
        if ref.removeprefix(SKETCHES) not in history or theirs.get(ref) == sketch:
            continue
        if not all(ctx.store.has(c) for c in chunks_of(ctx.graph, [sketch])):
            continue
        plan = plan_push(ctx.graph, ctx.store, backend, sketch, ref, force=True)
        sent = send(ctx.graph, ctx.store, backend, plan)
        report.add(sent.objects, sent.chunks, sent.bytes)


def fetch(ctx: Context, remote: str = "origin", chunks: str | None = None, *, action: str = "fetch") -> Transfer:
    """Receive every branch and tag of a remote, with their chunks (a partial clone: graph only).

    Graph objects are checked against their ids and chunks decoded and verified before any
    ref moves; the remote's branches land as remote-tracking branches (``origin/main``).

    Args:
        remote: The configured remote's name.
        chunks: Instead, fill in every chunk of this revision (a partial clone's).
        action: The command named in the tracking branches' reflogs (``pull``, ``clone``: as git).

    Returns:
        What was received and what was already here, and each ref moved (old, new).

    Raises:
        BadInputError: An unknown remote.
        RemoteError: The remote cannot be reached, refuses, or sends what fails verification.
        AuthError: The remote refuses the credentials.
    """
    backend = remotes.backend(ctx, remote)
    report = Transfer()
    with ctx.writing():
        if chunks is not None:
            needed = chunks_of(ctx.graph, [ctx.refs.resolve(chunks)])
            with byte_progress("fetch", 0) as bar:
                fetch_chunks(ctx.store, backend, needed, report, bar)
            return report
        complete = {sha.decode() for sha in ctx.graph.repo.refs.as_dict().values()}  # chunks all here
        refs = backend.refs()
        fetch_graph(ctx.graph, backend, set(refs.values()), report)
        for ref, sha in refs.items():
            kind = ctx.graph.read(sha).type_name
            if kind != b"commit" and not (kind == b"tag" and ref.startswith("refs/tags/")):
                raise RemoteError(f"the remote's {ref} names a {kind.decode()}, not a commit (a damaged remote)")
        if remotes.setting(ctx, remote, PARTIAL_KEY) != "true":
            with byte_progress("fetch", 0) as bar:
                needed = chunks_of(ctx.graph, set(refs.values()), stop=complete)
                fetch_chunks(ctx.store, backend, needed, report, bar)
        ctx.store.seal()  # chunks are visible before any ref names them
        held = {k.decode(): v.decode() for k, v in ctx.graph.repo.refs.as_dict().items()}
        before = {r: held.get(remotes.tracking_ref(remote, r) or "") for r in refs}  # old values: what moved
        track(ctx, remote, refs, action)
        report.refs = {r: (before[r], c) for r, c in refs.items() if not r.startswith(SKETCHES)}
    return report


def track(ctx: Context, remote: str, refs: dict[str, str], action: str) -> None:
    """Remote-tracking refs (refs/remotes/NAME/BRANCH), each move logged in its reflog as
    git logs it; tags as local tags unless present (git keeps no reflog for tags); sketches
    likewise (refs/mgit/sketches/COMMIT)."""
    held = ctx.graph.repo.refs.as_dict(ref_name(TRACKING.encode()))
    for ref, commit in refs.items():
        if ref.startswith("refs/heads/"):
            name = f"{TRACKING}{remote}/{ref.removeprefix('refs/heads/')}".encode()
            old = held.get(ref_name(name.removeprefix(TRACKING.encode())))
            if old == commit.encode():
                continue  # unchanged: no reflog entry, as in git
            message = _tracking_message(ctx, action, old.decode() if old else None, commit)
            ctx.graph.repo.refs.set_if_equals(
                ref_name(name), None, object_id(commit.encode()), committer=ctx.identity(), message=message.encode()
            )
        elif ref.startswith(("refs/tags/", SKETCHES)) and ref_name(ref.encode()) not in ctx.graph.repo.refs:
            ctx.graph.repo.refs[ref_name(ref.encode())] = object_id(commit.encode())  # a sketch made here wins


def _tracking_message(ctx: Context, action: str, old: str | None, new: str) -> str:
    """A tracking branch's reflog message, as git writes it: ``update by push``, ``clone: from
    URL``, else ``ACTION: storing head`` (new), ``fast-forward`` or ``forced-update``."""
    if action == "push":
        return "update by push"
    if action.startswith("clone:"):
        return action
    if old is None:
        how = "storing head"
    else:
        how = "fast-forward" if is_ancestor(ctx.graph, old, new) else "forced-update"
    return f"{action}: {how}"


@dataclass
class Pulled:
    """What ``pull`` did: what its fetch received, and its merge of the remote's branch."""

    fetched: Transfer
    merge: BranchMerge


def pull(ctx: Context, remote: str = "origin", branch: str | None = None, ff_only: bool = False) -> Pulled:
    """Fetch, then merge the remote's branch into the current branch as ``merge`` does.

    A fast-forward when it can, else a three-way merge committed on the current branch
    (mgit.ops.branch_merge). On a conflict the fetch is kept and nothing is merged.

    Args:
        remote: The configured remote's name.
        branch: The remote's branch (default: the current branch's name).
        ff_only: Refuse anything but a fast-forward (checked under the same lock as the merge).

    Returns:
        What the fetch received, and the merge (fast-forward, three-way, or up to date).

    Raises:
        BadInputError: HEAD is detached, or an unknown remote.
        MergeConflictError: Both sides changed the same tensor or line differently.
        NonFastForwardError: Not a fast-forward, with ``ff_only``.
        DirtyWorktreeError: Uncommitted changes the merge would overwrite.
        RemoteError: The remote cannot be reached, or lacks ``branch``.
    """
    current = ctx.refs.current_branch()
    if current is None:
        raise BadInputError("HEAD is detached: check out a branch to pull into")
    fetched = fetch(ctx, remote, action="pull")
    name = branch or current
    theirs_ref = f"{TRACKING}{remote}/{name}"
    if ref_name(theirs_ref.encode()) not in ctx.graph.repo.refs:
        raise RemoteError(f"the remote {remote!r} has no branch {name!r}")
    url = remotes.remotes(ctx).get(remote, remote)
    message = f"Merge branch '{name}' of {url}" + (f" into {current}" if current not in ("main", "master") else "")
    ff = "only" if ff_only else "auto"
    merged = branch_merge.merge_branch(ctx, f"{remote}/{name}", message=message, ff=ff, op="pull")
    return Pulled(fetched, merged)


def clone(
    url: str,
    path: str | os.PathLike[str],
    partial: bool = False,
    branch: str | None = None,
    token_file: str | None = None,
    include: Iterable[str] = (),
    exclude: Iterable[str] = (),
    budget: str | int | None = None,
) -> Context:
    """A new repository at ``path`` with ``url`` as remote ``origin``, its branch checked out.

    On any failure no half-made clone is left.

    Args: as :meth:`mgit.repo.Repository.clone`'s, which documents them and the errors.

    Returns:
        The new repository's context, open.
    """
    dest = Path(path)
    if dest.exists() and any(dest.iterdir()):
        raise BadInputError(f"{dest} exists and is not empty; clone into a new directory")
    if budget is not None:  # checked before anything travels
        if not partial:
            raise BadInputError("a full clone fetches every chunk: a budget needs --partial")
        checkout_budget(budget)
    if include or exclude:
        make_patterns(
            [include] if isinstance(include, str) else include, [exclude] if isinstance(exclude, str) else exclude
        )
    backend = open_backend(url if is_url(url) else str(Path(url).resolve()), token_file)
    refs = backend.refs()
    branch = branch or backend.head() or "main"
    if f"refs/heads/{branch}" not in refs:
        raise RemoteError(f"the remote has no branch {branch!r} (it has: {_names(refs)})")
    created = not dest.exists()
    ctx = opening.init(dest)
    try:
        remotes.remote_add(ctx, "origin", url, token_file)
        if partial:
            config = ctx.graph.repo.get_config()
            config.set((b"remote", b"origin"), PARTIAL_KEY.encode(), b"true")
            config.write_to_path()
            ctx.promisor = remotes.open_promisor(ctx)
        ctx.cloned = fetch(ctx, "origin", action=f"clone: from {remotes.remotes(ctx)['origin']}")
        commit = refs[f"refs/heads/{branch}"]
        ctx.refs.create_branch(branch, commit)
        ctx.refs.point_head_at_branch(branch)
        with ctx.reading():
            checkout.checkout(ctx, branch, force=True, include=include, exclude=exclude, budget=budget)
    except BaseException:
        ctx.close()
        shutil.rmtree(dest / ".mgit", ignore_errors=True)  # no half-cloned repository
        if created:
            shutil.rmtree(dest, ignore_errors=True)
        raise
    return ctx


def _names(refs: dict[str, str]) -> str:
    return ", ".join(r.removeprefix("refs/heads/") for r in refs if r.startswith("refs/heads/")) or "no branches"
