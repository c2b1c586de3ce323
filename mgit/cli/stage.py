"""Commands that make and record changes: `init`, `config`, `add`, `rm`, `mv`, `stash`, `status`, `commit`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

from mgit.cli.branch_merge import conflicts_shown
from mgit.cli.complete import complete_rev
from mgit.cli.state import CliState, abs_paths, pass_state
from mgit.errors import BadInputError, MgitError, NotARepositoryError
from mgit.lazy import lazy_module
from mgit.repo import Repository

if TYPE_CHECKING:
    from mgit import config
    from mgit.cli.views import stage as views
else:  # rendering (rich) and config files (dulwich) are imported when a command needs them
    config = lazy_module("mgit.config")
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
@click.argument("key", required=False)
@click.argument("value", required=False)
@click.option("--global", "is_global", is_flag=True, help="The user's mgit config (~/.config/mgit/config).")
@click.option("--local", "is_local", is_flag=True, help="This repository's .mgit/config only.")
@click.option("-l", "--list", "listing", is_flag=True, help="List every key=value mgit reads (git's files first).")
@click.option("--json", "as_json", is_flag=True, help="With --list: as JSON (schema mgit.config/1).")
@pass_state
def cmd_config(
    state: CliState, key: str | None, value: str | None, is_global: bool, is_local: bool, listing: bool, as_json: bool
) -> None:
    """Get or set a configuration value (e.g. user.name), as git config: in .mgit/config, or
    with --global in the user's mgit config (read outside a repository too); --list lists them."""
    if is_global and is_local:
        raise click.UsageError("--global and --local name one file each: give one")
    scope = "global" if is_global else "local" if is_local else None
    if listing:
        if key is not None:
            raise click.UsageError("--list takes no KEY")
        found = state.repo.config_list(scope) if scope != "global" else config.global_entries()
        if as_json:
            state.echo_json(views.config_json(found))
        else:
            state.emit(views.config_list(found))
    elif key is None:
        raise click.UsageError("config needs a KEY (or --list)")
    elif value is None:
        got = config.global_get(key) if is_global else state.repo.config_get(key, scope)
        if got is None:
            raise MgitError(f"config key {key} is not set")
        click.echo(got)
    elif is_global:
        config.global_set(key, value)
    else:
        state.repo.config_set(key, value)


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


@click.command("mv")
@click.argument("paths", nargs=-1, required=True)
@click.option("-f", "--force", is_flag=True, help="Overwrite a destination file that exists.")
@click.option("-v", "--verbose", is_flag=True, help="Name each file moved.")
@pass_state
def cmd_mv(state: CliState, paths: tuple[str, ...], force: bool, verbose: bool) -> None:
    """Move or rename SOURCE... to DEST (into DEST when it is a directory), in the working
    tree and the index, as git mv."""
    if len(paths) < 2:
        raise click.UsageError("mv needs SOURCE... DEST")
    for old, new in state.repo.mv(abs_paths(paths[:-1]), os.path.abspath(paths[-1]), force=force):
        if verbose:
            click.echo(f"Renaming {old} to {new}")


INDEX_OPTION = click.option(
    "--index", is_flag=True, help="Restore the index too, exactly (default: staged changes come back unstaged)."
)


def _position(name: str) -> int:
    """``stash@{N}`` or ``N`` → N."""
    text = name.removeprefix("stash@{").removesuffix("}") if name.startswith("stash@{") else name
    if not text.isdigit():
        raise BadInputError(f"{name!r} is not a stash entry (stash@{{N}} or N)")
    return int(text)


