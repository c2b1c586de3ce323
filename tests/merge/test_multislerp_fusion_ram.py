"""``multislerp``, ``arcee_fusion``, ``ram`` and ``ramplus_tl`` against mergekit 0.1.5, in-process on
the same tensors (tests/helpers/mergekit_ref.py: bit for bit in bf16/fp16, 1e-6 relative in
float32, and the same result dtype), per tensor and on whole models merged through
``Repository.merge``, the CLI (also under ``--budget``) and a mergekit config."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from helpers.cli import invoke
from helpers.mergekit_ref import (
    DTYPES,
    SHAPES,
    assert_matches,
    assert_same_spec,
    make_inputs,
    mergekit_merge,
    weights,
)
from mergekit.merge_methods.api import merge_state_dicts

from mgit.errors import BadInputError
from mgit.merge.methods import METHODS, merge_tensor, seeded_generator

NAMES = ["multislerp", "arcee_fusion", "ram", "ramplus_tl"]
Params = dict[str, Any]

# (method, parameters for k experts, with the base): every branch of each method's parameters
CASES: list[tuple[str, Callable[[int], Params], bool]] = [
    ("multislerp", lambda k: {"weight": weights(k)}, True),
    ("multislerp", lambda k: {"weight": weights(k)}, False),
    ("multislerp", lambda k: {"weight": [1.5, -0.25, 0.5, 0.75][:k], "normalize_weights": False, "eps": 1e-3}, True),
    ("arcee_fusion", lambda k: {}, True),
    ("ram", lambda k: {}, True),
    ("ram", lambda k: {"epsilon": 2e-3}, True),
    ("ram", lambda k: {"epsilon": 0.0}, True),
    ("ramplus_tl", lambda k: {}, True),
    ("ramplus_tl", lambda k: {"r": 0.5, "alpha": 1.0, "epsilon": 1e-3}, True),
    ("ramplus_tl", lambda k: {"r": -2.0, "alpha": 0.0}, True),
]


@pytest.mark.parametrize("name", NAMES)
def test_declares_mergekits_parameters(name: str) -> None:
    assert_same_spec(name)
    method = METHODS[name]
    assert not method.elementwise and not method.affine
    assert method.random == (name == "arcee_fusion")  # a sample of the scores past 1M elements
    assert method.accepts_sketches == (not name.startswith("ram"))


# 1, 2 and 4 experts where the method takes them (arcee_fusion: exactly 1)
WITH_K = [(*case, k) for case in CASES for k in (1, 2, 4) if case[0] != "arcee_fusion" or k == 1]


@pytest.mark.parametrize("kind", ["gauss", "quantized"])
@pytest.mark.parametrize("dtypes", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(
    ("method", "params_for", "with_base", "k"), WITH_K, ids=[f"{c[0]}-{i}-k{c[3]}" for i, c in enumerate(WITH_K)]
)
def test_equals_mergekit(
    method: str,
    params_for: Callable[[int], Params],
    with_base: bool,
    k: int,
    shape: tuple[int, ...],
    dtypes: tuple[Any, Any, Any],
    kind: str,
) -> None:
    in_dtype, dtype, out_dtype = dtypes
    base, experts = make_inputs(shape, k, in_dtype, seed=k + len(shape), kind=kind)
    if not with_base:  # multislerp without a base: k inputs that differ in direction
        base, experts = None, [base, *experts[1:]]
    params = params_for(k)
    ref = mergekit_merge(method, base, experts, params, dtype, out_dtype)
    ours = merge_tensor(method, base, experts, params, dtype=dtype, out_dtype=out_dtype)
    assert_matches(ours, ref)


def test_the_inputs_exercise_the_methods() -> None:
    """Each method's result differs from the plain mean and from the inputs, and its parameters
    change bits (so the comparisons above can fail)."""
    base, experts = make_inputs((12, 20), 3, torch.float32, seed=1)
    mean = merge_tensor("task_arithmetic", base, experts, {"weight": 1.0, "normalize": True})
    for method, params, other in [
        ("multislerp", {"weight": [0.5, 0.3, 0.2]}, {"weight": [0.2, 0.3, 0.5]}),
        ("ram", {}, {"epsilon": 5e-3}),
        ("ramplus_tl", {}, {"r": 1.0, "alpha": 5.0}),
    ]:
        merged = merge_tensor(method, base, experts, params)
        assert not torch.equal(merged, mean) and not torch.equal(merged, merge_tensor(method, base, experts, other))
    fused = merge_tensor("arcee_fusion", base, experts[:1], {})
    assert not torch.equal(fused, base) and not torch.equal(fused, experts[0])


# --------------------------------------------------------------------------------------------
# the branches, against mergekit


@pytest.mark.parametrize("case", ["antipodal_pair", "expert_is_base", "zero_weight", "scalar", "parallel"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_multislerp_special_cases_equal_mergekit(case: str, dtype: torch.dtype) -> None:
    """Two antipodal inputs balanced by their weights (linear fallback), an expert equal to the base
    (a zero offset), a zero weight, 0-d tensors, parallel inputs (a zero tangent)."""
    g = torch.Generator().manual_seed(4)
    x, y = torch.randn(5, 8, generator=g), torch.randn(5, 8, generator=g)
    base: torch.Tensor | None = None
    inputs, w = {
        "antipodal_pair": ([x, -x], [0.5, 0.5]),
        "expert_is_base": ([x, y, x * 0.5], [0.2, 0.3, 0.5]),
        "zero_weight": ([x, y, -y], [0.0, 0.7, 0.1]),
        "scalar": ([torch.tensor(0.5), torch.tensor(-2.0), torch.tensor(3.0)], [0.2, 0.3, 0.5]),
        "parallel": ([x, 2 * x, 3 * x], [0.2, 0.3, 0.5]),
    }[case]
    if case == "expert_is_base":
        base = (x * 0.5).to(dtype)
    inputs = [t.to(dtype) for t in inputs]
    params = {"weight": w}
    ours = merge_tensor("multislerp", base, inputs, params)
    assert_matches(ours, mergekit_merge("multislerp", base, inputs, params), exact=True)


def test_multislerp_refuses_balanced_antipodes_as_mergekit_raises() -> None:
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(1))
    inputs, params = [x, -x, x, -x], {"weight": [0.25] * 4}
    with pytest.raises(ValueError, match="weighted sum of the input tensors is zero"):
        mergekit_merge("multislerp", None, inputs, params)
    with pytest.raises(BadInputError, match=r"^multislerp \(w\): the weighted mean of the inputs' directions is zero"):
        merge_tensor("multislerp", None, inputs, params, name="w")


@pytest.mark.parametrize("case", ["no_experts", "experts_equal_base", "nothing_counts", "all_overlap", "scalar"])
@pytest.mark.parametrize("method", ["ram", "ramplus_tl"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_ram_special_cases_equal_mergekit(case: str, method: str, dtype: torch.dtype) -> None:
    """No expert (the base), experts equal to the base (no change counts: ρ = 0 / epsilon), every
    change below epsilon, every element changed by every expert, 0-d tensors."""
    g = torch.Generator().manual_seed(6)
    base = torch.randn(6, 7, generator=g) * 0.02
    delta = torch.randn(6, 7, generator=g) * 0.01 + 0.05
    params: Params = {"epsilon": 1.0} if case == "nothing_counts" else {}
    experts = {
        "no_experts": [],
        "experts_equal_base": [base.clone(), base.clone()],
        "nothing_counts": [base + delta, base - delta],
        "all_overlap": [base + delta, base - 2 * delta, base + 3 * delta],
        "scalar": [],
    }[case]
    if case == "scalar":
        base, experts = torch.tensor(0.25), [torch.tensor(0.5), torch.tensor(0.25), torch.tensor(-0.125)]
    base, experts = base.to(dtype), [e.to(dtype) for e in experts]
    ours = merge_tensor(method, base, experts, params)
    assert_matches(ours, mergekit_merge(method, base, experts, params), exact=True)


@pytest.mark.parametrize("case", ["expert_is_base", "row", "scalar", "quantized"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_arcee_fusion_special_cases_equal_mergekit(case: str, dtype: torch.dtype) -> None:
    """An expert equal to the base (every score 0: the fence is 0 and every element passes), one
    row, 0-d tensors, many equal scores."""
    g = torch.Generator().manual_seed(8)
    base = torch.randn(6, 9, generator=g) * 0.02
    expert = {
        "expert_is_base": base.clone(),
        "row": base + torch.randn(6, 9, generator=g) * 0.01,
        "scalar": base,
        "quantized": base + torch.randint(-2, 3, (6, 9), generator=g) * 0.004,
    }[case]
    if case == "row":
        base, expert = base[0], expert[0]
    if case == "scalar":
        base, expert = torch.tensor(0.25), torch.tensor(0.5)
    base, expert = base.to(dtype), expert.to(dtype)
    ours = merge_tensor("arcee_fusion", base, [expert], {})
    assert_matches(ours, mergekit_merge("arcee_fusion", base, [expert], {}), exact=True)


def test_arcee_fusion_samples_large_tensors_as_mergekit_does() -> None:
    """Past 1,000,000 elements mergekit takes the quantiles of a random sample drawn from torch's
    global generator: a generator seeded with s draws the same sample as torch.manual_seed(s)."""
    g = torch.Generator().manual_seed(3)
    base = torch.randn(1001, 1000, generator=g) * 0.02
    expert = base + torch.randn(1001, 1000, generator=g) * 0.01
    with torch.random.fork_rng():
        torch.manual_seed(11)
        ref = mergekit_merge("arcee_fusion", base, [expert], {})
    ours = merge_tensor("arcee_fusion", base, [expert], {}, generator=seeded_generator(11))
    assert_matches(ours, ref, exact=True)
    other = merge_tensor("arcee_fusion", base, [expert], {}, generator=seeded_generator(12))
    assert not torch.equal(other, ours)  # the sample decides the fence
    with pytest.raises(BadInputError, match="needs a seeded generator"):
        merge_tensor("arcee_fusion", base, [expert], {})
    small = merge_tensor("arcee_fusion", base[:10], [expert[:10]], {})  # small tensors draw nothing
    assert_matches(small, mergekit_merge("arcee_fusion", base[:10], [expert[:10]], {}), exact=True)


# --------------------------------------------------------------------------------------------
# contracts and ranges


def test_contracts_are_mergekits() -> None:
    base, experts = make_inputs((4, 5), 2, torch.float32, seed=0)
    with pytest.raises(BadInputError, match="needs exactly 1 expert"):
        merge_tensor("arcee_fusion", base, experts, {})
    for method in ("arcee_fusion", "ram", "ramplus_tl"):
        with pytest.raises(BadInputError, match="needs a base"):
            merge_tensor(method, None, experts[:1], {})
    with pytest.raises(BadInputError, match="missing required parameter weight"):
        merge_tensor("multislerp", base, experts, {})
    with pytest.raises(BadInputError, match="at least 1"):
        merge_tensor("multislerp", base, [], {"weight": 1.0})
    with pytest.raises(BadInputError, match="is deterministic and takes no masks"):
        merge_tensor("ram", base, experts, {}, masks=[None, None])
    with pytest.raises(BadInputError, match="draws no keep-masks"):
        merge_tensor("arcee_fusion", base, experts[:1], {}, masks=[None])


@pytest.mark.parametrize(
    ("method", "params", "message"),
    [
        ("multislerp", {"eps": 0.0}, r"eps = 0.0 is out of range; accepted: \(0, inf\)"),
        ("multislerp", {"normalize_weights": 2}, "normalize_weights = 2 must be true or false"),
        ("ram", {"epsilon": -1e-5}, r"epsilon = -1e-05 is out of range; accepted: \[0, inf\)"),
        ("ramplus_tl", {"epsilon": 0.0}, r"epsilon = 0.0 is out of range; accepted: \(0, inf\)"),
        ("ramplus_tl", {"alpha": -0.1}, r"alpha = -0.1 is out of range; accepted: \[0, inf\)"),
        ("ramplus_tl", {"r": float("nan")}, "r = nan is out of range; accepted: any finite number"),
    ],
)
def test_ranges_are_refused_in_one_line(method: str, params: Params, message: str) -> None:
    with pytest.raises(BadInputError, match=message):
        METHODS[method].check_params(params, method)


def test_rams_epsilon_is_not_dellas() -> None:
    """epsilon is a threshold on |Δ| for ram (any size), DELLA's spread below 1 for della."""
    METHODS["ram"].check_params({"epsilon": 2.0}, "ram")
    METHODS["ramplus_tl"].check_params({"epsilon": 2.0}, "ramplus_tl")
    with pytest.raises(BadInputError, match="epsilon = 2.0 is out of range"):
        METHODS["della"].check_params({"epsilon": 2.0}, "della")


