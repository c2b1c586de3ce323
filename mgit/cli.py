"""The `mgit` command: thin click commands over Repository, rich output, --json where
scripts need it. Errors print one line and exit non-zero; --debug shows tracebacks."""

from __future__ import annotations

import errno
import functools
import json
import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.filesize import decimal
from rich.markup import escape
from rich.table import Table
from rich.tree import Tree as RichTree

from mgit import __version__, _crashpoints, progress
from mgit.errors import BadInputError, MgitError, NotARepositoryError
from mgit.maintenance.gc import DEFAULT_GRACE_SECONDS
from mgit.pager import pager_command, paging
from mgit.remote.transfer import is_ancestor
from mgit.repo import Repository, _find_root

if TYPE_CHECKING:  # diff and merge machinery is imported where used: light commands skip it
    from mgit.diff.model import ModelDiff, TensorDiff
    from mgit.graph.objects import CommitInfo
    from mgit.maintenance.du import Usage
    from mgit.merge.plan import MergePlan
    from mgit.remote.transfer import Transfer
    from mgit.repo import Repair
    from mgit.worktree.sparse import SparseSummary
    from mgit.worktree.status import FileStatus

QUIET_HELP = "No progress bars or notes on stderr (warnings and errors still print)."
NO_PAGER_HELP = "Do not page long output (diff, log, show, reflog, lineage)."
ALERTS = ("error:", "warning:", "[yellow]warning:", "interrupted", "aborted", "still missing:", "still damaged:")


class _Stderr(Console):
    """stderr: notes (summaries, "Switched to branch ...") are dropped under -q; warnings and
    errors (lines starting with one of ALERTS) always print."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        first = objects[0] if objects else ""
        if progress.QUIET and not (isinstance(first, str) and first.lstrip().startswith(ALERTS)):
            return
        super().print(*objects, **kwargs)


# Piped output is not cut at 80 columns: tables keep whole tensor names on one line. A terminal
# keeps its colours when the output goes through the pager (less -R shows them).
out = Console(
    highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 240,
    force_terminal=True if sys.stdout.isatty() else None,
)  # fmt: skip
err = _Stderr(stderr=True, highlight=False, soft_wrap=True)
_state = {"debug": False, "paths": None, "pager": True}


def _repo(ctx: click.Context) -> Repository:
    return Repository(ctx.obj["dir"])


def _abs(paths: tuple[str, ...] | list[str]) -> list[str]:
    return [os.path.abspath(p) for p in paths]


def _dump(schema: str, payload: dict) -> None:
    click.echo(json.dumps({"schema": schema, **payload}, indent=2, sort_keys=False))


def _paths_after_dashdash() -> list[str] | None:
    return _state["paths"]


def _set_global(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """A global flag (-q, --debug, --no-pager) takes effect wherever it is given."""
    if not value:
        return
    if param.name == "debug":
        _state["debug"] = True
    elif param.name == "quiet":
        progress.QUIET = True
    elif param.name == "no_pager":
        _state["pager"] = False


def _global_options() -> list[click.Option]:
    """The flags every command accepts, before or after its name (`mgit checkout main -q`)."""
    flag = functools.partial(click.Option, is_flag=True, expose_value=False, callback=_set_global)
    return [
        flag(["-q", "--quiet"], help=QUIET_HELP),
        flag(["--debug"], help="Show tracebacks for errors."),
        flag(["--no-pager"], help=NO_PAGER_HELP),
    ]


def _add_global_options(group: click.Group) -> None:
    """Give every subcommand, at any depth, the global flags it does not define itself.
    Idempotent, and run by main(), so that commands added anywhere get them too."""
    for command in group.commands.values():
        taken = {opt for p in command.params for opt in getattr(p, "opts", ())}
        command.params.extend(o for o in _global_options() if not taken & set(o.opts))
        if isinstance(command, click.Group):
            _add_global_options(command)


def _paged(fn: Callable[..., None]) -> Callable[..., None]:
    """Run a command's output through the pager (as git pages log, show and diff)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        with paging(_pager()):
            fn(*args, **kwargs)

    return wrapper


def _pager() -> str | None:
    return pager_command(os.environ, sys.stdout.isatty(), _state["pager"])


# -- shell completion (click's: `_MGIT_COMPLETE=bash_source mgit`, or `mgit completion bash`) ----------


def _names_for_completion(ctx: click.Context, kinds: tuple[str, ...]) -> list[str]:
    """Branch, tag, remote-tracking branch or remote names of the repository ``-C`` names; none
    outside a repository (completion never fails)."""
    directory = ctx.find_root().params.get("directory") or "."
    try:
        with Repository(directory) as repo:
            found = {
                "branch": lambda: list(repo.branches()),
                "tag": lambda: list(repo.tags()),
                "remote_branch": lambda: list(repo.remote_branches()),
                "remote": lambda: list(repo.remotes()),
                "head": lambda: ["HEAD"],
            }
            return [name for kind in kinds for name in sorted(found[kind]())]
    except (MgitError, OSError):
        return []


