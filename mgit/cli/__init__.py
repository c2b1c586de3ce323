"""The `mgit` command: thin click commands over Repository, rich output, --json where
scripts need it. Errors print one line and exit with a code a script can tell apart (see the
guide's errors section); --debug shows tracebacks.

One module per group of commands (stage, refs, inspect, merge, sync, maintain, complete);
``views`` renders every JSON document and table from result objects; ``state`` holds one
invocation's flags, consoles and repository in click's context object."""

from __future__ import annotations

import errno
import functools
import os
import sys

import click

from mgit import _crashpoints, memory
from mgit.cli import complete, inspect, maintain, merge, refs, stage, sync
from mgit.cli.state import CliState
from mgit.errors import MgitError
from mgit.version import __version__

QUIET_HELP = "No progress bars or notes on stderr (warnings and errors still print)."
NO_PAGER_HELP = "Do not page long output (diff, log, show, reflog, lineage)."
INTERRUPTED = "interrupted; the repository is unchanged or consistent (run `mgit status`)"


def _set_global(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """A global flag (-q, --debug, --no-pager) takes effect wherever it is given."""
    if not value:
        return
    state = ctx.ensure_object(CliState)
    if param.name == "debug":
        state.debug = True
    elif param.name == "quiet":
        state.set_quiet(True)
    elif param.name == "no_pager":
        state.pager = False


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
    state = ctx.ensure_object(CliState)
    state.debug = debug
    state.pager = not no_pager
    state.set_quiet(quiet)
    if directory != ".":
        os.chdir(directory)


for _module in (stage, refs, inspect, merge, sync, maintain):
    for _command in _module.COMMANDS:
        cli.add_command(_command)
cli.add_command(complete.cmd_completion)


def _os_error_message(exc: OSError) -> str:
    where = f": {exc.filename}" if exc.filename else ""
    if exc.errno == errno.ENOSPC:
        return f"no space left on device{where}; free some space and run the command again (committed data is intact)"
    if exc.errno == errno.EFBIG:
        return f"file too large{where} (a file-size limit, or the file system's); committed data is intact"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"permission denied{where}"
    return f"{exc.strerror or exc}{where}"


def main(argv: list[str] | None = None) -> int:  # noqa: C901 (one except per documented exit code)
    """The `mgit` script: run one command, map every error to one stderr line and an exit code."""
    _crashpoints.install()  # crash tests only (MGIT_CRASH_AT); nothing happens when unset
    memory.tune_allocator()  # the command's own process: a library leaves the allocator alone
    _add_global_options(cli)
    args = list(sys.argv[1:] if argv is None else argv)
    state = CliState()
    if "--" in args:
        cut = args.index("--")
        args, state.paths = args[:cut], args[cut + 1 :]
    try:
        rc = cli.main(args=args, prog_name="mgit", standalone_mode=False, obj=state)
        return rc if isinstance(rc, int) else 0
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.UsageError as exc:
        command = exc.ctx.command_path if exc.ctx else "mgit"
        state.err.print(f"error: {exc.format_message()} (see `{command} --help`)", markup=False)
        return exc.exit_code
    except click.ClickException as exc:
        state.err.print(f"error: {exc.format_message()}", markup=False)
        return exc.exit_code
    except click.exceptions.Abort as exc:
        if isinstance(exc.__context__, KeyboardInterrupt):  # click turns Ctrl-C into Abort
            state.err.print(INTERRUPTED)
            return 130
        state.err.print("aborted")
        return 1
    except KeyboardInterrupt:
        state.err.print(INTERRUPTED)
        return 130
    except MgitError as exc:
        if state.debug:
            raise
        state.err.print(f"error: {exc}", markup=False)
        return exc.exit_code
    except OSError as exc:
        if state.debug:
            raise
        state.err.print(f"error: {_os_error_message(exc)}", markup=False)
        return 1
    except Exception as exc:  # a bug: say so briefly, keep the traceback behind --debug
        if state.debug:
            raise
        state.err.print(
            f"error: internal error {type(exc).__name__}: {exc} (rerun with --debug for the traceback)", markup=False
        )
        return 1


__all__ = ["cli", "main"]
