"""harness/merges.py and merge_cases.py: the same merge said to mergekit and to `mgit merge` (every
method bench_merge runs, checked against both tools' method specs), finding a run's result, and what
bench_merge's report says of its methods."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH_DIR))

from harness import merge_cases, merges  # noqa: E402
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


def paths_only(tmp_path: Path, experts: list[Path]) -> merges.Setup:
    """A Setup with the model paths alone: what a case's config and commands read."""
    return merges.Setup(None, ["mgit"], None, tmp_path, tmp_path / "base", experts, tmp_path, 1, None, {})  # type: ignore[arg-type]


def test_bench_merge_runs_each_method_at_the_counts_it_takes() -> None:
    run = merge_cases.cases(tuple(merge_cases.METHODS), (2, 4))
    ks = {m: [c.k for c in run if c.method == m] for m in merge_cases.METHODS}
    assert ks["nearswap"] == ks["arcee_fusion"] == [1] and ks["nuslerp"] == [2]
    assert ks["karcher"] == ks["sce"] == ks["ram"] == ks["ramplus_tl"] == ks["ties"] == [2, 4]
    assert merge_cases.DEFAULT_METHODS == ("task_arithmetic", "ties")


def test_a_merge_without_a_base_names_none_to_either_tool(tmp_path: Path) -> None:
    setup = paths_only(tmp_path, [tmp_path / "e1", tmp_path / "e2"])
    karcher = merge_cases.Case("karcher", 2)
    doc = json.loads(karcher.mergekit_config(setup))
    assert "base_model" not in doc and "parameters" not in doc
    assert doc["models"] == [{"model": str(tmp_path / "e1")}, {"model": str(tmp_path / "e2")}]
    cmd = karcher.mgit_cmd(["mgit"])
    assert not [a for a in cmd if a.startswith(("--base", "--weights", "--seed"))]
    assert karcher.inputs(setup) == setup.experts and karcher.mergekit_flags == ()
    multislerp = merge_cases.Case("multislerp", 2)
    assert "base_model" not in json.loads(multislerp.mergekit_config(setup)) and "--weights=0.5" in multislerp.mgit_cmd(
        []
    )


def test_merge_parameters_go_to_the_top_level_and_to_their_flags(tmp_path: Path) -> None:
    setup = paths_only(tmp_path, [tmp_path / "e1"] * 4)
    sce = merge_cases.Case("sce", 4)
    doc = json.loads(sce.mergekit_config(setup))
    assert doc["base_model"] == str(tmp_path / "base") and doc["parameters"] == {"select_topk": 0.5}
    assert all("parameters" not in m for m in doc["models"]) and sce.inputs(setup)[0] == setup.base
    assert sce.mgit_cmd(["mgit"])[3:7] == ["--method=sce", "--param=select_topk=0.5", "--dtype=BF16", "--base=main"]
    nearswap = merge_cases.Case("nearswap", 1)
    assert json.loads(nearswap.mergekit_config(setup))["parameters"] == {"t": 0.0001}
    assert "--t=0.0001" in nearswap.mgit_cmd([]) and nearswap.mgit_cmd([])[-1] == "expert-1"
    ties = json.loads(merge_cases.Case("ties", 2).mergekit_config(setup))
    assert [m["parameters"] for m in ties["models"]] == [{"weight": 0.5, "density": 0.5}] * 2
    fusion = merge_cases.Case("arcee_fusion", 1)
    assert fusion.mergekit_flags == ("--random-seed", "0") and "--seed=0" in fusion.mgit_cmd([])


def test_every_bench_method_says_what_mgits_method_takes() -> None:
    """Each case's parameters are ones mgit's method takes, in the scope the config gives them (per
    expert in `models`, the merge's at the top level); the base and expert count fit its contract; and
    a method that draws random numbers is seeded."""
    from mgit.merge.methods.registry import METHODS as MGIT_METHODS
    from mgit.merge.params import Scope

    for name, spec in merge_cases.METHODS.items():
        method = MGIT_METHODS[name]
        scopes = {p.name: p.scope for p in method.params}
        per_expert = [*(["weight"] if spec.weighted else []), *spec.expert_params]
        assert all(scopes.get(p) is Scope.EXPERT for p in per_expert), name
        assert all(scopes.get(p) is Scope.GLOBAL for p in spec.params), name
        assert spec.base or not method.needs_base, name
        for k in spec.ks((2, 4)):
            assert method.min_experts <= k <= (method.max_experts or k), (name, k)
        assert spec.seeded == method.random, name


def test_every_bench_method_says_what_mergekits_method_takes() -> None:
    """The same against mergekit's own method specs: per-expert parameters are its input parameters,
    the merge's its shared ones, and the base is named exactly where mergekit uses one."""
    registry = pytest.importorskip("mergekit.merge_methods")
    from mergekit.merge_methods.base import BasePolicy

    for name, spec in merge_cases.METHODS.items():
        theirs = registry.get(name).spec
        per_expert = {*(["weight"] if spec.weighted else []), *spec.expert_params}
        assert per_expert <= {p.name for p in theirs.input_parameters}, name
        assert set(spec.params) <= {p.name for p in theirs.shared_parameters}, name
        policy = theirs.contract.base
        assert spec.base if policy is BasePolicy.REQUIRED else not (spec.base and policy is BasePolicy.IGNORED), name


def made_up_outcome(method: str, k: int) -> merge_cases.Outcome:
    """An outcome of (method, k) as bench_merge makes one, with made-up numbers."""
    from harness.sameness import Sameness

    case = merge_cases.Case(method, k)
    counts = ["base_measured", "experts_measured", "expert_chunks_measured", "experts_estimated"]
    tool = merges.Merged(case, Proc(2.0, 100, 0.0, ""), [2.0], 10, {"bytes": dict.fromkeys(counts, 1)})
    return merge_cases.Outcome(case, tool, tool, Sameness(3, 3, dtypes=["torch.bfloat16"]), 0, 0)


def test_the_report_names_each_methods_settings_and_takes_its_targets_at_its_own_largest_k() -> None:
    from harness import merge_report

    outcome = made_up_outcome

    outcomes = [outcome("ties", 2), outcome("ties", 4), outcome("nearswap", 1), outcome("karcher", 4)]
    assert {t.context for t in merge_report.targets(outcomes)} == {("ties", "4"), ("nearswap", "1"), ("karcher", "4")}
    rows = merge_report.methods_table(outcomes).splitlines()[2:]
    assert rows == [
        "| ties | 2, 4 | yes | weight 1/K, density 0.5 | bfloat16 |",
        "| nearswap | 1 (the only count it takes) | yes | no weights, t 0.0001 | bfloat16 |",
        "| karcher | 4 | no | no weights | bfloat16 |",
    ]


def test_the_report_says_why_arcee_fusion_may_differ_from_mergekit(tmp_path: Path, monkeypatch) -> None:
    from harness import merge_report
    from harness.context import RunContext
    from harness.models import plan_model

    monkeypatch.setattr(RunContext, "header", lambda self, title: [title])
    inputs = merge_report.MergeInputs(plan_model(10**7), 10**7, 2, merge_cases.Case("ties", 2), ["mgit merge"])

    def text(*methods: tuple[str, int]) -> str:
        return merge_report.report([made_up_outcome(*m) for m in methods], RunContext("bench", tmp_path), inputs)

    assert text(("arcee_fusion", 1), ("ties", 2)).count(merge_cases.FUSION_SAMPLES) == 1
    assert merge_cases.FUSION_SAMPLES not in text(("ties", 2), ("karcher", 2))