def _completer(*kinds: str):
    """A click ``shell_complete`` callback offering the names of ``kinds`` that start as typed."""

    def complete(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
        return [n for n in _names_for_completion(ctx, kinds) if n.startswith(incomplete)]

    return complete


complete_rev = _completer("branch", "tag", "remote_branch", "head")
complete_branch = _completer("branch")
complete_tag = _completer("tag")
complete_remote = _completer("remote")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.option("-q", "--quiet", is_flag=True, help=QUIET_HELP)
@click.option("--no-pager", is_flag=True, help=NO_PAGER_HELP)
@click.option("-C", "directory", default=".", metavar="DIR", help="Run as if started in DIR.")
@click.version_option(__version__, prog_name="mgit")
@click.pass_context
def cli(ctx: click.Context, debug: bool, quiet: bool, no_pager: bool, directory: str) -> None:
    """mgit: version control for model weights. -q, --debug and --no-pager also work after
    the command's name."""
    _state["debug"] = debug
    _state["pager"] = not no_pager
    progress.QUIET = quiet
    if directory != ".":
        os.chdir(directory)
    ctx.obj = {"dir": "."}


def _enclosing_repository(path: Path) -> Path | None:
    """The repository whose working tree holds ``path`` (not ``path`` itself), if any."""
    if path.parent == path:
        return None
    try:
        return _find_root(path.parent)
    except NotARepositoryError:
        return None


@cli.command()
@click.argument("path", default=".")
@click.option("--force", is_flag=True, help="Create it even inside another repository's working tree.")
def init(path: str, force: bool) -> None:
    """Create an empty repository in PATH."""
    outer = _enclosing_repository(Path(path).resolve())
    if outer is not None and not force:
        raise BadInputError(
            f"{os.path.abspath(path)} is inside the mgit repository {outer}, which would see the new repository's "
            f"files as its own; use `mgit init --force {path}` to nest one anyway"
        )
    if outer is not None:
        err.print(f"warning: creating a repository nested inside the mgit repository {outer}", markup=False)
    repo = Repository.init(path)
    click.echo(f"Initialized empty mgit repository in {repo.git_dir}")


@cli.command()
@click.argument("key")
@click.argument("value", required=False)
@click.pass_context
def config(ctx: click.Context, key: str, value: str | None) -> None:
    """Get or set a configuration value (e.g. user.name)."""
    repo = _repo(ctx)
    if value is None:
        got = repo.config_get(key)
        if got is None:
            raise MgitError(f"config key {key} is not set")
        click.echo(got)
    else:
        repo.config_set(key, value)


@cli.command()
@click.argument("paths", nargs=-1, required=True)
@click.option(
    "--base",
    metavar="REV",
    shell_complete=complete_rev,
    help="Delta-encode changed tensors against REV (default HEAD).",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (schema mgit.add/1).")
@click.pass_context
def add(ctx: click.Context, paths: tuple[str, ...], base: str | None, as_json: bool) -> None:
    """Stage PATHS: new, changed and deleted files under them."""
    res = _repo(ctx).add(_abs(paths), base=base)
    if as_json:
        _dump("mgit.add/1", vars(res))
        return
    if res.added or res.removed:
        err.print(
            f"staged {len(res.added)} file(s), unstaged {len(res.removed)} deleted; "
            f"{decimal(res.logical_bytes)} read, {decimal(res.stored_bytes)} new in the store "
            f"({res.new_chunks} new chunks)"
        )


@cli.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--cached", is_flag=True, help="Keep the working files.")
@click.pass_context
def rm(ctx: click.Context, paths: tuple[str, ...], cached: bool) -> None:
    """Stop tracking PATHS (and delete them unless --cached)."""
    for path in _repo(ctx).rm(_abs(paths), cached=cached):
        click.echo(f"rm {path}")


def _describe(f: FileStatus) -> str:
    text = f"{f.change + ':':<10} {f.path}"
    t = f.tensors
    if t:
        bits = []
        for label, names in (("changed", t.changed), ("added", t.added), ("removed", t.removed)):
            if names:
                shown = ", ".join(names[:3]) + (f", +{len(names) - 3} more" if len(names) > 3 else "")
                bits.append(f"{len(names)} tensor(s) {label}: {shown}")
        text += "  (" + "; ".join(bits) + ")"
    if f.note:
        text += f"  ({f.note})"
    return text


def _file_status_json(f: FileStatus) -> dict:
    d = {"path": f.path, "change": f.change}
    if f.tensors is not None:
        d["tensors"] = {"added": f.tensors.added, "removed": f.tensors.removed, "changed": f.tensors.changed}
    if f.note:
        d["note"] = f.note
    return d


def _sparse_json(sparse: SparseSummary | None) -> dict | None:
    if sparse is None:
        return None
    return {
        "include": list(sparse.patterns.include),
        "exclude": list(sparse.patterns.exclude),
        "tensors_present": sparse.tensors_present,
        "tensors_total": sparse.tensors_total,
    }


def _sparse_line(sparse: SparseSummary) -> str:
    return (
        f"Sparse checkout ({sparse.patterns.describe()}): {sparse.tensors_present} of {sparse.tensors_total} "
        "tensors present (`mgit checkout HEAD --full` for all)"
    )


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (schema mgit.status/1).")
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Show staged, modified, untracked and deleted files, and which tensors changed."""
    st = _repo(ctx).status()
    if as_json:
        _dump(
            "mgit.status/1",
            {
                "branch": st.branch,
                "head": st.head,
                "staged": [_file_status_json(f) for f in st.staged],
                "unstaged": [_file_status_json(f) for f in st.unstaged],
                "untracked": st.untracked,
                "not_checked_out": st.not_checked_out,
                "sparse": _sparse_json(st.sparse),
            },
        )
        return
    out.print(f"On branch {st.branch}" if st.branch else f"HEAD detached at {st.head[:12] if st.head else '?'}")
    if st.head is None:
        out.print("No commits yet")
    if st.sparse is not None:
        out.print(_sparse_line(st.sparse), markup=False)
    for title, items, style in (
        ("Changes to be committed:", st.staged, "green"),
        ("Changes not staged for commit:", st.unstaged, "red"),
    ):
        if items:
            out.print(f"\n{title}")
            for f in items:
                out.print(f"  [{style}]{escape(_describe(f))}[/{style}]", markup=True)
    if st.untracked:
        out.print("\nUntracked files:")
        for p in st.untracked:
            out.print(f"  [red]{escape(p)}[/red]")
    if st.not_checked_out:
        out.print(f"\nNot checked out (tracked, absent from the working tree): {len(st.not_checked_out)} file(s)")
        for p in st.not_checked_out:
            out.print(f"  {p}", markup=False)
    if st.clean:
        out.print("\nnothing to commit, working tree clean")


@cli.command()
@click.option("-m", "--message", required=True, help="Commit message.")
@click.option("--allow-empty", is_flag=True)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (schema mgit.commit/1).")
@click.pass_context
def commit(ctx: click.Context, message: str, allow_empty: bool, as_json: bool) -> None:
    """Record the staged files as a new commit."""
    repo = _repo(ctx)
    sha = repo.commit(message, allow_empty=allow_empty)
    if as_json:
        info = repo.graph.commit(sha)
        _dump("mgit.commit/1", {"commit": sha, "branch": repo.refs.current_branch(), "parents": list(info.parents)})
        return
    where = repo.refs.current_branch() or "detached HEAD"
    click.echo(f"[{where} {sha[:12]}] {message.strip().splitlines()[0]}")


def _when(t: int, tz: int) -> str:
    return datetime.fromtimestamp(t, timezone(timedelta(seconds=tz))).strftime("%a %b %d %H:%M:%S %Y %z")


@cli.command()
@click.argument("rev", default="HEAD", shell_complete=complete_rev)
@click.option("--depth", type=int, default=50, show_default=True, help="How many generations to follow.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (schema mgit.lineage/1).")
@click.pass_context
@_paged
def lineage(ctx: click.Context, rev: str, depth: int, as_json: bool) -> None:
    """The derivation tree of REV: fine-tunes and merges down to the roots, with methods and weights."""
    tree_doc = _repo(ctx).lineage(rev, depth)
    if as_json:
        _dump("mgit.lineage/1", {"root": tree_doc})
        return

    def label(n: dict) -> str:
        text = f"[yellow]{n['commit'][:12]}[/yellow] {escape(n['summary'])}  [dim]{escape(n['role'])}[/dim]"
        if "method" in n:
            text += f"  [cyan]merge: {n['method']}[/cyan]"
        if n.get("seen"):
            text += "  [dim](shown above)[/dim]"
        if n.get("truncated"):
            text += "  [dim]…[/dim]"
        return text

    def grow(branch: RichTree, n: dict) -> None:
        for child in n["inputs"]:
            grow(branch.add(label(child)), child)

    root = RichTree(label(tree_doc))
    grow(root, tree_doc)
    out.print(root)


def _graph_lines(repo: Repository, c: CommitInfo) -> list[str]:
    """For --graph: a merge's experts drawn under it (from its plan)."""
    plan = repo.merge_record(c.id) if len(c.parents) > 1 else None
    if plan is None:
        return []
    weights = plan["parameters"].get("weight")
    base = f"base {plan['base'][:12]}" if plan["base"] else f"reference {plan.get('reference', '?')[:12]}"
    lines = [f"|\\  merge ({plan['method']}) of {base}"]
    for k, e in enumerate(plan["experts"]):
        w = f" × {weights[k]}" if weights is not None else ""
        lines.append(f"| + {e['name']} {e['commit'][:12]}{w}")
    return lines


@cli.command()
@click.argument("rev", default="HEAD", shell_complete=complete_rev)
@click.option("--oneline", is_flag=True, help="One line per commit.")
@click.option("--graph", is_flag=True, help="Draw merges with their experts.")
@click.option("-n", "--max-count", type=int, default=None)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (schema mgit.log/1).")
@click.pass_context
@_paged
def log(ctx: click.Context, rev: str, oneline: bool, graph: bool, max_count: int | None, as_json: bool) -> None:
    """Show commits, newest first (`mgit log -- PATH` limits to a path)."""
    repo = _repo(ctx)
    commits = repo.log(rev, _abs(_paths_after_dashdash() or []), max_count)
    if as_json:
        _dump(
            "mgit.log/1",
            {
                "commits": [
                    {
                        "id": c.id,
                        "parents": list(c.parents),
                        "author": c.author,
                        "time": c.time,
                        "message": c.message,
                    }
                    for c in commits
                ]
            },
        )
        return
    if not commits:
        err.print("no commits yet")
        return
    labels: dict[str, list[str]] = {}
    for name, sha in repo.branches().items():
        labels.setdefault(sha, []).append(name)
    for name, sha in repo.tags().items():
        labels.setdefault(sha, []).append(f"tag: {name}")
    for c in commits:
        deco = f" [cyan]({', '.join(labels[c.id])})[/cyan]" if c.id in labels else ""
        star = "* " if graph else ""
        if oneline:
            out.print(f"{star}[yellow]{c.id[:12]}[/yellow]{deco} {escape(c.summary)}", markup=True)
            for line in _graph_lines(repo, c) if graph else []:
                out.print(line, markup=False)
            continue
        if graph:
            out.print(f"* [yellow]commit {c.id}[/yellow]{deco}", markup=True)
            for line in _graph_lines(repo, c):
                out.print(line, markup=False)
            out.print(f"| Author: {c.author}\n|", markup=False)
            for line in c.message.rstrip().splitlines():
                out.print(f"|     {line}", markup=False)
            out.print("|")
            continue
        out.print(f"[yellow]commit {c.id}[/yellow]{deco}", markup=True)
        if len(c.parents) > 1:
            out.print("Merge:  " + " ".join(p[:12] for p in c.parents))
        out.print(f"Author: {c.author}", markup=False)
        out.print(f"Date:   {_when(c.time, c.timezone)}\n")
        for line in c.message.rstrip().splitlines():
            out.print(f"    {line}", markup=False)
        out.print()


@cli.command()
@click.argument("name", required=False, shell_complete=complete_tag)
@click.argument("rev", default="HEAD", shell_complete=complete_rev)
@click.option("-d", "--delete", is_flag=True, help="Delete the tag NAME.")
@click.option("--json", "as_json", is_flag=True, help="List as JSON (schema mgit.tag/1).")
@click.pass_context
def tag(ctx: click.Context, name: str | None, rev: str, delete: bool, as_json: bool) -> None:
    """List tags, create tag NAME at REV, or delete it with -d."""
    repo = _repo(ctx)
    if as_json and name is None:
        _dump("mgit.tag/1", {"tags": [{"name": t, "commit": c} for t, c in sorted(repo.tags().items())]})
    elif name is None:
        for t in sorted(repo.tags()):
            click.echo(t)
    elif delete:
        repo.delete_tag(name)
    else:
        repo.tag(name, rev)


@cli.command()
@click.argument("name", required=False, shell_complete=complete_branch)
@click.argument("rev", required=False, shell_complete=complete_rev)
@click.option("-d", "--delete", is_flag=True, help="Delete the branch NAME (refused if not merged).")
@click.option("-D", "force_delete", is_flag=True, help="Delete the branch NAME, merged or not.")
@click.option("-f", "--force", is_flag=True, help="Move branch NAME to REV even if it exists.")
@click.option("-m", "--move", "rename", is_flag=True, help="Rename: `-m OLD NEW` (or `-m NEW`: the current branch).")
@click.option("-M", "force_rename", is_flag=True, help="Rename, replacing a branch NEW that exists (`-M OLD NEW`).")
@click.option("-r", "--remotes", "remotes_only", is_flag=True, help="List the remote-tracking branches.")
@click.option("-a", "--all", "list_all", is_flag=True, help="List local and remote-tracking branches.")
@click.option("--json", "as_json", is_flag=True, help="List as JSON (schema mgit.branch/1).")
@click.pass_context
def branch(
    ctx: click.Context,
    name: str | None,
    rev: str | None,
    delete: bool,
    force_delete: bool,
    force: bool,
    rename: bool,
    force_rename: bool,
    remotes_only: bool,
    list_all: bool,
    as_json: bool,
) -> None:
    """List branches, create branch NAME at REV (-f: move it there), rename (-m OLD NEW; -M
    replaces an existing NEW) or delete one (-d; -D even if not merged)."""
    repo = _repo(ctx)
    rename = rename or force_rename
    if name is None:
        if delete or force_delete or force or rename:
            raise click.UsageError("-d, -D, -f, -m and -M need a branch NAME")
        _list_branches(repo, remotes_only, list_all, as_json)
    elif delete or force_delete:
        if rev is not None:
            raise click.UsageError("-d/-D take one branch NAME")
        repo.delete_branch(name, force=force_delete)
        click.echo(f"Deleted branch {name}")
    elif rename:
        old = name if rev is not None else repo.refs.current_branch()
        if old is None:
            raise click.UsageError("HEAD is detached: name the branch to rename, mgit branch -m OLD NEW")
        repo.rename_branch(old, rev or name, force=force_rename)
    else:
        repo.create_branch(name, rev or "HEAD", force=force)


def _list_branches(repo: Repository, remotes_only: bool, list_all: bool, as_json: bool) -> None:
    """`mgit branch` listings: local (default), remote-tracking (-r) or both (-a); JSON holds both."""
    current = repo.refs.current_branch()
    local, tracking = repo.branches(), repo.remote_branches()
    if as_json:
        _dump(
            "mgit.branch/1",
            {
                "current": current,
                "head": repo.refs.head(),
                "branches": [{"name": b, "commit": c, "current": b == current} for b, c in sorted(local.items())],
                "remote_branches": [{"name": b, "commit": c} for b, c in sorted(tracking.items())],
            },
        )
        return
    if not remotes_only:
        for b in sorted(local):
            out.print(f"* [green]{b}[/green]" if b == current else f"  {b}", markup=True)
    if remotes_only or list_all:
        prefix = "remotes/" if list_all else ""
        for b in sorted(tracking):
            out.print(f"  [red]{prefix}{b}[/red]", markup=True)


@cli.command()
@click.argument("rev", default="HEAD", shell_complete=complete_rev)
@click.option("--soft", "mode", flag_value="soft", help="Move the branch only; keep the index and working tree.")
@click.option(
    "--mixed", "mode", flag_value="mixed", default=True, help="Also reset the index; keep the working files (default)."
)
@click.option("--hard", "mode", flag_value="hard", help="Also overwrite the index and working tree with REV's.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (schema mgit.reset/1).")
@click.pass_context
def reset(ctx: click.Context, rev: str, mode: str, as_json: bool) -> None:
    """Move the current branch (or detached HEAD) to REV; `mgit reset --hard HEAD^1` undoes a merge.
    `mgit reset [REV] -- PATH...` unstages paths (their index entries become REV's, default HEAD)."""
    repo = _repo(ctx)
    paths = _paths_after_dashdash()  # `mgit reset --` alone is a whole reset, as in git
    res = repo.reset(rev, mode=mode, paths=_abs(paths) if paths else None)
    if as_json:
        _dump("mgit.reset/1", vars(res))
        return
    if mode == "hard":
        click.echo(f"HEAD is now at {res.commit[:12]} {repo.graph.commit(res.commit).summary}")
    elif mode == "mixed" and res.unstaged:
        unstaged = repo.status().unstaged
        if unstaged:
            click.echo("Unstaged changes after reset:")
            for f in unstaged:
                click.echo(f"{f.change[0].upper()}\t{f.path}")


@cli.command()
@click.argument("rev", required=False, shell_complete=complete_rev)
@click.option("-b", "new_branch", metavar="NAME", help="Create branch NAME at REV (default HEAD) and switch to it.")
@click.option("-f", "--force", is_flag=True, help="Discard local changes in the way.")
@click.option("--include", multiple=True, metavar="GLOB", help="Sparse: only tensors matching (fnmatch, repeatable).")
@click.option("--exclude", multiple=True, metavar="GLOB", help="Sparse: leave out tensors matching (repeatable).")
@click.option("--full", is_flag=True, help="Back to a full checkout (every tensor).")
@click.option("--budget", metavar="SIZE", help="Refuse to read and fetch more than SIZE (e.g. 500MB, 2GiB).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (schema mgit.checkout/1).")
@click.pass_context
def checkout(
    ctx: click.Context,
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
    repo = _repo(ctx)
    paths = _paths_after_dashdash()
    res = repo.checkout(
        rev, _abs(paths) if paths else None, create_branch=new_branch, force=force,
        include=include, exclude=exclude, full=full, budget=budget,
    )  # fmt: skip
    if as_json:
        doc = {k: v for k, v in vars(res).items() if k != "cost"}
        doc["branch"] = repo.refs.current_branch()
        doc["cost"] = None if res.cost is None else {**vars(res.cost), "total": res.cost.total}
        _dump("mgit.checkout/1", doc)
        return
    if paths:
        err.print(f"restored {len(res.written)} file(s)")
        return
    summary = (
        f"{len(res.written)} file(s) written, {len(res.removed)} removed, {decimal(res.bytes_read)} read from the store"
    )
    if res.bytes_fetched:
        summary += f", {decimal(res.bytes_fetched)} fetched"
    if budget is not None:
        summary += f" (budget {budget})"
    if new_branch:
        err.print(f"Switched to a new branch '{new_branch}'")
    elif res.detached:
        err.print(
            f"[yellow]warning: HEAD is now detached at {res.commit[:12]}; commits made here belong to no branch "
            "(create one with `mgit checkout -b NAME`)[/yellow]",
            markup=True,
        )
    elif rev in repo.branches():
        err.print(f"Switched to branch '{rev}'")
    else:
        err.print(f"HEAD is at {res.commit[:12]}")
    err.print(summary)
    patterns = repo.sparse_patterns()
    if patterns is not None:
        left = f"; {len(res.left_out)} file(s) with no tensor selected left out" if res.left_out else ""
        err.print(f"sparse checkout: {patterns.describe()}{left}", markup=False)


def _usage_json(u: Usage) -> dict:
    return {
        "logical_bytes": u.logical_bytes,
        "unique_bytes": u.unique_bytes,
        "stored_bytes": u.stored_bytes,
        "new_stored_bytes": u.new_stored_bytes,
        "chunks": u.chunks,
        "dedup_ratio": round(u.dedup_ratio, 4),
        "compression_ratio": round(u.compression_ratio, 4),
    }


def _usage_line(u: Usage) -> str:
    return (
        f"{decimal(u.logical_bytes)} logical, {decimal(u.unique_bytes)} unique "
        f"(dedup {u.dedup_ratio:.2f}×), {decimal(u.stored_bytes)} stored (compression {u.compression_ratio:.2f}×), "
        f"{decimal(u.new_stored_bytes)} new vs parent"
    )


@cli.command()
@click.argument("rev", default="HEAD", shell_complete=complete_rev)
@click.option("--stats", is_flag=True, help="Add storage statistics (as `mgit du REV`).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (schema mgit.show/1).")
@click.pass_context
@_paged
def show(ctx: click.Context, rev: str, stats: bool, as_json: bool) -> None:
    """Show a commit: files, tensor counts, logical vs stored bytes."""
    repo = _repo(ctx)
    info = repo.show(rev)
    usage = repo.du(rev) if stats else None
    plan = repo.merge_record(rev)
    c = info.commit
    if as_json:
        doc = {
            "id": c.id,
            "tree": c.tree,
            "parents": list(c.parents),
            "author": c.author,
            "time": c.time,
            "message": c.message,
            "files": [vars(f) for f in info.files],
            "logical_bytes": info.logical_bytes,
            "stored_bytes": info.stored_bytes,
        }
        if usage is not None:
            doc["usage"] = _usage_json(usage)
        if plan is not None:
            doc["plan"] = plan
        _dump("mgit.show/1", doc)
        return
    out.print(f"[yellow]commit {c.id}[/yellow]", markup=True)
    if c.parents:
        out.print("Parents: " + " ".join(p[:12] for p in c.parents))
    out.print(f"Author:  {c.author}\nDate:    {_when(c.time, c.timezone)}\n", markup=False)
    for line in c.message.rstrip().splitlines():
        out.print(f"    {line}", markup=False)
    table = Table(show_edge=False, pad_edge=False)
    for col, justify in (
        ("path", "left"),
        ("kind", "left"),
        ("tensors", "right"),
        ("logical", "right"),
        ("stored", "right"),
    ):
        table.add_column(col, justify=justify)
    for f in info.files:
        table.add_row(
            f.path, f.kind, str(f.tensors) if f.tensors else "", decimal(f.logical_bytes), decimal(f.stored_bytes)
        )
    out.print()
    out.print(table)
    ratio = info.stored_bytes / info.logical_bytes if info.logical_bytes else 1.0
    out.print(
        f"\n{len(info.files)} file(s), {decimal(info.logical_bytes)} logical, "
        f"{decimal(info.stored_bytes)} stored ({ratio:.2f}×)"
    )
    if usage is not None:
        out.print(f"storage: {_usage_line(usage)}")
    if plan is not None:
        _print_plan(plan)


def _print_plan(plan: dict) -> None:
    b = plan["bytes"]
    params = ", ".join(f"{k}={v}" for k, v in plan["parameters"].items())
    out.print(f"\nmerge: {plan['method']} ({params}), seed {plan['seed']}, mgit {plan['mgit_version']}")
    if plan["base"] is None:  # a method without a base: the first expert is the reference
        out.print(f"  base    none (reference: the first expert, {plan.get('reference', '?')[:12]})")
    else:
        out.print(f"  base    {plan['base'][:12]}")
    for e in plan["experts"]:
        out.print(f"  expert  {e['commit'][:12]}  {e['name']}")
    measured = f", measured {decimal(b['experts_measured'])}" if "experts_measured" in b else ""
    out.print(
        f"  expert reads: {b['expert_chunks_estimated']} chunk(s), estimated {decimal(b['experts_estimated'])}"
        f"{measured}; base reads {decimal(b.get('base_measured', b['base_estimated']))}"
        + (f"; output {decimal(b['output_logical'])}" if "output_logical" in b else "")  # older records lack it
    )
    decisions: dict[str, int] = {}
    for t in plan["tensors"]:
        decisions[t.get("decision") or "planned"] = decisions.get(t.get("decision") or "planned", 0) + 1
    if "budget" in plan:
        out.print("  " + _budget_line(plan["budget"]))
    untouched = sum(1 for t in plan["tensors"] if not any(t["expert_chunks_read"]))
    out.print(
        f"  tensors: {', '.join(f'{n} {d}' for d, n in sorted(decisions.items()))}; "
        f"{untouched} with every expert identical to the base (no expert read)"
    )


def _budget_line(b: dict) -> str:
    """One line on a budgeted plan: limit, planned vs full bytes, captured share, error bound."""
    limit = "no budget" if b["limit_bytes"] is None else f"budget {b['given']} = {decimal(b['limit_bytes'])}"
    rounding = b["rounding_allowance"]
    bound = "" if b["error_bound"] is None else (
        f"; error bound {b['error_bound']:.4g} (+ rounding {'unknown' if rounding is None else f'{rounding:.3g}'})"
    )  # fmt: skip
    best = (
        f" (any choice within the budget: at most {b['captured_share_max']:.1%})"
        if b["limit_bytes"] is not None and "captured_share_max" in b
        else ""
    )
    analyzed = b["analyze"]
    extra = (
        f"; analyzed {analyzed['pairs']} chunk pair(s), reading {decimal(analyzed['bytes_read'])}"
        if analyzed["pairs"]
        else ""
    )
    estimated = analyzed.get("pairs_by_source", {}).get("estimated", 0)  # older records lack it
    if estimated:
        extra += (
            f"; ‖Δ‖ of {estimated} chunk pair(s) estimated from chunk norms (analysis capped at "
            f"{decimal(analyzed['cap_bytes'])}; reading them all: {decimal(analyzed['priced_bytes'])})"
        )
    return (
        f"{limit} ({b['select']}): {b['chunks_chosen']} of {b['chunks_candidate']} expert chunk(s), "
        f"{decimal(b['expert_bytes_planned'])} of {decimal(b['expert_bytes_full'])}; "
        f"captured {b['captured_share']:.1%} of Σ‖wΔ‖²{best}{bound}{extra}"
    )


def _print_explain(plan: MergePlan) -> None:
    """Per layer: candidate and chosen chunks, bytes, captured share and error bound."""
    from mgit.merge.budget.report import TensorBudget
    from mgit.model.layers import layer_of

    report = plan.budget
    assert report is not None
    rows: dict[str, TensorBudget] = {}
    for tp in plan.tensors:
        tb = report.tensors.get(tp.name)
        if tb is None:
            continue
        layer = layer_of(tp.name)
        row = rows.setdefault("—" if layer is None else str(layer), TensorBudget())
        for name in ("candidates", "chosen", "full_bytes", "planned_bytes", "energy", "captured", "bound"):
            setattr(row, name, getattr(row, name) + getattr(tb, name))
    table = Table(show_edge=False, pad_edge=False)
    for col in ("layer", "chunks", "chosen", "naive", "planned", "captured", "bound"):
        table.add_column(col, justify="left" if col == "layer" else "right")
    affine = report.error_bound is not None
    for layer, row in sorted(rows.items(), key=lambda kv: (kv[0] != "—", int(kv[0]) if kv[0] != "—" else -1)):
        share = row.captured / row.energy if row.energy > 0 else 1.0
        table.add_row(
            layer, str(row.candidates), str(row.chosen), decimal(row.full_bytes), decimal(row.planned_bytes),
            f"{share:.1%}", f"{row.bound:.4g}" if affine else "—",
        )  # fmt: skip
    out.print(table)


@cli.command()
@click.argument("rev", required=False, shell_complete=complete_rev)
@click.option("-n", "--max-count", type=int, default=20, help="Commits to list when no REV is given.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (schema mgit.du/1).")
@click.pass_context
def du(ctx: click.Context, rev: str | None, max_count: int, as_json: bool) -> None:
    """Logical, unique and stored bytes per commit (REV, or HEAD's history) and for the store."""
    repo = _repo(ctx)
    commits = [repo.resolve(rev)] if rev else [c.id for c in repo.log(max_count=max_count)]
    rows = [(sha, repo.du(sha)) for sha in commits]
    store = repo.store_usage()
    if as_json:
        _dump(
            "mgit.du/1",
            {
                "commits": [{"id": sha, **_usage_json(u)} for sha, u in rows],
                "store": {
                    "packs": store.packs,
                    "chunks": store.chunks,
                    "raw_bytes": store.raw_bytes,
                    "stored_bytes": store.stored_bytes,
                    "compression_ratio": round(store.compression_ratio, 4),
                    "chunks_by_encoding": store.by_encoding,
                },
            },
        )
        return
    table = Table(show_edge=False, pad_edge=False)
    for col in ("commit", "logical", "unique", "stored", "new", "dedup", "compression"):
        table.add_column(col, justify="left" if col == "commit" else "right")
    for sha, u in rows:
        table.add_row(
            sha[:12],
            decimal(u.logical_bytes),
            decimal(u.unique_bytes),
            decimal(u.stored_bytes),
            decimal(u.new_stored_bytes),
            f"{u.dedup_ratio:.2f}×",
            f"{u.compression_ratio:.2f}×",
        )
    out.print(table)
    kinds = ", ".join(f"{n} {k}" for k, n in sorted(store.by_encoding.items()))
    out.print(
        f"\nstore: {store.chunks} chunks in {store.packs} pack(s) ({kinds}); {decimal(store.raw_bytes)} raw, "
        f"{decimal(store.stored_bytes)} stored (compression {store.compression_ratio:.2f}×)"
    )


@cli.command()
@click.option(
    "--grace",
    type=float,
    default=DEFAULT_GRACE_SECONDS,
    show_default=True,
    metavar="SECONDS",
    help="Keep unreferenced data younger than this (a write may be in flight).",
)
@click.option("--now", is_flag=True, help="Same as --grace 0.")
@click.pass_context
def gc(ctx: click.Context, grace: float, now: bool) -> None:
    """Remove chunks and objects nothing references; repack the rest."""
    report = _repo(ctx).gc(0 if now else grace)
    c = report.chunks
    err.print(
        f"removed {c.removed_chunks} chunk(s) and {report.objects_removed} object(s); kept {c.kept_chunks} chunk(s); "
        f"chunk store {decimal(c.bytes_before)} → {decimal(c.bytes_after)}"
        + (f"; removed {report.leftovers_removed} leftover temporary file(s)" if report.leftovers_removed else "")
    )


def _print_reflog(repo: Repository, ref: str) -> None:
    entries = repo.reflog(ref)
    for i, (_, new, when, message) in enumerate(entries):
        stamp = datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%d %H:%M")
        out.print(f"{new[:12]} {ref}@{{{i}}} {stamp} {escape(message)}")
    if not entries:
        err.print(_no_reflog(repo.reflog_ref(ref), ref), markup=False)


def _no_reflog(full: str, name: str) -> str:
    """Why a reflog is empty: a tag keeps none (as in git); other refs, no move recorded yet."""
    if full.startswith("refs/tags/"):
        return f"{full} has no reflog: tags keep none (as in git); `mgit show {name}` shows it"
    return f"{full} has no reflog entries yet"


def _reflog_json(repo: Repository, ref: str) -> None:
    entries = [{"old": old or None, "new": new, "time": when, "message": m} for old, new, when, m in repo.reflog(ref)]
    _dump("mgit.reflog/1", {"ref": ref, "entries": entries})


@cli.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (schema mgit.reflog/1).")
@click.pass_context
def reflog(ctx: click.Context, as_json: bool) -> None:
    """Where HEAD has been; `reflog show REF`, `reflog expire` (forget old entries)."""
    if ctx.invoked_subcommand is None:
        with paging(_pager()):
            (_reflog_json if as_json else _print_reflog)(_repo(ctx), "HEAD")


@reflog.command("show")
@click.argument("ref", default="HEAD", shell_complete=complete_rev)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (schema mgit.reflog/1).")
@click.pass_context
@_paged
def reflog_show(ctx: click.Context, ref: str, as_json: bool) -> None:
    """The moves of REF (HEAD, a branch, a tag, origin/main, refs/heads/NAME), newest first."""
    (_reflog_json if as_json else _print_reflog)(_repo(ctx), ref)


@reflog.command("expire")
@click.option("--older-than", "days", type=float, default=90.0, show_default=True, help="Days to keep.")
@click.option("--all", "everything", is_flag=True, help="Forget every entry (then gc keeps only what refs reach).")
@click.pass_context
def reflog_expire(ctx: click.Context, days: float, everything: bool) -> None:
    """Forget reflog entries, so that gc can reclaim what only they kept (deleted branches)."""
    n = _repo(ctx).reflog_expire(None if everything else days)
    err.print(f"forgot {n} reflog entr{'y' if n == 1 else 'ies'}; run `mgit gc` to reclaim what they kept alive")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (schema mgit.fsck/1).")
@click.option("--repair", is_flag=True, help="Drop damaged chunks, recover them from working files and remotes.")
@click.pass_context
def fsck(ctx: click.Context, as_json: bool, repair: bool) -> None:
    """Verify every object and chunk; exit 1 if anything is wrong."""
    repo = _repo(ctx)
    if repair:
        r = repo.fsck_repair()
        remotes = ", ".join(f"{n} from {name}" for name, n in r.from_remotes.items()) or "none from remotes"
        rebuilt = f"rebuilt {len(r.rebuilt_indexes)} pack index(es); " if r.rebuilt_indexes else ""
        err.print(
            f"repair: {rebuilt}dropped {len(r.dropped)} damaged chunk(s); recovered {r.from_worktree} from the "
            f"working tree, {remotes}; {len(r.missing)} still missing"
        )
        for cid, who in sorted(r.missing.items()):
            err.print(f"  still missing: chunk {cid[:12]} of {who}", markup=False)
        for line in _graph_repair_lines(r):
            err.print(line, markup=False)
    problems = repo.fsck()
    leftovers = repo.leftovers()
    if as_json:
        _dump(
            "mgit.fsck/1",
            {"ok": not problems, "problems": problems, "partial": repo.is_partial, "leftovers": leftovers},
        )
    else:
        for p in problems:
            out.print(f"[red]problem:[/red] {p}", markup=True, highlight=False)
        for p in leftovers:
            err.print(f"note: leftover temporary file {p} (left by a killed mgit; not damage): `mgit gc` removes it",
                      markup=False, highlight=False)  # fmt: skip
        ok = "ok: every object and chunk verified"
        if repo.is_partial:
            ok += " (a partial clone: chunks not fetched yet are not checked)"
        out.print(ok if not problems else f"{len(problems)} problem(s) found")
    if problems:
        raise click.exceptions.Exit(1)


def _graph_repair_lines(r: Repair) -> list[str]:
    """What ``fsck --repair`` did to git objects, refs and packs, one line each."""
    g = r.graph
    lines = [f"repair: rewrote damaged pack(s): {', '.join(r.rewritten_packs)}"] if r.rewritten_packs else []
    lines += [f"repair: dropped the lost staged statistics of {path}" for path in g.index_stats]
    lines += [f"repair: removed damaged git object {sha[:12]}, which nothing reaches" for sha in g.removed]
    if g.packed_lines:
        lines.append(f"repair: rewrote packed-refs without what names no readable ref ({', '.join(g.packed_lines)})")
    if g.reflog_lines:
        lines.append(f"repair: dropped {g.reflog_lines} reflog line(s) that could not be read or name a lost object")
    if g.objects or g.objects_lost or g.refs or g.refs_lost:
        counts = {name: list(g.objects.values()).count(name) for name in sorted(set(g.objects.values()))}
        by_remote = ", ".join(f"{n} from {name}" for name, n in counts.items())
        lines.append(
            f"repair: restored {len(g.objects)} git object(s){f' ({by_remote})' if by_remote else ''} and "
            f"{len(g.refs)} ref(s); {len(g.objects_lost)} object(s) and {len(g.refs_lost)} ref(s) still damaged"
        )
    lines += [f"  restored: {ref} from {source}" for ref, source in sorted(g.refs.items())]
    lines += [f"  still damaged: git object {sha[:12]} needed by {who}" for sha, who in sorted(g.objects_lost.items())]
    lines += [f"  still damaged: {ref}: {why}" for ref, why in sorted(g.refs_lost.items())]
    return lines


def _num(x: float | None, fmt: str = ".3g") -> str:
    return "" if x is None else format(x, fmt)


def _bar(value: float | None, top: float, width: int = 20) -> str:
    if value is None or top <= 0:
        return ""
    filled = value / top * width
    return "█" * int(filled) + ("▌" if filled - int(filled) >= 0.5 else "")


def _tensor_json(t: TensorDiff) -> dict:
    d = dict(vars(t))
    d["shape_a"] = list(t.shape_a) if t.shape_a is not None else None
    d["shape_b"] = list(t.shape_b) if t.shape_b is not None else None
    return d


@cli.command()
@click.argument("revs", nargs=-1, shell_complete=complete_rev)
@click.option("--staged", is_flag=True, help="Compare the index (not the working tree) with REV/HEAD.")
@click.option("--stat", is_flag=True, help="One line per file, from chunk ids only (no tensor data read).")
@click.option("--by-layer", is_flag=True, help="Group by layer index and module (attn, mlp, norm, embed, experts.N).")
@click.option("-k", "patterns", multiple=True, metavar="PATTERN", help="fnmatch pattern on tensor names (repeatable).")
@click.option("--model", metavar="DIR", help="Only the model in directory DIR.")
@click.option("--top", type=int, default=40, show_default=True, help="Rows to show, largest relative change first.")
@click.option("--plot", type=click.Path(dir_okay=False), metavar="PNG", help="Write a layers × modules heatmap.")
@click.option("--full", is_flag=True, help="Whole text-file diffs (longer ones are cut to their first hunks).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (schema mgit.diff/1).")
@click.pass_context
@_paged
def diff(
    ctx: click.Context,
    revs: tuple[str, ...],
    staged: bool,
    stat: bool,
    by_layer: bool,
    patterns: tuple[str, ...],
    model: str | None,
    top: int,
    plot: str | None,
    full: bool,
    as_json: bool,
) -> None:
    """Tensor-level diff: `mgit diff A B`, `mgit diff A` (vs working tree), `mgit diff` (HEAD vs working tree)."""
    if len(revs) > 2:
        raise click.UsageError("give at most two revisions")
    a = revs[0] if revs else None
    b = revs[1] if len(revs) > 1 else None
    from mgit.diff.plot import heatmap
    from mgit.diff.summary import by_layer as by_layer_groups
    from mgit.diff.text import shorten

    result = _repo(ctx).diff(
        a, b, staged=staged, numeric=not stat, patterns=patterns, model=os.path.abspath(model) if model else None
    )
    groups = by_layer_groups(result.tensors) if (by_layer or plot or as_json) else []
    if plot:
        heatmap(groups, plot, f"relative change {result.a} → {result.b}")
    if as_json:
        _dump(
            "mgit.diff/1",
            {
                "a": result.a,
                "b": result.b,
                "numeric": result.numeric,
                "tensors": [_tensor_json(t) for t in result.tensors],
                "files": [vars(f) for f in result.files],
                "groups": [
                    {
                        "layer": g.layer,
                        "module": g.module,
                        "tensors": g.tensors,
                        "changed": g.changed,
                        "delta_norm": g.delta_norm,
                        "relative_change": g.relative_change,
                    }
                    for g in groups
                ],
            },
        )
        return
    changed = result.changed
    if stat:
        _print_stat(result)
    elif by_layer:
        _print_groups(groups)
    else:
        _print_tensors(changed, top)
    for f in result.files if not stat else ():
        if f.text:
            out.print(f.text if full else shorten(f.text, f.path), markup=False, highlight=False, end="")
    if not changed and not any(f.text for f in result.files):
        err.print(f"no differences between {result.a} and {result.b}")


def _print_tensors(changed: list[TensorDiff], top: int) -> None:
    if not changed:
        return
    ranked = sorted(changed, key=lambda t: (t.relative_change is None, -(t.relative_change or 0), t.name))
    table = Table(show_edge=False, pad_edge=False)
    for col in ("tensor", "status", "chunks", "‖Δ‖", "‖Δ‖/‖A‖", "cos(A,B)", "max|Δ|"):
        table.add_column(col, justify="left" if col in ("tensor", "status") else "right", overflow="fold")
    for t in ranked[:top]:
        status = t.status if t.status != "changed" or t.file_a == t.file_b else "changed, moved"
        table.add_row(
            t.name,
            status,
            f"{t.chunks_changed}/{t.chunks_total}",
            _num(t.delta_norm),
            _num(t.relative_change),
            _num(t.cosine, ".6f"),
            _num(t.max_abs_delta),
        )
    out.print(table)
    if len(ranked) > top:
        out.print(f"… and {len(ranked) - top} more changed tensor(s) (--top N shows more)")


def _tensor_counts(changed: int, added: int, removed: int, moved: int) -> str:
    """'2 tensor(s) moved', '5 tensor(s): 3 changed, 2 moved' or 'no tensor changed'."""
    kinds = ("changed", "added", "removed", "moved")
    parts = [(n, what) for n, what in zip((changed, added, removed, moved), kinds, strict=True) if n]
    if len(parts) == 1:
        return f"{parts[0][0]} tensor(s) {parts[0][1]}"
    listed = ", ".join(f"{n} {what}" for n, what in parts)
    return f"{sum(n for n, _ in parts)} tensor(s): {listed}" if parts else "no tensor changed"


def _line_counts(text: str | None) -> str:
    """'+3 -1' of a unified diff (after any mode-change line), or the one-line summary of a
    binary or large file."""
    if not text:
        return ""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("--- ")), None)
    if start is None:
        return "; ".join(lines)
    body = lines[start + 2 :]
    counts = f"+{sum(1 for x in body if x.startswith('+'))} -{sum(1 for x in body if x.startswith('-'))}"
    return "; ".join([*lines[:start], counts])


def _print_stat(result: ModelDiff) -> None:
    """One line per file (tensor counts by kind, or +/- lines), then the totals. A tensor that
    moved between shards unchanged counts as moved, never as changed."""
    for f in result.files:
        if f.kind == "safetensors":
            counts = _tensor_counts(f.tensors_changed, f.tensors_added, f.tensors_removed, f.tensors_moved)
            chunks = f", {f.chunks_changed} chunk(s), {decimal(f.bytes_changed)}" if f.chunks_changed else ""
            out.print(f" {f.path} | {f.status}: {counts}{chunks}", markup=False)
        else:
            lines = _line_counts(f.text)
            out.print(f" {f.path} | {f.status}" + (f": {lines}" if lines else ""), markup=False)
    by_status: dict[str, int] = {}
    for t in result.changed:
        kind = t.status if t.status in ("added", "removed", "moved") else "changed"
        by_status[kind] = by_status.get(kind, 0) + 1
    changed = result.changed
    counts = _tensor_counts(*(by_status.get(k, 0) for k in ("changed", "added", "removed", "moved")))
    out.print(
        f" {len(result.files)} file(s) changed; {counts}; "
        f"{sum(t.chunks_changed for t in changed)} chunk(s), {decimal(sum(t.bytes_changed for t in changed))}"
    )


def _print_groups(groups: list) -> None:
    top = max((g.relative_change or 0 for g in groups), default=0)
    table = Table(show_edge=False, pad_edge=False)
    for col in ("layer", "module", "changed", "‖Δ‖/‖A‖", ""):
        table.add_column(col, justify="left" if col in ("module", "") else "right")
    for g in groups:
        table.add_row(
            "" if g.layer is None else str(g.layer),
            g.module,
            f"{g.changed}/{g.tensors}",
            _num(g.relative_change),
            _bar(g.relative_change, top),
        )
    out.print(table)


def _numbers(text: str | None) -> float | list[float] | None:
    """'0.5' → 0.5; '0.5,0.3,0.2' → one value per expert."""
    if text is None:
        return None
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a number or a comma-separated list of numbers") from None
    return values[0] if len(values) == 1 else values


def _param_pairs(pairs: tuple[str, ...]) -> dict[str, object]:
    out: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise click.BadParameter(f"--param {pair!r}: expected NAME=VALUE")
        lowered = value.lower()
        out[key] = lowered == "true" if lowered in ("true", "false") else _numbers(value)
    return out


@cli.command()
@click.argument("experts", nargs=-1, shell_complete=complete_rev)
@click.option("--method", help="linear, task_arithmetic, ties, dare_linear, dare_ties, ... (see docs/merging.md)")
@click.option("--config", "config", type=click.Path(dir_okay=False), help="a mergekit YAML config instead")
@click.option("--weights", "weight", metavar="W[,W...]", help="weight per expert (or one for all)")
@click.option("--density", metavar="D[,D...]", help="fraction of each delta kept (ties/dare/breadcrumbs/della)")
@click.option("--lambda", "lambda_", type=float, help="scale of the merged delta")
@click.option("--epsilon", metavar="E[,E...]", help="della: spread of keep probabilities")
@click.option("--gamma", metavar="G[,G...]", help="breadcrumbs: fraction of largest magnitudes removed")
@click.option("--t", "t", type=float, help="slerp: interpolation factor")
@click.option("--normalize/--no-normalize", default=None, help="divide by the sum of weights")
@click.option("--rescale/--no-rescale", default=None, help="restore the L1 norm of sparsified deltas")
@click.option("--param", "extra", multiple=True, metavar="NAME=VALUE", help="any other mergekit parameter")
@click.option("--base", metavar="REV", shell_complete=complete_rev, help="base revision (default HEAD)")
@click.option("-b", "branch", metavar="NAME", help="put the merge on a new branch NAME")
@click.option("-m", "--message", help="commit message")
@click.option("--seed", type=int, help="seed of random methods (recorded; default random)")
@click.option("--dtype", help="working dtype, e.g. F32 (default: promotion of the inputs)")
@click.option("--out-dtype", help="dtype of the merged tensors, e.g. BF16")
@click.option("--model", metavar="DIR", help="the model directory, when a commit holds several")
@click.option("--allow-missing", is_flag=True, help="an expert lacking a tensor contributes the base's")
@click.option(
    "--budget",
    metavar="SIZE|N%",
    help="cap on expert chunk bytes read (or fetched): 2GB (10^9), 500MiB (2^20), or N% of a full merge's",
)
@click.option(
    "--budget-select",
    type=click.Choice(["importance", "uniform"]),
    default="importance",
    show_default=True,
    help="how chunks are chosen under --budget (uniform: at random, seeded; for comparisons)",
)
@click.option("--explain", is_flag=True, help="print the budgeted plan per layer (bytes, captured share, bound)")
@click.option("--dry-run", is_flag=True, help="print the plan (what would be read); read no tensor data")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="the merge result as JSON (mgit.merge/1); with --dry-run/--explain the plan (mgit.plan/1)",
)
@click.pass_context
def merge(
    ctx: click.Context,
    experts: tuple[str, ...],
    method: str | None,
    config: str | None,
    weight: str | None,
    density: str | None,
    lambda_: float | None,
    epsilon: str | None,
    gamma: str | None,
    t: float | None,
    normalize: bool | None,
    rescale: bool | None,
    extra: tuple[str, ...],
    base: str | None,
    branch: str | None,
    message: str | None,
    seed: int | None,
    dtype: str | None,
    out_dtype: str | None,
    model: str | None,
    allow_missing: bool,
    budget: str | None,
    budget_select: str,
    explain: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Merge EXPERTS (revisions) into the base as a commit with parents [base, experts...]."""
    if (method is None) == (config is None):
        raise click.UsageError("give --method with EXPERTS, or --config FILE")
    config = os.path.abspath(config) if config else None
    repo = _repo(ctx)
    given = {
        "weight": _numbers(weight),
        "density": _numbers(density),
        "lambda": lambda_,
        "epsilon": _numbers(epsilon),
        "gamma": _numbers(gamma),
        "t": t,
        "normalize": normalize,
        "rescale": rescale,
    }
    params = {k: v for k, v in given.items() if v is not None} | _param_pairs(extra)
    model_dir = os.path.abspath(model) if model else None
    if dry_run or explain:
        plan, setup = repo.merge_plan(
            list(experts), method, base, model=model_dir, allow_missing=allow_missing, config=config,
            budget=budget, budget_select=budget_select, explain=explain, seed=seed or 0, dtype=dtype,
            out_dtype=out_dtype, **params,
        )  # fmt: skip
        from mgit.merge.record import plan_record

        record = plan_record(plan, setup, None, __version__)
        if as_json:
            click.echo(json.dumps(record, indent=2))
        elif explain:
            _print_plan(record)
            _print_explain(plan)
        else:
            _print_plan(record)
            table = Table(show_edge=False, pad_edge=False)
            for col in ("tensor", *[e["name"] for e in record["experts"]]):
                table.add_column(col, justify="left" if col == "tensor" else "right", overflow="fold")
            for tp in plan.tensors:
                cells = [
                    f"{len(r)}/{len(tp.base.chunks)} {decimal(b)}" for r, b in zip(tp.reads, tp.read_bytes, strict=True)
                ]
                table.add_row(tp.name, *cells)
            out.print(table)
        return
    sha = repo.merge(
        list(experts), method, base, branch=branch, message=message, seed=seed, dtype=dtype,
        out_dtype=out_dtype, model=model_dir, allow_missing=allow_missing, config=config, budget=budget,
        budget_select=budget_select, **params,
    )  # fmt: skip
    record = repo.merge_record(sha)
    if as_json:
        _dump("mgit.merge/1", _merge_json(repo, sha, record))
        return
    b = record["bytes"]
    out.print(  # the merge's result: stdout, as every result (progress and warnings go to stderr)
        f"merged {len(record['experts'])} expert(s) with {record['method']} → {sha[:12]} "
        f"on {repo.refs.current_branch() or 'HEAD'}; "
        f"read {decimal(b['experts_measured'])} of expert chunks ({b['expert_chunks_measured']}), "
        f"{decimal(b['base_measured'])} of base chunks"
    )
    if "budget" in record:
        out.print("  " + _budget_line(record["budget"]))


def _merge_json(repo: Repository, sha: str, record: dict) -> dict:
    """A merge's result for scripts: the commit, the bytes read and the plan in summary."""
    decisions: dict[str, int] = {}
    for t in record["tensors"]:
        decisions[t.get("decision") or "planned"] = decisions.get(t.get("decision") or "planned", 0) + 1
    return {
        "commit": sha,
        "branch": repo.refs.current_branch(),
        "method": record["method"],
        "parameters": record["parameters"],
        "seed": record["seed"],
        "base": record["base"],
        "experts": record["experts"],
        "bytes": record["bytes"],
        "plan": {
            "tensors": len(record["tensors"]),
            "decisions": decisions,
            "untouched": sum(1 for t in record["tensors"] if not any(t["expert_chunks_read"])),
            "budget": record.get("budget"),
        },
    }


# -- remotes ----------------------------------------------------------------------------------


def _transfer_json(kind: str, remote: str, t: Transfer) -> dict:
    return {
        "kind": kind,
        "remote": remote,
        "objects": t.objects,
        "chunks": t.chunks,
        "bytes": t.bytes,
        "present_objects": t.present_objects,
        "present_chunks": t.present_chunks,
        "refs": {r: {"old": old, "new": new} for r, (old, new) in sorted(t.refs.items())},
    }


def _transfer_line(verb: str, t: Transfer) -> str:
    return (
        f"{verb} {t.chunks} chunk(s) and {t.objects} object(s), {decimal(t.bytes)}; "
        f"{t.present_chunks} chunk(s) and {t.present_objects} object(s) were already there"
    )


@cli.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="List as JSON (schema mgit.remote/1).")
@click.pass_context
def remote(ctx: click.Context, as_json: bool) -> None:
    """List remotes; `remote add NAME URL`, `remote remove NAME`."""
    if ctx.invoked_subcommand is None and as_json:
        _dump("mgit.remote/1", {"remotes": [{"name": n, "url": u} for n, u in sorted(_repo(ctx).remotes().items())]})
    elif ctx.invoked_subcommand is None:
        for name, url in sorted(_repo(ctx).remotes().items()):
            out.print(f"{name}\t{url}")


