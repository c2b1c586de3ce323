"""The merge-method interface: what a method declares, and the checked way to call it.

A method declares everything the rest of mgit needs (parameters, input contract, elementwise,
affine, a torch-free kernel, …), so nothing outside ``mgit.merge.methods`` asks for one by name.
The declarations are torch-free, so a bad request is refused before torch loads. The list:
docs/merging.md, "Notes from the code".
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from mgit.errors import BadInputError, UnknownParameterError
from mgit.merge.params import Param, Range, Scope, check_params

if TYPE_CHECKING:
    import numpy as np
    import torch

    from mgit.merge.methods.inputs import DeltaAt, Each, Prepared
    from mgit.merge.sparsify import Sampling, Sparsity


@dataclass(frozen=True)
class Weights:
    """How the experts enter one merged tensor: M = s·base + Σ_k a_k·Δ_k (affine methods)."""

    experts: tuple[float, ...]  # a_k
    base: float  # s


@dataclass(frozen=True, kw_only=True)
class TensorCall:
    """One output tensor's merge as asked: the one list of what a tensor merge takes
    (:func:`mgit.merge.methods.registry.merge_tensor` documents each field), built by
    ``merge_tensor``, :meth:`MergeMethod.__call__` and the engine, checked by
    :func:`mgit.merge.methods.inputs.call`."""

    base: torch.Tensor | None
    experts: Sequence[torch.Tensor]
    params: Mapping[str, Any] | None = None
    dtype: torch.dtype | None = None  # the working dtype (None: the promotion of the inputs)
    out_dtype: torch.dtype | None = None  # the result's dtype (None: the working dtype)
    generator: torch.Generator | None = None  # random methods' draws
    masks: Sequence[torch.Tensor | None] | None = None  # random methods: per expert, an injected keep-mask
    name: str | None = None  # the tensor's name, for messages


class ArrayKernel(Protocol):
    """A method's merge of one slice on numpy arrays of a dtype's bits (see
    :meth:`MergeMethod.array_kernel`)."""

    def merge(
        self, base: np.ndarray, experts: Sequence[np.ndarray], present: Sequence[int] | None, out: np.ndarray
    ) -> bool:
        """Write the merged slice's bits into ``out`` (``present`` as in :meth:`MergeMethod.merge_slice`);
        False when it declines this slice (its values are out of its range), which torch then merges."""
        ...


class MergeMethod(ABC):
    """A named merge method: its declared properties and its tensor kernels (subclasses)."""

    name: str
    summary: str
    params: tuple[Param, ...]
    needs_base: bool
    base_optional: bool = False  # a method that needs no base may still take one (nuslerp): when one is named
    min_experts: int
    max_experts: int | None
    random: bool = False
    elementwise: bool = False
    affine: bool = False
    decides_per_expert: bool = False
    skips_zero_deltas: bool = False
    # Under a budget, an expert tensor may be read as its stored low-rank sketch: the method then
    # merges the sketch-reconstructed delta (base + Δ̂), which the plan states. Every method here
    # takes one; a method that needs exact deltas declares False and reads exact chunks only.
    accepts_sketches: bool = True

    def __repr__(self) -> str:
        return f"<merge method {self.name}>"

    # -- declarations (torch-free) ---------------------------------------------------------

    def experts_expected(self, count: int) -> str | None:
        """None when the method merges ``count`` experts, else how many it takes ("exactly 1")."""
        low, high = self.min_experts, self.max_experts
        if low <= count and (high is None or count <= high):
            return None
        if high == low:
            return f"exactly {low}"
        return f"at least {low}" if high is None else f"{low} to {high}"

    def param(self, name: str) -> Param:
        for param in self.params:
            if param.name == name:
                return param
        raise UnknownParameterError(f"{self.name}: unknown parameter {name!r} (accepted: {self._accepted()})")

    def _accepted(self) -> str:
        return ", ".join(p.name for p in self.params) or "none"

    def check_names(self, names: Iterable[str], lead: str = "") -> None:
        """Every named parameter is one this method takes (``lead`` starts the message)."""
        accepted = [p.name for p in self.params]
        unknown = sorted(set(names) - set(accepted))
        if unknown:
            raise UnknownParameterError(
                f"{lead}{self.name}: unknown parameter(s) {', '.join(unknown)} (accepted: {', '.join(accepted)})"
            )

    def check_params(self, params: Mapping[str, Any], where: str) -> None:
        """Every given value within its range (:mod:`mgit.merge.params`), and the conditions
        joining several parameters (:meth:`check_together`)."""
        check_params(params, where, self.own_ranges())
        self.check_together(params, where)

    def own_ranges(self) -> dict[str, Range]:
        """The ranges this method gives its parameters where a name means something else here
        than in :data:`mgit.merge.params.RANGES` (nearswap's ``t`` is a distance, not slerp's t)."""
        return {p.name: p.range for p in self.params if p.range is not None}

    def check_together(self, params: Mapping[str, Any], where: str) -> None:  # noqa: B027 (a hook: most methods have none)
        """Conditions on several parameters at once (none by default)."""

    def keeps_base_where_unchanged(self, params: Mapping[str, Any]) -> bool:
        """Whether, with these (resolved) parameters, a slice where every expert equals the base
        (or was left out by a budget, for methods that :attr:`skips_zero_deltas`) merges to the base's
        own values, bit for bit in the working dtype. The engine then carries the base's chunk into the
        result without reading or computing it. False by default: a weighted mean of equal inputs
        need not round back to them."""
        return False

    def effective_weights(self, params: Mapping[str, Any], count: int) -> Weights:
        """Each expert's weight in the merged tensor (resolved ``params``); for methods that are
        not affine, their weight as a ranking. By default: towards the experts' mean."""
        return Weights(tuple(1.0 / count for _ in range(count)), 1.0)

    @property
    def replays_mergekit_draws(self) -> bool:
        """Whether ``--rng mergekit`` reproduces this random method's draws: it declares them
        (:meth:`draws`). arcee_fusion samples indices instead, on large tensors only: refused."""
        return type(self).draws is not MergeMethod.draws

    def draws(self, params: Mapping[str, Any], k: int) -> bool:
        """Random methods: whether expert ``k``'s decision on a tensor draws from the generator
        with these resolved parameters, one 32-bit number per element, as mergekit's does on the
        CPU (:mod:`mgit.merge.rng` replays mergekit's draws from it). False by default."""
        return False

    def array_kernel(self, params: Mapping[str, Any], dtype: str) -> ArrayKernel | None:
        """A torch-free kernel merging slices whose inputs and result are ``dtype`` (a safetensors
        name) with these resolved parameters, bit for bit as :meth:`merge_slice`; None (the default)
        when the method has none for them."""
        return None

    def resolve(self, params: Mapping[str, Any] | None, n_experts: int) -> dict[str, Any]:
        """Check names, fill defaults, broadcast expert parameters to tuples of ``n_experts`` values."""
        given = dict(params or {})
        unknown = sorted(set(given) - {p.name for p in self.params})
        if unknown:
            raise UnknownParameterError(
                f"{self.name}: unknown parameter(s) {', '.join(unknown)} (accepted: {self._accepted()})"
            )
        resolved: dict[str, Any] = {}
        for param in self.params:
            if param.name in given:
                value = given[param.name]
            elif param.scope is Scope.EXPERT and n_experts == 0:
                value = ()
            elif param.required:
                raise BadInputError(f"{self.name}: missing required parameter {param.name}")
            else:
                value = param.default
            if param.scope is Scope.GLOBAL:
                resolved[param.name] = param.coerce(value, self.name)
                continue
            if isinstance(value, Sequence) and not isinstance(value, str | bytes):
                if len(value) != n_experts:
                    raise BadInputError(f"{self.name}: {len(value)} values of {param.name} for {n_experts} expert(s)")
                values = list(value)
            elif _is_tensor(value) and value.dim() > 0:
                raise BadInputError(f"{self.name}: give {param.name} as a number or a list, not a tensor")
            else:
                values = [value] * n_experts
            resolved[param.name] = tuple(param.coerce(v, self.name) for v in values)
        return resolved

    # -- kernels (subclasses; tensors in the working dtype, parameters resolved) -----------

    @abstractmethod
    def merge(
        self, base: torch.Tensor | None, experts: list[torch.Tensor], p: Mapping[str, Any], s: Sampling
    ) -> torch.Tensor:
        """One output tensor from whole input tensors (every method implements it)."""

    def decide(self, delta: torch.Tensor, k: int, p: Mapping[str, Any], s: Sampling) -> Sparsity:
        """Methods that :attr:`decides_per_expert`: the decision on expert ``k``'s whole delta.

        The delta is the method's to use up: callers hand over a fresh ``expert - base`` and drop
        it afterwards, so a method may overwrite it (TIES sorts magnitudes in its buffer)."""
        raise TypeError(f"{self.name} decides nothing per expert (decides_per_expert is False)")

    def merge_part(
        self,
        base: torch.Tensor | None,
        experts: list[torch.Tensor],
        prepared: Prepared,
        start: int,
        present: Sequence[int] | None,
    ) -> torch.Tensor:
        """Elementwise methods: elements ``start`` on of the flattened result, from the same slices
        of the inputs. By default the whole-tensor kernel on the slice (every input present)."""
        from mgit.merge.sparsify import Sampling

        assert present is None, f"{self.name} needs every input"
        return self.merge(base, experts, prepared.params, Sampling())

    # -- checked entry points ----------------------------------------------------------------

    def __call__(
        self,
        base: torch.Tensor | None,
        experts: Sequence[torch.Tensor],
        params: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> torch.Tensor:
        """Merge one output tensor; ``options`` are :class:`TensorCall`'s other fields (dtype,
        out_dtype, generator, masks, name). See :func:`mgit.merge.methods.registry.merge_tensor`."""
        return self.merge_tensor(TensorCall(base=base, experts=experts, params=params, **options))

    def merge_tensor(self, call: TensorCall) -> torch.Tensor:
        """Merge one output tensor as ``call`` asks, checked (:func:`mgit.merge.methods.inputs.call`)."""
        from mgit.merge.methods.inputs import call as checked

        return checked(self, call)

    def prepare(
        self,
        count: int,
        params: Mapping[str, Any] | None,
        input_dtype: torch.dtype,
        *,
        dtype: torch.dtype | None = None,
        base: torch.Tensor | None = None,
        expert_at: Callable[[int], torch.Tensor] | None = None,
        generator: torch.Generator | None = None,
        name: str | None = None,
        each: Each | None = None,
        delta_at: DeltaAt | None = None,
    ) -> Prepared:
        """Everything an elementwise method decides on whole tensors, before it merges slices.

        Parameters are resolved and the working dtype fixed (``dtype``, else ``input_dtype``, the
        inputs' common dtype). Sparsifying methods (TIES, Breadcrumbs, DARE, DELLA) also need the
        whole ``base`` and the experts, made one at a time by ``expert_at(k)`` and dropped after
        their decision (kept as bits); ``each(fn, ks)``, when given, may run the deterministic
        ones concurrently. A caller that makes the deltas itself (the engine: from stored chunks,
        without holding whole tensors it does not need) gives ``delta_at(k, working dtype)``
        instead, each delta made for the call. Then :meth:`merge_slice` merges any slice on its own.
        """
        from mgit.merge.methods.inputs import prepare

        return prepare(self, count, params, input_dtype, dtype, base, expert_at, generator, name, each, delta_at)

    def merge_slice(
        self,
        prepared: Prepared,
        base: torch.Tensor | None,
        experts: Sequence[torch.Tensor],
        start: int = 0,
        present: Sequence[int] | None = None,
    ) -> torch.Tensor:
        """Elements ``[start, start + n)`` of the flattened merged tensor, from the same slices of
        the inputs (any shape with n elements), in the working dtype. Elementwise methods only.
        With ``present`` (methods that :attr:`skips_zero_deltas`), ``experts`` holds only those
        experts' slices; every other expert equals the base there."""
        work = prepared.work
        aligned_base = base.to(dtype=work) if base is not None else None
        aligned = [e.to(dtype=work) for e in experts]
        return self.merge_part(aligned_base, aligned, prepared, start, present)


def _is_tensor(value: Any) -> bool:
    """Whether ``value`` is a torch tensor, without importing torch (none exists before it is)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)
