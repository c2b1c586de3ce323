"""Paging long output as git does: through ``$MGIT_PAGER``, ``$PAGER`` or ``less -FRX`` when
stdout is a terminal. The process's stdout (file descriptor 1) is pointed at the pager's
stdin, so everything printed (click, rich) goes through it; closing waits for the pager."""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping

DEFAULT_PAGER = "less"
PAGER_ENV = {"LESS": "FRX", "LV": "-c"}  # as git: quit if one screen, keep colours, no clear


def pager_command(environ: Mapping[str, str], stdout_is_tty: bool, enabled: bool = True) -> str | None:
    """The shell command to page through, or None for no pager: not a terminal, --no-pager,
    or ``MGIT_PAGER`` / ``PAGER`` set empty or to ``cat`` (``MGIT_PAGER`` wins when set)."""
    if not enabled or not stdout_is_tty:
        return None
    for name in ("MGIT_PAGER", "PAGER"):
        if name in environ:
            command = environ[name].strip()
            return None if command in ("", "cat") else command
    return DEFAULT_PAGER


def _runnable(command: str) -> bool:
    """Does the pager's program exist? Leading ``NAME=value`` assignments are passed over; a
    line shlex cannot split is left to the shell."""
    try:
        words = shlex.split(command)
    except ValueError:
        return True
    words = list(itertools.dropwhile(lambda w: re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", w), words))
    return not words or shutil.which(words[0]) is not None


@contextlib.contextmanager
def paging(command: str | None) -> Iterator[None]:
    """Within the block, stdout goes to ``command`` (a shell command line); None: unchanged.
    A pager that quits early (the user pressed q) ends the output quietly."""
    if command is None:
        yield
        return
    sys.stdout.flush()
    env = {**PAGER_ENV, **os.environ}
    if not _runnable(command):
        yield  # no such pager: print directly, as git does (a shell would only say "not found")
        return
    try:
        pager = subprocess.Popen(command, shell=True, stdin=subprocess.PIPE, env=env)
    except OSError:
        yield  # no such pager: print directly, as git does
        return
    assert pager.stdin is not None  # stdin=PIPE
    saved = os.dup(1)
    os.dup2(pager.stdin.fileno(), 1)
    pager.stdin.close()
    try:
        yield
    except BrokenPipeError:
        pass
    finally:
        try:
            sys.stdout.flush()
        except BrokenPipeError:  # what the pager did not take is dropped, not printed later
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.close(devnull)
            with contextlib.suppress(BrokenPipeError):
                sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
        pager.wait()
