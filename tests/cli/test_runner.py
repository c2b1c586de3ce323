"""The in-process CLI runner behaves as the real process: same exit codes and stdout/stderr
apart, and no state leaks from one call into the next."""

from __future__ import annotations

import os
from pathlib import Path

from helpers.cli import invoke
from helpers.run import run_mgit

from mgit import cli, progress


def test_same_result_as_a_subprocess(tmp_path: Path) -> None:
    for args in (("status",), ("bogus",), ("log", "--oneline", "--nope")):
        here, real = invoke(*args, cwd=tmp_path), run_mgit(*args, cwd=tmp_path)
        assert (here.exit_code, here.stdout, here.stderr) == (real.returncode, real.stdout, real.stderr)
    invoke("init", cwd=tmp_path, check=True)
    here, real = invoke("status", "--json", cwd=tmp_path), run_mgit("status", "--json", cwd=tmp_path)
    assert (here.exit_code, here.stdout, here.stderr) == (real.returncode, real.stdout, real.stderr)


def test_no_state_leaks(tmp_path: Path) -> None:
    before = os.getcwd()
    invoke("init", cwd=tmp_path, check=True)
    invoke("-C", str(tmp_path), "-q", "--debug", "status", "--", "x", cwd=before, check=True)
    assert os.getcwd() == before
    # no module-level flags: each call has its own context object (tests/helpers/cli.py restores the rest)
    assert not hasattr(cli, "_state")
    assert progress.QUIET is False
    assert invoke("status", cwd=tmp_path).stdout.startswith("On branch main")
    assert invoke("log", cwd=tmp_path).stderr == "no commits yet\n"  # -q did not stay on
    assert invoke("show", "nope", cwd=tmp_path).stderr.startswith("error: ")  # nor --debug (it would raise)
