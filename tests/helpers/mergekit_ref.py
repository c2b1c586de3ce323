"""Comparing mgit's merge methods with mergekit 0.1.5's, called in-process on the same tensors
(``mergekit.merge_methods.api.merge_tensors``, the base first): the shared inputs, the reference
call and what "equal" means (bit for bit in half precision, 1e-6 relative in float32)."""

from __future__ import annotations

from typing import Any

import mergekit.merge_methods as mk_methods
import pytest
import torch
from mergekit.merge_methods.api import merge_tensors
from mergekit.merge_methods.base import MISSING, BasePolicy

from mgit.merge.methods import METHODS, REQUIRED

Tensor = torch.Tensor
Params = dict[str, Any]

SHAPES: list[tuple[int, ...]] = [(37,), (12, 20), (3, 6, 10)]
# (input dtype or "mixed", mergekit/mgit dtype, out_dtype)
DTYPES = [
    pytest.param((torch.float32, None, None), id="fp32"),
    pytest.param((torch.bfloat16, None, None), id="bf16"),
    pytest.param((torch.float16, None, None), id="fp16"),
    pytest.param((torch.bfloat16, torch.float32, torch.bfloat16), id="bf16-dtype_fp32-out_bf16"),
    pytest.param((torch.float32, torch.bfloat16, None), id="fp32-dtype_bf16"),
    pytest.param(("mixed", None, torch.float16), id="bf16+fp16-promoted-out_fp16"),
]


def weights(k: int) -> list[float]:
    """The experts' weights in the method tests: unequal, not summing to 1."""
    return [0.6, 0.3, 0.45, 0.2][:k]


def make_inputs(
    shape: tuple[int, ...], k: int, dtype: torch.dtype | str, seed: int, kind: str = "gauss"
) -> tuple[Tensor, list[Tensor]]:
    """A base ~ N(0, 0.02) and k experts = base + delta, delta scales spread over a decade and a
    fifth of the elements untouched. ``kind="quantized"``: deltas on a coarse grid, so that many
    magnitudes are equal and sorting ties must be broken the same way."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(shape, generator=g) * 0.02
    experts = []
    for i in range(k):
        if kind == "quantized":
            delta = torch.randint(-3, 4, shape, generator=g).float() * 0.004
        else:
            delta = torch.randn(shape, generator=g) * 10.0 ** -(2 + (i % 3) / 2)
        delta[torch.rand(shape, generator=g) < 0.2] = 0
        experts.append(base + delta)
    if dtype == "mixed":
        return base.to(torch.bfloat16), [
            e.to(torch.float16 if i % 2 == 0 else torch.bfloat16) for i, e in enumerate(experts)
        ]
    return base.to(dtype), [e.to(dtype) for e in experts]


def mergekit_merge(
    method: str,
    base: Tensor | None,
    experts: list[Tensor],
    params: Params,
    dtype: torch.dtype | None = None,
    out_dtype: torch.dtype | None = None,
) -> Tensor:
    """mergekit's result for one tensor (``merge_tensors``, the base first when there is one)."""
    tensors = experts if base is None else [base, *experts]
    return merge_tensors(
        tensors,
        method,
        parameters=params,
        base_index=None if base is None else 0,
        dtype=dtype,
        out_dtype=out_dtype,
    )


def bits(t: Tensor) -> Tensor:
    """The tensor's bits as integers of its width."""
    return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def assert_matches(ours: Tensor, ref: Tensor, exact: bool = False) -> None:
    """float32/64 outputs: max |ours - ref| <= 1e-6 * max |ref|; half-precision outputs (or exact=True):
    bit-identical (compared as integers, so -0.0 vs 0.0 and NaN payloads count)."""
    assert ours.dtype == ref.dtype and ours.shape == ref.shape
    if exact or ref.dtype in (torch.bfloat16, torch.float16):
        assert torch.equal(bits(ours), bits(ref)), f"max diff {(ours.double() - ref.double()).abs().max()}"
        return
    diff = (ours.double() - ref.double()).abs().max().item()
    assert diff <= 1e-6 * max(ref.double().abs().max().item(), 1e-30)


def assert_same_spec(name: str) -> None:
    """mgit's method declares mergekit's parameter names, defaults, scopes and base policy."""
    ours = METHODS[name]
    spec = mk_methods.get(name).spec
    assert [p.name for p in ours.params] == [p.name for p in spec.parameters]
    for mine, theirs in zip(ours.params, spec.parameters, strict=True):
        assert (mine.default is REQUIRED) == (theirs.default is MISSING), mine.name
        if mine.default is not REQUIRED:
            assert mine.default == theirs.default, mine.name
        assert (mine.scope.value == "global") == (theirs.scope.value == "shared"), mine.name
    assert ours.needs_base == (spec.contract.base == BasePolicy.REQUIRED)