@click.group("stash", invoke_without_command=True)
@click.option("-m", "--message", help="Describe the entry (default: WIP on BRANCH: …).")
@click.pass_context
def cmd_stash(ctx: click.Context, message: str | None) -> None:
    """Set the changes of tracked files aside and reset them to HEAD (`stash push`); `stash
    list`, `pop`, `apply`, `drop` as git."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(cmd_stash_push, message=message)
    elif message is not None:
        raise click.UsageError("-m goes with `stash push`")


@cmd_stash.command("push")
@click.option("-m", "--message", help="Describe the entry (default: WIP on BRANCH: …).")
@pass_state
def cmd_stash_push(state: CliState, message: str | None) -> None:
    """Record the staged and unstaged changes of tracked files as stash@{0}, then reset the
    index and working files to HEAD (untracked files stay)."""
    made = state.repo.stash(message)
    if made is None:
        click.echo("No local changes to save")
        return
    click.echo(f"Saved working directory and index state {state.repo.stash_list()[0].message}")


@cmd_stash.command("list")
@click.option("--json", "as_json", is_flag=True, help="As JSON (schema mgit.stash/1).")
@pass_state
def cmd_stash_list(state: CliState, as_json: bool) -> None:
    """Every stash entry, newest first: stash@{N}: MESSAGE."""
    entries = state.repo.stash_list()
    if as_json:
        state.echo_json(views.stash_json(entries))
    else:
        state.emit(views.stash_list(entries))


def _apply(state: CliState, entry: str, index: bool, drop: bool) -> None:
    repo = state.repo
    position = _position(entry)
    entries = repo.stash_list()
    commit = entries[position].commit if position < len(entries) else None
    with conflicts_shown(state, as_json=False):  # a stash merged onto a moved HEAD can conflict
        res = (repo.stash_pop if drop else repo.stash_apply)(position, index=index)
    state.err.print(f"restored {len(res.written)} file(s) and removed {len(res.removed)} from stash@{{{position}}}")
    if drop and commit is not None:
        click.echo(f"Dropped stash@{{{position}}} ({commit[:12]})")


@cmd_stash.command("pop")
@click.argument("entry", default="0")
@INDEX_OPTION
@pass_state
def cmd_stash_pop(state: CliState, entry: str, index: bool) -> None:
    """Apply stash@{N} (default 0) onto the working tree, then drop it (kept if refused)."""
    _apply(state, entry, index, drop=True)


@cmd_stash.command("apply")
@click.argument("entry", default="0")
@INDEX_OPTION
@pass_state
def cmd_stash_apply(state: CliState, entry: str, index: bool) -> None:
    """Apply stash@{N} (default 0) onto the working tree; the entry stays."""
    _apply(state, entry, index, drop=False)


@cmd_stash.command("drop")
@click.argument("entry", default="0")
@pass_state
def cmd_stash_drop(state: CliState, entry: str) -> None:
    """Forget stash@{N} (default 0)."""
    position = _position(entry)
    click.echo(f"Dropped stash@{{{position}}} ({state.repo.stash_drop(position)[:12]})")


@click.command("status")
@click.option("-s", "--short", is_flag=True, help="git's short format: XY PATH (index, working tree), ?? untracked.")
@click.option("--porcelain", is_flag=True, help="The short format, for scripts (as git's v1).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (schema mgit.status/1).")
@pass_state
def cmd_status(state: CliState, short: bool, porcelain: bool, as_json: bool) -> None:
    """Show staged, modified, untracked and deleted files, and which tensors changed."""
    repo = state.repo
    st = repo.status()
    if as_json:
        state.echo_json(views.status_json(st))
        return
    here = "" if porcelain else _here(repo.root)  # --porcelain: from the root, as git's
    state.emit(views.status_short(st, here) if short or porcelain else views.status_text(st, here))


def _here(root: Path) -> str:
    """The current directory, repository-relative ('' at the root or outside it)."""
    rel = os.path.relpath(Path.cwd().resolve(), root)
    return "" if rel == "." or rel.startswith("..") else Path(rel).as_posix()


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


COMMANDS = [cmd_init, cmd_config, cmd_add, cmd_rm, cmd_mv, cmd_stash, cmd_status, cmd_commit]
