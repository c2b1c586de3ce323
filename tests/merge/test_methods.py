"""mgit's merge methods against mergekit 0.1.5, called in-process on the same synthetic tensors.

mergekit is called through its Python API: ``mergekit.merge_methods.api.merge_tensors`` (one output
tensor; the base first, ``base_index=0``) and ``merge_state_dicts`` (a small llama-like state dict),
with the same ``dtype``/``out_dtype`` as mgit. Deterministic methods must agree within 1e-6 relative
in float32 and bit for bit in bf16/fp16 outputs.

Random methods (dare_linear, dare_ties, della, della_linear). mergekit draws each expert's keep-mask
with ``torch.bernoulli`` from torch's *global* generator, experts in order, only for experts it
actually sparsifies. The tests get the same masks into both implementations in two ways:

1. **Seed**: ``torch.manual_seed(s)`` (inside ``torch.random.fork_rng``) before calling mergekit, and
   ``seeded_generator(s)`` for mgit. mgit draws from its explicit generator with the same calls, so
   the masks (and results) are bit-identical. This checks our sampler, not only our arithmetic.
2. **Injection**: ``torch.bernoulli`` is monkeypatched while mergekit runs (mergekit calls it as an
   attribute of the ``torch`` module) with a stand-in that records the probability tensor mergekit asks
   for and returns a predetermined mask of that shape and dtype; mgit receives the same masks through
   its ``masks=`` argument. The recorded probabilities must equal ours bit for bit, and the results too.

The sampler's distribution is checked on its own: kept fraction within 5 binomial sigmas of the
density (of the bf16-rounded density in bf16), L1-preserving rescale (= 1/density in expectation),
and DELLA's rank-dependent keep rates.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from helpers.mergekit_ref import (
    DTYPES,
    SHAPES,
    assert_matches,
    assert_same_spec,
    bits,
    make_inputs,
    mergekit_merge,
    weights,
)
from mergekit.merge_methods.api import merge_state_dicts, merge_tensors

from mgit.errors import BadInputError, MgitError
from mgit.merge.methods import (
    METHODS,
    Sampling,
    dare_drop,
    dare_probabilities,
    della_mask,
    della_probabilities,
    get_method,
    merge_tensor,
    seeded_generator,
)

Tensor = torch.Tensor
Params = dict[str, Any]

# --------------------------------------------------------------------------------------------
# Registry mirrors mergekit's method specs

NAMES = [
    "linear",
    "task_arithmetic",
    "ties",
    "dare_linear",
    "dare_ties",
    "breadcrumbs",
    "breadcrumbs_ties",
    "della",
    "della_linear",
    "slerp",
    "model_stock",
    "nearswap",
    "nuslerp",
    "sce",
    "karcher",
    "multislerp",
    "arcee_fusion",
    "ram",
    "ramplus_tl",
    "passthrough",
]


def test_registry_has_the_methods() -> None:
    assert sorted(METHODS) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_parameters_and_contract_match_mergekit(name: str) -> None:
    assert_same_spec(name)
    # arcee_fusion: its quantiles come from a random sample of the scores past 1M elements
    assert METHODS[name].random == (name.startswith(("dare", "della")) or name == "arcee_fusion")


# --------------------------------------------------------------------------------------------
# Deterministic methods: equal to mergekit

ParamsFor = Callable[[int], Params]
DETERMINISTIC: list[tuple[str, ParamsFor]] = [
    ("linear", lambda k: {"weight": weights(k)}),
    ("linear", lambda k: {"weight": [1.5, -0.25, 0.5, 0.75][:k], "normalize": False}),
    ("task_arithmetic", lambda k: {"weight": weights(k)}),
    ("task_arithmetic", lambda k: {"weight": 0.7, "lambda": 0.8, "normalize": True}),
    # Weights summing to 0: normalize replaces the zero divisor by 1 (both branches).
    ("task_arithmetic", lambda k: {"weight": [1.0] * (k - 1) + [1.0 - k], "normalize": True}),
    ("ties", lambda k: {"weight": [1.0] * (k - 1) + [1.0 - k], "density": 0.7}),
    ("ties", lambda k: {"weight": weights(k), "density": 0.5}),
    (
        "ties",
        lambda k: {
            "weight": weights(k),
            "density": [0.2, 0.7, 1.0, 0.4][:k],
            "rescale": True,
            "lambda": 1.3,
            "normalize": False,
        },
    ),
    ("breadcrumbs", lambda k: {"weight": weights(k), "density": 0.7, "gamma": 0.05}),
    (
        "breadcrumbs",
        lambda k: {"weight": weights(k), "density": [0.9, 0.5, 0.3, 1.0][:k], "gamma": 0.2, "rescale": True},
    ),
    ("breadcrumbs_ties", lambda k: {"weight": weights(k), "density": 0.6, "gamma": 0.1, "normalize": True}),
    (
        "breadcrumbs_ties",
        lambda k: {
            "weight": weights(k),
            "density": 0.9,
            "gamma": 0.3,
            "rescale": True,
            "lambda": 0.5,
            "int8_mask": True,
        },
    ),
    ("slerp", lambda k: {"t": 0.3}),
    ("slerp", lambda k: {"t": 0.85}),
    ("model_stock", lambda k: {}),
    ("model_stock", lambda k: {"filter_wise": True}),
    ("passthrough", lambda k: {}),
    ("passthrough", lambda k: {"scale": 0.3}),
]


def _experts_for(method: str, shape_index: int) -> int:
    if method in ("slerp", "passthrough"):
        return 1
    return 2 + shape_index  # K = 2, 3, 4 over the three shapes


@pytest.mark.parametrize("kind", ["gauss", "quantized"])
@pytest.mark.parametrize("dtypes", DTYPES)
@pytest.mark.parametrize("shape_index", range(len(SHAPES)))
@pytest.mark.parametrize(
    ("method", "params_for"), DETERMINISTIC, ids=[f"{m}-{i}" for i, (m, _) in enumerate(DETERMINISTIC)]
)
def test_deterministic_equals_mergekit(
    method: str, params_for: ParamsFor, shape_index: int, dtypes: tuple[Any, Any, Any], kind: str
) -> None:
    in_dtype, dtype, out_dtype = dtypes
    k = _experts_for(method, shape_index)
    base, experts = make_inputs(SHAPES[shape_index], k, in_dtype, seed=shape_index, kind=kind)
    if not METHODS[method].needs_base:
        base = None  # linear/passthrough: every input is an expert
    params = params_for(k)
    ref = mergekit_merge(method, base, experts, params, dtype, out_dtype)
    ours = merge_tensor(method, base, experts, params, dtype=dtype, out_dtype=out_dtype)
    assert_matches(ours, ref)


# (case, expected cosine range): |cos| > 0.9995 falls back to linear interpolation.
SLERP_CASES = {
    "colinear": (0.9999, 1.0),
    "nearly_colinear": (0.9995, 0.9999),  # lerp, just above the threshold
    "just_below_threshold": (0.999, 0.9995),  # still spherical
    "antipodal": (-1.0, -0.9999),
    "zero_base": (0.0, 0.0),
    "orthogonal": (-0.2, 0.2),
}


@pytest.mark.parametrize("case", list(SLERP_CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_slerp_special_cases(case: str, dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(7)
    v0 = torch.randn(9, 11, generator=g)
    noise = torch.randn(9, 11, generator=g)
    v1 = {
        "colinear": 2.5 * v0,
        "nearly_colinear": 2.5 * v0 + 0.06 * noise,
        "just_below_threshold": 2.5 * v0 + 0.09 * noise,
        "antipodal": -0.5 * v0,
        "zero_base": noise,
        "orthogonal": noise,
    }[case]
    if case == "zero_base":
        v0 = torch.zeros_like(v0)
    v0, v1 = v0.to(dtype), v1.to(dtype)
    low, high = SLERP_CASES[case]
    cos = torch.nn.functional.cosine_similarity(v0.double().flatten(), v1.double().flatten(), dim=0).item()
    assert low <= cos <= high, cos
    for t in (0.0, 0.4, 1.0):
        assert_matches(
            merge_tensor("slerp", v0, [v1], {"t": t}), mergekit_merge("slerp", v0, [v1], {"t": t}), exact=True
        )
    if case == "colinear":
        lerp = ((1 - 0.4) * v0.float() + 0.4 * v1.float()).to(dtype)
        torch.testing.assert_close(merge_tensor("slerp", v0, [v1], {"t": 0.4}), lerp)


def test_slerp_several_chunks() -> None:
    """Above 2**20 elements mergekit reduces norms and dot products chunk by chunk; so do we."""
    base, experts = make_inputs((1100, 1000), 1, torch.bfloat16, seed=3)
    assert_matches(merge_tensor("slerp", base, experts, {"t": 0.6}), mergekit_merge("slerp", base, experts, {"t": 0.6}))


@pytest.mark.parametrize("filter_wise", [False, True])
def test_model_stock_singular_keeps_base(filter_wise: bool) -> None:
    """Two experts with opposite offsets: 1 + (k - 1) cos = 0, no finite ratio; the base is kept."""
    g = torch.Generator().manual_seed(2)
    base = torch.randn(4, 6, generator=g)
    offset = torch.randn(4, 6, generator=g)
    experts = [base + offset, base - offset]
    params = {"filter_wise": filter_wise}
    ours = merge_tensor("model_stock", base, experts, params)
    assert_matches(ours, mergekit_merge("model_stock", base, experts, params))
    torch.testing.assert_close(ours, base)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("filter_wise", [False, True])
def test_model_stock_tiny_offsets(filter_wise: bool, dtype: torch.dtype) -> None:
    """Offsets so small that the product of their norms is clamped at 1e-6, as mergekit does."""
    g = torch.Generator().manual_seed(8)
    base = torch.randn(5, 7, generator=g) * 0.02
    experts = [(base + torch.randn(5, 7, generator=g) * 3e-5).to(dtype) for _ in range(3)]
    base = base.to(dtype)
    params = {"filter_wise": filter_wise}
    assert_matches(
        merge_tensor("model_stock", base, experts, params), mergekit_merge("model_stock", base, experts, params)
    )


def test_ties_sign_election_by_mass() -> None:
    """TIES elects the sign of the summed (weighted) mass, not the majority count."""
    base = torch.zeros(1)
    experts = [torch.tensor([1.0]), torch.tensor([1.0]), torch.tensor([-5.0])]
    params = {"weight": [1.0, 1.0, 1.0], "density": 1.0}
    ours = merge_tensor("ties", base, experts, params)
    assert_matches(ours, mergekit_merge("ties", base, experts, params))
    assert ours.item() == -5.0  # only the agreeing expert counts, divided by its own weight


def _state_dict(seed: int, dtype: torch.dtype) -> dict[str, Tensor]:
    g = torch.Generator().manual_seed(seed)
    shapes = {
        "embed.weight": (40, 16),
        "layers.0.q.weight": (16, 16),
        "layers.0.k.weight": (16, 16),
        "layers.0.mlp.weight": (24, 16),
        "layers.0.norm.weight": (16,),
        "norm.weight": (16,),
    }
    return {name: (torch.randn(shape, generator=g) * 0.02).to(dtype) for name, shape in shapes.items()}


@pytest.mark.parametrize(
    ("method", "params", "dtype", "out_dtype"),
    [
        ("linear", {"weight": [0.5, 0.3, 0.2]}, None, None),
        ("linear", {"weight": [0.5, 0.3, 0.2]}, torch.float32, torch.bfloat16),
        ("task_arithmetic", {"weight": [0.5, 0.3], "lambda": 0.9}, None, None),
        ("ties", {"weight": [0.5, 0.3], "density": 0.4}, None, None),
        ("breadcrumbs_ties", {"weight": [0.5, 0.3], "density": 0.5, "gamma": 0.05}, torch.float32, None),
        ("model_stock", {}, None, None),
    ],
)
@pytest.mark.parametrize("in_dtype", [torch.bfloat16, torch.float32])
def test_state_dict_equals_mergekit(
    method: str, params: Params, dtype: torch.dtype | None, out_dtype: torch.dtype | None, in_dtype: torch.dtype
) -> None:
    """Through mergekit's merge_state_dicts (which batches same-shaped tensors): each tensor equal."""
    base = _state_dict(0, in_dtype)
    experts = []
    for i in (1, 2):
        noise = _state_dict(i, torch.float32)
        experts.append({n: (base[n].float() + noise[n] * 0.3).to(in_dtype) for n in base})
    needs_base = METHODS[method].needs_base
    models = [base, *experts]
    ref = merge_state_dicts(
        models, method, parameters=params, base=0 if needs_base else None, dtype=dtype, out_dtype=out_dtype
    )
    for name in base:
        tensors = [m[name] for m in models]
        if needs_base:
            ours = merge_tensor(method, tensors[0], tensors[1:], params, dtype=dtype, out_dtype=out_dtype, name=name)
        else:
            ours = merge_tensor(method, None, tensors, params, dtype=dtype, out_dtype=out_dtype, name=name)
        assert_matches(ours, ref[name])


