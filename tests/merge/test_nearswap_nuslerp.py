"""nearswap and nuslerp (mergekit 0.1.5's methods of those names) against mergekit in-process:
bit for bit in bf16/fp16, within 1e-6 relative in float32, per tensor and through `mgit merge`."""

from __future__ import annotations

import pytest
import torch
from helpers.cli import invoke
from helpers.mergekit_ref import DTYPES, SHAPES, assert_matches, mergekit_merge
from mergekit.merge_methods.api import merge_state_dicts

from mgit.errors import BadInputError
from mgit.merge.methods import get_method, merge_tensor

Tensor = torch.Tensor


def pair(shape: tuple[int, ...], dtype: torch.dtype | str, seed: int) -> tuple[Tensor, Tensor]:
    """A base ~ N(0, 0.02) and an expert whose distances from it spread over three decades
    (1e-4 … 1e-1, around every threshold below), a fifth of its elements equal to the base's;
    dtype "mixed": a bf16 base and an fp16 expert."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(shape, generator=g) * 0.02
    scale = 10.0 ** (-4 + 3 * torch.rand(shape, generator=g))
    delta = torch.randn(shape, generator=g) * scale
    delta[torch.rand(shape, generator=g) < 0.2] = 0
    if dtype == "mixed":
        return base.to(torch.bfloat16), (base + delta).to(torch.float16)
    return base.to(dtype), (base + delta).to(dtype)


# --------------------------------------------------------------------------------------------
# nearswap


@pytest.mark.parametrize("t", [0.0, 1e-4, 0.003, 0.05, 2.5])
@pytest.mark.parametrize("dtypes", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_nearswap_equals_mergekit(shape: tuple[int, ...], dtypes: tuple, t: float) -> None:
    in_dtype, dtype, out_dtype = dtypes
    base, expert = pair(shape, in_dtype, seed=len(shape))
    ref = mergekit_merge("nearswap", base, [expert], {"t": t}, dtype, out_dtype)
    ours = merge_tensor("nearswap", base, [expert], {"t": t}, dtype=dtype, out_dtype=out_dtype)
    assert_matches(ours, ref, exact=True)  # the same operations in the same order: bit for bit in f32 too


def test_nearswap_takes_the_expert_within_t_and_weighs_it_t_over_distance_beyond() -> None:
    base = torch.tensor([0.0, 0.0, 0.0, 1.0])
    expert = torch.tensor([0.001, 0.01, 0.04, 1.0])
    merged = merge_tensor("nearswap", base, [expert], {"t": 0.01})
    # within t: the expert; at 4 t: weight 1/4; equal: either
    torch.testing.assert_close(merged, torch.tensor([0.001, 0.01, 0.01, 1.0]))


def test_nearswap_fp16_t_0_gives_mergekits_nan_where_the_inputs_are_near() -> None:
    """mergekit divides t by max(|base - expert|, 1e-6): in fp16 torch computes 0 / d as
    0 · (1 / d), and 1 / d overflows to inf below d ≈ 2^-16, so t = 0 gives NaN there (equal
    inputs included). Reproduced, not hidden: the result is mergekit's."""
    base, expert = pair((64,), torch.float16, seed=5)
    ours = merge_tensor("nearswap", base, [expert], {"t": 0.0})
    nan, distance = ours.isnan(), (base.float() - expert.float()).abs()
    assert bool((nan >= (base == expert)).all()) and bool((base == expert).any())
    assert bool((distance[nan] < 2**-15).all()) and bool((~nan).any())
    assert_matches(ours, mergekit_merge("nearswap", base, [expert], {"t": 0.0}), exact=True)


@pytest.mark.parametrize("count", [0, 2])
def test_nearswap_takes_exactly_one_expert_and_a_base(count: int) -> None:
    base, expert = pair((8,), torch.float32, seed=1)
    with pytest.raises(BadInputError, match=r"nearswap: needs exactly 1 expert tensor\(s\), got"):
        merge_tensor("nearswap", base, [expert] * count, {"t": 0.1})
    with pytest.raises(BadInputError, match="nearswap: needs a base tensor"):
        merge_tensor("nearswap", None, [expert], {"t": 0.1})
    with pytest.raises(BadInputError, match="nearswap: missing required parameter t"):
        merge_tensor("nearswap", base, [expert], {})


