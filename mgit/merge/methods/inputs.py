"""The checks and dtype alignment around every method's kernels (torch at import: this module
is loaded only when a tensor is merged).

Conventions (mergekit's ``dtype`` / ``out_dtype``): all inputs are first converted to ``dtype``,
or, when it is ``None``, to the promotion of all input dtypes (``torch.promote_types``); the
method computes in that working dtype and the result is cast to ``out_dtype`` when given. Only
floating-point tensors are merged. Errors are one-line :class:`mgit.errors.BadInputError`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from mgit.errors import BadInputError
from mgit.merge.sparsify import Sampling, Sparsity

if TYPE_CHECKING:  # the interface calls in here (lazily): no import back at run time
    from mgit.merge.methods.base import MergeMethod, TensorCall

Each = Callable[[Callable[[int], None], list[int]], None]  # runs fn(k) for every k, maybe concurrently
# (k, working dtype) -> expert k's delta from the base in that dtype, made for the call (it is overwritten)
DeltaAt = Callable[[int, torch.dtype], torch.Tensor]


@dataclass(frozen=True)
class Prepared:
    """What an elementwise method fixed on whole tensors (see :meth:`MergeMethod.prepare`)."""

    params: dict[str, Any]  # resolved
    work: torch.dtype  # the working dtype
    sparsities: tuple[Sparsity | None, ...] | None = None  # per expert, for sparsifying methods


def where_of(method: MergeMethod, name: str | None) -> str:
    return f"{method.name}{f' ({name})' if name else ''}"


def call(method: MergeMethod, asked: TensorCall) -> torch.Tensor:
    """One output tensor, checked: see :func:`mgit.merge.methods.registry.merge_tensor`."""
    base, experts, params, dtype, out_dtype = asked.base, asked.experts, asked.params, asked.dtype, asked.out_dtype
    generator, masks, name = asked.generator, asked.masks, asked.name
    where = where_of(method, name)
    if isinstance(experts, torch.Tensor) or not isinstance(experts, Sequence):
        raise BadInputError(f"{where}: experts must be a list of tensors")
    experts = list(experts)
    check_inputs(method, where, base is not None, len(experts), dtype, out_dtype)
    inputs = ([base] if base is not None else []) + experts
    check_tensors(where, inputs)
    work = dtype or promoted(inputs)
    if method.elementwise:
        deltas = deltas_of(base, experts.__getitem__) if base is not None else None
        prepared = _prepare(method, where, base, len(experts), deltas, params, work, generator, masks)
        result = method.merge_slice(prepared, base, experts)
    else:
        resolved = method.resolve(params, len(experts))
        sampling = _sampling(method, where, generator, masks, inputs[0], len(experts))
        aligned_base = base.to(dtype=work) if base is not None else None
        result = method.merge(aligned_base, [e.to(dtype=work) for e in experts], resolved, sampling)
    if result.shape != inputs[0].shape:  # pragma: no cover - a bug in a method
        raise AssertionError(f"{where}: produced shape {tuple(result.shape)}")
    return result.to(dtype=out_dtype) if out_dtype is not None else result


def prepare(
    method: MergeMethod,
    count: int,
    params: Mapping[str, Any] | None,
    input_dtype: torch.dtype,
    dtype: torch.dtype | None,
    base: torch.Tensor | None,
    expert_at: Callable[[int], torch.Tensor] | None,
    generator: torch.Generator | None,
    name: str | None,
    each: Each | None,
    delta_at: DeltaAt | None = None,
) -> Prepared:
    """:meth:`MergeMethod.prepare`, checked."""
    where = where_of(method, name)
    if not method.elementwise:
        raise BadInputError(f"{where}: needs whole tensors; call the method instead")
    check_inputs(method, where, method.needs_base, count, dtype, None)
    if delta_at is None and base is not None and expert_at is not None:
        delta_at = deltas_of(base, expert_at)
    if method.decides_per_expert and delta_at is None:
        raise BadInputError(f"{where}: decides on whole deltas; give base and expert_at, or delta_at")
    return _prepare(method, where, base, count, delta_at, params, dtype or input_dtype, generator, None, each, True)


def deltas_of(base: torch.Tensor, expert_at: Callable[[int], torch.Tensor], made_for_call: bool = False) -> DeltaAt:
    """Deltas from a base and experts, left as they are: a converted copy of an expert becomes its
    delta in place, else the delta is a new tensor. With ``made_for_call``, ``expert_at`` makes
    each expert for the call (the base itself excepted), so it becomes its delta in place too."""
    aligned_bases: dict[torch.dtype, torch.Tensor] = {}  # the base in each working dtype asked for

    def delta_at(k: int, work: torch.dtype) -> torch.Tensor:
        if work not in aligned_bases:
            aligned_bases[work] = base.to(dtype=work)
        expert = expert_at(k)
        aligned = expert.to(dtype=work)
        own = aligned is not expert or (made_for_call and expert is not base)
        return aligned.sub_(aligned_bases[work]) if own else aligned - aligned_bases[work]

    return delta_at


def _prepare(
    method: MergeMethod,
    where: str,
    base: torch.Tensor | None,
    count: int,
    delta_at: DeltaAt | None,
    params: Mapping[str, Any] | None,
    work: torch.dtype,
    generator: torch.Generator | None,
    masks: Sequence[torch.Tensor | None] | None,
    each: Each | None = None,
    pack: bool = False,
) -> Prepared:
    resolved = method.resolve(params, count)
    if not method.decides_per_expert or count == 0:
        return Prepared(resolved, work)
    assert delta_at is not None
    sampling = _sampling(method, where, generator, masks, base, count)
    decided: list[Sparsity | None] = [None] * count

    def one(k: int) -> None:
        delta = delta_at(k, work)  # the method may overwrite it
        sparsity = method.decide(delta, k, resolved, sampling)
        decided[k] = sparsity.packed() if pack else sparsity

    if each is None or method.random:  # random methods draw from one generator, in expert order
        for k in range(count):
            one(k)
    else:
        each(one, list(range(count)))
    return Prepared(resolved, work, tuple(decided))


def check_inputs(
    method: MergeMethod,
    where: str,
    has_base: bool,
    count: int,
    dtype: torch.dtype | None,
    out_dtype: torch.dtype | None,
) -> None:
    expected = method.experts_expected(count)
    if expected is not None:
        raise BadInputError(f"{where}: needs {expected} expert tensor(s), got {count}")
    if method.needs_base and not has_base:
        raise BadInputError(f"{where}: needs a base tensor")
    if not method.needs_base and not method.base_optional and has_base:
        raise BadInputError(
            f"{where}: takes no base; pass the base as one more input (with its own weight) if it should count"
        )
    check_dtypes(where, dtype, out_dtype)


def _sampling(
    method: MergeMethod,
    where: str,
    generator: torch.Generator | None,
    masks: Sequence[torch.Tensor | None] | None,
    like: torch.Tensor | None,
    count: int,
) -> Sampling:
    if not method.random:
        if masks is not None:
            raise BadInputError(f"{where}: is deterministic and takes no masks")
        return Sampling(where=where)
    if masks is not None:
        assert like is not None  # masks come only with whole tensors (call), the base among them
        if isinstance(masks, torch.Tensor) or len(masks) != count:
            raise BadInputError(f"{where}: give one mask (or None) per expert, {count} in all")
        for mask in masks:
            if mask is not None and (not isinstance(mask, torch.Tensor) or mask.shape != like.shape):
                raise BadInputError(f"{where}: a mask must be a tensor of shape {tuple(like.shape)}")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise BadInputError(f"{where}: generator must be a torch.Generator")
    # A missing generator is reported when a draw is needed: experts with density >= 1 draw nothing.
    return Sampling(generator, tuple(masks) if masks is not None else None, where)


def check_tensors(where: str, tensors: list[torch.Tensor]) -> None:
    for tensor in tensors:
        if not isinstance(tensor, torch.Tensor):
            raise BadInputError(f"{where}: inputs must be torch tensors, got {type(tensor).__name__}")
        if not tensor.is_floating_point():
            raise BadInputError(f"{where}: only floating-point tensors are merged, got {tensor.dtype}")
    first = tensors[0]
    if any(t.shape != first.shape for t in tensors[1:]):
        shapes = ", ".join(str(tuple(t.shape)) for t in tensors)
        raise BadInputError(f"{where}: tensor shapes differ: {shapes}")
    if any(t.device != first.device for t in tensors[1:]):
        raise BadInputError(f"{where}: tensors are on different devices")


def check_dtypes(where: str, dtype: torch.dtype | None, out_dtype: torch.dtype | None) -> None:
    for label, value in (("dtype", dtype), ("out_dtype", out_dtype)):
        if value is not None and (not isinstance(value, torch.dtype) or not value.is_floating_point):
            raise BadInputError(f"{where}: {label} must be a floating-point torch dtype, got {value!r}")


def promoted(tensors: list[torch.Tensor]) -> torch.dtype:
    dtype = tensors[0].dtype
    for tensor in tensors[1:]:
        dtype = torch.promote_types(dtype, tensor.dtype)
    return dtype
