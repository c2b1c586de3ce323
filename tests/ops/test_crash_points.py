"""Crash points (issue 12): the fast subset of benchmarks/crash_points.py. Every crash point
(rename, fsync, lock release) of add, commit, checkout and reset --hard on a tiny model is hit by a
SIGKILL, and the repository must need no manual repair: status works, the rerun succeeds,
the result equals an uninterrupted run's, fsck is clean and no commit is lost."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.histories import sharded_branches as _two_branches
from helpers.run import run_mgit

from mgit import Repository, _crashpoints
from mgit.graph.names import TMP_MARK

_SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "crash_points.py"


def _driver():
    spec = importlib.util.spec_from_file_location("crash_points", _SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("crash_points", module)
    spec.loader.exec_module(module)
    return module


crash_points = _driver()


@pytest.mark.slow
@pytest.mark.parametrize("name", crash_points.FAST)
def test_every_crash_point_needs_no_repair(name: str, tmp_path: Path) -> None:
    scenario = next(s for s in crash_points.SCENARIOS if s.name == name)
    outcome = crash_points.run_scenario(scenario, tmp_path)
    assert outcome.trials >= 5, outcome.points  # the hooks saw the command's renames and fsyncs
    assert outcome.points.get("unlock") == 1
    assert outcome.failures == [], "\n".join(outcome.failures)


def _model_files(root: Path) -> dict[str, str]:
    return {p.name: crash_points._hash(p) for p in sorted((root / "model").glob("*.safetensors"))}


@pytest.mark.slow
def test_a_killed_checkout_never_shows_a_file_mixing_two_revisions(tmp_path: Path) -> None:
    """Killed at each of its crash points, a branch switch that changes a tenth of each model
    file leaves every working file as it was, as it will be, or (between deleting the old and
    renaming the new) missing, until the next command finishes the checkout; never a file
    holding some chunks of each revision, which a reader would load as a model."""
    scenario = next(s for s in crash_points.SCENARIOS if s.name == "checkout (a few tensors)")
    crash_points.setup_checkout_few(tmp_path / "old")
    old = _model_files(tmp_path / "old")
    crash_points.run_cli(scenario.args, tmp_path / "old", {}, tmp_path / "old.log")
    new = _model_files(tmp_path / "old")
    assert set(old) == set(new) and all(old[f] != new[f] for f in old)

    def no_mix(root: Path) -> str | None:
        seen = _model_files(root)
        mixed = [f for f in old if f in seen and seen[f] not in (old[f], new[f])]
        return f"{mixed} hold(s) a mix of both revisions" if mixed else None

    outcome = crash_points.run_scenario(scenario, tmp_path / "trials", after_kill=no_mix)
    assert outcome.trials >= 5 and "write" not in outcome.points, outcome.points
    assert outcome.failures == [], "\n".join(outcome.failures)


def test_crash_log_counts_points_without_killing(tmp_path: Path) -> None:
    """The enumeration run passes every point and exits normally, logging each kind."""
    scenario = next(s for s in crash_points.SCENARIOS if s.name == "commit")
    kinds = crash_points.count_points(scenario, tmp_path)
    assert set(kinds) <= set(_crashpoints.KINDS)
    assert {"rename", "fsync", "unlock"} <= set(kinds)


def test_points_are_inert_when_unset() -> None:
    """Without the environment variables nothing is wrapped (zero cost in normal runs)."""
    import os

    assert not _crashpoints._active
    assert os.replace.__module__ in ("posix", "nt", "os")
    _crashpoints.point("rename")  # a no-op


def _ff_setup(root: Path) -> None:
    crash_points.setup_checkout(root)  # b is main plus a commit: `merge b` fast-forwards


KILLED_WHILE_PREPARING = {
    "checkout": (crash_points.setup_checkout, ["checkout", "b"]),
    "merge (fast-forward)": (_ff_setup, ["merge", "b"]),
    "merge (three-way)": (crash_points.setup_branch_merge, ["merge", "e1", "-m", "m3"]),
    "merge": (crash_points.setup_merge, ["merge", "--method", "linear", "--weights", "0.5", "e1", "e2", "-m", "m"]),
    "checkout REV -- paths": (crash_points.setup_checkout, ["checkout", "b", "--", "model"]),
    "restore --source": (crash_points.setup_checkout, ["restore", "--source", "b", "model"]),
}


@pytest.mark.parametrize("name", sorted(KILLED_WHILE_PREPARING))
def test_a_kill_while_preparing_leaves_no_temporary_once_the_next_command_ran(name: str, tmp_path: Path) -> None:
    """SIGKILL once the first file's new bytes are prepared (its `.NAME.mgit-tmp-*` complete,
    no working file changed yet): the next command (`status`) removes every temporary, and
    the working tree is as it was or as the command leaves it."""
    setup, args = KILLED_WHILE_PREPARING[name]
    if args[0] == "merge" and "--method" in args:
        import mgit.merge.engine  # noqa: F401 - torch once here, not in every forked child
    setup(tmp_path / "ref")
    before = crash_points.fingerprint(tmp_path / "ref")["work"]
    assert crash_points.run_cli(args, tmp_path / "ref", {}, tmp_path / "ref.log") == 0
    after = crash_points.fingerprint(tmp_path / "ref")["work"]
    setup(tmp_path / "repo")
    rc = crash_points.run_cli(args, tmp_path / "repo", {"MGIT_CRASH_AT": "prepare:1"}, tmp_path / "killed.log")
    assert rc == -signal.SIGKILL, (tmp_path / "killed.log").read_text()
    assert any(TMP_MARK in p.name for p in (tmp_path / "repo").rglob("*"))  # the kill left one
    said = run_mgit("status", cwd=tmp_path / "repo", check=True).stderr
    if name.startswith(("checkout REV", "restore")):
        assert "the interrupted restore of model/" in said and "run it again" in said, said
    else:
        assert "finishing the interrupted" in said, said
    assert [p for p in (tmp_path / "repo").rglob("*") if TMP_MARK in p.name] == []
    assert crash_points.fingerprint(tmp_path / "repo")["work"] in (before, after)
    with Repository(tmp_path / "repo") as repo:
        assert repo.fsck() == [] and repo.status().clean


# -- item 10: the console script honours MGIT_CRASH_AT -----------------------------------------


def test_the_console_entry_point_installs_crash_points(repo: Repository) -> None:
    _two_branches(repo)
    repo.close()
    script = "import sys; from mgit.cli import main; sys.exit(main())"  # what the `mgit` script runs
    env = {**os.environ, "MGIT_CRASH_AT": "rename:1"}
    killed = subprocess.run(
        [sys.executable, "-c", script, "checkout", "b"], cwd=repo.root, env=env, capture_output=True, timeout=120
    )
    assert killed.returncode == -9, killed.stderr
    assert run_mgit("status", cwd=repo.root).returncode == 0  # the next command finishes it