def test_nearswap_t_is_a_distance_not_slerps_fraction() -> None:
    """t above 1 is a valid threshold for nearswap (slerp's t stays in [0, 1]); a negative one is refused."""
    nearswap, slerp = get_method("nearswap"), get_method("slerp")
    nearswap.check_params({"t": 2.5}, "nearswap")
    with pytest.raises(BadInputError, match=r"slerp: t = 2.5 is out of range; accepted: \[0, 1\]"):
        slerp.check_params({"t": 2.5}, "slerp")
    with pytest.raises(BadInputError, match=r"nearswap: t = -0.1 is out of range; accepted: \[0, inf\)"):
        nearswap.check_params({"t": -0.1}, "nearswap")


def test_nearswap_from_the_cli_equals_mergekit(experts, small_chunks) -> None:
    """`mgit merge math --method nearswap --t …` on a llama-like model in several chunks per tensor."""
    repo = experts
    base, math = repo.state_dict("main"), repo.state_dict("math")
    invoke("merge", "math", "--method", "nearswap", "--t", "0.001", cwd=repo.root, check=True)
    want = merge_state_dicts({"base": base, "math": math}, "nearswap", base="base", parameters={"t": 0.001})
    got = repo.state_dict("HEAD")
    assert set(got) == set(want)
    for name in want:
        assert_matches(got[name], want[name], exact=True)
    assert any(not torch.equal(got[n], base[n]) and not torch.equal(got[n], math[n]) for n in want)


def test_nearswap_config_range_is_nearswaps(experts, tmp_path) -> None:
    """A mergekit YAML config with nearswap's t = 1.5 merges; with t = -1 it is refused in one line."""
    repo = experts
    for t, code in ((1.5, 0), (-1.0, None)):
        config = tmp_path / f"nearswap{t}.yml"
        config.write_text(
            f"merge_method: nearswap\nbase_model: main\nmodels:\n  - model: math\nparameters:\n  t: {t}\n"
        )
        result = invoke("merge", "--config", str(config), "--base", "main", "-b", f"ns{code}", cwd=repo.root)
        if code == 0:
            assert result.exit_code == 0, result.stderr
        else:
            assert result.exit_code != 0 and "t = -1.0 is out of range; accepted: [0, inf)" in result.stderr
            assert "Traceback" not in result.stderr


# --------------------------------------------------------------------------------------------
# nuslerp

NUSLERP_WEIGHTS = [[0.6, 0.3], [1.0, -1.0], [0.25, 0.75]]  # the second: a zero sum, t = 0.5


def three(shape: tuple[int, ...], dtype: torch.dtype | str, seed: int) -> tuple[Tensor, Tensor, Tensor]:
    """A base and two experts spread around it (see :func:`pair`)."""
    base, first = pair(shape, dtype, seed)
    offset = torch.randn(shape, generator=torch.Generator().manual_seed(seed + 100)) * 0.01
    return base, first, (base.float() + offset).to(first.dtype)


