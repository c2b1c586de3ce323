"""Repository operations with remotes: remote add/remove, push, fetch, pull, clone, and
opening a partial clone's promisor. A mixin of :class:`mgit.repo.Repository`.

Remotes live in ``.mgit/config`` as ``[remote "NAME"]`` with ``url``, ``tokenfile`` and, for
the remote a partial clone came from, ``partial = true``: chunks missing here are then
fetched from it when a command needs them, and kept (mgit.remote.promisor).
"""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from mgit.errors import BadInputError, MgitError, NonFastForwardError, RemoteError
from mgit.graph.refs import check_ref_name
from mgit.progress import Bar, byte_progress
from mgit.remote.backend import Backend
from mgit.remote.open import is_url, open_backend
from mgit.remote.promisor import PARTIAL_KEY, Promisor
from mgit.remote.transfer import (
    Transfer,
    chunks_of,
    fetch_chunks,
    fetch_graph,
    is_ancestor,
    plan_push,
    push,
    remote_has,
)
from mgit.worktree.cost import checkout_budget
from mgit.worktree.sparse import make_patterns

if TYPE_CHECKING:
    from mgit.repo import Repository

TRACKING = "refs/remotes/"


class Sync:
    """Remote operations (mixed into Repository)."""

    # -- configuration --------------------------------------------------------------------

    def remotes(self: Repository) -> dict[str, str]:
        """Remote name → URL."""
        config = self.graph.repo.get_config()
        out = {}
        for section in config.sections():
            if len(section) == 2 and section[0] == b"remote":
                try:
                    out[section[1].decode()] = config.get(section, b"url").decode()
                except KeyError:
                    continue
        return out

    def remote_add(self: Repository, name: str, url: str, token_file: str | None = None) -> None:
        """Record a remote, under the lock: a lock holder removes any git lock file it finds
        (mgit.lock), which would be this write's own ``config.lock`` if it ran without it."""
        check_ref_name(name, "remote")
        with self.lock:
            if name in self.remotes():
                raise BadInputError(f"remote {name!r} already exists")
            if not is_url(url):
                url = str(Path(url).expanduser().resolve())
            config = self.graph.repo.get_config()
            config.set((b"remote", name.encode()), b"url", url.encode())
            if token_file:
                tokens = str(Path(token_file).expanduser().resolve()).encode()
                config.set((b"remote", name.encode()), b"tokenfile", tokens)
            config.write_to_path()

    def remote_remove(self: Repository, name: str) -> None:
        """Forget a remote and its tracking refs, under the lock (as remote_add)."""
        with self.lock:
            if name not in self.remotes():
                raise BadInputError(f"no remote named {name!r}")
            config = self.graph.repo.get_config()
            del config[(b"remote", name.encode())]
            config.write_to_path()
            for ref in [r for r in self.graph.repo.refs.allkeys() if r.startswith(f"{TRACKING}{name}/".encode())]:
                del self.graph.repo.refs[ref]
            shutil.rmtree(self.git_dir / "logs" / f"{TRACKING}{name}", ignore_errors=True)  # their reflogs too, as git

    def _remote_setting(self: Repository, name: str, key: str) -> str | None:
        try:
            return self.graph.repo.get_config().get((b"remote", name.encode()), key.encode()).decode()
        except KeyError:
            return None

    def _backend(self: Repository, name: str, create: bool = False) -> Backend:
        url = self._remote_setting(name, "url")
        if url is None:
            known = ", ".join(self.remotes()) or "none"
            raise BadInputError(f"no remote named {name!r} (known: {known}); add one with `mgit remote add`")
        return open_backend(url, self._remote_setting(name, "tokenfile"), create=create)

    # -- push / fetch / pull --------------------------------------------------------------

    def push(self: Repository, remote: str = "origin", branch: str | None = None, force: bool = False) -> Transfer:
        """Send ``branch`` (default: the current one) and what it needs; move the remote's branch."""
        branch = branch or self.refs.current_branch()
        if branch is None:
            raise BadInputError("HEAD is detached: name the branch to push")
        tags = self.refs.tags()
        ref = f"refs/tags/{branch}" if branch in tags and branch not in self.refs.branches() else f"refs/heads/{branch}"
        commit = self.refs.resolve(branch)
        backend = self._backend(remote, create=True)
        try:
            with self.lock:
                plan = plan_push(self.graph, self.store, backend, commit, ref, force)
                with byte_progress("push", plan.chunk_bytes) as bar:
                    report = push(self.graph, self.store, backend, plan, bar)
                self._track(remote, {ref: commit}, "push")
        finally:
            backend.close()  # a working repository as the remote: release its lock, even after a failure
        return report

    def fetch(
        self: Repository, remote: str = "origin", chunks: str | None = None, *, action: str = "fetch"
    ) -> Transfer:
        """Every branch and tag of the remote, with their chunks (a partial clone: graph only).
        ``chunks``: instead, fill in every chunk of that revision (a partial clone's).
        ``action`` names the command in the tracking branches' reflogs (pull, clone: as git)."""
        backend = self._backend(remote)
        report = Transfer()
        with self._writing():
            if chunks is not None:
                needed = chunks_of(self.graph, [self.refs.resolve(chunks)])
                with byte_progress("fetch", 0) as bar:
                    fetch_chunks(self.store, backend, needed, report, bar)
                return report
            complete = {sha.decode() for sha in self.graph.repo.refs.as_dict().values()}  # chunks all here
            refs = backend.refs()
            fetch_graph(self.graph, backend, set(refs.values()), report)
            for ref, sha in refs.items():
                kind = self.graph.read(sha).type_name
                if kind != b"commit" and not (kind == b"tag" and ref.startswith("refs/tags/")):
                    raise RemoteError(f"the remote's {ref} names a {kind.decode()}, not a commit (a damaged remote)")
            if self._remote_setting(remote, PARTIAL_KEY) != "true":
                with byte_progress("fetch", 0) as bar:
                    needed = chunks_of(self.graph, set(refs.values()), stop=complete)
                    fetch_chunks(self.store, backend, needed, report, bar)
            self.store.seal()  # chunks are visible before any ref names them
            held = {k.decode(): v.decode() for k, v in self.graph.repo.refs.as_dict().items()}
            before = {r: held.get(self.tracking_ref(remote, r) or "") for r in refs}  # old values: what moved
            self._track(remote, refs, action)
            report.refs = {r: (before[r], c) for r, c in refs.items()}
        return report

    def _track(self: Repository, remote: str, refs: dict[str, str], action: str) -> None:
        """Remote-tracking refs (refs/remotes/NAME/BRANCH), each move logged in its reflog as
        git logs it; tags as local tags unless present (git keeps no reflog for tags)."""
        held = self.graph.repo.refs.as_dict(TRACKING.encode())
        for ref, commit in refs.items():
            if ref.startswith("refs/heads/"):
                name = f"{TRACKING}{remote}/{ref.removeprefix('refs/heads/')}".encode()
                old = held.get(name.removeprefix(TRACKING.encode()))
                if old == commit.encode():
                    continue  # unchanged: no reflog entry, as in git
                message = _tracking_message(self, action, old.decode() if old else None, commit)
                self.graph.repo.refs.set_if_equals(
                    name, None, commit.encode(), committer=self.identity(), message=message.encode()
                )
            elif ref.startswith("refs/tags/") and ref.encode() not in self.graph.repo.refs:
                self.graph.repo.refs[ref.encode()] = commit.encode()

    @staticmethod
    def tracking_ref(remote: str, ref: str) -> str | None:
        """The local ref a remote's ref is kept as: its branches under refs/remotes/REMOTE/,
        its tags as local tags."""
        if ref.startswith("refs/heads/"):
            return f"{TRACKING}{remote}/{ref.removeprefix('refs/heads/')}"
        return ref if ref.startswith("refs/tags/") else None

    def remote_branch_for(self: Repository, name: str) -> str | None:
        """``refs/remotes/R/name`` when ``name`` is no local revision and exactly one remote R has it."""
        if name in self.refs.branches() or name in self.refs.tags():
            return None
        try:
            self.refs.resolve(name)
            return None
        except MgitError:
            pass
        found = [f"{TRACKING}{r}/{name}" for r in self.remotes()
                 if f"{TRACKING}{r}/{name}".encode() in self.graph.repo.refs]  # fmt: skip
        return found[0] if len(found) == 1 else None

    def pull(self: Repository, remote: str = "origin", branch: str | None = None) -> Transfer:
        """Fetch, then fast-forward the current branch to the remote's ``branch`` (default: same name)."""
        current = self.refs.current_branch()
        if current is None:
            raise BadInputError("HEAD is detached: check out a branch to pull into")
        report = self.fetch(remote, action="pull")
        theirs_ref = f"{TRACKING}{remote}/{branch or current}"
        try:
            theirs = self.graph.repo.refs[theirs_ref.encode()].decode()
        except KeyError:
            raise RemoteError(f"the remote {remote!r} has no branch {branch or current!r}") from None
        ours = self.refs.head()
        if ours == theirs or (ours is not None and is_ancestor(self.graph, theirs, ours)):
            return report  # up to date (or ahead)
        if ours is not None and not is_ancestor(self.graph, ours, theirs):
            raise NonFastForwardError(
                f"{current} and {remote}/{branch or current} have diverged; merge them with `mgit merge` "
                f"(e.g. mgit merge {remote}/{branch or current}), then push"
            )
        self.checkout(theirs_ref)  # updates the working tree (refuses to overwrite local changes)
        self.refs.point_head_at_branch(current)
        self.refs.advance_head(ours, theirs, f"pull: fast-forward to {remote}/{branch or current}")
        return report

    @classmethod
    def clone(
        cls,
        url: str,
        path: str | os.PathLike[str],
        partial: bool = False,
        branch: str | None = None,
        token_file: str | None = None,
        include: Iterable[str] = (),
        exclude: Iterable[str] = (),
        budget: str | int | None = None,
    ) -> Repository:
        """A new repository at ``path`` with ``url`` as remote ``origin``, its branches fetched
        and ``branch`` (default: the remote's HEAD) checked out. ``partial``: the graph only;
        chunks are fetched when a command needs them. ``include``/``exclude`` make the checkout
        sparse (a partial clone then fetches only the selected tensors' chunks); ``budget``
        refuses a checkout that would read and fetch more (and then no clone is left)."""
        dest = Path(path)
        if dest.exists() and any(dest.iterdir()):
            raise BadInputError(f"{dest} exists and is not empty; clone into a new directory")
        if budget is not None:  # checked before anything travels
            if not partial:
                raise BadInputError("a full clone fetches every chunk: a budget needs --partial")
            checkout_budget(budget)
        if include or exclude:
            make_patterns([include] if isinstance(include, str) else include,
                          [exclude] if isinstance(exclude, str) else exclude)  # fmt: skip
        backend = open_backend(url if is_url(url) else str(Path(url).resolve()), token_file)
        refs = backend.refs()
        branch = branch or backend.head() or "main"
        if f"refs/heads/{branch}" not in refs:
            raise RemoteError(f"the remote has no branch {branch!r} (it has: {_names(refs)})")
        created = not dest.exists()
        repo = cls.init(dest)
        try:
            repo.remote_add("origin", url, token_file)
            if partial:
                config = repo.graph.repo.get_config()
                config.set((b"remote", b"origin"), PARTIAL_KEY.encode(), b"true")
                config.write_to_path()
                repo.promisor = repo._open_promisor()
            repo.cloned = repo.fetch("origin", action=f"clone: from {repo.remotes()['origin']}")
            commit = refs[f"refs/heads/{branch}"]
            repo.refs.create_branch(branch, commit)
            repo.refs.point_head_at_branch(branch)
            repo.checkout(branch, force=True, include=include, exclude=exclude, budget=budget)
        except BaseException:
            repo.close()
            shutil.rmtree(dest / ".mgit", ignore_errors=True)  # no half-cloned repository
            if created:
                shutil.rmtree(dest, ignore_errors=True)
            raise
        return repo

    def _recover_from_remotes(self: Repository, wanted: set[str]) -> dict[str, set[str]]:
        """Fetch what each remote holds of ``wanted`` (verified); an unreachable remote is skipped."""
        got: dict[str, set[str]] = {}
        for name in sorted(self.remotes()):
            todo = sorted(wanted - {c for found in got.values() for c in found})
            if not todo:
                break
            try:
                backend = self._backend(name)
                present = [k.removeprefix("chunks/") for k in remote_has(backend, [f"chunks/{c}" for c in todo])]
                fetch_chunks(self.store, backend, present, Transfer(), Bar())
            except (RemoteError, OSError):
                continue
            got[name] = {c for c in present if self.store.has(c, refresh=False)}
        return got

    # -- partial clones ---------------------------------------------------------------------

    @property
    def is_partial(self: Repository) -> bool:
        """A partial clone: chunks may be missing here and are fetched when needed."""
        return self.promisor is not None

    @property
    def fetched(self: Repository) -> Transfer:
        """What this object's reads fetched on demand, checkouts within a budget included (a
        partial clone's; empty in a full clone)."""
        return self.promisor.fetched if self.promisor is not None else Transfer()

    def _open_promisor(self: Repository) -> Promisor | None:
        """In a partial clone, the remote it came from, composed into the store: chunks missing
        here are fetched from it (None: not a partial clone)."""
        name = next((n for n in self.remotes() if self._remote_setting(n, PARTIAL_KEY) == "true"), None)
        if name is None:
            return None
        return Promisor(name, functools.partial(self._backend, name), self.store).attach()


def _tracking_message(repo: Repository, action: str, old: str | None, new: str) -> str:
    """A tracking branch's reflog message, as git writes it: ``update by push``, ``clone: from
    URL``, else ``ACTION: storing head`` (new), ``fast-forward`` or ``forced-update``."""
    if action == "push":
        return "update by push"
    if action.startswith("clone:"):
        return action
    if old is None:
        how = "storing head"
    else:
        how = "fast-forward" if is_ancestor(repo.graph, old, new) else "forced-update"
    return f"{action}: {how}"


def _names(refs: dict[str, str]) -> str:
    return ", ".join(r.removeprefix("refs/heads/") for r in refs if r.startswith("refs/heads/")) or "no branches"