@remote.command("add")
@click.argument("name")
@click.argument("url")
@click.option("--token-file", type=click.Path(dir_okay=False), help="File holding the HTTP bearer token.")
@click.pass_context
def remote_add(ctx: click.Context, name: str, url: str, token_file: str | None) -> None:
    """Add a remote: a directory, http(s)://host:port/repo or s3://bucket/prefix."""
    _repo(ctx).remote_add(name, url, token_file)


@remote.command("remove")
@click.argument("name", shell_complete=complete_remote)
@click.pass_context
def remote_remove(ctx: click.Context, name: str) -> None:
    """Forget a remote (and its remote-tracking branches)."""
    _repo(ctx).remote_remove(name)


@cli.command()
@click.argument("remote_name", metavar="[REMOTE]", default="origin", shell_complete=complete_remote)
@click.argument("branch", required=False, shell_complete=complete_branch)
@click.option("-f", "--force", is_flag=True, help="Move the remote branch even if that discards its commits.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (schema mgit.transfer/1).")
@click.pass_context
def push(ctx: click.Context, remote_name: str, branch: str | None, force: bool, as_json: bool) -> None:
    """Send a branch (default: the current one) and the chunks the remote lacks."""
    t = _repo(ctx).push(remote_name, branch, force=force)
    if as_json:
        _dump("mgit.transfer/1", _transfer_json("push", remote_name, t))
        return
    err.print(_transfer_line("sent", t))
    for ref, (old, new) in t.refs.items():
        what = "up to date" if old == new else f"{(old or '(new)')[:12]} → {new[:12]}"
        err.print(f"{remote_name} {ref.removeprefix('refs/heads/')}: {what}")