@pytest.mark.parametrize("with_base", [False, True], ids=["no-base", "base"])
@pytest.mark.parametrize(("row_wise", "flatten"), [(False, True), (False, False), (True, False), (True, True)])
@pytest.mark.parametrize("weight", NUSLERP_WEIGHTS, ids=str)
@pytest.mark.parametrize("dtypes", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_nuslerp_equals_mergekit(
    shape: tuple[int, ...], dtypes: tuple, weight: list[float], row_wise: bool, flatten: bool, with_base: bool
) -> None:
    in_dtype, dtype, out_dtype = dtypes
    base, first, second = three(shape, in_dtype, seed=len(shape))
    params = {"weight": weight, "nuslerp_row_wise": row_wise, "nuslerp_flatten": flatten}
    given = base if with_base else None
    ref = mergekit_merge("nuslerp", given, [first, second], params, dtype, out_dtype)
    ours = merge_tensor("nuslerp", given, [first, second], params, dtype=dtype, out_dtype=out_dtype)
    assert_matches(ours, ref, exact=True)  # the same operations in the same order: bit for bit in f32 too


@pytest.mark.parametrize("case", ["colinear", "antipodal", "zero", "orthogonal"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_nuslerp_special_cases(case: str, dtype: torch.dtype) -> None:
    """Colinear and antipodal vectors interpolate linearly; a zero vector normalises by the 1e-7 floor."""
    g = torch.Generator().manual_seed(11)
    first, noise = torch.randn(6, 9, generator=g), torch.randn(6, 9, generator=g)
    second = {"colinear": 3 * first, "antipodal": -first, "zero": torch.zeros(6, 9), "orthogonal": noise}[case]
    first, second = first.to(dtype), second.to(dtype)
    for row_wise, flatten in ((False, True), (True, False), (False, False)):
        params = {"weight": [0.4, 0.6], "nuslerp_row_wise": row_wise, "nuslerp_flatten": flatten}
        ours = merge_tensor("nuslerp", None, [first, second], params)
        assert_matches(ours, mergekit_merge("nuslerp", None, [first, second], params), exact=True)
    if case == "colinear":
        lerp = merge_tensor("linear", None, [first, second], {"weight": [0.4, 0.6]})
        torch.testing.assert_close(merge_tensor("nuslerp", None, [first, second], {"weight": [0.4, 0.6]}), lerp)


def test_nuslerp_contract_is_mergekits() -> None:
    """Exactly two experts; the base optional (mergekit's BasePolicy.OPTIONAL); weight required."""
    from mergekit.merge_methods import get as mergekit_method
    from mergekit.merge_methods.base import BasePolicy

    contract = mergekit_method("nuslerp").spec.contract
    method = get_method("nuslerp")
    assert (method.min_experts, method.max_experts) == (contract.min_non_base, contract.max_non_base) == (2, 2)
    assert method.base_optional and contract.base == BasePolicy.OPTIONAL
    assert not get_method("nearswap").base_optional and not get_method("linear").base_optional
    base, first, second = three((8,), torch.float32, seed=2)
    with pytest.raises(BadInputError, match=r"nuslerp: needs exactly 2 expert tensor\(s\), got 3"):
        merge_tensor("nuslerp", base, [first, second, first], {"weight": 1.0})
    with pytest.raises(BadInputError, match="nuslerp: missing required parameter weight"):
        merge_tensor("nuslerp", None, [first, second], {})
    with pytest.raises(BadInputError, match="linear: takes no base"):
        merge_tensor("linear", base, [first, second], {"weight": 1.0})


def test_nuslerp_flags_are_checked_before_reading(experts, tmp_path) -> None:
    config = tmp_path / "nuslerp.yml"
    config.write_text(
        "merge_method: nuslerp\nmodels:\n  - model: math\n    parameters: {weight: 0.5}\n"
        "  - model: code\n    parameters: {weight: 0.5}\nparameters:\n  nuslerp_row_wise: 5\n"
    )
    result = invoke("merge", "--config", str(config), cwd=experts.root)
    assert result.exit_code != 0 and "nuslerp_row_wise = 5 must be true or false" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("with_base", [False, True], ids=["no-base", "base"])
def test_nuslerp_from_the_cli_equals_mergekit(experts, small_chunks, with_base: bool) -> None:
    """`mgit merge math code --method nuslerp` merges the two experts; with `--base main` their
    offsets from main, as mergekit does with and without a base_model."""
    repo = experts
    models = {n: repo.state_dict(n) for n in ("main", "math", "code")}
    args = ["merge", "math", "code", "--method", "nuslerp", "--weights", "0.7,0.4", "-b", "out"]
    args += ["--param", "nuslerp_row_wise=true", "--param", "nuslerp_flatten=false"]
    invoke(*args, *(["--base", "main"] if with_base else []), cwd=repo.root, check=True)
    params = {"weight": {"math": 0.7, "code": 0.4}, "nuslerp_row_wise": True, "nuslerp_flatten": False}
    inputs = models if with_base else {n: models[n] for n in ("math", "code")}
    want = merge_state_dicts(inputs, "nuslerp", base="main" if with_base else None, parameters=params)
    got = repo.state_dict("out")
    assert set(got) == set(want)
    for name in want:
        assert_matches(got[name], want[name], exact=True)
    other = merge_state_dicts(
        models if not with_base else {n: models[n] for n in ("math", "code")},
        "nuslerp",
        base="main" if not with_base else None,
        parameters=params,
    )
    assert any(not torch.equal(got[n], other[n]) for n in want)  # the base made a difference