# --------------------------------------------------------------------------------------------
# Random methods: bit-identical given the same masks

RANDOM: list[tuple[str, ParamsFor]] = [
    ("dare_linear", lambda k: {"weight": weights(k), "density": 0.5}),
    (
        "dare_linear",
        lambda k: {"weight": weights(k), "density": [0.3, 1.0, 0.8, 0.1][:k], "rescale": False, "normalize": True},
    ),
    ("dare_ties", lambda k: {"weight": weights(k), "density": 0.4}),
    (
        "dare_ties",
        lambda k: {"weight": weights(k), "density": [0.0, 0.6, 1.0, 0.25][:k], "lambda": 1.5, "normalize": True},
    ),
    ("della", lambda k: {"weight": weights(k), "density": 0.5, "epsilon": 0.1}),
    ("della", lambda k: {"weight": weights(k), "density": [0.4, 1.0, 0.7, 0.3][:k], "epsilon": 0.2, "rescale": False}),
    ("della_linear", lambda k: {"weight": weights(k), "density": 0.6, "epsilon": 0.3}),
    ("della_linear", lambda k: {"weight": weights(k), "density": [0.5, 0.2, 1.0, 0.0][:k], "lambda": 0.7}),
]
RANDOM_DTYPES = DTYPES[:4]
RANDOM_IDS = [f"{m}-{i}" for i, (m, _) in enumerate(RANDOM)]


