"""Commands that make and record changes: `init`, `config`, `add`, `rm`, `status`, `commit`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

from mgit.cli.complete import complete_rev
from mgit.cli.state import CliState, abs_paths, pass_state
from mgit.errors import BadInputError, MgitError, NotARepositoryError
from mgit.lazy import lazy_module
from mgit.repo import Repository

if TYPE_CHECKING:
    from mgit.cli.views import stage as views
else:  # rendering (rich) is imported when the command prints
    views = lazy_module("mgit.cli.views.stage")


def _enclosing_repository(path: Path) -> Path | None:
    """The repository whose working tree holds ``path`` (not ``path`` itself), if any."""
    from mgit.context import find_root

    if path.parent == path:
        return None
    try:
        return find_root(path.parent)
    except NotARepositoryError:
        return None


@click.command("init")
@click.argument("path", default=".")
@click.option("--force", is_flag=True, help="Create it even inside another repository's working tree.")
@pass_state
def cmd_init(state: CliState, path: str, force: bool) -> None:
    """Create an empty repository in PATH."""
    outer = _enclosing_repository(Path(path).resolve())
    if outer is not None and not force:
        raise BadInputError(
            f"{os.path.abspath(path)} is inside the mgit repository {outer}, which would see the new repository's "
            f"files as its own; use `mgit init --force {path}` to nest one anyway"
        )
    if outer is not None:
        state.err.print(f"warning: creating a repository nested inside the mgit repository {outer}", markup=False)
    repo = Repository.init(path)
    click.echo(f"Initialized empty mgit repository in {repo.git_dir}")


@click.command("config")
@click.argument("key")
@click.argument("value", required=False)
@pass_state
def cmd_config(state: CliState, key: str, value: str | None) -> None:
    """Get or set a configuration value (e.g. user.name)."""
    repo = state.repo
    if value is None:
        got = repo.config_get(key)
        if got is None:
            raise MgitError(f"config key {key} is not set")
        click.echo(got)
    else:
        repo.config_set(key, value)


@click.command("add")
@click.argument("paths", nargs=-1, required=True)
@click.option(
    "--base",
    metavar="REV",
    shell_complete=complete_rev,
    help="Delta-encode changed tensors against REV (default HEAD).",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (schema mgit.add/1).")
@pass_state
def cmd_add(state: CliState, paths: tuple[str, ...], base: str | None, as_json: bool) -> None:
    """Stage PATHS: new, changed and deleted files under them."""
    res = state.repo.add(abs_paths(paths), base=base)
    if as_json:
        state.echo_json(views.add_json(res))
        return
    state.emit(views.add_text(res))


@click.command("rm")
@click.argument("paths", nargs=-1, required=True)
@click.option("--cached", is_flag=True, help="Keep the working files.")
@pass_state
def cmd_rm(state: CliState, paths: tuple[str, ...], cached: bool) -> None:
    """Stop tracking PATHS (and delete them unless --cached)."""
    for path in state.repo.rm(abs_paths(paths), cached=cached):
        click.echo(f"rm {path}")


@click.command("status")
@click.option("-s", "--short", is_flag=True, help="git's short format: XY PATH (index, working tree), ?? untracked.")
@click.option("--porcelain", is_flag=True, help="The short format, for scripts (as git's v1).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (schema mgit.status/1).")
@pass_state
def cmd_status(state: CliState, short: bool, porcelain: bool, as_json: bool) -> None:
    """Show staged, modified, untracked and deleted files, and which tensors changed."""
    st = state.repo.status()
    if as_json:
        state.echo_json(views.status_json(st))
        return
    state.emit(views.status_short(st) if short or porcelain else views.status_text(st))


@click.command("commit")
@click.option("-m", "--message", required=True, help="Commit message.")
@click.option("--allow-empty", is_flag=True)
@click.option(
    "--sketch",
    "share",
    metavar="SHARE",
    help="then sketch the commit's change for budgeted merges, e.g. 10% (default: config sketch.share)",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (schema mgit.commit/1).")
@pass_state
def cmd_commit(state: CliState, message: str, allow_empty: bool, share: str | None, as_json: bool) -> None:
    """Record the staged files as a new commit."""
    repo = state.repo
    sha = repo.commit(message, allow_empty=allow_empty, sketch=share)
    if as_json:
        info = repo.graph.commit(sha)
        state.echo_json(views.commit_json(sha, repo.refs.current_branch(), list(info.parents)))
        return
    click.echo(views.commit_line(sha, repo.refs.current_branch(), message))


COMMANDS = [cmd_init, cmd_config, cmd_add, cmd_rm, cmd_status, cmd_commit]
