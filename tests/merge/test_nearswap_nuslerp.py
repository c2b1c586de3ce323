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
