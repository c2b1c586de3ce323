"""``sce`` and ``karcher`` against mergekit 0.1.5, in-process on the same tensors (tests/helpers/mergekit_ref.py:
bit for bit in bf16/fp16, 1e-6 relative in float32), per tensor and on whole models merged
through ``Repository.merge`` and the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
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


KARCHER_PARAMS: list[dict[str, Any]] = [
    {},
    {"max_iter": 3},
    {"max_iter": 50, "tol": 1e-7},
    {"tol": 0.5},
    {"max_iter": 0},
]
CASES = [("sce", p) for p in SCE_PARAMS] + [("karcher", p) for p in KARCHER_PARAMS]


@pytest.mark.parametrize("name", ["sce", "karcher"])
def test_declares_mergekits_parameters(name: str) -> None:
    assert_same_spec(name)
    assert not METHODS[name].random and not METHODS[name].elementwise


@pytest.mark.parametrize("kind", ["gauss", "quantized"])
@pytest.mark.parametrize("dtypes", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("k", [1, 2, 4])
@pytest.mark.parametrize(("method", "params"), CASES, ids=[f"{m}-{i}" for i, (m, _) in enumerate(CASES)])
def test_equals_mergekit(
    method: str, params: dict[str, Any], k: int, shape: tuple[int, ...], dtypes: tuple[Any, Any, Any], kind: str
) -> None:
    in_dtype, dtype, out_dtype = dtypes
    base, experts = make_inputs(shape, k, in_dtype, seed=k + len(shape), kind=kind)
    if not METHODS[method].needs_base:  # karcher: k inputs that differ in direction, not only by small deltas
        base, experts = None, [base, *experts[1:]]
    ref = mergekit_merge(method, base, experts, params, dtype, out_dtype)
    ours = merge_tensor(method, base, experts, params, dtype=dtype, out_dtype=out_dtype)
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


def test_sce_whole_model_equals_mergekit(experts: Any, tmp_path: Path) -> None:
    """Through the engine (Repository.merge), the CLI (--param) and a mergekit config, every
    tensor bit for bit."""
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
    config = {"merge_method": "sce", "base_model": "main", "models": [{"model": n} for n in ("main", *names)]}
    from_config = _merged_by_config(repo, tmp_path, config | {"parameters": {"select_topk": 0.4}})
    assert all(torch.equal(from_config[n], want[n]) for n in want)


def _merged_by_config(repo: Any, tmp_path: Path, config: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The model a mergekit YAML config merges (on a new branch)."""
    path = tmp_path / f"{config['merge_method']}.yml"
    path.write_text(yaml.safe_dump(config))
    return repo.state_dict(repo.merge([], None, config=path, branch=f"{config['merge_method']}-config"))


# --------------------------------------------------------------------------------------------
# karcher: no base, every input an expert


@pytest.mark.parametrize(
    "case", ["all_zero", "nan_and_zero", "one_zero", "antipodal", "identical", "signed_zeros", "scalar", "negative_tol"]
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_karcher_special_cases_equal_mergekit(case: str, dtype: torch.dtype) -> None:
    """The branches: norms within tol (dropped, or all: zeros), a ~0 start (the first direction),
    angles within tol (skipped), 0-d tensors, a negative tol (a zero input's direction is 0); a NaN
    norm is no valid direction either, and the zeros it falls back to keep the NaNs (x·0)."""
    g = torch.Generator().manual_seed(9)
    x = torch.randn(5, 8, generator=g)
    y = torch.randn(5, 8, generator=g)
    params: dict[str, Any] = {"tol": -1.0} if case == "negative_tol" else {}
    inputs = {
        "all_zero": [torch.zeros(5, 8), -torch.zeros(5, 8), x * 1e-8],
        "nan_and_zero": [torch.where(x > 1, torch.nan, x), torch.zeros(5, 8)],
        "one_zero": [x, torch.zeros(5, 8), y],
        "antipodal": [x, -x],
        "identical": [x, x.clone(), x.clone()],
        "signed_zeros": [-torch.zeros(5, 8), -torch.zeros(5, 8)],
        "scalar": [torch.tensor(0.5), torch.tensor(-2.0), torch.tensor(3.0)],
        "negative_tol": [x, torch.zeros(5, 8), y],
    }[case]
    inputs = [t.to(dtype) for t in inputs]
    ours = merge_tensor("karcher", None, inputs, params)
    assert_matches(ours, mergekit_merge("karcher", None, inputs, params), exact=True)


def test_karcher_moves_off_the_chord() -> None:
    """The inputs exercise the iteration: more steps change the bits, and the result is not the mean."""
    base, experts = make_inputs((12, 20), 3, torch.float32, seed=2)
    inputs = [base, experts[1] * 3, -experts[2]]
    one_step = merge_tensor("karcher", None, inputs, {"max_iter": 1})
    converged = merge_tensor("karcher", None, inputs, {})
    mean = merge_tensor("linear", None, inputs, {"weight": 1.0})
    assert not torch.equal(one_step, converged) and not torch.equal(converged, mean)


def test_karcher_parameters_are_checked() -> None:
    base, experts = make_inputs((4, 5), 2, torch.float32, seed=0)
    assert merge_tensor("karcher", None, experts, {"max_iter": 2.0}).shape == base.shape  # --param gives floats
    with pytest.raises(BadInputError, match="max_iter .*whole number"):
        merge_tensor("karcher", None, experts, {"max_iter": 2.5})
    with pytest.raises(BadInputError, match="max_iter = 2.5 must be a whole number"):
        METHODS["karcher"].check_params({"max_iter": 2.5}, "karcher")
    with pytest.raises(BadInputError, match="takes no base"):
        merge_tensor("karcher", base, experts, {})
    with pytest.raises(BadInputError, match="at least 1"):
        merge_tensor("karcher", None, [], {})


def test_karcher_whole_model_equals_mergekit(experts: Any, tmp_path: Path) -> None:
    """Through the engine (Repository.merge), the CLI (--param) and a mergekit config, every tensor
    bit for bit; a base the config names is merely one more input, as in mergekit."""
    repo = experts
    names = ["main", "math", "code"]
    models = {n: repo.state_dict(n) for n in names}
    want = merge_state_dicts(models, "karcher", parameters={"max_iter": 5})
    got = repo.state_dict(repo.merge(names, "karcher", branch="karcher-api", max_iter=5))
    assert set(got) == set(want) and all(torch.equal(got[n], want[n]) for n in want)
    result = invoke("merge", *names, "--method", "karcher", "--param", "max_iter=5", "-b", "karcher-cli", cwd=repo.root)
    assert result.exit_code == 0, result.stderr
    cli = repo.state_dict("karcher-cli")
    assert all(torch.equal(cli[n], want[n]) for n in want)
    config = {"merge_method": "karcher", "base_model": "main", "models": [{"model": n} for n in names]}
    from_config = _merged_by_config(repo, tmp_path, config | {"parameters": {"max_iter": 5}})
    assert all(torch.equal(from_config[n], want[n]) for n in want)
