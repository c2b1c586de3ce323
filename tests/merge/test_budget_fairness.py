"""--budget-fairness per-expert: each expert's share of the budget is spent on its own chunks first,
so experts with small deltas are not left at the base by those with large ones (issue 15: on real
dense fine-tunes the global ranking starved whole tasks)."""

from __future__ import annotations

import pytest
from helpers.cli import invoke
from helpers.models import commit_uneven
from hypothesis import given
from hypothesis import strategies as st

from mgit.errors import BadInputError
from mgit.merge.budget.importance import Candidate, choose

NAMES = ("math", "code", "chat")
WEIGHTS = [0.5, 0.3, 0.2]


@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(1, 40), st.floats(0.001, 100)), min_size=1, max_size=30),
    st.floats(0.0, 1.0),
    st.sampled_from(["importance", "uniform"]),
)
def test_each_expert_gets_its_share_and_the_budget_holds(rows, share, select):
    cands = [Candidate(0, k, n, cost, norm, 1.0) for n, (k, cost, norm) in enumerate(rows)]
    total = sum(c.cost for c in cands)
    limit = int(total * share)
    taken = choose(cands, limit, select, seed=3, fairness="per-expert")
    assert sum(c.cost for c, t in zip(cands, taken, strict=True) if t) <= limit
    biggest = max(c.cost for c in cands)
    for k in {c.expert for c in cands}:
        mine = [(c, t) for c, t in zip(cands, taken, strict=True) if c.expert == k]
        own = sum(c.cost for c, _ in mine)
        got = sum(c.cost for c, t in mine if t)
        # the expert's share of the budget, less what a chunk too large for what is left may cost
        assert got >= own * limit // total - biggest or got == own


def test_the_global_ranking_can_starve_an_expert_and_per_expert_does_not():
    big = [Candidate(0, 0, n, 10, 100.0, 1.0) for n in range(10)]
    small = [Candidate(1, 1, n, 10, 1.0, 1.0) for n in range(10)]
    cands = big + small
    glob = choose(cands, 100, "importance", 0)
    fair = choose(cands, 100, "importance", 0, fairness="per-expert")
    assert sum(glob[10:]) == 0  # the small expert gets nothing
    assert sum(fair[:10]) == 5 and sum(fair[10:]) == 5


@pytest.fixture
def uneven(repo, small_chunks):
    commit_uneven(repo, NAMES, 40)
    return repo


def test_a_per_expert_merge_records_its_fairness_and_each_experts_share(uneven):
    repo = uneven
    sha = repo.merge(
        list(NAMES),
        "task_arithmetic",
        branch="fair",
        checkout=False,
        budget="20%",
        budget_fairness="per-expert",
        weight=WEIGHTS,
    )
    b = repo.merge_record(sha)["budget"]
    assert b["fairness"] == "per-expert"
    assert len(b["captured_share_per_expert"]) == len(NAMES)
    assert all(0 < s <= 1 for s in b["captured_share_per_expert"])
    assert repo.merge_record(sha)["bytes"]["experts_measured"] <= b["limit_bytes"]
    glob = repo.merge_record(
        repo.merge(
            list(NAMES),
            "task_arithmetic",
            branch="glob",
            checkout=False,
            budget="20%",
            budget_fairness="global",
            weight=WEIGHTS,
        )
    )["budget"]
    assert glob["fairness"] == "global"
    assert min(b["captured_share_per_expert"]) >= min(glob["captured_share_per_expert"])


def test_the_cli_takes_and_shows_it_and_refuses_an_unknown_one(uneven):
    args = ["merge", "--method", "task_arithmetic", "--weights", "0.5,0.3,0.2", *NAMES, "--budget", "20%"]
    shown = invoke(*args, "--budget-fairness", "per-expert", "--explain", cwd=uneven.root, check=True)
    assert "importance, per-expert" in shown.stdout and "per expert " in shown.stdout
    bad = invoke(*args, "--budget-fairness", "sometimes", cwd=uneven.root)
    assert bad.returncode != 0 and "sometimes" in bad.stderr
    with pytest.raises(BadInputError, match="fairness"):
        uneven.merge(list(NAMES), "task_arithmetic", budget="20%", budget_fairness="sometimes", weight=WEIGHTS)


def test_per_expert_is_the_default(uneven):
    """bench_quality measured it better or equal on real fine-tunes (benchmarks/results/bench_quality.md)."""
    sha = uneven.merge(list(NAMES), "task_arithmetic", branch="d", checkout=False, budget="20%", weight=WEIGHTS)
    assert uneven.merge_record(sha)["budget"]["fairness"] == "per-expert"