@cli.command()
@click.argument("remote_name", metavar="[REMOTE]", default="origin", shell_complete=complete_remote)
@click.option(
    "--chunks",
    "chunks_rev",
    metavar="REV",
    shell_complete=complete_rev,
    help="Fill in every chunk of REV (a partial clone's).",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (schema mgit.transfer/1).")
@click.pass_context
def fetch(ctx: click.Context, remote_name: str, chunks_rev: str | None, as_json: bool) -> None:
    """Receive the remote's branches and tags (and their chunks, unless a partial clone)."""
    repo = _repo(ctx)
    t = repo.fetch(remote_name, chunks=chunks_rev)
    if as_json:
        _dump("mgit.transfer/1", _transfer_json("fetch", remote_name, t))
    else:
        err.print(_transfer_line("received", t))
        _print_ref_moves(repo, remote_name, t)


def _ref_move_line(repo: Repository, remote_name: str, ref: str, old: str | None, new: str) -> str | None:
    """git fetch's line for one of the remote's refs: how its local copy moved (None: it did not)."""
    local = Repository.tracking_ref(remote_name, ref)
    if local is None or old == new:
        return None
    src = ref.removeprefix("refs/heads/").removeprefix("refs/tags/")
    dst = local.removeprefix("refs/remotes/").removeprefix("refs/tags/")
    if ref.startswith("refs/tags/"):
        if old is None:
            return f" * {'[new tag]':<17} {src} -> {dst}"
        return f" ! {'[rejected]':<17} {src} -> {dst}  (would clobber existing tag)"
    if old is None:
        return f" * {'[new branch]':<17} {src} -> {dst}"
    if is_ancestor(repo.graph, old, new):
        return f"   {f'{old[:7]}..{new[:7]}':<17} {src} -> {dst}"
    return f" + {f'{old[:7]}...{new[:7]}':<17} {src} -> {dst}  (forced update)"


def _print_ref_moves(repo: Repository, remote_name: str, t: Transfer) -> None:
    """Which local refs a fetch moved, as git prints them (nothing when none did)."""
    lines = [_ref_move_line(repo, remote_name, ref, old, new) for ref, (old, new) in sorted(t.refs.items())]
    lines = [line for line in lines if line is not None]
    if lines:
        err.print(f"From {repo.remotes().get(remote_name, remote_name)}", markup=False)
        for line in lines:
            err.print(line, markup=False)


@cli.command()
@click.argument("remote_name", metavar="[REMOTE]", default="origin", shell_complete=complete_remote)
@click.argument("branch", required=False, shell_complete=complete_branch)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (schema mgit.transfer/1).")
@click.pass_context
def pull(ctx: click.Context, remote_name: str, branch: str | None, as_json: bool) -> None:
    """Fetch, then fast-forward the current branch (diverged history: use `mgit merge`)."""
    repo = _repo(ctx)
    before = repo.refs.head()
    t = repo.pull(remote_name, branch)
    after = repo.refs.head()
    if as_json:
        head = {"branch": repo.refs.current_branch(), "old": before, "new": after}
        _dump("mgit.transfer/1", {**_transfer_json("pull", remote_name, t), "head": head})
        return
    err.print(_transfer_line("received", t))
    _print_ref_moves(repo, remote_name, t)
    if before == after:
        click.echo("Already up to date.")
    else:
        click.echo(f"Updating {(before or '0' * 7)[:7]}..{(after or '')[:7]}\nFast-forward")


@cli.command()
@click.argument("url")
@click.argument("path", required=False)
@click.option("--partial", is_flag=True, help="Fetch the graph only; chunks come when a command needs them.")
@click.option("-b", "--branch", help="Branch to check out (default: the remote's HEAD).")
@click.option("--token-file", type=click.Path(dir_okay=False), help="File holding the HTTP bearer token.")
@click.option("--include", multiple=True, metavar="GLOB", help="Sparse checkout: only tensors matching (repeatable).")
@click.option("--exclude", multiple=True, metavar="GLOB", help="Sparse checkout: leave out tensors matching.")
@click.option("--budget", metavar="SIZE", help="Refuse a checkout reading and fetching more than SIZE (e.g. 500MB).")
@click.option("--json", "as_json", is_flag=True, help="What was received (schema mgit.transfer/1).")
def clone(
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
        url, dest, partial=partial, branch=branch, token_file=token_file, include=include, exclude=exclude,
        budget=budget,
    )  # fmt: skip
    got = repo.cloned
    if partial:  # the checkout's on-demand chunks count too
        got.add(repo.fetched.objects, repo.fetched.chunks, repo.fetched.bytes)
    if as_json:
        _dump("mgit.transfer/1", _transfer_json("clone", url, got))
        return
    note = f" (partial: {decimal(repo.fetched.bytes)} of chunks fetched for the checkout)" if partial else ""
    err.print(f"cloned {url} into {dest}, on {repo.refs.current_branch()}: {_transfer_line('received', got)}{note}")


@cli.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script for SHELL: `eval "$(mgit completion bash)"` (see the guide)."""
    from click.shell_completion import get_completion_class

    complete = get_completion_class(shell)
    assert complete is not None  # click ships all three
    click.echo(complete(cli, {}, "mgit", "_MGIT_COMPLETE").source())


@cli.command()
@click.argument("root", type=click.Path(file_okay=False, exists=True))
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8790, show_default=True, type=int, help="Port to listen on.")
@click.option("--token-file", type=click.Path(dir_okay=False, exists=True), help="Lines `ro TOKEN` / `rw TOKEN`.")
@click.option("-v", "--verbose", is_flag=True, help="Log every request.")
@click.option("--timeout", default=30.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Seconds a connection may stay idle or stalled before it is closed.")  # fmt: skip
@click.option("--max-connections", default=64, show_default=True, type=click.IntRange(min=1),
              help="Connections served at once; more get 503 (clients retry).")  # fmt: skip
def serve(
    root: str, host: str, port: int, token_file: str | None, verbose: bool, timeout: float, max_connections: int
) -> None:
    """Serve every remote directory under ROOT over HTTP (push creates new ones)."""
    from mgit.remote.server import MgitServer, read_tokens

    tokens = read_tokens(token_file) if token_file else None
    server = MgitServer(
        root, host, port, tokens, verbose=verbose, idle_timeout=timeout, max_connections=max_connections
    )
    access = "token required" if tokens else "no authentication: anyone who can connect may push"
    err.print(f"serving {os.path.abspath(root)} at {server.url} ({access}); Ctrl-C stops")
    try:
        server.serve_forever()
    finally:
        server.server_close()


def _os_error_message(exc: OSError) -> str:
    where = f": {exc.filename}" if exc.filename else ""
    if exc.errno == errno.ENOSPC:
        return f"no space left on device{where}; free some space and run the command again (committed data is intact)"
    if exc.errno == errno.EFBIG:
        return f"file too large{where} (a file-size limit, or the file system's); committed data is intact"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"permission denied{where}"
    return f"{exc.strerror or exc}{where}"


def main(argv: list[str] | None = None) -> int:
    _crashpoints.install()  # crash tests only (MGIT_CRASH_AT); nothing happens when unset
    _add_global_options(cli)
    args = list(sys.argv[1:] if argv is None else argv)
    if "--" in args:
        cut = args.index("--")
        args, _state["paths"] = args[:cut], args[cut + 1 :]
    else:
        _state["paths"] = None
    try:
        rc = cli.main(args=args, prog_name="mgit", standalone_mode=False)
        return rc if isinstance(rc, int) else 0
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.UsageError as exc:
        command = exc.ctx.command_path if exc.ctx else "mgit"
        err.print(f"error: {exc.format_message()} (see `{command} --help`)", markup=False)
        return exc.exit_code
    except click.ClickException as exc:
        err.print(f"error: {exc.format_message()}", markup=False)
        return exc.exit_code
    except click.exceptions.Abort as exc:
        if isinstance(exc.__context__, KeyboardInterrupt):  # click turns Ctrl-C into Abort
            err.print("interrupted; the repository is unchanged or consistent (run `mgit status`)")
            return 130
        err.print("aborted")
        return 1
    except KeyboardInterrupt:
        err.print("interrupted; the repository is unchanged or consistent (run `mgit status`)")
        return 130
    except MgitError as exc:
        if _state["debug"]:
            raise
        err.print(f"error: {exc}", markup=False)
        return exc.exit_code
    except OSError as exc:
        if _state["debug"]:
            raise
        err.print(f"error: {_os_error_message(exc)}", markup=False)
        return 1
    except Exception as exc:  # a bug: say so briefly, keep the traceback behind --debug
        if _state["debug"]:
            raise
        err.print(
            f"error: internal error {type(exc).__name__}: {exc} (rerun with --debug for the traceback)", markup=False
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
