"""``linear``: the weighted average of the inputs (mergekit's ``linear``); no base, every input an expert."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mgit.errors import BadInputError
from mgit.merge.methods.base import MergeMethod, Weights
from mgit.merge.params import REQUIRED, Param, Scope

if TYPE_CHECKING:
    import torch

    from mgit.merge.sparsify import Sampling


class Linear(MergeMethod):
    """Weighted average sum_k w_k x_k (divided by sum_k w_k when ``normalize``, the default).

    As mergekit: accumulated in float32 (float64 for float64 inputs) with one ``addcmul`` per input
    in input order, the weights rounded to that accumulation dtype, then cast back to the working
    dtype. Deviation: mergekit silently divides by a zero weight sum (inf/NaN); we refuse. A base
    named in a mergekit config is merely one more input there, with its own weight; here too.
    """

    name = "linear"
    summary = "weighted average of the inputs"
    params = (
        Param("weight", float, Scope.EXPERT, REQUIRED, doc="weight of each input"),
        Param("normalize", bool, Scope.GLOBAL, True),
    )
    needs_base = False
    min_experts = 1
    max_experts = None
    elementwise = True
    affine = True

    def effective_weights(self, params: Mapping[str, Any], count: int) -> Weights:
        w = [float(x) for x in params["weight"]]
        total = sum(w) if params.get("normalize", True) else 1.0
        total = total or 1.0
        return Weights(tuple(x / total for x in w), sum(abs(x) for x in w) / abs(total))

    def merge(
        self, base: torch.Tensor | None, experts: list[torch.Tensor], p: Mapping[str, Any], s: Sampling
    ) -> torch.Tensor:
        import torch

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
