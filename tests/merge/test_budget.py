"""Budgeted merges: never over budget, exact at full budget, bounded error, importance pays."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers.models import commit_model, commit_uneven, llama_state_dict, uneven_finetune
from helpers.run import run_mgit
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mgit import Repository
from mgit.budget import Budget, parse_budget
from mgit.errors import BadInputError
from mgit.merge.budget.knapsack import Item, choose_by_density, choose_uniform, fractional_bound

NAMES = ("math", "code", "chat", "law")
WEIGHTS = [0.4, 0.3, 0.2, 0.1]


def _experts(repo, dtype=torch.bfloat16):
    return commit_uneven(repo, NAMES, 40, dtype)


@pytest.fixture
def uneven(repo, small_chunks):
    _experts(repo)
    return repo


def _merge(repo, branch, method="task_arithmetic", **kw):
    repo.checkout("main")
    params = {"weight": WEIGHTS} if method != "slerp" else {"t": 0.3}
    experts = list(NAMES) if method != "slerp" else ["math"]
    sha = repo.merge(experts, method, branch=branch, **(params | kw))
    return sha, repo.merge_record(sha)


def _distance(a: dict, b: dict) -> float:
    return math.sqrt(sum(float(((a[k].double() - b[k].double()) ** 2).sum()) for k in a))


def _bits(sd: dict) -> dict:
    return {k: v.view(torch.int16) if v.dtype == torch.bfloat16 else v for k, v in sd.items()}


def _equal(a: dict, b: dict) -> bool:
    a, b = _bits(a), _bits(b)
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# -- the knapsack -----------------------------------------------------------------------------


def _optimum(items: list[Item], limit: int) -> float:
    best = 0.0
    for mask in range(1 << len(items)):
        chosen = [it for n, it in enumerate(items) if mask >> n & 1]
        if sum(it.cost for it in chosen) <= limit:
            best = max(best, sum(it.value for it in chosen))
    return best


@given(
    st.lists(st.tuples(st.integers(1, 50), st.floats(0, 100)), min_size=1, max_size=10),
    st.integers(0, 200),
)
def test_knapsack_within_budget_and_half_the_optimum(pairs, limit):
    items = [Item(c, v) for c, v in pairs]
    taken = choose_by_density(items, limit)
    assert sum(it.cost for it, t in zip(items, taken, strict=True) if t) <= limit
    value = sum(it.value for it, t in zip(items, taken, strict=True) if t)
    assert value >= _optimum(items, limit) / 2 - 1e-9
    assert value <= fractional_bound(items, limit) + 1e-9  # no choice beats the fractional optimum
    assert _optimum(items, limit) <= fractional_bound(items, limit) + 1e-9
    uniform = choose_uniform(items, limit, seed=7)
    assert sum(it.cost for it, t in zip(items, uniform, strict=True) if t) <= limit
    assert choose_uniform(items, limit, seed=7) == uniform


def test_knapsack_takes_everything_that_fits():
    items = [Item(10, 1.0), Item(20, 0.0), Item(5, 3.0)]
    assert choose_by_density(items, 35) == [True, True, True]
    assert choose_by_density(items, 15) == [True, False, True]
    # the guard: one big valuable item beats the dense small one
    assert choose_by_density([Item(1, 1.0), Item(10, 9.0)], 10) == [False, True]


def test_parse_budget():
    assert parse_budget("2GB") == Budget(nbytes=2 * 10**9)
    assert parse_budget("500MiB") == Budget(nbytes=500 * 2**20)
    assert parse_budget("1.5 gib").nbytes == int(1.5 * 2**30)
    assert parse_budget("10%").resolve(1000) == 100
    assert parse_budget(4096).resolve(10) == 4096
    for bad in ("x", "-3GB", "200%", "2XB", "", "%"):
        with pytest.raises(BadInputError):
            parse_budget(bad)


# -- budgeted merges --------------------------------------------------------------------------


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    share=st.floats(0.0, 1.0),
    method=st.sampled_from(["task_arithmetic", "ties", "linear", "dare_linear"]),
    select=st.sampled_from(["importance", "uniform"]),
)
def test_budget_is_never_exceeded(uneven, share, method, select):
    repo = uneven
    full = repo.merge_plan(list(NAMES), method, weight=WEIGHTS)[0].expert_bytes
    limit = int(full * share)
    n = len(repo.branches())
    sha, record = _merge(repo, f"b{n}", method, budget=limit, budget_select=select, seed=5)
    b, spent = record["budget"], record["bytes"]
    assert b["limit_bytes"] == limit
    assert spent["experts_measured"] == b["expert_bytes_planned"] == spent["experts_estimated"]
    assert spent["experts_measured"] <= limit
    assert b["chunks_chosen"] <= b["chunks_candidate"]
    if select == "importance":  # the plan is near the best any choice can do at this budget
        assert b["captured_share"] <= b["captured_share_max"] + 1e-9


def test_full_budget_equals_the_exact_merge(uneven):
    repo = uneven
    for method in ("task_arithmetic", "ties", "linear", "slerp"):
        exact, _ = _merge(repo, f"{method}-exact", method)
        full, record = _merge(repo, f"{method}-100", method, budget="100%")
        assert _equal(repo.state_dict(exact), repo.state_dict(full)), method
        assert record["budget"]["captured_share"] == 1.0
        assert record["budget"]["chunks_chosen"] == record["budget"]["chunks_candidate"]
        if method in ("task_arithmetic", "linear"):
            assert record["budget"]["error_bound"] == 0.0


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("method", ["task_arithmetic", "linear"])
def test_error_bound_holds(repo, small_chunks, dtype, method):
    _experts(repo, dtype)
    exact = repo.state_dict(_merge(repo, "exact", method)[0])
    for share in (0.5, 0.2, 0.05):
        sha, record = _merge(repo, f"b{int(share * 100)}", method, budget=f"{share * 100}%")
        b = record["budget"]
        error = _distance(repo.state_dict(sha), exact)
        assert 0 < error <= b["error_bound"] + b["rounding_allowance"], (share, error, b)
        if dtype == torch.float32:  # rounding is then negligible beside the bound itself
            assert b["rounding_allowance"] < 1e-2 * b["error_bound"]
            assert error <= b["error_bound"] * 1.01


def test_importance_beats_uniform_selection(uneven):
    """On experts whose change is uneven across tensors the ranked plan's error is well below a
    uniform random choice's at every budget (the benchmark reports the 2x target at scale). The
    global ranking minimises weight error; the default, per-expert, trades some for fairness."""
    repo = uneven
    base = repo.state_dict("main")
    exact = repo.state_dict(_merge(repo, "exact")[0])
    scale = _distance(exact, base)
    for share in ("50%", "25%", "10%"):
        ranked = _distance(repo.state_dict(_merge(repo, f"i{share}", budget=share, budget_fairness="global")[0]), exact)
        ranked /= scale
        uniform = []
        for seed in (1, 2, 3):
            sha, _ = _merge(repo, f"u{share}{seed}", budget=share, budget_select="uniform", seed=seed)
            uniform.append(_distance(repo.state_dict(sha), exact) / scale)
        assert ranked <= 0.8 * min(uniform), (share, ranked, uniform)


def test_plan_reads_no_tensor_data_and_is_deterministic(uneven):
    repo = uneven
    before = repo.store.reads.chunks
    first, _ = repo.merge_plan(list(NAMES), "task_arithmetic", weight=WEIGHTS, budget="30%")
    second, _ = repo.merge_plan(list(NAMES), "task_arithmetic", weight=WEIGHTS, budget="30%")
    assert repo.store.reads.chunks == before  # statistics from the experts' commits, no reads
    assert first.budget.analyze_pairs == 0
    assert [tp.reads for tp in first.tensors] == [tp.reads for tp in second.tensors]


def test_unrecorded_pairs_are_analyzed_once_and_cached(repo, small_chunks):
    """An expert two commits past the base: its chunks' statistics pair them with the first
    commit's, not the base's; analyze reads them once, then the cache answers."""
    base = _experts(repo)
    repo.checkout("math")
    commit_model(repo, uneven_finetune(base, seed=99), "math, again")
    repo.checkout("main")
    first, _ = repo.merge_plan(list(NAMES), "task_arithmetic", weight=WEIGHTS, budget="30%")
    assert first.budget.analyze_pairs > 0 and first.budget.analyze_bytes > 0
    before = repo.store.reads.chunks
    second, _ = repo.merge_plan(list(NAMES), "task_arithmetic", weight=WEIGHTS, budget="30%")
    assert second.budget.analyze_pairs == 0 and repo.store.reads.chunks == before
    assert [tp.reads for tp in first.tensors] == [tp.reads for tp in second.tensors]
    # the cached values are the analyzed ones: same captured share and bound
    assert second.budget.captured_share == first.budget.captured_share
    assert second.budget.error_bound == first.budget.error_bound


def test_budget_below_the_unrankable_chunks_is_refused(uneven, monkeypatch):
    from mgit.merge.budget import analyze

    monkeypatch.setattr(analyze, "delta_l2", lambda a, b, dtype: None)  # as if every change were NaN
    monkeypatch.setattr(analyze, "recorded_norms", lambda commits, stats_of, wanted: {})
    monkeypatch.setattr(analyze, "norm_bounds", lambda expert_l2, base_l2: None)  # NaN chunks have no norms
    monkeypatch.setattr(analyze, "history_bounds", lambda expert, base, steps: None)  # nor recorded changes
    with pytest.raises(BadInputError, match="raise --budget"):
        uneven.merge_plan(list(NAMES), "task_arithmetic", weight=WEIGHTS, budget="10%")


def test_budget_is_recorded_and_shown(uneven):
    repo = uneven
    sha, record = _merge(repo, "b", budget="25%")
    b = record["budget"]
    assert set(b) >= {
        "given",
        "limit_bytes",
        "select",
        "expert_bytes_full",
        "expert_bytes_planned",
        "chunks_candidate",
        "chunks_chosen",
        "captured_share",
        "error_bound",
        "rounding_allowance",
        "analyze",
    }
    assert b["given"] == "25%" and 0 < b["captured_share"] < 1
    chosen = [t for t in record["tensors"] if "expert_chunks_chosen" in t]
    assert sum(len(c) for t in chosen for c in t["expert_chunks_chosen"]) == b["chunks_chosen"]
    shown = run_mgit("show", sha, cwd=repo.root, check=True).stdout
    assert "budget 25%" in shown and "error bound" in shown
    doc = json.loads(run_mgit("show", "--json", sha, cwd=repo.root, check=True).stdout)
    assert doc["plan"]["budget"] == b


def test_cli_explain_and_errors(uneven):
    root = uneven.root
    head = uneven.resolve("HEAD")
    args = ("merge", "--method", "task_arithmetic", "--weights", "0.4,0.3,0.2,0.1", *NAMES)
    shown = run_mgit(*args, "--budget", "10%", "--explain", cwd=root, check=True).stdout
    assert "layer" in shown and "captured" in shown and "bound" in shown
    doc = json.loads(run_mgit(*args, "--budget", "10%", "--explain", "--json", cwd=root, check=True).stdout)
    assert doc["budget"]["limit_bytes"] == doc["budget"]["expert_bytes_full"] // 10
    assert uneven.resolve("HEAD") == head  # nothing merged
    bad = run_mgit(*args, "--budget", "lots", cwd=root)
    assert bad.returncode != 0 and "budget 'lots'" in bad.stderr and "Traceback" not in bad.stderr
    done = run_mgit(*args, "--budget", "20kB", cwd=root, check=True)
    assert "budget 20kB" in done.stdout


def test_merge_example_runs(tmp_path):
    """examples/merge_experts.py: TIES on the real MiniLM, then a budgeted task arithmetic merge."""
    script = Path(__file__).parents[2] / "examples" / "merge_experts.py"
    proc = subprocess.run([sys.executable, script, tmp_path / "w"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "budgeted merge" in proc.stdout and "error bound" in proc.stdout


def test_a_budgeted_merge_in_a_partial_clone_fetches_only_the_planned_chunks(repo, small_chunks, tmp_path):
    _experts(repo)
    repo.remote_add("origin", str(tmp_path / "remote.mgit"))
    for branch in ("main", *NAMES):
        repo.push("origin", branch)
    partial = Repository.clone(str(tmp_path / "remote.mgit"), tmp_path / "p", partial=True)  # fetches main
    experts = [f"origin/{n}" for n in NAMES]
    held = partial.store.ids()
    plan, _ = partial.merge_plan(experts, "task_arithmetic", weight=WEIGHTS, budget="20%")
    assert partial.store.ids() == held  # planning fetched nothing: statistics and sizes only
    chosen = {tp.experts[k].chunks[i].id for tp in plan.tensors for k, r in enumerate(tp.reads) for i in r}
    assert chosen and not chosen & held
    sha = partial.merge(experts, "task_arithmetic", weight=WEIGHTS, budget="20%")
    b, spent = partial.merge_record(sha)["budget"], partial.merge_record(sha)["bytes"]
    assert partial.store.ids() - held - set(_chunks(partial, sha)) == chosen  # besides the result: the plan's
    assert 0 < spent["experts_fetched"] <= b["expert_bytes_planned"] <= b["limit_bytes"]
    assert spent["experts_measured"] <= b["limit_bytes"] and spent["base_fetched"] == 0  # main came with the clone
    full = repo.merge(list(NAMES), "task_arithmetic", weight=WEIGHTS, budget="20%", branch="same")
    assert _equal(partial.state_dict(sha), repo.state_dict(full))  # the same plan as in the full repository
    assert Repository(partial.root).fsck() == []


def _chunks(repo, rev):
    """The chunks of a revision's own files (not its history's)."""
    from mgit.model.materialize import local_chunks

    return {c for e in repo.snapshot(rev).values() if e.kind != "blob" for c in local_chunks(repo.graph, e)}


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("task_arithmetic", {"weight": [0.5, -0.2, 0.7], "lambda": 0.8}),
        ("task_arithmetic", {"weight": [0.5, 0.2, 0.7], "normalize": True}),
        ("ties", {"weight": [0.5, 0.2, 0.7], "density": 1.0}),
    ],
)
def test_experts_a_budget_skipped_are_left_out_of_the_math(method, params):
    """An expert equal to the base on a slice adds a zero delta: leaving it out gives the same
    result up to rounding (its weight still counts in a normalizing sum)."""
    from mgit.merge.methods import get_method

    g = torch.Generator().manual_seed(0)
    base = torch.randn(1000, generator=g, dtype=torch.float64)
    experts = [base + torch.randn(1000, generator=g, dtype=torch.float64) * 0.01 for _ in range(3)]
    m = get_method(method)
    prepared = m.prepare(3, params, torch.float64, base=base, expert_at=lambda k: experts[k])
    with_zero = m.merge_slice(prepared, base, [experts[0], base, experts[2]])
    left_out = m.merge_slice(prepared, base, [experts[0], experts[2]], present=[0, 2])
    assert torch.allclose(with_zero, left_out, rtol=0, atol=1e-12)
    assert torch.equal(m.merge_slice(prepared, base, [], present=[]), base)


def test_a_nan_in_the_base_is_read_not_ranked(repo, small_chunks):
    """A chunk whose change is not finite cannot be ranked: it is always read, and the plan and
    its record stay valid JSON."""
    base = llama_state_dict(seed=3)
    base["model.layers.1.mlp.up_proj.weight"][0, 0] = float("nan")
    commit_model(repo, base, "base")
    for k, name in enumerate(NAMES[:2]):
        repo.checkout("main")
        repo.checkout(create_branch=name)
        commit_model(repo, uneven_finetune(base, seed=40 + k), name)
    repo.checkout("main")
    sha = repo.merge(list(NAMES[:2]), "task_arithmetic", weight=[0.5, 0.5], budget="30%", branch="nan")
    record = repo.merge_record(sha)
    nan_tensor = next(t for t in record["tensors"] if t["name"] == "model.layers.1.mlp.up_proj.weight")
    assert record["bytes"]["experts_measured"] <= record["budget"]["limit_bytes"]
    assert torch.isnan(repo.state_dict(sha, names=[nan_tensor["name"]])[nan_tensor["name"]][0, 0])
    assert run_mgit("show", sha, cwd=repo.root, check=True).returncode == 0


def test_show_reads_plan_records_older_than_the_budget_keys(uneven):
    """A merge recorded by an earlier mgit has no budget or output keys: show still prints it."""
    from mgit.cli.views.merge import plan_text as _print_plan

    sha, record = _merge(uneven, "old")
    del record["bytes"]["output_logical"]
    _print_plan(record)  # no KeyError
