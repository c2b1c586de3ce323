"""One invocation's state, carried in click's context object (``ctx.obj``) instead of module
globals: the global flags (--debug, -q, --no-pager), the paths after ``--``, the two consoles
and the repository, opened once when a command first asks for it. ``main()`` makes a fresh one
per call, so in-process calls (tests) cannot leak into one another."""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click

from mgit import progress
from mgit.cli.views import Printout
from mgit.pager import pager_command, paging

if TYPE_CHECKING:  # rich and the repository are imported when a command first prints or opens one
    from rich.console import Console

    from mgit.repo import Repository

# What -q never hides on stderr: warnings, errors and the lines that say something went wrong.
ALERTS = ("error:", "warning:", "[yellow]warning:", "interrupted", "aborted", "still missing:", "still damaged:")


def stdout_console() -> Console:
    """stdout. Piped output is not cut at 80 columns: tables keep whole tensor names on one line.
    A terminal keeps its colours when the output goes through the pager (less -R shows them)."""
    from rich.console import Console

    tty = sys.stdout.isatty()
    return Console(highlight=False, soft_wrap=True, width=None if tty else 240, force_terminal=True if tty else None)


class AlertConsole:
    """stderr: notes (summaries, "Switched to branch ...") are dropped while ``hide_notes`` (-q);
    warnings and errors (lines starting with one of ALERTS) always print. (Not rich's own
    ``quiet``, which silences everything.) Rich's console is made on the first line printed."""

    def __init__(self, hide_notes: bool = False) -> None:
        self.hide_notes = hide_notes
        self._console: Console | None = None

    def print(self, *objects: Any, **kwargs: Any) -> None:
        first = objects[0] if objects else ""
        if self.hide_notes and not (isinstance(first, str) and first.lstrip().startswith(ALERTS)):
            return
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=True, highlight=False, soft_wrap=True)
        self._console.print(*objects, **kwargs)


@dataclass
class CliState:
    """The context object of one `mgit` invocation (``ctx.obj``)."""

    debug: bool = False
    quiet: bool = False
    pager: bool = True
    paths: list[str] | None = None  # the arguments after `--`, None when there is no `--`
    directory: str = "."  # the repository is looked for from here (-C has already changed directory)
    _repo: Repository | None = field(default=None, repr=False)
    _out: Console | None = field(default=None, repr=False)
    err: AlertConsole = field(default_factory=AlertConsole)

    def set_quiet(self, quiet: bool) -> None:
        """-q: no notes on stderr (the console filters) and no progress bars (progress reads its flag)."""
        self.quiet = self.err.hide_notes = quiet
        progress.QUIET = quiet

    @property
    def out(self) -> Console:
        """stdout's console, made when first printed to (rich loads only for commands that print)."""
        if self._out is None:
            self._out = stdout_console()
        return self._out

    @property
    def repo(self) -> Repository:
        """The repository the command runs in, opened on first use."""
        if self._repo is None:
            from mgit.repo import Repository

            self._repo = Repository(self.directory)
        return self._repo

    def pager_command(self) -> str | None:
        return pager_command(os.environ, sys.stdout.isatty(), self.pager)

    def emit(self, printout: Printout) -> None:
        """Print what a view rendered, each line on the stream it names, in order."""
        for stream, objects, kwargs in printout.items:
            (self.out if stream == "out" else self.err).print(*objects, **kwargs)

    @staticmethod
    def echo_json(doc: dict) -> None:
        """A ``--json`` document (its schema first), as every command prints one."""
        click.echo(json.dumps(doc, indent=2, sort_keys=False))


pass_state = click.make_pass_decorator(CliState, ensure=True)


def abs_paths(paths: tuple[str, ...] | list[str]) -> list[str]:
    return [os.path.abspath(p) for p in paths]


def paged(fn: Callable[..., None]) -> Callable[..., None]:
    """Run a command's output through the pager (as git pages log, show and diff)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        state = click.get_current_context().ensure_object(CliState)
        with paging(state.pager_command()):
            fn(*args, **kwargs)

    return wrapper
