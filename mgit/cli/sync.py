"""Commands that talk to other repositories: `remote` (add, remove), `push`, `fetch`, `pull`,
`clone`, and `serve` (the HTTP server other repositories talk to)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

from mgit.cli.branch_merge import conflicts_shown
from mgit.cli.complete import complete_branch, complete_remote, complete_rev
from mgit.cli.state import CliState, pass_state
from mgit.cli.views import Printout
from mgit.cli.views import branch_merge as merge_views
from mgit.lazy import lazy_module
from mgit.repo import Repository

if TYPE_CHECKING:
    from mgit.cli.views import sync as views
    from mgit.remote.transfer import Transfer
else:  # rendering (rich) is imported when the command prints
    views = lazy_module("mgit.cli.views.sync")


@click.group("remote", invoke_without_command=True)
@click.option("-v", "--verbose", is_flag=True, help="With each remote its URL, for fetch and push (as git).")
@click.option("--json", "as_json", is_flag=True, help="List as JSON (schema mgit.remote/1).")
@click.pass_context
def cmd_remote(ctx: click.Context, verbose: bool, as_json: bool) -> None:
    """List remotes; `remote add NAME URL`, `remote remove NAME`."""
    state = ctx.ensure_object(CliState)
    if ctx.invoked_subcommand is None and as_json:
        state.echo_json(views.remote_json(state.repo.remotes()))
    elif ctx.invoked_subcommand is None and verbose:
        for line in views.remote_verbose(state.repo.remotes()):
            click.echo(line)
    elif ctx.invoked_subcommand is None:
        state.emit(views.remote_list(state.repo.remotes()))


@cmd_remote.command("add")
@click.argument("name")
@click.argument("url")
@click.option("--token-file", type=click.Path(dir_okay=False), help="File holding the HTTP bearer token.")
@pass_state
def cmd_remote_add(state: CliState, name: str, url: str, token_file: str | None) -> None:
    """Add a remote: a directory, http(s)://host:port/repo or s3://bucket/prefix."""
    state.repo.remote_add(name, url, token_file)


@cmd_remote.command("remove")
@click.argument("name", shell_complete=complete_remote)
@pass_state
def cmd_remote_remove(state: CliState, name: str) -> None:
    """Forget a remote (and its remote-tracking branches)."""
    state.repo.remote_remove(name)


@click.command("push")
@click.argument("remote_name", metavar="[REMOTE]", default="origin", shell_complete=complete_remote)
@click.argument("branch", required=False, shell_complete=complete_branch)
@click.option("-f", "--force", is_flag=True, help="Move the remote branch even if that discards its commits.")
@click.option("--all", "all_branches", is_flag=True, help="Push every local branch.")
@click.option("--tags", is_flag=True, help="Push every tag (with BRANCH, if named).")
@click.option("-d", "--delete", is_flag=True, help="Delete the remote's branch (or tag) BRANCH.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (schema mgit.transfer/1).")
@pass_state
def cmd_push(
    state: CliState,
    remote_name: str,
    branch: str | None,
    force: bool,
    all_branches: bool,
    tags: bool,
    delete: bool,
    as_json: bool,
) -> None:
    """Send a branch (default: the current one) and the chunks the remote lacks; --all every
    branch, --tags every tag; --delete removes the remote's BRANCH."""
    if delete and (all_branches or tags):
        raise click.UsageError("--delete takes one BRANCH, without --all or --tags")
    t = state.repo.push(remote_name, branch, force=force, all_branches=all_branches, tags=tags, delete=delete)
    if as_json:
        state.echo_json(views.transfer_json("push", remote_name, t))
        return
    state.emit(views.push_text(remote_name, t))


def _ref_moves(repo: Repository, remote_name: str, t: Transfer) -> Printout:
    """git fetch's lines for the refs a fetch moved (nothing when none did)."""
    from mgit.remote.transfer import is_ancestor

    lines = [
        views.ref_move_line(
            Repository.tracking_ref(remote_name, ref),
            ref,
            old,
            new,
            lambda old=old, new=new: is_ancestor(repo.graph, old, new),  # type: ignore[misc]
        )
        for ref, (old, new) in sorted(t.refs.items())
    ]
    return views.ref_moves(lines, lambda: repo.remotes().get(remote_name, remote_name))


