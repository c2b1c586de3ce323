"""The exit codes a script can tell apart (docs/guide.md, "Errors"), one test each, in-process.

1 other error, 2 bad input (and click's usage errors), 3 over a budget, 4 uncommitted
changes in the way, 5 merge conflicts, 10 not a repository, 11 locked, 130 interrupted
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import numpy as np
import pytest
from helpers.cli import Result, invoke
from safetensors.numpy import save_file

from mgit.errors import (
    BadInputError,
    BudgetExceededError,
    DirtyWorktreeError,
    LockedError,
    MergeConflictError,
    MgitError,
    NotARepositoryError,
    UnknownMethodError,
    UnknownParameterError,
)


def _write(root: Path, rows: int, seed: int) -> None:
    """A one-tensor model in root/model whose size depends on ``rows`` (so a change is seen
    from the file's size, whatever the clock)."""
    (root / "model").mkdir(exist_ok=True)
    weight = np.random.default_rng(seed).standard_normal((rows, 64)).astype(np.float32)
    save_file({"w": weight}, str(root / "model" / "model.safetensors"))


def _mgit(root: Path, *args: str) -> Result:
    return invoke(*args, cwd=root)


@pytest.fixture
def two_branches(tmp_path: Path) -> Path:
    """main (64 rows) and other (96 rows), main checked out and clean."""
    root = tmp_path / "repo"
    root.mkdir()
    for args in (("init",), ("config", "user.name", "Ada"), ("config", "user.email", "ada@example.com")):
        _mgit(root, *args).check()
    _write(root, 64, seed=1)
    _mgit(root, "add", "model").check()
    _mgit(root, "commit", "-m", "v1").check()
    _mgit(root, "checkout", "-b", "other").check()
    _write(root, 96, seed=2)
    _mgit(root, "add", "model").check()
    _mgit(root, "commit", "-m", "v2").check()
    _mgit(root, "checkout", "main").check()
    return root


def _one_error_line(result: Result) -> str:
    assert result.stdout == "" and result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result
    return result.stderr


def test_the_codes_are_on_the_error_classes() -> None:
    assert MgitError.exit_code == 1 and BadInputError.exit_code == 2 and BudgetExceededError.exit_code == 3
    assert DirtyWorktreeError.exit_code == 4 and NotARepositoryError.exit_code == 10 and LockedError.exit_code == 11
    assert MergeConflictError.exit_code == 5
    # the finer errors are the coarser ones too: `except BadInputError` still catches them
    for finer in (UnknownMethodError, UnknownParameterError, BudgetExceededError):
        assert issubclass(finer, BadInputError)
    assert UnknownMethodError.exit_code == UnknownParameterError.exit_code == 2


def test_not_a_repository_exits_10(tmp_path: Path) -> None:
    got = _mgit(tmp_path, "status")
    assert got.exit_code == 10 and "not an mgit repository" in _one_error_line(got)


def test_locked_exits_11(two_branches: Path) -> None:
    fd = os.open(two_branches / ".mgit" / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as another live mgit process holds it
        got = _mgit(two_branches, "checkout", "other")
    finally:
        os.close(fd)
    assert got.exit_code == 11 and "another mgit process" in _one_error_line(got)
    assert _mgit(two_branches, "checkout", "other").exit_code == 0  # released: it goes through


def test_over_budget_exits_3(two_branches: Path) -> None:
    got = _mgit(two_branches, "checkout", "other", "--budget", "1kB")
    assert got.exit_code == 3 and "the budget is" in _one_error_line(got)
    assert '"branch": "main"' in _mgit(two_branches, "status", "--json").stdout  # nothing moved


def test_uncommitted_changes_in_the_way_exit_4(two_branches: Path) -> None:
    _write(two_branches, 80, seed=3)
    got = _mgit(two_branches, "checkout", "other")
    assert got.exit_code == 4
    _one_error_line(got)


@pytest.mark.parametrize(
    "args",
    [
        ("add", "../elsewhere"),  # a path outside the repository
        ("merge", "other", "--method", "no_such_method"),  # an unknown merge method
        ("merge", "other", "--method", "linear", "--param", "no_such=1"),  # a parameter linear does not take
        ("checkout", "other", "--budget", "lots"),  # a budget that is no size
    ],
)
def test_bad_input_exits_2(two_branches: Path, args: tuple[str, ...]) -> None:
    got = _mgit(two_branches, *args)
    assert got.exit_code == 2, got
    _one_error_line(got)


def test_usage_errors_exit_2(two_branches: Path) -> None:
    for args in (("log", "--no-such-option"), ("no-such-command",), ("merge",), ("merge", "other", "main")):
        got = _mgit(two_branches, *args)
        assert got.exit_code == 2 and "--help" in _one_error_line(got), got


def test_merge_conflicts_exit_5(two_branches: Path) -> None:
    """Both branches changed the one tensor (to another shape on ours): the conflict is listed on
    stdout, one error line follows, and nothing was committed."""
    _write(two_branches, 80, seed=3)
    _mgit(two_branches, "add", "model").check()
    _mgit(two_branches, "commit", "-m", "v3").check()
    got = _mgit(two_branches, "merge", "other")
    assert got.exit_code == 5 and got.stdout.startswith("CONFLICT (dtype/shape): tensor w of model/model.safetensors")
    assert got.stderr.startswith("error: merge of other: 1 conflict(s)") and got.stderr.count("\n") == 1
    assert _mgit(two_branches, "log", "--oneline").stdout.splitlines()[0].endswith("v3")


def test_other_errors_exit_1(two_branches: Path) -> None:
    got = _mgit(two_branches, "show", "no-such-rev")
    assert got.exit_code == 1 and "no-such-rev" in _one_error_line(got)
    got = _mgit(two_branches, "push", "origin")  # no such remote: a bad name, so 2
    assert got.exit_code == 2
    _one_error_line(got)


def test_ctrl_c_exits_130(two_branches: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mgit.repo import Repository

    def interrupted(self: Repository) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Repository, "status", interrupted)
    got = _mgit(two_branches, "status")
    assert got.exit_code == 130 and got.stderr.strip().startswith("interrupted; the repository is unchanged")


def test_an_unknown_method_or_parameter_has_its_own_class(two_branches: Path) -> None:
    from mgit.repo import Repository

    with Repository(two_branches) as repo:
        with pytest.raises(BadInputError) as method:
            repo.merge_plan(["other"], "no_such_method", None)
        with pytest.raises(BadInputError) as parameter:
            repo.merge_plan(["other"], "linear", None, no_such=1)
    assert isinstance(method.value, UnknownMethodError) and isinstance(parameter.value, UnknownParameterError)


def test_a_merge_budget_below_what_must_be_read_is_over_budget() -> None:
    """The merge's own refusal (chunks of unknown change cannot be left out) is the budget's error."""
    from mgit.errors import BudgetExceededError
    from mgit.merge.budget.importance import Candidate, choose

    unknown = Candidate(tensor=0, expert=0, chunk=0, cost=100, norm=None, weight=1.0)
    with pytest.raises(BudgetExceededError, match="raise --budget") as info:
        choose([unknown], 10, "importance", 0)
    assert info.value.exit_code == 3
