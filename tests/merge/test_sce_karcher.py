"""``sce`` against mergekit 0.1.5, in-process on the same tensors (tests/helpers/mergekit_ref.py:
bit for bit in bf16/fp16, 1e-6 relative in float32), per tensor and on whole models merged
through ``Repository.merge`` and the CLI."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from helpers.cli import invoke
from helpers.mergekit_ref import DTYPES, SHAPES, assert_matches, assert_same_spec, make_inputs, mergekit_merge
from mergekit.merge_methods.api import merge_state_dicts

from mgit.errors import BadInputError
from mgit.merge.methods import METHODS, merge_tensor

SCE_PARAMS: list[dict[str, Any]] = [
    {},
    {"select_topk": 0.5},
    {"select_topk": 0.1, "int8_mask": True},
    {"select_topk": 0.37},
    {"select_topk": 0.0},
    {"select_topk": -1.0},
    {"select_topk": 1.5, "int8_mask": True},
]


def test_sce_declares_mergekits_parameters() -> None:
    assert_same_spec("sce")
    assert not METHODS["sce"].random and not METHODS["sce"].elementwise


@pytest.mark.parametrize("kind", ["gauss", "quantized"])
@pytest.mark.parametrize("dtypes", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("k", [1, 2, 4])
@pytest.mark.parametrize("params", SCE_PARAMS, ids=[str(i) for i in range(len(SCE_PARAMS))])
def test_sce_equals_mergekit(
    params: dict[str, Any], k: int, shape: tuple[int, ...], dtypes: tuple[Any, Any, Any], kind: str
) -> None:
    in_dtype, dtype, out_dtype = dtypes
    base, experts = make_inputs(shape, k, in_dtype, seed=k + len(shape), kind=kind)
    ref = mergekit_merge("sce", base, experts, params, dtype, out_dtype)
    ours = merge_tensor("sce", base, experts, params, dtype=dtype, out_dtype=out_dtype)
    assert_matches(ours, ref)


@pytest.mark.parametrize(
    "case",
    ["no_experts", "experts_equal_base", "tiny_deltas", "opposite_signs", "scalar"],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sce_special_cases_equal_mergekit(case: str, dtype: torch.dtype) -> None:
    """The branches: no expert (the base), zero variance (nothing selected), an energy sum below
    1e-6 (equal weights), signs cancelling (a zero sum elects +), 0-d tensors."""
    g = torch.Generator().manual_seed(5)
    base = torch.randn(6, 7, generator=g) * 0.02
    delta = torch.randn(6, 7, generator=g) * 0.01
    experts = {
        "no_experts": [],
        "experts_equal_base": [base.clone(), base.clone()],
        "tiny_deltas": [base + delta * 1e-3, base - delta * 2e-3],
        "opposite_signs": [base + delta, base - delta, base + 2 * delta],
        "scalar": [],
    }[case]
    if case == "scalar":
        base, experts = torch.tensor(0.25), [torch.tensor(0.5), torch.tensor(-0.125)]
    base, experts = base.to(dtype), [e.to(dtype) for e in experts]
    for params in ({}, {"select_topk": 0.5}):
        assert_matches(merge_tensor("sce", base, experts, params), mergekit_merge("sce", base, experts, params))


def test_sce_differs_from_the_plain_mean_and_selection_matters() -> None:
    """The test inputs exercise the method: weighting, erasing and selection each change bits."""
    base, experts = make_inputs((12, 20), 3, torch.bfloat16, seed=1)
    full = merge_tensor("sce", base, experts, {})
    selected = merge_tensor("sce", base, experts, {"select_topk": 0.3})
    mean = merge_tensor("task_arithmetic", base, experts, {"weight": 1.0, "normalize": True})
    assert not torch.equal(full, selected) and not torch.equal(full, mean)


def test_sce_refuses_what_it_cannot_merge() -> None:
    base, experts = make_inputs((4, 5), 2, torch.float32, seed=0)
    with pytest.raises(BadInputError, match="needs a base"):
        merge_tensor("sce", None, experts, {})
    with pytest.raises(BadInputError, match="unknown parameter"):
        merge_tensor("sce", base, experts, {"density": 0.5})
    with pytest.raises(BadInputError, match="select_topk"):
        METHODS["sce"].check_params({"select_topk": float("nan")}, "sce")


def test_sce_whole_model_equals_mergekit(experts: Any) -> None:
    """Through the engine (Repository.merge) and the CLI (--param), every tensor bit for bit."""
    repo = experts
    names = ["math", "code"]
    models = {n: repo.state_dict(n) for n in ("main", *names)}
    want = merge_state_dicts(models, "sce", base="main", parameters={"select_topk": 0.4})
    got = repo.state_dict(repo.merge(names, "sce", base="main", branch="sce-api", select_topk=0.4))
    assert set(got) == set(want) and all(torch.equal(got[n], want[n]) for n in want)
    result = invoke(
        "merge",
        *names,
        "--method",
        "sce",
        "--param",
        "select_topk=0.4",
        "--base",
        "main",
        "-b",
        "sce-cli",
        cwd=repo.root,
    )
    assert result.exit_code == 0, result.stderr
    cli = repo.state_dict("sce-cli")
    assert all(torch.equal(cli[n], want[n]) for n in want)
