"""Merge methods: pure torch functions that compute ONE output tensor, in one registry.

Every method takes the base tensor (or ``None``), the expert tensors and the parameters for one
output tensor, and returns the merged tensor. Nothing here reads files or knows about models.
Elementwise methods also merge slices on their own (:meth:`MergeMethod.prepare`, then
:meth:`MergeMethod.merge_slice`), which the engine uses to stream a tensor chunk by chunk; the
sparsifiers they use live in :mod:`mgit.merge.sparsify`.

Conventions (all chosen so that results equal mergekit 0.1.5's, see ``tests/merge``):

* **Parameters** carry mergekit's names (``weight``, ``density``, ``lambda``, ``normalize``,
  ``rescale``, ``epsilon``, ``gamma``, ``t``, ``filter_wise``, ``scale``, ``int8_mask``) and its
  defaults. A *global* parameter has one value; an *expert* parameter has one value per expert,
  given either as a scalar (broadcast) or as a sequence with exactly one value per expert.
  Per-tensor filters and per-layer gradients are resolved by the caller (the config layer) before
  calling in here.
* **Base.** Task-arithmetic-family methods, SLERP and Model Stock need a base; the expert
  parameters then describe the experts only (mergekit's ``NON_BASE`` scope). ``linear`` and
  ``passthrough`` have no base (mergekit ignores it: a base model named in a mergekit config is
  merely one more input there, with its own weight); pass every input as an expert.
* **dtypes** as mergekit's ``dtype`` / ``out_dtype``: all inputs are first converted to ``dtype``,
  or, when it is ``None``, to the promotion of all input dtypes (``torch.promote_types``); the method
  computes in that working dtype (with its own internal upcasts, documented per method) and the
  result is cast to ``out_dtype`` when given. Only floating-point tensors are merged (mergekit copies
  non-floating buffers instead of merging them; so must the caller).
* **Randomness.** The random methods (``dare_*``, ``della*``) draw their keep-masks from an explicit
  ``torch.Generator``; the draws are exactly those mergekit makes from torch's global generator,
  so a generator seeded with ``s`` reproduces ``torch.manual_seed(s)`` + mergekit bit for bit
  (experts drawn in order). A keep-mask per expert can also be injected (``masks=``), which skips
  that expert's draw. :func:`seeded_generator` derives a per-tensor stream from a merge seed.

Errors are :class:`mgit.errors.BadInputError` with a one-line message.

Where mgit departs from mergekit (all on inputs mergekit mishandles or on paths it does not take):
a ``linear`` weight sum of 0 with ``normalize`` is refused (mergekit returns inf/NaN); DELLA on a
tensor with fewer than 2 elements per row is refused with a clear message (mergekit fails with an
IndexError or a bernoulli RuntimeError); a base given to ``linear``/``passthrough`` is refused rather
than being merged as an input. Magnitude ranking always upcasts to float32, i.e. mergekit's CPU path
(on an accelerator mergekit sorts in the native dtype). SLERP reduces in chunks of 2**20 elements as
mergekit does for one tensor at a time (``merge_tensors``, ``mergekit-yaml``); mergekit's
``merge_state_dicts`` batches B same-shaped tensors and then uses chunks of 2**20 // B, which can
change the last bits of tensors above that size.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from mgit.errors import BadInputError
from mgit.merge.params import METHOD_PARAMS, REQUIRED, Param, Scope
from mgit.merge.sparsify import (
    Sampling,
    Sparsity,
    dare_drop,
    dare_mask,
    dare_probabilities,
    dare_sparsity,
    della_mask,
    della_probabilities,
    della_prune,
    della_sparsity,
    magnitude_sparsity,
    outlier_sparsity,
    rescale_l1,
    seeded_generator,
    trim_magnitude,
    trim_outliers,
)

__all__ = [
    "METHODS",
    "REQUIRED",
    "MergeMethod",
    "Param",
    "Prepared",
    "TaskArithmetic",
    "Sampling",
    "Scope",
    "dare_drop",
    "dare_mask",
    "dare_probabilities",
    "della_mask",
    "della_probabilities",
    "della_prune",
    "get_method",
    "merge_tensor",
    "method_names",
    "rescale_l1",
    "seeded_generator",
    "sign_consensus",
    "slerp",
    "trim_magnitude",
    "trim_outliers",
]


def sign_consensus(weighted: torch.Tensor) -> torch.Tensor:
    """TIES sign election over the stacked weighted deltas ``[K, ...]``.

    The elected sign is that of the summed mass (sum over experts, ties -> +); an expert element
    counts only if its sign equals it (zeros never count). ``int8_mask`` in mergekit only changes
    the dtype of this comparison, not its result.
    """
    elected = torch.where(weighted.sum(dim=0) >= 0, 1, -1).to(weighted.dtype)
    return weighted.sign() == elected


def _agreeing_sum(weighted: torch.Tensor, weights: torch.Tensor, normalize: bool) -> torch.Tensor:
    """TIES steps 3-4 on stacked weighted deltas ``[K, n]`` (consumed): the sum of the elements
    agreeing with the elected sign, divided by the agreeing weights when ``normalize``.

    Equal bit for bit to the plain formulation (:func:`sign_consensus`, then ``(weighted * agree).sum``),
    which a slice holding a NaN still takes; otherwise the agreement is computed in the working dtype
    as 0/1 (+0, never -0, as a bool promoted to it would be), about 3x faster than via bool tensors.
    """
    total = weighted.sum(dim=0)
    if bool(total.isnan().any()):
        agree = sign_consensus(weighted)
        mixed = (weighted * agree).sum(dim=0)
        divisor = (weights * agree).sum(dim=0) if normalize else None
    else:
        one = torch.ones((), dtype=weighted.dtype, device=weighted.device)
        elected = torch.copysign(one, total.add_(0))  # + 0 turns -0 into +0: a zero sum elects +
        agree = torch.sign(weighted).mul_(elected).clamp_(min=0).add_(0)  # 1 where signs agree, else +0
        mixed = weighted.mul_(agree).sum(dim=0)
        divisor = None
        if normalize:
            for k in range(agree.shape[0]):
                agree[k].mul_(weights[k])
            divisor = agree.sum(dim=0)
    if divisor is not None:
        divisor.masked_fill_(divisor == 0, 1)
        mixed /= divisor
    return mixed


# --------------------------------------------------------------------------------------------
# The methods. Each receives tensors already in the working dtype and fully resolved parameters.

MergeFn = Callable[[torch.Tensor | None, list[torch.Tensor], Mapping[str, Any], Sampling], torch.Tensor]
Sparsifier = Callable[[torch.Tensor, int, Mapping[str, Any], Sampling, str], Sparsity]


def _sparsify_magnitude(delta: torch.Tensor, k: int, p: Mapping[str, Any], s: Sampling, m: str) -> Sparsity:
    return magnitude_sparsity(delta, p["density"][k], p["rescale"])


def _sparsify_outliers(delta: torch.Tensor, k: int, p: Mapping[str, Any], s: Sampling, m: str) -> Sparsity:
    return outlier_sparsity(delta, p["density"][k], p["gamma"][k], p["rescale"])


def _sparsify_random(delta: torch.Tensor, k: int, p: Mapping[str, Any], s: Sampling, m: str) -> Sparsity:
    return dare_sparsity(delta, p["density"][k], p["rescale"], s, s.mask(k))


def _sparsify_della(delta: torch.Tensor, k: int, p: Mapping[str, Any], s: Sampling, m: str) -> Sparsity:
    return della_sparsity(delta, p["density"][k], p["epsilon"][k], p["rescale"], s, s.mask(k), m)


COMBINE_SLICE = 1 << 20  # elements combined at a time: bounded scratch, cache-friendly, same bits


@dataclass(frozen=True)
class TaskArithmetic:
    """One member of the generalized task arithmetic family (mergekit's
    ``GeneralizedTaskArithmeticMerge``): base + lambda * combine(weight_k * sparsify(expert_k - base)).

    Steps, all in the working dtype:
      1. delta_k = expert_k - base, sparsified per expert (trim / breadcrumbs / DARE / DELLA);
      2. multiplied by weight_k, the weights first rounded to the working dtype (bf16 in a bf16 merge);
      3. combined: without consensus the sum over experts; with consensus (TIES sign election) the
         sum of the elements whose sign agrees with the elected one;
      4. ``normalize`` divides by the sum of weights (with consensus: per element, of the agreeing
         experts' weights; a zero divisor becomes 1; without consensus a |sum| < 1e-8 becomes 1);
      5. multiplied by ``lambda`` (only when lambda != 1) and added to the base.
    With no experts the base is returned.

    Only the sparsifier looks at a whole delta (it ranks or sums it); what it decides
    (:class:`~mgit.merge.sparsify.Sparsity`) is applied element by element, and steps 2-5 act on
    each element alone. So the engine decides per expert first, then merges any slice of the
    tensor on its own (:meth:`contribution` with ``start``, then :meth:`combine`), bit for bit.
    """

    name: str
    sparsify: Sparsifier | None
    consensus: bool

    def decide(self, delta: torch.Tensor, k: int, p: Mapping[str, Any], s: Sampling) -> Sparsity:
        """The sparsifier's decision on expert ``k``'s whole delta (expert - base)."""
        assert self.sparsify is not None
        return self.sparsify(delta, k, p, s, self.name)

    def contribution(
        self,
        base: torch.Tensor,
        expert: torch.Tensor,
        sparsity: Sparsity | None = None,
        start: int = 0,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Step 1 for one expert on a slice (elements ``start`` on of the flattened tensor): its
        delta with ``sparsity`` applied, in the base's dtype (written into ``out`` when given)."""
        if sparsity is None and out is not None and expert.dtype == base.dtype == out.dtype:
            return torch.sub(expert, base, out=out)
        delta = expert - base
        if sparsity is not None:
            delta = sparsity.apply(delta, start)
        delta = delta.to(base.dtype)
        if out is not None:
            out.copy_(delta)
        return delta

    def combine(
        self, base: torch.Tensor, stacked: torch.Tensor, p: Mapping[str, Any], present: Sequence[int] | None = None
    ) -> torch.Tensor:
        """Steps 2-5 over the experts' contributions stacked as ``[K, *base.shape]`` (which it
        scales in place), in slices of COMBINE_SLICE elements. With ``present``, only those
        experts are stacked: the others' deltas are exactly 0 here (a budget skipped them), so
        they add nothing but their weight to a normalizing sum."""
        count = stacked.shape[0]
        every = torch.tensor(p["weight"], dtype=stacked.dtype, device=stacked.device).reshape(-1, 1)
        weights = every if present is None else every[list(present)]
        flat_base, flat = base.reshape(-1), stacked.reshape(count, -1)
        out = torch.empty_like(flat_base)
        for start in range(0, flat_base.numel(), COMBINE_SLICE):
            part = slice(start, start + COMBINE_SLICE)
            out[part] = self._combine_slice(flat_base[part], flat[:, part], weights, p, every)
        return out.reshape(base.shape)

    def _combine_slice(
        self,
        base: torch.Tensor,
        stacked: torch.Tensor,
        weights: torch.Tensor,
        p: Mapping[str, Any],
        every: torch.Tensor,
    ) -> torch.Tensor:
        for k in range(stacked.shape[0]):  # row by row: a contiguous multiply, 2x faster than broadcasting
            stacked[k].mul_(weights[k])
        if self.consensus:  # a zero delta never agrees with the elected sign: absent experts add nothing
            mixed = _agreeing_sum(stacked, weights, p["normalize"])
        else:
            mixed = stacked.sum(dim=0)
            if p["normalize"]:
                divisor = every.sum(dim=0)
                divisor[divisor.abs() < 1e-8] = 1
                mixed /= divisor
        if p["lambda"] != 1:
            mixed *= p["lambda"]
        return (base + mixed).to(base.dtype)

    def merge_slice(
        self,
        base: torch.Tensor,
        experts: Sequence[torch.Tensor],
        p: Mapping[str, Any],
        sparsities: Sequence[Sparsity | None] | None = None,
        start: int = 0,
        present: Sequence[int] | None = None,
    ) -> torch.Tensor:
        """Steps 1-5 on a slice, every expert's decision already made. With ``present``,
        ``experts`` are those experts only; every other one's delta is 0 on this slice."""
        if not experts:
            return base
        which = range(len(experts)) if present is None else present
        stacked = torch.empty((len(experts), *base.shape), dtype=base.dtype, device=base.device)
        for row, (k, expert) in enumerate(zip(which, experts, strict=True)):
            self.contribution(base, expert, sparsities[k] if sparsities else None, start, out=stacked[row])
        return self.combine(base, stacked, p, present)

    def __call__(
        self, base: torch.Tensor | None, experts: list[torch.Tensor], p: Mapping[str, Any], s: Sampling
    ) -> torch.Tensor:
        assert base is not None
        decided = [self.decide(e - base, k, p, s) for k, e in enumerate(experts)] if self.sparsify else None
        return self.merge_slice(base, experts, p, decided)


def _linear(base: torch.Tensor | None, experts: list[torch.Tensor], p: Mapping[str, Any], s: Sampling) -> torch.Tensor:
    """Weighted average sum_k w_k x_k (divided by sum_k w_k when ``normalize``, the default).

    As mergekit: accumulated in float32 (float64 for float64 inputs) with one ``addcmul`` per input
    in input order, the weights rounded to that accumulation dtype, then cast back to the working
    dtype. Deviation: mergekit silently divides by a zero weight sum (inf/NaN); we refuse.
    """
    first = experts[0]
    acc_dtype = torch.float64 if first.dtype == torch.float64 else torch.float32
    # Shapes [1, ...] mirror mergekit's batch layout so the same kernels (and roundings) apply.
    weights = torch.tensor([p["weight"]], dtype=acc_dtype, device=first.device)
    column = (1,) * (first.dim() + 1)
    acc = torch.zeros((1, *first.shape), dtype=acc_dtype, device=first.device)
    for k, tensor in enumerate(experts):
        acc.addcmul_(tensor.unsqueeze(0), weights[:, k].reshape(column))
    if p["normalize"]:
        total = weights.sum(dim=1)
        if bool((total == 0).any()):
            raise BadInputError("linear: the weights sum to 0, cannot normalize (set normalize: false)")
        acc.div_(total.reshape(column))
    return acc[0].to(first.dtype)


_SLERP_CHUNK = 1024 * 1024  # elements per chunk, as mergekit: bounds float32 scratch and fixes reduction order
_SLERP_DOT_THRESHOLD = 0.9995
_SLERP_NORM_EPS = 1e-8


def slerp(t: float, v0: torch.Tensor, v1: torch.Tensor) -> torch.Tensor:
    """Spherical interpolation between whole tensors v0 (t = 0) and v1 (t = 1).

    Follows mergekit's ``slerp`` exactly: computed in float32 (float64 for float64 v0) over the
    flattened tensors; each norm is the norm of per-chunk norms (chunks of 2**20 elements); the
    cosine is the sum of per-chunk dot products of the *normalised* vectors (a norm <= 1e-8 is
    replaced by 1), clamped to [-1, 1]. When |cos| > 0.9995 (nearly colinear or antipodal) it falls
    back to linear interpolation (1 - t) v0 + t v1; otherwise
    sin((1 - t) theta) / sin(theta) v0 + sin(t theta) / sin(theta) v1 on the un-normalised inputs.
    The result has v0's dtype.
    """
    work = torch.float64 if v0.dtype == torch.float64 else torch.float32
    a = v0.reshape(1, -1)
    b = v1.reshape(1, -1)
    tt = torch.tensor([t], dtype=work, device=v0.device).reshape(-1, 1)
    n = a.shape[1]
    if n == 0:
        return ((1 - tt) * a + tt * b).reshape(v0.shape).to(v0.dtype)
    chunks = [slice(start, start + _SLERP_CHUNK) for start in range(0, n, _SLERP_CHUNK)]

    def norm(x: torch.Tensor) -> torch.Tensor:
        parts = [torch.linalg.vector_norm(x[:, c].to(work), dim=1, keepdim=True) for c in chunks]
        value = torch.linalg.vector_norm(torch.stack(parts), dim=0)
        return torch.where(value > _SLERP_NORM_EPS, value, 1)

    norm_a, norm_b = norm(a), norm(b)
    dots = [((a[:, c].to(work) / norm_a) * (b[:, c].to(work) / norm_b)).sum(dim=1, keepdim=True) for c in chunks]
    cos = torch.stack(dots).sum(dim=0).clamp(-1, 1)
    colinear = cos.abs() > _SLERP_DOT_THRESHOLD
    theta = torch.acos(torch.where(colinear, 0, cos))
    sin_theta = torch.sin(theta)
    coef_a = torch.where(colinear, 1 - tt, torch.sin((1 - tt) * theta) / sin_theta)
    coef_b = torch.where(colinear, tt, torch.sin(tt * theta) / sin_theta)
    out = torch.empty_like(a)
    for c in chunks:
        out[:, c] = coef_a * a[:, c].to(work) + coef_b * b[:, c].to(work)
    return out.reshape(v0.shape)


def _slerp(base: torch.Tensor | None, experts: list[torch.Tensor], p: Mapping[str, Any], s: Sampling) -> torch.Tensor:
    """SLERP from the base (t = 0) to the single expert (t = 1); see :func:`slerp`."""
    assert base is not None
    return slerp(p["t"], base, experts[0])


def _model_stock(
    base: torch.Tensor | None, experts: list[torch.Tensor], p: Mapping[str, Any], s: Sampling
) -> torch.Tensor:
    """Model Stock: move from the base towards the experts' average by t = k cos / (1 + (k - 1) cos).

    cos is the mean, over all expert pairs, of the cosine between their offsets from the base
    (norm product clamped below at 1e-6, cosine clamped to [-1, 1]); over the whole flattened tensor,
    or with ``filter_wise`` per row along the last dimension (a 1-D tensor is one row). Where
    |1 + (k - 1) cos| < 1e-6 the base is kept (t = 0). Everything in the working dtype, as mergekit.
    """
    assert base is not None
    w0, ws = base, list(experts)
    if p["filter_wise"]:
        if w0.dim() == 1:
            w0, ws = w0.unsqueeze(0), [w.unsqueeze(0) for w in ws]
    else:
        w0, ws = w0.reshape(-1), [w.reshape(-1) for w in ws]
    offsets = [w - w0 for w in ws]
    cosines = []
    for i, first in enumerate(offsets):
        for second in offsets[i + 1 :]:
            norms = torch.norm(first, dim=-1) * torch.norm(second, dim=-1)
            cosines.append(((first * second).sum(dim=-1) / norms.clamp(min=1e-6)).clamp(-1, 1))
    cos = torch.stack(cosines).mean(dim=0).unsqueeze(-1)
    k = len(ws)
    denominator = 1 + (k - 1) * cos
    singular = denominator.abs() < 1e-6
    ratio = (k * cos) / torch.where(singular, torch.ones_like(denominator), denominator)
    t = torch.where(singular, torch.zeros_like(cos), ratio)
    average = sum(ws) / k  # left-to-right sum, as mergekit's Python sum()
    return (t * average + (1 - t) * w0).reshape(base.shape)


def _passthrough(
    base: torch.Tensor | None, experts: list[torch.Tensor], p: Mapping[str, Any], s: Sampling
) -> torch.Tensor:
    """The single input, multiplied by ``scale`` when given (the result may alias the input)."""
    (tensor,) = experts
    scale = p["scale"][0]
    return tensor if scale is None else tensor * scale


# --------------------------------------------------------------------------------------------
# Registry


@dataclass(frozen=True)
class Prepared:
    """What an elementwise method fixed on whole tensors (see :meth:`MergeMethod.prepare`)."""

    params: dict[str, Any]  # resolved
    work: torch.dtype  # the working dtype
    sparsities: tuple[Sparsity | None, ...] | None = None  # per expert, for sparsifying methods


@dataclass(frozen=True)
class MergeMethod:
    """A named merge method: its function, accepted parameters and input contract."""

    name: str
    fn: MergeFn
    params: tuple[Param, ...]
    needs_base: bool
    min_experts: int
    max_experts: int | None
    random: bool
    summary: str
    # Each output element depends only on the same element of the inputs, the parameters and
    # decisions made once per expert (prepare), so a tensor may be merged slice by slice.
    elementwise: bool = False

    def param(self, name: str) -> Param:
        for param in self.params:
            if param.name == name:
                return param
        raise BadInputError(f"{self.name}: unknown parameter {name!r} (accepted: {self._accepted()})")

    def _accepted(self) -> str:
        return ", ".join(p.name for p in self.params) or "none"

    def resolve(self, params: Mapping[str, Any] | None, n_experts: int) -> dict[str, Any]:
        """Check names, fill defaults, broadcast expert parameters to tuples of ``n_experts`` values."""
        given = dict(params or {})
        unknown = sorted(set(given) - {p.name for p in self.params})
        if unknown:
            raise BadInputError(
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
            elif isinstance(value, torch.Tensor) and value.dim() > 0:
                raise BadInputError(f"{self.name}: give {param.name} as a number or a list, not a tensor")
            else:
                values = [value] * n_experts
            resolved[param.name] = tuple(param.coerce(v, self.name) for v in values)
        return resolved

    def __call__(
        self,
        base: torch.Tensor | None,
        experts: Sequence[torch.Tensor],
        params: Mapping[str, Any] | None = None,
        *,
        dtype: torch.dtype | None = None,
        out_dtype: torch.dtype | None = None,
        generator: torch.Generator | None = None,
        masks: Sequence[torch.Tensor | None] | None = None,
        name: str | None = None,
    ) -> torch.Tensor:
        """Merge one output tensor. See :func:`merge_tensor`."""
        where = self._where(name)
        if isinstance(experts, torch.Tensor) or not isinstance(experts, Sequence):
            raise BadInputError(f"{where}: experts must be a list of tensors")
        experts = list(experts)
        self._check_inputs(where, base is not None, len(experts), dtype, out_dtype)
        inputs = ([base] if base is not None else []) + experts
        _check_tensors(where, inputs)
        work = dtype or _promoted(inputs)
        if self.elementwise:
            prepared = self._prepare(where, base, len(experts), experts.__getitem__, params, work, generator, masks)
            result = self.merge_slice(prepared, base, experts)
        else:
            resolved = self.resolve(params, len(experts))
            sampling = self._sampling(where, generator, masks, inputs[0], len(experts))
            aligned_base = base.to(dtype=work) if base is not None else None
            result = self.fn(aligned_base, [e.to(dtype=work) for e in experts], resolved, sampling)
        if result.shape != inputs[0].shape:  # pragma: no cover - a bug in a method
            raise AssertionError(f"{where}: produced shape {tuple(result.shape)}")
        return result.to(dtype=out_dtype) if out_dtype is not None else result

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
        each: Callable[[Callable[[int], None], list[int]], None] | None = None,
    ) -> Prepared:
        """Everything an elementwise method decides on whole tensors, before it merges slices.

        Parameters are resolved and the working dtype fixed (``dtype``, else ``input_dtype``, the
        inputs' common dtype). Sparsifying methods (TIES, Breadcrumbs, DARE, DELLA) also need the
        whole ``base`` and the experts, made one at a time by ``expert_at(k)`` and dropped after
        their decision (kept as bits); ``each(fn, ks)``, when given, may run the deterministic
        ones concurrently. Then :meth:`merge_slice` merges any slice on its own.
        """
        where = self._where(name)
        if not self.elementwise:
            raise BadInputError(f"{where}: needs whole tensors; call the method instead")
        self._check_inputs(where, self.needs_base, count, dtype, None)
        if self.decides_per_expert and (base is None or expert_at is None):
            raise BadInputError(f"{where}: decides on whole deltas; give base and expert_at")
        return self._prepare(where, base, count, expert_at, params, dtype or input_dtype, generator, None, each, True)

    def _prepare(
        self,
        where: str,
        base: torch.Tensor | None,
        count: int,
        expert_at: Callable[[int], torch.Tensor] | None,
        params: Mapping[str, Any] | None,
        work: torch.dtype,
        generator: torch.Generator | None,
        masks: Sequence[torch.Tensor | None] | None,
        each: Callable[[Callable[[int], None], list[int]], None] | None = None,
        pack: bool = False,
    ) -> Prepared:
        resolved = self.resolve(params, count)
        if not self.decides_per_expert or count == 0:
            return Prepared(resolved, work)
        assert base is not None and expert_at is not None and isinstance(self.fn, TaskArithmetic)
        sampling = self._sampling(where, generator, masks, base, count)
        aligned_base = base.to(dtype=work)
        decided: list[Sparsity | None] = [None] * count

        def one(k: int) -> None:
            delta = expert_at(k).to(dtype=work) - aligned_base  # the expert is dropped here
            sparsity = self.fn.decide(delta, k, resolved, sampling)
            decided[k] = sparsity.packed() if pack else sparsity

        if each is None or self.random:  # random methods draw from one generator, in expert order
            for k in range(count):
                one(k)
        else:
            each(one, list(range(count)))
        return Prepared(resolved, work, tuple(decided))

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
        if isinstance(self.fn, TaskArithmetic):
            assert aligned_base is not None
            return self.fn.merge_slice(aligned_base, aligned, prepared.params, prepared.sparsities, start, present)
        assert present is None, f"{self.name} needs every input"
        return self.fn(aligned_base, aligned, prepared.params, Sampling())

    @property
    def skips_zero_deltas(self) -> bool:
        """Whether an expert equal to the base may be left out of a slice's math (it adds a zero
        delta): the task arithmetic family. Exact merges never do (mergekit computes with it)."""
        return isinstance(self.fn, TaskArithmetic)

    @property
    def decides_per_expert(self) -> bool:
        """Whether the method looks at each expert's whole delta before merging (sparsifiers)."""
        return isinstance(self.fn, TaskArithmetic) and self.fn.sparsify is not None

    def _where(self, name: str | None) -> str:
        return f"{self.name}{f' ({name})' if name else ''}"

    def _check_inputs(
        self, where: str, has_base: bool, count: int, dtype: torch.dtype | None, out_dtype: torch.dtype | None
    ) -> None:
        if count < self.min_experts or (self.max_experts is not None and count > self.max_experts):
            if self.max_experts == self.min_experts:
                expected = f"exactly {self.min_experts}"
            elif self.max_experts is None:
                expected = f"at least {self.min_experts}"
            else:
                expected = f"{self.min_experts} to {self.max_experts}"
            raise BadInputError(f"{where}: needs {expected} expert tensor(s), got {count}")
        if self.needs_base and not has_base:
            raise BadInputError(f"{where}: needs a base tensor")
        if not self.needs_base and has_base:
            raise BadInputError(
                f"{where}: takes no base; pass the base as one more input (with its own weight) if it should count"
            )
        _check_dtypes(where, dtype, out_dtype)

    def _sampling(
        self,
        where: str,
        generator: torch.Generator | None,
        masks: Sequence[torch.Tensor | None] | None,
        like: torch.Tensor,
        count: int,
    ) -> Sampling:
        if not self.random:
            if masks is not None:
                raise BadInputError(f"{where}: is deterministic and takes no masks")
            return Sampling()
        if masks is not None:
            if isinstance(masks, torch.Tensor) or len(masks) != count:
                raise BadInputError(f"{where}: give one mask (or None) per expert, {count} in all")
            for mask in masks:
                if mask is not None and (not isinstance(mask, torch.Tensor) or mask.shape != like.shape):
                    raise BadInputError(f"{where}: a mask must be a tensor of shape {tuple(like.shape)}")
        if generator is not None and not isinstance(generator, torch.Generator):
            raise BadInputError(f"{where}: generator must be a torch.Generator")
        # A missing generator is reported when a draw is needed: experts with density >= 1 draw nothing.
        return Sampling(generator, tuple(masks) if masks is not None else None, where)


def _check_tensors(where: str, tensors: list[torch.Tensor]) -> None:
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


def _check_dtypes(where: str, dtype: torch.dtype | None, out_dtype: torch.dtype | None) -> None:
    for label, value in (("dtype", dtype), ("out_dtype", out_dtype)):
        if value is not None and (not isinstance(value, torch.dtype) or not value.is_floating_point):
            raise BadInputError(f"{where}: {label} must be a floating-point torch dtype, got {value!r}")


def _promoted(tensors: list[torch.Tensor]) -> torch.dtype:
    dtype = tensors[0].dtype
    for tensor in tensors[1:]:
        dtype = torch.promote_types(dtype, tensor.dtype)
    return dtype


def _gta(name: str, sparsify: Sparsifier | None, consensus: bool, summary: str) -> MergeMethod:
    return MergeMethod(
        name=name,
        fn=TaskArithmetic(name, sparsify, consensus),
        params=METHOD_PARAMS[name],
        needs_base=True,
        min_experts=0,
        max_experts=None,
        random=sparsify in (_sparsify_random, _sparsify_della),
        summary=summary,
        elementwise=True,
    )


METHODS: dict[str, MergeMethod] = {
    m.name: m
    for m in (
        MergeMethod(
            name="linear",
            fn=_linear,
            params=METHOD_PARAMS["linear"],
            needs_base=False,
            min_experts=1,
            max_experts=None,
            random=False,
            summary="weighted average of the inputs",
            elementwise=True,
        ),
        _gta("task_arithmetic", None, False, "base + lambda * sum of weighted deltas"),
        _gta("ties", _sparsify_magnitude, True, "trim to top-density magnitudes, elect sign, disjoint mean"),
        _gta("dare_linear", _sparsify_random, False, "random drop (keep density) + rescale, weighted sum"),
        _gta("dare_ties", _sparsify_random, True, "random drop + rescale, then TIES sign election"),
        _gta("breadcrumbs", _sparsify_outliers, False, "drop outliers and small deltas"),
        _gta("breadcrumbs_ties", _sparsify_outliers, True, "breadcrumbs, then TIES sign election"),
        _gta("della", _sparsify_della, True, "magnitude-ranked random drop, TIES election"),
        _gta("della_linear", _sparsify_della, False, "magnitude-ranked random drop"),
        MergeMethod(
            name="slerp",
            fn=_slerp,
            params=METHOD_PARAMS["slerp"],
            needs_base=True,
            min_experts=1,
            max_experts=1,
            random=False,
            summary="spherical interpolation between base and one expert",
        ),
        MergeMethod(
            name="model_stock",
            fn=_model_stock,
            params=METHOD_PARAMS["model_stock"],
            needs_base=True,
            min_experts=2,
            max_experts=None,
            random=False,
            summary="move towards the experts' mean by a ratio from their pairwise angles",
        ),
        MergeMethod(
            name="passthrough",
            fn=_passthrough,
            params=METHOD_PARAMS["passthrough"],
            needs_base=False,
            min_experts=1,
            max_experts=1,
            random=False,
            summary="the single input, optionally scaled",
            elementwise=True,
        ),
    )
}


def method_names() -> list[str]:
    return sorted(METHODS)


def get_method(name: str) -> MergeMethod:
    try:
        return METHODS[name]
    except (KeyError, TypeError):
        raise BadInputError(f"unknown merge method {name!r} (known: {', '.join(method_names())})") from None


def merge_tensor(
    method: str | MergeMethod,
    base: torch.Tensor | None,
    experts: Sequence[torch.Tensor],
    params: Mapping[str, Any] | None = None,
    *,
    dtype: torch.dtype | None = None,
    out_dtype: torch.dtype | None = None,
    generator: torch.Generator | None = None,
    masks: Sequence[torch.Tensor | None] | None = None,
    name: str | None = None,
) -> torch.Tensor:
    """Merge one output tensor with the named method.

    ``base``: the base tensor, or None for methods without a base (linear, passthrough).
    ``experts``: the other inputs, in order; expert parameters are given in the same order.
    ``params``: mergekit-named parameters; expert parameters as a scalar or one value per expert.
    ``dtype``/``out_dtype``: as mergekit (working dtype, default the promotion of the inputs; cast of
    the result). ``generator``: needed by random methods for every expert they sample (density < 1)
    that has no injected keep-mask in ``masks`` (same shape as the tensors, 1 = keep). ``name``: for error messages.
    Inputs are never modified; the result may alias an input (passthrough, or a single-input no-op).
    """
    resolved = method if isinstance(method, MergeMethod) else get_method(method)
    return resolved(
        base, experts, params, dtype=dtype, out_dtype=out_dtype, generator=generator, masks=masks, name=name
    )
