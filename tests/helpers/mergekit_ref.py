"""mergekit 0.1.5 called in-process as the reference of mgit's merge methods, and the comparison
the tests hold them to (docs/merging.md, "Equality with mergekit")."""

from __future__ import annotations

import pytest
import torch
from mergekit.merge_methods.api import merge_tensors

Tensor = torch.Tensor

SHAPES: list[tuple[int, ...]] = [(37,), (12, 20), (3, 6, 10)]
# (input dtype or "mixed" (bf16 base, experts alternately fp16 and bf16), mergekit/mgit dtype, out_dtype)
DTYPES = [
    pytest.param((torch.float32, None, None), id="fp32"),
    pytest.param((torch.bfloat16, None, None), id="bf16"),
    pytest.param((torch.float16, None, None), id="fp16"),
    pytest.param((torch.bfloat16, torch.float32, torch.bfloat16), id="bf16-dtype_fp32-out_bf16"),
    pytest.param((torch.float32, torch.bfloat16, None), id="fp32-dtype_bf16"),
    pytest.param(("mixed", None, torch.float16), id="bf16+fp16-promoted-out_fp16"),
]


def mergekit_merge(
    method: str,
    base: Tensor | None,
    experts: list[Tensor],
    params: dict[str, object],
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
