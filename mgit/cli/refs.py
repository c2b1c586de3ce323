"""Commands that move refs and the working tree between commits: `branch`, `tag`, `reset`, `checkout`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from mgit.cli.complete import complete_branch, complete_rev, complete_tag
from mgit.cli.state import CliState, abs_paths, pass_state
from mgit.lazy import lazy_module

if TYPE_CHECKING:
    from mgit.cli.views import refs as views
else:  # rendering (rich) is imported when the command prints
    views = lazy_module("mgit.cli.views.refs")


@click.command("tag")
@click.argument("name", required=False, shell_complete=complete_tag)
@click.argument("rev", default="HEAD", shell_complete=complete_rev)
@click.option("-d", "--delete", is_flag=True, help="Delete the tag NAME.")
@click.option("-a", "--annotate", is_flag=True, help="An annotated tag (a tag object; needs -m).")
@click.option("-m", "--message", help="The annotated tag's message (implies -a).")
@click.option("-n", "lines", is_flag=True, help="List with each tag's message (a lightweight one: its commit's).")
@click.option("--json", "as_json", is_flag=True, help="List as JSON (schema mgit.tag/1).")
@pass_state
def cmd_tag(
    state: CliState,
    name: str | None,
    rev: str,
    delete: bool,
    annotate: bool,
    message: str | None,
    lines: bool,
    as_json: bool,
) -> None:
    """List tags, create tag NAME at REV (-a -m MSG: annotated), or delete it with -d."""
    repo = state.repo
    if name is None and (delete or annotate or message is not None):
        raise click.UsageError("-d, -a and -m need a tag NAME")
    if as_json and name is None:
        state.echo_json(views.tag_json(repo.tags(), repo.tag_messages()))
    elif name is None:
        messages = repo.tag_messages() if lines else {}
        state.emit(views.tag_list(repo.tags(), messages, lambda c: repo.graph.commit(c).summary, lines))
    elif delete:
        repo.delete_tag(name)
    elif annotate and message is None:
        raise click.UsageError("an annotated tag needs its message: mgit tag -a NAME -m MESSAGE")
    else:
        repo.tag(name, rev, message=message)


@click.command("branch")
@click.argument("name", required=False, shell_complete=complete_branch)
@click.argument("rev", required=False, shell_complete=complete_rev)
@click.option("-d", "--delete", is_flag=True, help="Delete the branch NAME (refused if not merged).")
@click.option("-D", "force_delete", is_flag=True, help="Delete the branch NAME, merged or not.")
@click.option("-f", "--force", is_flag=True, help="Move branch NAME to REV even if it exists.")
@click.option("-m", "--move", "rename", is_flag=True, help="Rename: `-m OLD NEW` (or `-m NEW`: the current branch).")
@click.option("-M", "force_rename", is_flag=True, help="Rename, replacing a branch NEW that exists (`-M OLD NEW`).")
@click.option("-r", "--remotes", "remotes_only", is_flag=True, help="List the remote-tracking branches.")
@click.option("-a", "--all", "list_all", is_flag=True, help="List local and remote-tracking branches.")
@click.option("-v", "--verbose", count=True, help="With each branch its commit and subject (-vv: and upstream).")
@click.option("--json", "as_json", is_flag=True, help="List as JSON (schema mgit.branch/1).")
@pass_state
def cmd_branch(
    state: CliState,
    name: str | None,
    rev: str | None,
    delete: bool,
    force_delete: bool,
    force: bool,
    rename: bool,
    force_rename: bool,
    remotes_only: bool,
    list_all: bool,
    verbose: int,
    as_json: bool,
) -> None:
    """List branches, create branch NAME at REV (-f: move it there), rename (-m OLD NEW; -M
    replaces an existing NEW) or delete one (-d; -D even if not merged)."""
    repo = state.repo
    rename = rename or force_rename
    if name is None:
        if delete or force_delete or force or rename:
            raise click.UsageError("-d, -D, -f, -m and -M need a branch NAME")
        current = repo.refs.current_branch()
        local, tracking = repo.branches(), repo.remote_branches()
        if as_json:
            state.echo_json(views.branch_json(current, repo.refs.head(), local, tracking))
        elif verbose:
            info = repo.branch_info(upstreams=verbose > 1)
            shown = tracking if remotes_only or list_all else {}
            subjects = {c: repo.graph.commit(c).summary for c in shown.values()}
            state.emit(views.branch_verbose(current, info, tracking, remotes_only, list_all, subjects))
        else:
            state.emit(views.branch_list(current, local, tracking, remotes_only, list_all))
    elif delete or force_delete:
        if rev is not None:
            raise click.UsageError("-d/-D take one branch NAME")
        tip = repo.delete_branch(name, force=force_delete)
        click.echo(f"Deleted branch {name} (was {tip[:12]}).")
    elif rename:
        old = name if rev is not None else repo.refs.current_branch()
        if old is None:
            raise click.UsageError("HEAD is detached: name the branch to rename, mgit branch -m OLD NEW")
        repo.rename_branch(old, rev or name, force=force_rename)
    else:
        repo.create_branch(name, rev or "HEAD", force=force)


@click.command("reset")
@click.argument("rev", default="HEAD", shell_complete=complete_rev)
@click.option("--soft", "mode", flag_value="soft", help="Move the branch only; keep the index and working tree.")
@click.option(
    "--mixed", "mode", flag_value="mixed", default=True, help="Also reset the index; keep the working files (default)."
)
@click.option("--hard", "mode", flag_value="hard", help="Also overwrite the index and working tree with REV's.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (schema mgit.reset/1).")
@pass_state
def cmd_reset(state: CliState, rev: str, mode: str, as_json: bool) -> None:
    """Move the current branch (or detached HEAD) to REV; `mgit reset --hard HEAD^1` undoes a merge.
    `mgit reset [REV] -- PATH...` unstages paths (their index entries become REV's, default HEAD)."""
    repo = state.repo
    paths = state.paths  # `mgit reset --` alone is a whole reset, as in git
    res = repo.reset(rev, mode=mode, paths=abs_paths(paths) if paths else None)
    if as_json:
        state.echo_json(views.reset_json(res))
        return
    if mode == "hard":
        click.echo(f"HEAD is now at {res.commit[:12]} {repo.graph.commit(res.commit).summary}")  # type: ignore[index,arg-type]
    elif mode == "mixed" and res.unstaged:
        unstaged = repo.status().unstaged
        if unstaged:
            click.echo("Unstaged changes after reset:")
            for f in unstaged:
                click.echo(f"{f.change[0].upper()}\t{f.path}")


@click.command("checkout")
@click.argument("rev", required=False, shell_complete=complete_rev)
@click.option("-b", "new_branch", metavar="NAME", help="Create branch NAME at REV (default HEAD) and switch to it.")
@click.option("-f", "--force", is_flag=True, help="Discard local changes in the way.")
@click.option("--include", multiple=True, metavar="GLOB", help="Sparse: only tensors matching (fnmatch, repeatable).")
@click.option("--exclude", multiple=True, metavar="GLOB", help="Sparse: leave out tensors matching (repeatable).")
@click.option("--full", is_flag=True, help="Back to a full checkout (every tensor).")
@click.option("--budget", metavar="SIZE", help="Refuse to read and fetch more than SIZE (e.g. 500MB, 2GiB).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (schema mgit.checkout/1).")
@pass_state
def cmd_checkout(
    state: CliState,
    rev: str | None,
    new_branch: str | None,
    force: bool,
    include: tuple[str, ...],
    exclude: tuple[str, ...],
    full: bool,
    budget: str | None,
    as_json: bool,
) -> None:
    """Switch to REV, or restore paths from it: `mgit checkout REV -- PATH...`.
    --include/--exclude make the checkout sparse (kept for later checkouts until --full)."""
    repo = state.repo
    paths = state.paths
    res = repo.checkout(
        rev,
        abs_paths(paths) if paths else None,
        create_branch=new_branch,
        force=force,
        include=include,
        exclude=exclude,
        full=full,
        budget=budget,
    )
    if as_json:
        state.echo_json(views.checkout_json(res, repo.refs.current_branch()))
        return
    if paths:
        state.err.print(f"restored {len(res.written)} file(s)")
        return
    is_branch = not new_branch and not res.detached and rev in repo.branches()
    state.emit(views.checkout_text(res, rev, new_branch, budget, is_branch, repo.sparse_patterns()))


@click.command("switch")
@click.argument("branch", required=False, shell_complete=complete_branch)
@click.argument("start", required=False, shell_complete=complete_rev)
@click.option("-c", "--create", metavar="NEW", help="Create branch NEW at START (default HEAD), switch to it.")
@click.option("--detach", is_flag=True, help="Detach HEAD at the revision BRANCH (any revision; default HEAD).")
@click.option("-f", "--force", "--discard-changes", "force", is_flag=True, help="Discard local changes in the way.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (schema mgit.checkout/1).")
@pass_state
def cmd_switch(
    state: CliState,
    branch: str | None,
    start: str | None,
    create: str | None,
    detach: bool,
    force: bool,
    as_json: bool,
) -> None:
    """Switch to BRANCH (`-c NEW [START]`: a new one; `--detach [REV]`: no branch), as git switch."""
    repo = state.repo
    if create is not None and start is None:
        branch, start = None, branch  # `switch -c NEW START`: click reads START as BRANCH
    elif start is not None:
        raise click.UsageError("switch takes one BRANCH (START goes with -c NEW)")
    res = repo.switch(branch, create=create, start=start, detach=detach, force=force)
    if as_json:
        state.echo_json(views.checkout_json(res, repo.refs.current_branch()))
        return
    is_branch = create is None and not detach
    state.emit(views.checkout_text(res, branch, create, None, is_branch, repo.sparse_patterns()))


@click.command("restore")
@click.argument("paths", nargs=-1)
@click.option(
    "-s",
    "--source",
    metavar="REV",
    shell_complete=complete_rev,
    help="Restore from REV (default: the index; with --staged, HEAD).",
)
@click.option("-S", "--staged", is_flag=True, help="Restore the index entries (unstage); the working files stay.")
@click.option("-W", "--worktree", is_flag=True, help="Restore the working files (the default; with --staged: both).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (schema mgit.restore/1).")
@pass_state
def cmd_restore(
    state: CliState, paths: tuple[str, ...], source: str | None, staged: bool, worktree: bool, as_json: bool
) -> None:
    """Restore PATHS in the working tree from the index (or --source REV); --staged: the index
    from HEAD (or REV), as git restore. Tracked paths the source lacks are removed."""
    paths = paths + tuple(state.paths or ())
    if not paths:
        raise click.UsageError("restore needs PATHS")
    res = state.repo.restore(abs_paths(paths), source=source, staged=staged, worktree=worktree or not staged)
    if as_json:
        state.echo_json(views.restore_json(res))
        return
    state.emit(views.restore_text(res))


COMMANDS = [cmd_tag, cmd_branch, cmd_reset, cmd_checkout, cmd_switch, cmd_restore]
