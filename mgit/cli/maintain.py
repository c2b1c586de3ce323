"""Commands that keep the store healthy: `gc` and `fsck` (with --repair)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from mgit.cli.state import CliState, pass_state
from mgit.lazy import lazy_module
from mgit.maintenance import DEFAULT_GRACE_SECONDS

if TYPE_CHECKING:
    from mgit.cli.views import maintain as views
else:  # rendering (rich) is imported when the command prints
    views = lazy_module("mgit.cli.views.maintain")


@click.command("gc")
@click.option(
    "--grace",
    type=float,
    default=DEFAULT_GRACE_SECONDS,
    show_default=True,
    metavar="SECONDS",
    help="Keep unreferenced data younger than this (a write may be in flight).",
)
@click.option("--now", is_flag=True, help="Same as --grace 0.")
@pass_state
def cmd_gc(state: CliState, grace: float, now: bool) -> None:
    """Remove chunks and objects nothing references; repack the rest."""
    report = state.repo.gc(0 if now else grace)
    state.err.print(views.gc_line(report))


@click.command("fsck")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (schema mgit.fsck/1).")
@click.option("--repair", is_flag=True, help="Drop damaged chunks, recover them from working files and remotes.")
@pass_state
def cmd_fsck(state: CliState, as_json: bool, repair: bool) -> None:
    """Verify every object and chunk; exit 1 if anything is wrong."""
    repo = state.repo
    if repair:
        state.emit(views.repair_text(repo.fsck_repair()))
    problems = repo.fsck()
    leftovers = repo.leftovers()
    if as_json:
        state.echo_json(views.fsck_json(problems, repo.is_partial, leftovers))
    else:
        state.emit(views.fsck_text(problems, repo.is_partial, leftovers))
    if problems:
        raise click.exceptions.Exit(1)


COMMANDS = [cmd_gc, cmd_fsck]
