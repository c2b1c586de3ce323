"""Commands that look at history and storage without changing anything: `log`, `show`,
`lineage`, `du`, `reflog` (show, expire) and `diff`."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

from mgit.cli.complete import complete_rev
from mgit.cli.state import CliState, abs_paths, paged, pass_state
from mgit.cli.views.logformat import parse_format
from mgit.lazy import lazy_module
from mgit.pager import paging

if TYPE_CHECKING:
    from mgit.cli.views import diff as diff_views
    from mgit.cli.views import history as views
    from mgit.cli.views import maintain as maintain_views
else:  # rendering (rich) is imported when the command prints
    diff_views = lazy_module("mgit.cli.views.diff")
    views = lazy_module("mgit.cli.views.history")
    maintain_views = lazy_module("mgit.cli.views.maintain")


@click.command("lineage")
@click.argument("rev", default="HEAD", shell_complete=complete_rev)
@click.option("--depth", type=int, default=50, show_default=True, help="How many generations to follow.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (schema mgit.lineage/1).")
@pass_state
@paged
def cmd_lineage(state: CliState, rev: str, depth: int, as_json: bool) -> None:
    """The derivation tree of REV: fine-tunes and merges down to the roots, with methods and weights."""
    tree_doc = state.repo.lineage(rev, depth)
    if as_json:
        state.echo_json(views.lineage_json(tree_doc))
        return
    state.emit(views.lineage_text(tree_doc))


@click.command("log")
@click.argument("revs", nargs=-1, shell_complete=complete_rev)
@click.option("--oneline", is_flag=True, help="One line per commit.")
@click.option("--graph", is_flag=True, help="Draw the commits' lanes and edges (merges: every parent).")
@click.option("-n", "--max-count", type=int, default=None, help="At most N commits (a negative N: all, as git).")
@click.option("--all", "all_refs", is_flag=True, help="Every branch, tag and remote-tracking branch, and HEAD.")
@click.option("--stat", is_flag=True, help="Per commit, the files it changed (from manifests: no tensor data read).")
@click.option("--format", "--pretty", "fmt", metavar="FORMAT", help="oneline|short|medium|full|fuller or a %-template.")
@click.option("--author", multiple=True, metavar="PATTERN", help="Commits whose author matches (regex; repeatable).")
@click.option("--since", "--after", "since", metavar="DATE", help="Commits more recent than DATE ('2 weeks ago').")
@click.option("--until", "--before", "until", metavar="DATE", help="Commits older than DATE.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (schema mgit.log/1).")
@pass_state
@paged
def cmd_log(
    state: CliState,
    revs: tuple[str, ...],
    oneline: bool,
    graph: bool,
    max_count: int | None,
    all_refs: bool,
    stat: bool,
    fmt: str | None,
    author: tuple[str, ...],
    since: str | None,
    until: str | None,
    as_json: bool,
) -> None:
    """Show commits, newest first: REVS are revisions and ranges (A..B, A...B, ^A; default
    HEAD); `mgit log -- PATH` limits to a path."""
    if oneline and fmt:
        raise click.UsageError("give --oneline or --format, not both")
    style = views.LogStyle(parse_format(fmt) if fmt else views.LogFormat(), oneline, notes=graph)
    repo = state.repo
    revisions, paths = list(revs) or "HEAD", abs_paths(state.paths or [])
    parents = None
    if graph:
        found = repo.log_graph(revisions, paths, max_count, all_refs=all_refs, author=author, since=since, until=until)
        commits, parents = found.commits, found.parents
    else:
        commits = repo.log(revisions, paths, max_count, all_refs=all_refs, author=author, since=since, until=until)
    stats = {c.id: repo.changes(c.id) for c in commits} if stat else None
    if as_json:
        state.echo_json(views.log_json(commits, stats))
        return
    if not commits and repo.refs.head() is None:
        state.err.print("no commits yet")
        return
    refs = repo.refs
    labels = views.ref_labels(refs.head(), refs.current_branch(), repo.branches(), repo.tags(), repo.remote_branches())
    state.emit(views.log_text(commits, labels, style, repo.merge_record, parents, stats))


@click.command("show")
@click.argument("rev", default="HEAD", shell_complete=complete_rev)
@click.option("--stats", is_flag=True, help="Add storage statistics (as `mgit du REV`).")
@click.option("--stat", is_flag=True, help="Files changed against the first parent (as `log --stat`).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (schema mgit.show/1).")
@pass_state
@paged
def cmd_show(state: CliState, rev: str, stats: bool, stat: bool, as_json: bool) -> None:
    """Show a commit: files, tensor counts, logical vs stored bytes."""
    repo = state.repo
    info = repo.show(rev)
    usage = repo.du(rev) if stats else None
    plan = repo.merge_record(rev)
    changed = repo.changes(info.commit.id) if stat else None
    if as_json:
        state.echo_json(views.show_json(info, usage, plan, changed))
        return
    state.emit(views.show_text(info, usage, plan, changed))


@click.command("du")
@click.argument("rev", required=False, shell_complete=complete_rev)
@click.option("-n", "--max-count", type=int, default=20, help="Commits to list when no REV is given.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (schema mgit.du/1).")
@pass_state
def cmd_du(state: CliState, rev: str | None, max_count: int, as_json: bool) -> None:
    """Logical, unique and stored bytes per commit (REV, or HEAD's history) and for the store."""
    repo = state.repo
    commits = [repo.resolve(rev)] if rev else [c.id for c in repo.log(max_count=max_count)]
    rows = [(sha, repo.du(sha)) for sha in commits]
    store = repo.store_usage()
    if as_json:
        state.echo_json(views.du_json(rows, store))
        return
    state.emit(views.du_text(rows, store))


def _reflog(state: CliState, ref: str, as_json: bool) -> None:
    """The moves of ``ref``, as JSON or as text (`reflog` and `reflog show`)."""
    from mgit.graph.reflogs import is_grave

    repo = state.repo
    entries = repo.reflog(ref)
    if as_json:
        state.echo_json(views.reflog_json(ref, entries))
        return
    full = repo.reflog_ref(ref)
    state.emit(views.reflog_text(ref, full if not entries else ref, entries))
    if is_grave(full):
        state.err.print(views.deleted_branch_note(ref, full), markup=False)


@click.group("reflog", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (schema mgit.reflog/1).")
@click.pass_context
def cmd_reflog(ctx: click.Context, as_json: bool) -> None:
    """Where HEAD has been; `reflog show REF`, `reflog expire` (forget old entries)."""
    if ctx.invoked_subcommand is None:
        state = ctx.ensure_object(CliState)
        with paging(state.pager_command()):
            _reflog(state, "HEAD", as_json)


@cmd_reflog.command("show")
@click.argument("ref", default="HEAD", shell_complete=complete_rev)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (schema mgit.reflog/1).")
@pass_state
@paged
def cmd_reflog_show(state: CliState, ref: str, as_json: bool) -> None:
    """The moves of REF (HEAD, a branch, a tag, origin/main, refs/heads/NAME), newest first."""
    _reflog(state, ref, as_json)


@cmd_reflog.command("expire")
@click.option("--older-than", "days", type=float, default=90.0, show_default=True, help="Days to keep.")
@click.option("--all", "everything", is_flag=True, help="Forget every entry (then gc keeps only what refs reach).")
@pass_state
def cmd_reflog_expire(state: CliState, days: float, everything: bool) -> None:
    """Forget reflog entries, so that gc can reclaim what only they kept (deleted branches)."""
    n = state.repo.reflog_expire(None if everything else days)
    state.err.print(maintain_views.reflog_expired_line(n))


@click.command("diff")
@click.argument("revs", nargs=-1, shell_complete=complete_rev)
@click.option("--staged", is_flag=True, help="Compare the index (not the working tree) with REV/HEAD.")
@click.option("--stat", is_flag=True, help="One line per file, from chunk ids only (no tensor data read).")
@click.option("--name-only", is_flag=True, help="Only the paths of the files that differ.")
@click.option("--name-status", is_flag=True, help="The paths with A (added), D (deleted) or M (modified).")
@click.option("--by-layer", is_flag=True, help="Group by layer index and module (attn, mlp, norm, embed, experts.N).")
@click.option("-k", "patterns", multiple=True, metavar="PATTERN", help="fnmatch pattern on tensor names (repeatable).")
@click.option("--model", metavar="DIR", help="Only the model in directory DIR.")
@click.option("--top", type=int, default=40, show_default=True, help="Rows to show, largest relative change first.")
@click.option("--plot", type=click.Path(dir_okay=False), metavar="PNG", help="Write a layers × modules heatmap.")
@click.option("--full", is_flag=True, help="Whole text-file diffs (longer ones are cut to their first hunks).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (schema mgit.diff/1).")
@pass_state
@paged
def cmd_diff(
    state: CliState,
    revs: tuple[str, ...],
    staged: bool,
    stat: bool,
    name_only: bool,
    name_status: bool,
    by_layer: bool,
    patterns: tuple[str, ...],
    model: str | None,
    top: int,
    plot: str | None,
    full: bool,
    as_json: bool,
) -> None:
    """Tensor-level diff: `mgit diff A B` (or A..B; A...B: from their merge base to B), `mgit diff A`
    (vs working tree), `mgit diff` (HEAD vs working tree)."""
    if len(revs) > 2:
        raise click.UsageError("give at most two revisions")
    names = name_only or name_status
    a = revs[0] if revs else None
    b = revs[1] if len(revs) > 1 else None
    from mgit.diff.plot import heatmap
    from mgit.diff.summary import by_layer as by_layer_groups
    from mgit.diff.text import shorten

    result = state.repo.diff(
        a,
        b,
        staged=staged,
        numeric=not (stat or names),
        patterns=patterns,
        model=os.path.abspath(model) if model else None,
    )
    if names and not as_json:
        for line in diff_views.name_lines(result, name_status):
            click.echo(line)
        return
    groups = by_layer_groups(result.tensors) if (by_layer or plot or as_json) else []
    if plot:
        heatmap(groups, plot, f"relative change {result.a} → {result.b}")  # type: ignore[arg-type]
    if as_json:
        state.echo_json(diff_views.diff_json(result, groups))
        return
    changed = result.changed
    if stat:
        state.emit(diff_views.stat_text(result))
    elif by_layer:
        state.emit(diff_views.groups_table(groups))
    else:
        state.emit(diff_views.tensors_table(changed, top))
    for f in result.files if not stat else ():
        if f.text:
            state.out.print(f.text if full else shorten(f.text, f.path), markup=False, highlight=False, end="")
    if not changed and not any(f.text for f in result.files):
        state.err.print(f"no differences between {result.a} and {result.b}")


COMMANDS = [cmd_lineage, cmd_log, cmd_show, cmd_du, cmd_reflog, cmd_diff]