def _draws(method: str, density: float) -> bool:
    """Whether mergekit draws a mask for an expert with this density."""
    return density < 1 and (method.startswith("dare") or density > 0)


@pytest.mark.parametrize("dtypes", RANDOM_DTYPES)
@pytest.mark.parametrize("shape_index", range(len(SHAPES)))
@pytest.mark.parametrize(("method", "params_for"), RANDOM, ids=RANDOM_IDS)
def test_random_same_seed_equals_mergekit(
    method: str, params_for: ParamsFor, shape_index: int, dtypes: tuple[Any, Any, Any]
) -> None:
    in_dtype, dtype, out_dtype = dtypes
    k = 2 + shape_index
    base, experts = make_inputs(SHAPES[shape_index], k, in_dtype, seed=10 + shape_index)
    params = params_for(k)
    seed = 1234 + shape_index
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        ref = mergekit_merge(method, base, experts, params, dtype, out_dtype)
    ours = merge_tensor(
        method, base, experts, params, dtype=dtype, out_dtype=out_dtype, generator=seeded_generator(seed)
    )
    assert_matches(ours, ref, exact=True)


@pytest.mark.parametrize("dtypes", RANDOM_DTYPES)
@pytest.mark.parametrize("shape_index", range(len(SHAPES)))
@pytest.mark.parametrize(("method", "params_for"), RANDOM, ids=RANDOM_IDS)
def test_random_injected_masks_equal_mergekit(
    method: str, params_for: ParamsFor, shape_index: int, dtypes: tuple[Any, Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    in_dtype, dtype, out_dtype = dtypes
    k = 2 + shape_index
    shape = SHAPES[shape_index]
    base, experts = make_inputs(shape, k, in_dtype, seed=20 + shape_index)
    params = params_for(k)
    densities = params["density"] if isinstance(params["density"], list) else [params["density"]] * k
    g = torch.Generator().manual_seed(99)
    masks = [torch.rand(shape, generator=g) < 0.5 for _ in range(k)]
    fed = iter([mask for mask, density in zip(masks, densities, strict=True) if _draws(method, density)])
    asked: list[Tensor] = []

    def fake_bernoulli(probabilities: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        asked.append(probabilities.clone())
        return next(fed).reshape(probabilities.shape).to(probabilities.dtype)

    with monkeypatch.context() as patch:
        patch.setattr(torch, "bernoulli", fake_bernoulli)
        ref = mergekit_merge(method, base, experts, params, dtype, out_dtype)
    assert next(fed, None) is None  # mergekit drew exactly for the experts we expected
    ours = merge_tensor(method, base, experts, params, dtype=dtype, out_dtype=out_dtype, masks=masks)
    assert_matches(ours, ref, exact=True)

    # The probabilities mergekit asked for are the ones our sampler uses.
    work = dtype or base.dtype
    drawing = [i for i in range(k) if _draws(method, densities[i])]
    assert len(asked) == len(drawing)
    epsilons = params.get("epsilon", 0.15)
    for i, probabilities in zip(drawing, asked, strict=True):
        delta = experts[i].to(work) - base.to(work)
        if method.startswith("dare"):
            mine = dare_probabilities(delta, densities[i])
        else:
            eps = epsilons[i] if isinstance(epsilons, list) else epsilons
            mine = della_probabilities(delta, densities[i], eps)
        assert mine.dtype == probabilities.dtype
        assert torch.equal(bits(mine), bits(probabilities))


def test_same_seed_is_reproducible_and_seeds_differ() -> None:
    base, experts = make_inputs((16, 24), 3, torch.bfloat16, seed=5)
    params = {"weight": weights(3), "density": 0.5}
    for method in ("dare_ties", "dare_linear", "della", "della_linear"):
        first = merge_tensor(method, base, experts, params, generator=seeded_generator(42, "w"))
        again = merge_tensor(method, base, experts, params, generator=seeded_generator(42, "w"))
        other = merge_tensor(method, base, experts, params, generator=seeded_generator(43, "w"))
        other_name = merge_tensor(method, base, experts, params, generator=seeded_generator(42, "v"))
        assert torch.equal(bits(first), bits(again))
        assert not torch.equal(first, other)
        assert not torch.equal(first, other_name)


def test_seeded_generator_without_name_is_torch_manual_seed() -> None:
    with torch.random.fork_rng():
        torch.manual_seed(77)
        expected = torch.rand(8)
    assert torch.equal(torch.rand(8, generator=seeded_generator(77)), expected)


@pytest.mark.parametrize(("method", "params_for"), DETERMINISTIC + RANDOM, ids=[m for m, _ in DETERMINISTIC + RANDOM])
def test_scalar_tensors(method: str, params_for: ParamsFor) -> None:
    """0-d tensors (mergekit merges them too); della cannot rank a single element, neither can we."""
    k = 1 if method in ("slerp", "passthrough") else 3
    base, experts = make_inputs((), k, torch.bfloat16, seed=6)
    if not METHODS[method].needs_base:
        base = None
    params = params_for(k)
    densities = params.get("density", 1.0)
    densities = densities if isinstance(densities, list) else [densities] * k
    if method.startswith("della") and any(_draws(method, d) for d in densities):
        with pytest.raises(BadInputError, match="cannot rank"):
            merge_tensor(method, base, experts, params, generator=seeded_generator(0))
        return
    with torch.random.fork_rng():
        torch.manual_seed(0)
        ref = mergekit_merge(method, base, experts, params)
    assert_matches(merge_tensor(method, base, experts, params, generator=seeded_generator(0)), ref)


def test_no_experts_returns_base() -> None:
    """mergekit's task-arithmetic family returns the base (in the working dtype) when there are no experts."""
    base = torch.randn(5, 3).to(torch.bfloat16)
    ref = merge_tensors([base], "ties", base_index=0, out_dtype=torch.float32)
    assert_matches(merge_tensor("ties", base, [], {}, out_dtype=torch.float32), ref, exact=True)


# --------------------------------------------------------------------------------------------
# The sampler's distribution


def _within_binomial(kept: float, n: int, p: float, sigmas: float = 5.0) -> bool:
    return abs(kept / n - p) <= sigmas * math.sqrt(p * (1 - p) / n)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("density", [0.1, 0.3, 0.9])
def test_dare_keep_fraction_and_rescale(dtype: torch.dtype, density: float) -> None:
    n = 200_000
    g = torch.Generator().manual_seed(11)
    delta = (torch.randn(n, generator=g) * 0.01).to(dtype)
    delta[delta == 0] = 0.01  # every element nonzero, so kept elements are visible
    # bf16 samples with probability = density rounded to bf16 (as mergekit); others in float32.
    sampling_dtype = torch.bfloat16 if dtype == torch.bfloat16 else torch.float32
    p = torch.tensor(density, dtype=sampling_dtype).item()
    assert dare_probabilities(delta, density).unique().tolist() == [p]

    plain = dare_drop(delta, density, rescale=False, sampling=Sampling(seeded_generator(1)))
    kept = plain != 0
    assert _within_binomial(kept.sum().item(), n, p)
    assert torch.equal(plain[kept], delta[kept])  # kept values untouched without rescale

    scaled = dare_drop(delta, density, rescale=True, sampling=Sampling(seeded_generator(1)))
    assert torch.equal(scaled != 0, kept)  # same seed, same mask
    # mergekit's rescale preserves the L1 norm (computed in the sampling dtype) ...
    l1_tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    assert scaled.double().abs().sum().item() == pytest.approx(delta.double().abs().sum().item(), rel=l1_tolerance)
    # ... which for iid deltas is a factor of about 1/density on every kept element.
    normal = kept & (delta.abs() >= 1e-3)  # fp16 subnormals below ~6e-5 round far more coarsely
    factors = scaled[normal].double() / delta[normal].double()
    assert factors.max() / factors.min() - 1 <= 2 * torch.finfo(dtype).eps  # one factor, up to rounding
    assert factors.mean().item() == pytest.approx(1 / p, rel=0.05)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_della_keep_rates_rise_with_magnitude(dtype: torch.dtype) -> None:
    rows, cols, density, epsilon = 200, 200, 0.5, 0.2
    g = torch.Generator().manual_seed(12)
    delta = torch.randn(rows, cols, generator=g).to(dtype)
    probabilities = della_probabilities(delta, density, epsilon)
    rounding = torch.finfo(dtype).eps  # bf16 computes the probabilities in bf16, as mergekit
    assert probabilities.min().item() == pytest.approx(density - epsilon, abs=rounding)
    assert probabilities.max().item() == pytest.approx(density + epsilon, abs=rounding)
    assert probabilities.double().mean().item() == pytest.approx(density, abs=2e-3)

    mask = della_mask(delta, density, epsilon, Sampling(seeded_generator(3)))
    n = rows * cols
    assert _within_binomial(mask.sum().item(), n, density)
    order = delta.float().abs().argsort(dim=1)
    decile = cols // 10
    low = mask.gather(1, order[:, :decile]).double()
    high = mask.gather(1, order[:, -decile:]).double()
    m = rows * decile
    # Mean keep probability in the lowest and highest deciles of magnitude (ranks are linear in p).
    assert _within_binomial(low.sum().item(), m, (probabilities.gather(1, order[:, :decile])).double().mean().item())
    assert _within_binomial(high.sum().item(), m, (probabilities.gather(1, order[:, -decile:])).double().mean().item())
    assert high.mean() - low.mean() > epsilon  # ~ 1.8 * epsilon expected


# --------------------------------------------------------------------------------------------
# Contracts and errors


@pytest.mark.parametrize(("method", "params_for"), DETERMINISTIC + RANDOM, ids=[m for m, _ in DETERMINISTIC + RANDOM])
def test_inputs_are_not_modified(method: str, params_for: ParamsFor) -> None:
    k = 1 if method in ("slerp", "passthrough") else 3
    base, experts = make_inputs((8, 9), k, torch.bfloat16, seed=4)
    if not METHODS[method].needs_base:
        base = None
    before = [t.clone() for t in ([base] if base is not None else []) + experts]
    merge_tensor(method, base, experts, params_for(k), generator=seeded_generator(0), dtype=torch.bfloat16)
    after = ([base] if base is not None else []) + experts
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))


def _inputs(k: int = 2, shape: tuple[int, ...] = (4, 5)) -> tuple[Tensor, list[Tensor]]:
    return make_inputs(shape, k, torch.float32, seed=1)


ERRORS: list[tuple[str, Callable[[], object], str]] = [
    ("unknown method", lambda: merge_tensor("average", None, _inputs()[1], {"weight": 1.0}), "unknown merge method"),
    ("unknown method type", lambda: get_method(None), "unknown merge method"),  # type: ignore[arg-type]
    ("unknown parameter", lambda: merge_tensor("ties", *_inputs(), {"weight": 1.0, "densty": 0.5}), "densty"),
    ("parameter of another method", lambda: merge_tensor("ties", *_inputs(), {"weight": 1.0, "gamma": 0.1}), "gamma"),
    ("missing weight", lambda: merge_tensor("task_arithmetic", *_inputs(), {"lambda": 0.5}), "missing required"),
    ("missing t", lambda: merge_tensor("slerp", *_inputs(1), {}), "missing required parameter t"),
    ("weights count", lambda: merge_tensor("ties", *_inputs(3), {"weight": [0.5, 0.5]}), "2 values of weight"),
    ("densities count", lambda: merge_tensor("ties", *_inputs(2), {"weight": 1, "density": [1, 1, 1]}), "density"),
    ("linear weights count", lambda: merge_tensor("linear", None, _inputs(3)[1], {"weight": [1, 2]}), "weight"),
    ("bad number", lambda: merge_tensor("ties", *_inputs(), {"weight": "half"}), "must be a number"),
    ("bool as number", lambda: merge_tensor("ties", *_inputs(), {"weight": True}), "must be a number"),
    ("bad bool", lambda: merge_tensor("ties", *_inputs(), {"weight": 1, "normalize": "yes"}), "true or false"),
    (
        "shape mismatch",
        lambda: merge_tensor("ties", _inputs()[0], [_inputs()[1][0], torch.zeros(4, 6)], {"weight": 1}),
        "shapes differ",
    ),
    (
        "integer tensor",
        lambda: merge_tensor("linear", None, [torch.ones(3, dtype=torch.int64)] * 2, {"weight": 1}),
        "floating-point",
    ),
    ("integer dtype", lambda: merge_tensor("ties", *_inputs(), {"weight": 1}, dtype=torch.int32), "dtype"),
    ("bad out_dtype", lambda: merge_tensor("ties", *_inputs(), {"weight": 1}, out_dtype="bf16"), "out_dtype"),  # type: ignore[arg-type]
    ("no base", lambda: merge_tensor("ties", None, _inputs()[1], {"weight": 1}), "needs a base"),
    ("base to linear", lambda: merge_tensor("linear", *_inputs(), {"weight": 1}), "takes no base"),
    ("slerp two experts", lambda: merge_tensor("slerp", *_inputs(2), {"t": 0.5}), "exactly 1"),
    ("model_stock one expert", lambda: merge_tensor("model_stock", *_inputs(1), {}), "at least 2"),
    ("passthrough two", lambda: merge_tensor("passthrough", None, _inputs(2)[1], {}), "exactly 1"),
    ("experts not a list", lambda: merge_tensor("linear", None, _inputs()[0], {"weight": 1}), "list of tensors"),  # type: ignore[arg-type]
    (
        "random without generator",
        lambda: merge_tensor("dare_ties", *_inputs(), {"weight": 1, "density": 0.5}),
        "generator",
    ),
    (
        "masks for deterministic",
        lambda: merge_tensor("ties", *_inputs(), {"weight": 1}, masks=[None, None]),
        "takes no masks",
    ),
    (
        "masks count",
        lambda: merge_tensor("dare_ties", *_inputs(), {"weight": 1}, masks=[torch.ones(4, 5)]),
        "one mask",
    ),
    (
        "mask shape",
        lambda: merge_tensor("dare_ties", *_inputs(), {"weight": 1}, masks=[torch.ones(4, 5), torch.ones(5, 4)]),
        "shape",
    ),
    (
        "della epsilon",
        lambda: merge_tensor(
            "della", *_inputs(), {"weight": 1, "density": 0.9, "epsilon": 0.15}, generator=seeded_generator(0)
        ),
        "epsilon",
    ),
    (
        "della one column",
        lambda: merge_tensor(
            "della", *_inputs(2, (4, 1)), {"weight": 1, "density": 0.5}, generator=seeded_generator(0)
        ),
        "cannot rank",
    ),
    ("linear zero weight sum", lambda: merge_tensor("linear", None, _inputs()[1], {"weight": [1, -1]}), "sum to 0"),
    ("negative seed", lambda: seeded_generator(-1), "seed"),
]


@pytest.mark.parametrize(("call", "message"), [(c, m) for _, c, m in ERRORS], ids=[i for i, _, _ in ERRORS])
def test_clear_errors(call: Callable[[], object], message: str) -> None:
    with pytest.raises(BadInputError, match=message) as info:
        call()
    assert isinstance(info.value, MgitError)
    assert "\n" not in str(info.value)


def test_random_method_with_density_one_needs_no_generator() -> None:
    """Nothing is drawn at density 1 (as mergekit), so no generator is needed: plain task arithmetic."""
    base, experts = _inputs()
    params = {"weight": [0.5, 0.5], "density": 1.0, "rescale": False}
    assert_matches(
        merge_tensor("dare_linear", base, experts, params),
        merge_tensor("task_arithmetic", base, experts, {"weight": [0.5, 0.5]}),
        exact=True,
    )


def test_expert_parameters_broadcast_and_coerce() -> None:
    method = get_method("ties")
    resolved = method.resolve({"weight": 1, "density": [0.5, 1]}, 2)
    assert resolved == {
        "int8_mask": False,
        "normalize": True,
        "rescale": False,
        "lambda": 1.0,
        "weight": (1.0, 1.0),
        "density": (0.5, 1.0),
    }
    assert get_method("passthrough").resolve(None, 1) == {"scale": (None,)}
