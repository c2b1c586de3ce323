"""harness/merges.py: the same merge said to mergekit and to `mgit merge`, and finding a run's result."""

from __future__ import annotations

import json
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH_DIR))

from harness import merges  # noqa: E402
from harness.runner import Proc  # noqa: E402


def test_the_mgit_merge_command_puts_every_flag_where_the_reports_show_it() -> None:
    exact = merges.mgit_merge_cmd(["mgit"], "ties", 4, "b", {"density": 0.5})
    assert exact == [
        "mgit",
        "-q",
        "merge",
        "--method=ties",
        "--weights=0.25",
        "--density=0.5",
        "--dtype=BF16",
        "--base=main",
        "-b",
        "b",
        "-m",
        "bench b",
        "expert-1",
        "expert-2",
        "expert-3",
        "expert-4",
    ]
    budgeted = merges.mgit_merge_cmd(
        ["mgit"], "task_arithmetic", 2, "b", {"lambda": 1.0}, budget=10, select="uniform", seed=0, checkout=False
    )
    assert budgeted[3:] == [
        "--method=task_arithmetic",
        "--weights=0.5",
        "--lambda=1.0",
        "--dtype=BF16",
        "--budget=10%",
        "--budget-select=uniform",
        "--seed=0",
        "--base=main",
        "-b",
        "b",
        "--no-checkout",
        "-m",
        "bench b",
        "expert-1",
        "expert-2",
    ]


def test_the_mergekit_config_says_the_same_merge(tmp_path: Path) -> None:
    doc = json.loads(merges.mergekit_config("task_arithmetic", tmp_path, [tmp_path] * 2, {"weight": 0.5}))
    assert list(doc) == ["merge_method", "base_model", "models", "dtype"] and doc["dtype"] == "bfloat16"
    assert [m["parameters"] for m in doc["models"]] == [{"weight": 0.5}] * 2
    with_lambda = json.loads(merges.mergekit_config("task_arithmetic", tmp_path, [tmp_path], {}, {"lambda": 1.0}))
    assert list(with_lambda) == ["merge_method", "base_model", "models", "parameters", "dtype"]
    assert with_lambda["parameters"] == {"lambda": 1.0}


def test_find_returns_the_result_of_a_run_or_none() -> None:
    results = [merges.Merged(("mgit", 4), Proc(1.0, 0, 0.0, ""), [1.0], 10)]
    assert merges.find(results, ("mgit", 4)) is results[0]
    assert merges.find(results, ("mgit", 8)) is None
    assert results[0].rel_error is None
