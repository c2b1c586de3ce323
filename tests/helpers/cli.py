"""Run the `mgit` CLI in-process, as a user's process would see it: the same entry point
(``mgit.cli.main``: crash points, global flags after the command's name, errors mapped to
one stderr line and an exit code), with stdout and stderr captured apart and the working
directory set for the call. Far faster than ``python -m mgit`` in a subprocess, so golden
tests can pin many outputs cheaply.

The CLI keeps one invocation's state (the parsed ``--`` paths, --debug, --no-pager, -q, the
consoles) in a fresh context object per ``main()`` call; what lives outside it (the progress
module's quiet flag, the working directory that ``-C`` changes) is saved before each call and
restored after, so calls cannot leak into one another.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import click
from click.testing import CliRunner

from mgit import cli as mgit_cli
from mgit import progress


@dataclass(frozen=True)
class Result:
    """What a process running ``mgit ARGS`` would leave: exit code, stdout, stderr."""

    args: tuple[str, ...]
    exit_code: int
    stdout: str
    stderr: str

    @property
    def returncode(self) -> int:  # the name subprocess.CompletedProcess uses
        return self.exit_code

    def check(self) -> Result:
        """Raise if the command failed (as ``run_mgit(check=True)`` does)."""
        if self.exit_code != 0:
            raise AssertionError(f"mgit {' '.join(self.args)} failed ({self.exit_code}):\n{self.stdout}\n{self.stderr}")
        return self


@contextmanager
def _chdir(path: Path | str) -> Iterator[None]:
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


@contextmanager
def _cli_state() -> Iterator[None]:
    """Save and restore the module-level state one call changes: progress's quiet flag (-q).
    Everything else a call sets lives in its own context object (mgit.cli.state.CliState)."""
    quiet = progress.QUIET
    try:
        yield
    finally:
        progress.QUIET = quiet


def _runner() -> CliRunner:
    try:  # click < 8.2 mixes stderr into stdout unless told not to
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:  # click >= 8.2: stderr is always kept apart
        return CliRunner()


def invoke(
    *args: str,
    cwd: Path | str,
    env: Mapping[str, str | None] | None = None,
    check: bool = False,
    input: str | None = None,
) -> Result:
    """Run ``mgit ARGS`` in ``cwd`` in this process; ``check`` raises on a non-zero exit."""
    runner = _runner()
    with _chdir(cwd), _cli_state(), runner.isolation(input=input, env=dict(env or {})) as streams:
        out_stream, err_stream = streams[0], streams[1]
        try:
            code = mgit_cli.main(list(args))
        except SystemExit as exc:  # a command that exits itself
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except click.exceptions.Exit as exc:
            code = exc.exit_code
        click.utils.echo("", nl=False)  # flush click's text wrappers
        stdout = out_stream.getvalue().decode("utf-8", "replace")
        stderr = err_stream.getvalue().decode("utf-8", "replace") if err_stream is not None else ""
    result = Result(tuple(args), code, stdout, stderr)
    return result.check() if check else result
