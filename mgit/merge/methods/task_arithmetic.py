"""The generalized task arithmetic family as one configurable method (mergekit's
``GeneralizedTaskArithmeticMerge``): task arithmetic, TIES, DARE, Breadcrumbs, DELLA and their
variants differ only in the sparsifier and whether a TIES sign election combines the deltas.

Only the sparsifier looks at a whole delta, so the engine decides per expert, then merges any
slice on its own, bit for bit. The formula: docs/merging.md, "Notes from the code".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mgit.merge.methods.base import ArrayKernel, MergeMethod, Weights
from mgit.merge.params import REQUIRED, Param, Scope, check_della

if TYPE_CHECKING:
    import torch

    from mgit.merge.methods.inputs import Prepared
    from mgit.merge.sparsify import Sampling, Sparsity

COMBINE_SLICE = 1 << 20  # elements combined at a time: bounded scratch, cache-friendly, same bits


def sign_consensus(weighted: torch.Tensor) -> torch.Tensor:
    """TIES sign election over the stacked weighted deltas ``[K, ...]``.

    The elected sign is that of the summed mass (sum over experts, ties -> +); an expert element
    counts only if its sign equals it (zeros never count). ``int8_mask`` in mergekit only changes
    the dtype of this comparison, not its result.
    """
    import torch

    elected = torch.where(weighted.sum(dim=0) >= 0, 1, -1).to(weighted.dtype)
    return weighted.sign() == elected


def _agreeing_sum(weighted: torch.Tensor, weights: torch.Tensor, normalize: bool) -> torch.Tensor:
    """TIES steps 3-4 on stacked weighted deltas ``[K, n]`` (consumed): the sum of the elements
    agreeing with the elected sign, divided by the agreeing weights when ``normalize``.

    Equal bit for bit to the plain formulation (:func:`sign_consensus`, then ``(weighted * agree).sum``),
    which a slice holding a NaN still takes; otherwise the agreement is computed in the working dtype
    as 0/1 (+0, never -0, as a bool promoted to it would be), about 3x faster than via bool tensors.
    """
    import torch

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


# -- the sparsifiers: one per family member's first step -------------------------------------

Decide = Callable[["torch.Tensor", int, Mapping[str, Any], "Sampling", str], "Sparsity"]


def _magnitude(delta: torch.Tensor, k: int, p: Mapping[str, Any], s: Sampling, m: str) -> Sparsity:
    from mgit.merge.sparsify import magnitude_sparsity

    return magnitude_sparsity(delta, p["density"][k], p["rescale"], overwrite=True)


def _outliers(delta: torch.Tensor, k: int, p: Mapping[str, Any], s: Sampling, m: str) -> Sparsity:
    from mgit.merge.sparsify import outlier_sparsity

    return outlier_sparsity(delta, p["density"][k], p["gamma"][k], p["rescale"], overwrite=True)


def _random(delta: torch.Tensor, k: int, p: Mapping[str, Any], s: Sampling, m: str) -> Sparsity:
    from mgit.merge.sparsify import dare_sparsity

    return dare_sparsity(delta, p["density"][k], p["rescale"], s, s.mask(k))


def _della(delta: torch.Tensor, k: int, p: Mapping[str, Any], s: Sampling, m: str) -> Sparsity:
    from mgit.merge.sparsify import della_sparsity

    return della_sparsity(delta, p["density"][k], p["epsilon"][k], p["rescale"], s, s.mask(k), m)


def _expert(name: str, default: Any, doc: str) -> Param:
    return Param(name, float, Scope.EXPERT, default, doc=doc)


@dataclass(frozen=True)
class Sparsifier:
    """How a family member sparsifies each delta: its decision, whether it draws at random,
    its ``rescale`` default and the parameters it adds (mergekit's)."""

    decide: Decide
    random: bool
    rescale: bool
    extra: tuple[Param, ...] = ()
    joint_check: Callable[[Mapping[str, Any], str], None] | None = None
    draws_at: Callable[[float], bool] | None = None  # random ones: whether a density draws (see MergeMethod.draws)


_GAMMA = _expert("gamma", 0.01, "fraction of largest-magnitude outliers dropped (breadcrumbs)")
_EPSILON = _expert("epsilon", 0.15, "spread of DELLA's keep probabilities around density")


def _check_della(params: Mapping[str, Any], where: str) -> None:
    if "epsilon" in params:
        check_della(params.get("density", 1.0), params["epsilon"], where)


SPARSIFIERS: dict[str, Sparsifier] = {
    "magnitude": Sparsifier(_magnitude, random=False, rescale=False),
    "outliers": Sparsifier(_outliers, random=False, rescale=False, extra=(_GAMMA,)),
    # DARE draws below density 1 (also at 0: mergekit does); DELLA only strictly between 0 and 1
    "random": Sparsifier(_random, random=True, rescale=True, draws_at=lambda density: density < 1),
    "della": Sparsifier(
        _della,
        random=True,
        rescale=True,
        extra=(_EPSILON,),
        joint_check=_check_della,
        draws_at=lambda density: 0 < density < 1,
    ),
}


_INT8_MASK = "mergekit: dtype of the sign mask only; no effect on the result"


def _family_params(normalize: bool, sparsifier: Sparsifier | None) -> tuple[Param, ...]:
    """The family's parameters, in mergekit's order, with this member's defaults."""
    rescale = sparsifier.rescale if sparsifier is not None else False
    return (
        Param("int8_mask", bool, Scope.GLOBAL, False, doc=_INT8_MASK),
        Param("normalize", bool, Scope.GLOBAL, normalize, doc="divide by the sum of (agreeing) weights"),
        Param("rescale", bool, Scope.GLOBAL, rescale, doc="rescale sparsified deltas to their L1 norm"),
        Param("lambda", float, Scope.GLOBAL, 1.0, doc="scale of the combined delta"),
        _expert("weight", REQUIRED, "weight of each expert's delta"),
        _expert("density", 1.0, "fraction of each delta kept"),
        *(sparsifier.extra if sparsifier is not None else ()),
    )


class TaskArithmetic(MergeMethod):
    """One member of the family: ``sparsify`` names its sparsifier (None: plain task arithmetic),
    ``consensus`` turns on the TIES sign election, ``normalize`` is its default."""

    needs_base = True
    min_experts = 0
    max_experts = None
    elementwise = True
    skips_zero_deltas = True  # an expert equal to the base adds a zero delta: it may be left out

    def __init__(self, name: str, summary: str, sparsify: str | None, *, consensus: bool, normalize: bool) -> None:
        self.name, self.summary, self.consensus = name, summary, consensus
        self.sparsifier = SPARSIFIERS[sparsify] if sparsify is not None else None
        self.params = _family_params(normalize, self.sparsifier)
        self.random = self.sparsifier is not None and self.sparsifier.random
        self.decides_per_expert = self.sparsifier is not None
        # Without sparsifier or sign election, a linear combination of the deltas.
        self.affine = self.sparsifier is None and not consensus

    def check_together(self, params: Mapping[str, Any], where: str) -> None:
        if self.sparsifier is not None and self.sparsifier.joint_check is not None:
            self.sparsifier.joint_check(params, where)

    def keeps_base_where_unchanged(self, params: Mapping[str, Any]) -> bool:
        """Yes: with no expert present :meth:`combine_slice` returns the base itself, and every
        expert equal to the base adds a zero delta (so leaving it out changes nothing but the sign
        of a zero the base holds, which carrying keeps as the base has it)."""
        return True

    def array_kernel(self, params: Mapping[str, Any], dtype: str) -> ArrayKernel | None:
        """Plain task arithmetic on bf16 / fp16 (:mod:`~mgit.merge.methods.affine_arrays`)."""
        if not self.affine:
            return None
        from mgit.merge.methods.affine_arrays import affine_kernel

        return affine_kernel(dtype, params["weight"], bool(params["normalize"]), float(params["lambda"]))

    def effective_weights(self, params: Mapping[str, Any], count: int) -> Weights:
        w = [float(x) for x in params["weight"]]
        total = sum(w) if params.get("normalize") else 1.0
        total = total if abs(total) >= 1e-8 else 1.0
        lam = float(params.get("lambda", 1.0))
        return Weights(tuple(lam * x / total for x in w), 1.0)

    def draws(self, params: Mapping[str, Any], k: int) -> bool:
        draws_at = self.sparsifier.draws_at if self.sparsifier is not None else None
        return draws_at is not None and draws_at(float(params["density"][k]))

    def decide(self, delta: torch.Tensor, k: int, p: Mapping[str, Any], s: Sampling) -> Sparsity:
        """The sparsifier's decision on expert ``k``'s whole delta (expert - base), which it may
        overwrite (see :meth:`MergeMethod.decide`)."""
        assert self.sparsifier is not None
        return self.sparsifier.decide(delta, k, p, s, self.name)

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
        import torch

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
        import torch

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

    def combine_slice(
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
        import torch

        if not experts:
            return base
        which = range(len(experts)) if present is None else present
        stacked = torch.empty((len(experts), *base.shape), dtype=base.dtype, device=base.device)
        for row, (k, expert) in enumerate(zip(which, experts, strict=True)):
            self.contribution(base, expert, sparsities[k] if sparsities else None, start, out=stacked[row])
        return self.combine(base, stacked, p, present)

    def merge_part(
        self,
        base: torch.Tensor | None,
        experts: list[torch.Tensor],
        prepared: Prepared,
        start: int,
        present: Sequence[int] | None,
    ) -> torch.Tensor:
        assert base is not None
        return self.combine_slice(base, experts, prepared.params, prepared.sparsities, start, present)

    def merge(
        self, base: torch.Tensor | None, experts: list[torch.Tensor], p: Mapping[str, Any], s: Sampling
    ) -> torch.Tensor:
        assert base is not None
        decided = [self.decide(e - base, k, p, s) for k, e in enumerate(experts)] if self.sparsifier else None
        return self.combine_slice(base, experts, p, decided)