# --------------------------------------------------------------------------------------------
# whole models: Repository.merge, the CLI (also under --budget), a mergekit config

# method -> (experts, parameters by expert name for mergekit, the CLI's options, base for mergekit)
WHOLE: dict[str, tuple[list[str], Params, list[str]]] = {
    "multislerp": (["math", "code"], {"weight": {"math": 0.7, "code": 0.4}}, ["--weights", "0.7,0.4"]),
    "arcee_fusion": (["math"], {}, []),
    "ram": (["math", "code"], {"epsilon": 1e-4}, ["--epsilon", "1e-4"]),
    "ramplus_tl": (["math", "code"], {"r": 0.3, "alpha": 0.5}, ["--param", "r=0.3", "--param", "alpha=0.5"]),
}


def _mergekit_model(repo: Any, method: str) -> dict[str, torch.Tensor]:
    names, params, _ = WHOLE[method]
    models = {n: repo.state_dict(n) for n in ("main", *names)}
    with torch.random.fork_rng():  # arcee_fusion would draw only past 1M elements: none here
        return merge_state_dicts(models, method, base="main", parameters=params)


def _assert_model(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert set(got) == set(want)
    for name in want:
        assert_matches(got[name], want[name], exact=True)


@pytest.mark.parametrize("method", NAMES)
def test_whole_model_from_the_cli_and_python_equals_mergekit(experts: Any, small_chunks: Any, method: str) -> None:
    """`mgit merge EXPERTS --method NAME --base main -b OUT` commits the merge, every tensor bit for
    bit mergekit's (arcee_fusion and ramplus_tl write float32 for bf16 inputs, as mergekit does);
    Repository.merge gives the same commit's tensors."""
    repo = experts
    names, params, options = WHOLE[method]
    want = _mergekit_model(repo, method)
    result = invoke("merge", *names, "--method", method, *options, "--base", "main", "-b", "cli", cwd=repo.root)
    assert result.exit_code == 0, result.stderr
    record = repo.merge_record("cli")
    assert record["method"] == method
    _assert_model(repo.state_dict("cli"), want)
    python_params = {k: list(v.values()) if isinstance(v, dict) else v for k, v in params.items()}
    sha = repo.merge(names, method, base="main", branch="api", checkout=False, **python_params)
    _assert_model(repo.state_dict(sha), want)


@pytest.mark.parametrize("method", NAMES)
def test_runs_under_a_budget(experts: Any, small_chunks: Any, method: str) -> None:
    """`--budget 40%` plans and commits within the budget; `--budget 100%` is the exact merge."""
    repo = experts
    names, _, options = WHOLE[method]
    args = ["merge", *names, "--method", method, *options, "--base", "main"]
    result = invoke(*args, "--budget", "40%", "-b", "b40", cwd=repo.root)
    assert result.exit_code == 0, result.stderr
    record = repo.merge_record("b40")
    assert record["budget"]["limit_bytes"] > 0
    assert record["bytes"]["experts_measured"] <= record["budget"]["limit_bytes"]
    invoke(*args, "--budget", "100%", "-b", "b100", cwd=repo.root, check=True)
    _assert_model(repo.state_dict("b100"), _mergekit_model(repo, method))


def test_multislerp_without_a_base_and_from_a_config(experts: Any, tmp_path: Path) -> None:
    """No base: the experts themselves are interpolated (mergekit without base_model); a config
    naming base_model interpolates the offsets, as the CLI's --base does."""
    repo = experts
    models = {n: repo.state_dict(n) for n in ("main", "math", "code")}
    weight = {"main": 0.2, "math": 0.5, "code": 0.3}
    no_base = merge_state_dicts(models, "multislerp", parameters={"weight": weight})
    result = invoke(
        "merge", "main", "math", "code", "--method", "multislerp", "--weights", "0.2,0.5,0.3", "-b", "nb", cwd=repo.root
    )
    assert result.exit_code == 0, result.stderr
    _assert_model(repo.state_dict("nb"), no_base)
    config = {
        "merge_method": "multislerp",
        "base_model": "main",
        "models": [{"model": "main"}, *({"model": n, "parameters": {"weight": weight[n]}} for n in ("math", "code"))],
        "parameters": {"eps": 1e-6},
    }
    path = tmp_path / "multislerp.yml"
    path.write_text(yaml.safe_dump(config))
    with_base = merge_state_dicts(
        models, "multislerp", base="main", parameters={"weight": {"math": 0.5, "code": 0.3}, "eps": 1e-6}
    )
    _assert_model(repo.state_dict(repo.merge([], None, config=path, branch="cfg")), with_base)


def test_a_config_out_of_range_is_refused_in_one_line(experts: Any, tmp_path: Path) -> None:
    path = tmp_path / "ram.yml"
    path.write_text("merge_method: ramplus_tl\nbase_model: main\nmodels:\n  - model: math\nparameters:\n  alpha: -1\n")
    result = invoke("merge", "--config", str(path), "-b", "bad", cwd=experts.root)
    assert result.exit_code != 0 and "alpha = -1 is out of range; accepted: [0, inf)" in result.stderr
    assert "Traceback" not in result.stderr and "bad" not in experts.branches()