@click.command("fetch")
@click.argument("remote_name", metavar="[REMOTE]", default="origin", shell_complete=complete_remote)
@click.option(
    "--chunks",
    "chunks_rev",
    metavar="REV",
    shell_complete=complete_rev,
    help="Fill in every chunk of REV (a partial clone's).",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (schema mgit.transfer/1).")
@pass_state
def cmd_fetch(state: CliState, remote_name: str, chunks_rev: str | None, as_json: bool) -> None:
    """Receive the remote's branches and tags (and their chunks, unless a partial clone)."""
    repo = state.repo
    t = repo.fetch(remote_name, chunks=chunks_rev)
    if as_json:
        state.echo_json(views.transfer_json("fetch", remote_name, t))
    else:
        state.err.print(views.transfer_line("received", t))
        state.emit(_ref_moves(repo, remote_name, t))


@click.command("pull")
@click.argument("remote_name", metavar="[REMOTE]", default="origin", shell_complete=complete_remote)
@click.argument("branch", required=False, shell_complete=complete_branch)
@click.option("--ff-only", is_flag=True, help="Refuse diverged branches instead of merging them.")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Machine-readable output (mgit.transfer/1; conflicts: mgit.merge-conflicts/2).",
)
@pass_state
def cmd_pull(state: CliState, remote_name: str, branch: str | None, ff_only: bool, as_json: bool) -> None:
    """Fetch, then merge the remote's branch into the current one: a fast-forward, or a three-way
    merge as `mgit merge` makes (conflicts: nothing is merged, the fetch is kept)."""
    repo = state.repo
    with conflicts_shown(state, as_json):
        pulled = repo.pull(remote_name, branch, ff_only=ff_only)
    if as_json:
        state.echo_json(views.pull_json(remote_name, pulled.fetched, pulled.merge))
        return
    state.err.print(views.transfer_line("received", pulled.fetched))
    state.emit(_ref_moves(repo, remote_name, pulled.fetched))
    state.emit(merge_views.merge_text(pulled.merge))


@click.command("clone")
@click.argument("url")
@click.argument("path", required=False)
@click.option("--partial", is_flag=True, help="Fetch the graph only; chunks come when a command needs them.")
@click.option("-b", "--branch", help="Branch to check out (default: the remote's HEAD).")
@click.option("--token-file", type=click.Path(dir_okay=False), help="File holding the HTTP bearer token.")
@click.option("--include", multiple=True, metavar="GLOB", help="Sparse checkout: only tensors matching (repeatable).")
@click.option("--exclude", multiple=True, metavar="GLOB", help="Sparse checkout: leave out tensors matching.")
@click.option("--budget", metavar="SIZE", help="Refuse a checkout reading and fetching more than SIZE (e.g. 500MB).")
@click.option("--json", "as_json", is_flag=True, help="What was received (schema mgit.transfer/1).")
@pass_state
def cmd_clone(
    state: CliState,
    url: str,
    path: str | None,
    partial: bool,
    branch: str | None,
    token_file: str | None,
    include: tuple[str, ...],
    exclude: tuple[str, ...],
    budget: str | None,
    as_json: bool,
) -> None:
    """Copy a remote into a new repository and check out a branch (with --partial and
    --include, only the selected tensors' chunks are fetched)."""
    dest = path or os.path.basename(url.rstrip("/")).removesuffix(".mgit") or "clone"
    repo = Repository.clone(
        url,
        dest,
        partial=partial,
        branch=branch,
        token_file=token_file,
        include=include,
        exclude=exclude,
        budget=budget,
    )
    got = repo.cloned
    if partial:  # the checkout's on-demand chunks count too
        got.add(repo.fetched.objects, repo.fetched.chunks, repo.fetched.bytes)
    if as_json:
        state.echo_json(views.transfer_json("clone", url, got))
        return
    line = views.clone_line(url, dest, repo.refs.current_branch(), got, repo.fetched if partial else None)
    state.err.print(line)


@click.command("serve")
@click.argument("root", type=click.Path(file_okay=False, exists=True))
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8790, show_default=True, type=int, help="Port to listen on.")
@click.option("--token-file", type=click.Path(dir_okay=False, exists=True), help="Lines `ro TOKEN` / `rw TOKEN`.")
@click.option("-v", "--verbose", is_flag=True, help="Log every request.")
@click.option(
    "--timeout",
    default=30.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds a connection may stay idle or stalled before it is closed.",
)
@click.option(
    "--max-connections",
    default=64,
    show_default=True,
    type=click.IntRange(min=1),
    help="Connections served at once; more get 503 (clients retry).",
)
@pass_state
def cmd_serve(
    state: CliState,
    root: str,
    host: str,
    port: int,
    token_file: str | None,
    verbose: bool,
    timeout: float,
    max_connections: int,
) -> None:
    """Serve every remote directory under ROOT over HTTP (push creates new ones)."""
    from mgit.remote.server import MgitServer, read_tokens

    tokens = read_tokens(token_file) if token_file else None
    server = MgitServer(
        root, host, port, tokens, verbose=verbose, idle_timeout=timeout, max_connections=max_connections
    )
    access = "token required" if tokens else "no authentication: anyone who can connect may push"
    state.err.print(f"serving {os.path.abspath(root)} at {server.url} ({access}); Ctrl-C stops")
    try:
        server.serve_forever()
    finally:
        server.server_close()


COMMANDS = [cmd_remote, cmd_push, cmd_fetch, cmd_pull, cmd_clone, cmd_serve]
