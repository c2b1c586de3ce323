"""git's merge for models on the command line: `mgit merge REV` without a method (which `mgit
merge` hands over to here), `merge-base`, `revert`, and the conflict listing that `merge`,
`pull` and `revert` print before their one-line error (exit 5)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import fields
from typing import Any

import click
from click.core import ParameterSource

from mgit.cli.complete import complete_rev
from mgit.cli.state import CliState, pass_state
from mgit.cli.views import branch_merge as views
from mgit.errors import MergeConflictError

# What only a branch merge takes; a model merge's options are model_only().
BRANCH_ONLY = ("ours", "theirs", "no_ff", "ff_only")
# The model merge's request fields a branch merge shares (its revision, method and parameters).
SHARED = ("experts", "method", "params", "message", "seed", "checkout")

PATTERN_HELP = "settle conflicts matching PATTERN (fnmatch over PATH or PATH:TENSOR; bare: all) with {} side"


def side_option(name: str, whose: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--ours`` / ``--theirs``: repeatable patterns; given bare (after REV), every conflict."""
    return click.option(
        name, multiple=True, is_flag=False, flag_value="*", metavar="[PATTERN]", help=PATTERN_HELP.format(whose)
    )


def given(ctx: click.Context, names: Sequence[str]) -> list[str]:
    """The options among ``names`` given on the command line, as typed (``--budget``)."""
    return [
        p.opts[-1]
        for p in ctx.command.params
        if p.name in names and ctx.get_parameter_source(p.name) is ParameterSource.COMMANDLINE
    ]


def model_only() -> list[str]:
    """What only a model merge (--method with experts, docs/merging.md) takes: each option that is
    a field of its request (mgit.merge.request.MergeRequest) a branch merge does not share, and
    --no-checkout, --dry-run and --check."""
    from mgit.merge.request import MergeRequest

    return [f.name for f in fields(MergeRequest) if f.name not in SHARED] + ["no_checkout", "dry_run", "check_only"]


def is_branch_merge(state: CliState, experts: Sequence[str], method: str | None, config: str | None) -> bool:
    """`mgit merge` merges a branch (git's merge) unless asked for a model merge: without
    --method/--config, or given a branch merge's options, it does; with --method, one revision
    and none of a model merge's options, it does unless the revision is strictly ahead of HEAD
    (Repository.is_branch_merge: a model merge with HEAD as the base would undo HEAD's own
    changes; --base HEAD asks for that)."""
    ctx = click.get_current_context()
    if given(ctx, BRANCH_ONLY) or (method is None and config is None):
        return True
    if config is not None or given(ctx, model_only()):
        return False
    return state.repo.is_branch_merge(list(experts))


@contextmanager
def conflicts_shown(state: CliState, as_json: bool) -> Iterator[None]:
    """A merge stopped by conflicts lists them (stdout; --json: mgit.merge-conflicts/2) before
    its one-line error and exit code 5."""
    try:
        yield
    except MergeConflictError as exc:
        if exc.report is not None:
            if as_json:
                state.echo_json(views.conflicts_json(exc.report))
            else:
                state.emit(views.conflicts_text(exc.report))
        raise


def run_merge(
    state: CliState,
    experts: Sequence[str],
    method: str | None,
    params: dict[str, Any],
    *,
    message: str | None,
    seed: int | None,
    ours: Sequence[str],
    theirs: Sequence[str],
    no_ff: bool,
    ff_only: bool,
    as_json: bool,
) -> None:
    """`mgit merge REV` as git merges: up to date, a fast-forward, or a three-way merge commit."""
    model_options = given(click.get_current_context(), model_only())
    if model_options:
        raise click.UsageError(
            f"{', '.join(model_options)}: an option of model merges (--method with EXPERTS, docs/merging.md), "
            "not of merging a branch"
        )
    if not experts and (ours or theirs):  # `--theirs REV` took REV as its pattern
        raise click.UsageError(
            "name the revision to merge; a bare --ours or --theirs goes after it: mgit merge REV --theirs"
        )
    if len(experts) != 1:
        what = "name the revision to merge" if not experts else "merging a branch takes one revision"
        raise click.UsageError(f"{what}: mgit merge REV (several models merge into one with --method NAME EXPERTS...)")
    if no_ff and ff_only:
        raise click.UsageError("--no-ff and --ff-only contradict each other: give one")
    ff = "no" if no_ff else "only" if ff_only else "auto"
    with conflicts_shown(state, as_json):
        result = state.repo.merge_branch(
            experts[0], ours=ours, theirs=theirs, method=method, seed=seed, message=message, ff=ff, **params
        )
    if as_json:
        state.echo_json(views.merge_json(result))
    else:
        state.emit(views.merge_text(result))


@click.command("merge-base")
@click.argument("revs", nargs=-1, required=True, shell_complete=complete_rev)
@click.option("--all", "show_all", is_flag=True, help="print every best common ancestor, not one")
@click.option("--is-ancestor", is_flag=True, help="A B: exit 0 if A is an ancestor of B (or B itself), else 1")
@pass_state
def cmd_merge_base(state: CliState, revs: tuple[str, ...], show_all: bool, is_ancestor: bool) -> int:
    """Print the best common ancestor of two commits (exit 1 when they share none), as git does."""
    if is_ancestor:
        if len(revs) != 2:
            raise click.UsageError("--is-ancestor takes two revisions: A B")
        return 0 if state.repo.is_ancestor(*revs) else 1
    if len(revs) < 2:
        raise click.UsageError("merge-base needs two revisions (or more: the first against any of the others)")
    bases = state.repo.merge_bases(list(revs))
    if not bases:
        return 1
    click.echo(views.merge_base_lines(bases if show_all else bases[:1]))
    return 0


@click.command("revert")
@click.argument("rev", shell_complete=complete_rev)
@click.option("-m", "--mainline", type=click.IntRange(min=1), help="of a merge commit: the parent (1, 2, ...) to keep")
@click.option("--message", "message", help='commit message (default: Revert "SUBJECT" ...)')
@side_option("--ours", "HEAD's")
@side_option("--theirs", "the reverted commit's parent's")
@click.option("--method", help="settle conflicting tensors with this merge method (task_arithmetic: both changes)")
@click.option("--seed", type=int, help="with a random --method: its seed")
@click.option(
    "--json", "as_json", is_flag=True, help="as JSON (mgit.branch-merge/2; conflicts: mgit.merge-conflicts/2)"
)
@pass_state
def cmd_revert(
    state: CliState,
    rev: str,
    mainline: int | None,
    message: str | None,
    ours: tuple[str, ...],
    theirs: tuple[str, ...],
    method: str | None,
    seed: int | None,
    as_json: bool,
) -> None:
    """Commit the inverse of REV's change on HEAD (a three-way merge, as git reverts)."""
    with conflicts_shown(state, as_json):
        result = state.repo.revert(
            rev, mainline=mainline, ours=ours, theirs=theirs, method=method, seed=seed, message=message
        )
    if as_json:
        state.echo_json(views.merge_json(result))
    else:
        state.emit(views.merge_text(result))


COMMANDS = [cmd_merge_base, cmd_revert]
