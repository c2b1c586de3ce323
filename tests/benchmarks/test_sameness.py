"""harness/sameness.py: whether a merge's result is another's, bit for bit and by the relative error
against the exact merge, computed in the child the benchmarks start (run here in-process)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH_DIR))

from harness import sameness  # noqa: E402

torch = pytest.importorskip("torch")


def save_dir(out: Path, tensors: dict) -> Path:
    from safetensors.torch import save_file

    out.mkdir(exist_ok=True)
    save_file(tensors, str(out / "model.safetensors"))
    return out


def test_same_main_tells_bit_identical_from_nearly_equal(tmp_path: Path, monkeypatch, capsys) -> None:
    from mgit import Repository

    tensors = {"a": torch.randn(64, 32).to(torch.bfloat16), "b": torch.ones(16, dtype=torch.bfloat16)}
    with Repository.init(tmp_path / "repo") as repo:
        rev = repo.commit_state_dict(tensors, model="model", message="m")

    def check(theirs: dict) -> sameness.Sameness:
        out = save_dir(tmp_path / "out", theirs)
        monkeypatch.setattr(sys, "argv", ["-c", str(tmp_path / "repo"), rev, str(out)])
        sameness.same_main()
        return sameness.Sameness(**json.loads(capsys.readouterr().out.strip().splitlines()[-1]))

    same = check(tensors)
    assert same.bit_identical and (same.tensors, same.identical, same.max_abs) == (2, 2, 0.0)
    assert sameness.same_cell(same) == "bit-identical (2/2)"
    assert sameness.same_cell(same, max_abs=True) == "bit-identical (2/2 tensors, max abs diff 0)"
    nudged = {**tensors, "a": tensors["a"].clone()}
    nudged["a"][0, 0] = nudged["a"][0, 0] + 1
    off = check(nudged)
    assert not off.bit_identical and off.identical == 1 and off.max_abs >= 0.5
    assert sameness.same_cell(off).startswith("**NO**: 1/2 bit-identical")
    missing = check({"a": tensors["a"]})
    assert not missing.bit_identical and missing.problems == ["b"]


def test_errors_main_measures_each_result_against_the_exact_merge(tmp_path: Path, monkeypatch, capsys) -> None:
    """‖M − M_full‖ / ‖M_full − base‖ over all tensors: base zeros, exact merge ones (‖Δ‖ = 2 over
    4 + 0 elements), a budgeted result off by 2 in one element (relative error 1), mergekit's equal."""
    from mgit import Repository

    base = {"w": torch.zeros(4), "n": torch.zeros(2)}
    exact = {"w": torch.ones(4), "n": torch.zeros(2)}
    budgeted = {"w": torch.tensor([3.0, 1.0, 1.0, 1.0]), "n": torch.zeros(2)}
    with Repository.init(tmp_path / "repo") as repo:
        versions = (("base", base), ("exact", exact), ("budgeted", budgeted))
        revs = [repo.commit_state_dict(t, model="model", message=m) for m, t in versions]
    out = save_dir(tmp_path / "mergekit", exact)
    monkeypatch.setattr(sys, "argv", ["-c", str(tmp_path / "repo"), revs[0], revs[1], str(out), revs[2], revs[1]])
    sameness.errors_main()
    denom, found = sameness.read_errors(json.loads(capsys.readouterr().out.strip().splitlines()[-1]))
    assert denom == 2.0
    assert math.isclose(found[revs[2]].rel_error, 1.0) and found[revs[2]].identical == 1
    assert found[revs[1]].rel_error == 0.0 and found[revs[1]].bit_identical
    assert found["mergekit"].bit_identical and found["mergekit"].rel_error == 0.0


def test_bench_merges_child_compares_a_merge_and_counts_its_expert_reads(tmp_path: Path, monkeypatch, capsys) -> None:
    """bench_merge's comparison child (``harness.merge_cases.compare_main``): a real task-arithmetic
    merge against its own tensors written out as another tool's output is bit-identical, and the
    expert chunks it read are counted."""
    from harness import merge_cases  # noqa: E402
    from helpers.models import TINY, commit_model, frozen_finetune, llama_state_dict

    from mgit import Repository

    base = llama_state_dict(TINY)
    with Repository.init(tmp_path / "repo") as repo:
        commit_model(repo, base, "base")
        for k in (1, 2):
            repo.checkout("main", create_branch=f"expert-{k}")
            commit_model(repo, frozen_finetune(base, set(), seed=k), f"expert {k}")
        repo.checkout("main")
        sha = repo.merge(["expert-1", "expert-2"], "task_arithmetic", weight=0.5, branch="m", checkout=False)
        out = save_dir(tmp_path / "out", repo.state_dict(sha))
    monkeypatch.setattr(sys, "argv", ["-c", str(tmp_path / "repo"), sha, str(out)])
    merge_cases.compare_main()
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert doc["identical"] == doc["tensors"] == len(base) and doc["problems"] == []
    assert doc["dtypes"] == sorted({str(t.dtype) for t in base.values()})
    assert doc["expert_own_bytes"] > 0 and doc["expert_delta_chunks"] >= 0
