"""The remotes: their configuration, opening their backends, the tracking refs that name
their branches here, a partial clone's promisor, and fetching lost chunks from them.

Remotes live in ``.mgit/config`` as ``[remote "NAME"]`` with ``url``, ``tokenfile`` and, for
the remote a partial clone came from, ``partial = true``: chunks missing here are then
fetched from it when a command needs them, and kept (mgit.remote.promisor). Checkout,
maintenance and sync use this module; it uses no other operation.
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from mgit.context import Context
from mgit.errors import BadInputError, MgitError, RemoteError
from mgit.graph.ids import ref_name
from mgit.graph.refs import check_ref_name
from mgit.remote.open import is_url, open_backend

if TYPE_CHECKING:  # the transfer machinery is imported when a remote is used, not when a repository opens
    from mgit.remote.backend import Backend
    from mgit.remote.promisor import Promisor

TRACKING = "refs/remotes/"
PARTIAL_KEY = "partial"  # ``[remote "NAME"] partial = true``: the remote a partial clone fetches from


def remotes(ctx: Context) -> dict[str, str]:
    """The configured remotes, as ``git remote -v`` lists them.

    Returns:
        Remote name → URL.
    """
    config = ctx.graph.repo.get_config()
    out = {}
    for section in config.sections():
        if len(section) == 2 and section[0] == b"remote":
            try:
                out[section[1].decode()] = config.get(section, b"url").decode()
            except KeyError:
                continue
    return out


def remote_add(ctx: Context, name: str, url: str, token_file: str | None = None) -> None:
    """Record a remote, as ``git remote add`` does.

    Written under the lock: a lock holder removes any git lock file it finds (mgit.lock),
    which would be this write's own ``config.lock`` if it ran without it.

    Args:
        name: The remote's name (``origin``).
        url: A directory (a remote's, or another repository), an ``http(s)://`` or ``s3://`` URL.
        token_file: A file holding the bearer token for an HTTP remote.

    Raises:
        BadInputError: A remote of that name exists.
    """
    check_ref_name(name, "remote")
    with ctx.lock:
        if name in remotes(ctx):
            raise BadInputError(f"remote {name!r} already exists")
        if not is_url(url):
            url = str(Path(url).expanduser().resolve())
        config = ctx.graph.repo.get_config()
        config.set((b"remote", name.encode()), b"url", url.encode())
        if token_file:
            tokens = str(Path(token_file).expanduser().resolve()).encode()
            config.set((b"remote", name.encode()), b"tokenfile", tokens)
        config.write_to_path()


def remote_remove(ctx: Context, name: str) -> None:
    """Forget a remote and its remote-tracking branches (under the lock, as :func:`remote_add`).

    Args:
        name: The remote.

    Raises:
        BadInputError: No remote of that name.
    """
    with ctx.lock:
        if name not in remotes(ctx):
            raise BadInputError(f"no remote named {name!r}")
        config = ctx.graph.repo.get_config()
        del config[(b"remote", name.encode())]
        config.write_to_path()
        for ref in [r for r in ctx.graph.repo.refs.allkeys() if r.startswith(f"{TRACKING}{name}/".encode())]:
            del ctx.graph.repo.refs[ref]
        shutil.rmtree(ctx.git_dir / "logs" / f"{TRACKING}{name}", ignore_errors=True)  # their reflogs too, as git


def setting(ctx: Context, name: str, key: str) -> str | None:
    """A remote's configured ``key`` (url, tokenfile, partial), None when unset."""
    try:
        return ctx.graph.repo.get_config().get((b"remote", name.encode()), key.encode()).decode()
    except KeyError:
        return None


def backend(ctx: Context, name: str, create: bool = False) -> Backend:
    """A configured remote's backend, opened, to send and receive objects and refs.

    Args:
        name: The remote.
        create: A directory remote may be made where there is none.

    Returns:
        The backend (directory, working repository, HTTP, S3).

    Raises:
        BadInputError: No remote of that name.
        RemoteError: The remote cannot be opened.
    """
    url = setting(ctx, name, "url")
    if url is None:
        known = ", ".join(remotes(ctx)) or "none"
        raise BadInputError(f"no remote named {name!r} (known: {known}); add one with `mgit remote add`")
    return open_backend(url, setting(ctx, name, "tokenfile"), create=create)


def tracking_ref(remote: str, ref: str) -> str | None:
    """The local ref a remote's ref is kept as, as git's default refspecs keep it.

    Args:
        remote: The remote's name.
        ref: A full ref of the remote.

    Returns:
        Its branches under ``refs/remotes/REMOTE/``, its tags as local tags; None for
        anything else.
    """
    if ref.startswith("refs/heads/"):
        return f"{TRACKING}{remote}/{ref.removeprefix('refs/heads/')}"
    return ref if ref.startswith("refs/tags/") else None


def remote_branch_for(ctx: Context, name: str) -> str | None:
    """The remote's branch that ``checkout NAME`` makes a local branch from, as git guesses.

    Args:
        name: A name that is no local revision.

    Returns:
        ``refs/remotes/R/name`` when exactly one remote R has that branch, else None.
    """
    if name in ctx.refs.branches() or name in ctx.refs.tags():
        return None
    try:
        ctx.refs.resolve(name)
        return None
    except MgitError:
        pass
    found = [
        f"{TRACKING}{r}/{name}"
        for r in remotes(ctx)
        if ref_name(f"{TRACKING}{r}/{name}".encode()) in ctx.graph.repo.refs
    ]
    return found[0] if len(found) == 1 else None


def recover_from_remotes(ctx: Context, wanted: set[str]) -> dict[str, set[str]]:
    """Fetch what each remote holds of ``wanted`` (verified); an unreachable remote is skipped."""
    from mgit.progress import Bar
    from mgit.remote.transfer import Transfer, fetch_chunks, remote_has

    got: dict[str, set[str]] = {}
    for name in sorted(remotes(ctx)):
        todo = sorted(wanted - {c for found in got.values() for c in found})
        if not todo:
            break
        try:
            source = backend(ctx, name)
            present = [k.removeprefix("chunks/") for k in remote_has(source, [f"chunks/{c}" for c in todo])]
            fetch_chunks(ctx.store, source, present, Transfer(), Bar())
        except (RemoteError, OSError):
            continue
        got[name] = {c for c in present if ctx.store.has(c, refresh=False)}
    return got


def open_promisor(ctx: Context) -> Promisor | None:
    """In a partial clone, the remote it came from, composed into the store: chunks missing
    here are fetched from it (None: not a partial clone)."""
    name = next((n for n in remotes(ctx) if setting(ctx, n, PARTIAL_KEY) == "true"), None)
    if name is None:
        return None
    from mgit.remote.promisor import Promisor

    return Promisor(name, functools.partial(backend, ctx, name), ctx.store).attach()
