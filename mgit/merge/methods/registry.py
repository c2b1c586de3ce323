"""Every merge method by name: the only place that lists them (torch-free).

Adding a method: a file with a :class:`~mgit.merge.methods.base.MergeMethod` subclass, one line
here, and a test comparing it with mergekit (``tests/merge/test_methods.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from mgit.errors import UnknownMethodError
from mgit.merge.methods.arcee_fusion import ArceeFusion
from mgit.merge.methods.base import MergeMethod
from mgit.merge.methods.karcher import Karcher
from mgit.merge.methods.linear import Linear
from mgit.merge.methods.model_stock import ModelStock
from mgit.merge.methods.multislerp import MultiSlerp
from mgit.merge.methods.nearswap import NearSwap
from mgit.merge.methods.nuslerp import NuSlerp
from mgit.merge.methods.passthrough import Passthrough
from mgit.merge.methods.ram import Ram, RamPlusTl
from mgit.merge.methods.sce import Sce
from mgit.merge.methods.slerp import Slerp
from mgit.merge.methods.task_arithmetic import TaskArithmetic as TA
from mgit.merge.params import Param

if TYPE_CHECKING:
    import torch

METHODS: dict[str, MergeMethod] = {
    m.name: m
    for m in (
        Linear(),
        TA("task_arithmetic", "base + lambda * sum of weighted deltas", None, consensus=False, normalize=False),
        TA(
            "ties",
            "trim to top-density magnitudes, elect sign, disjoint mean",
            "magnitude",
            consensus=True,
            normalize=True,
        ),
        TA(
            "dare_linear",
            "random drop (keep density) + rescale, weighted sum",
            "random",
            consensus=False,
            normalize=False,
        ),
        TA("dare_ties", "random drop + rescale, then TIES sign election", "random", consensus=True, normalize=False),
        TA("breadcrumbs", "drop outliers and small deltas", "outliers", consensus=False, normalize=False),
        TA("breadcrumbs_ties", "breadcrumbs, then TIES sign election", "outliers", consensus=True, normalize=False),
        TA("della", "magnitude-ranked random drop, TIES election", "della", consensus=True, normalize=True),
        TA("della_linear", "magnitude-ranked random drop", "della", consensus=False, normalize=False),
        Slerp(),
        ModelStock(),
        NearSwap(),
        NuSlerp(),
        Karcher(),
        Sce(),
        MultiSlerp(),
        ArceeFusion(),
        Ram(),
        RamPlusTl(),
        Passthrough(),
    )
}
METHOD_PARAMS: dict[str, tuple[Param, ...]] = {name: m.params for name, m in METHODS.items()}


def method_names() -> list[str]:
    return sorted(METHODS)


def get_method(name: str) -> MergeMethod:
    try:
        return METHODS[name]
    except (KeyError, TypeError):
        raise UnknownMethodError(f"unknown merge method {name!r} (known: {', '.join(method_names())})") from None


def check_method(method: Any, names: Iterable[str], where: str = "") -> MergeMethod:
    """The method exists and takes every named parameter (the messages the method gives;
    ``where`` leads them, e.g. the config file); returns it."""
    lead = f"{where}: " if where else ""
    if not isinstance(method, str) or method not in METHODS:
        raise UnknownMethodError(f"{lead}unknown merge method {method!r} (known: {', '.join(method_names())})")
    found = METHODS[method]
    found.check_names(names, lead)
    return found


def merge_tensor(
    method: str | MergeMethod,
    base: torch.Tensor | None,
    experts: Sequence[torch.Tensor],
    params: Mapping[str, Any] | None = None,
    **options: Any,
) -> torch.Tensor:
    """Merge one output tensor with the named method.

    Args:
        method: a method's name (or the method).
        base: the base tensor, or None for methods without a base (linear, passthrough).
        experts: the other inputs, in order; expert parameters are given in the same order.
        params: mergekit-named parameters; expert parameters as a scalar or one value per expert.
        **options: :class:`~mgit.merge.methods.base.TensorCall`'s other fields, by keyword:
            ``dtype``/``out_dtype`` as mergekit's (working dtype, default the promotion of the
            inputs; cast of the result); ``generator``, needed by random methods for every expert
            they sample (density < 1) that has no injected keep-mask in ``masks`` (same shape as
            the tensors, 1 = keep); ``name``, for error messages.

    Returns:
        The merged tensor. Inputs are never modified; the result may alias an input
        (passthrough, or a single-input no-op).

    Raises:
        BadInputError: an unknown method or parameter, a value out of range, inputs the method
            does not take (count, base, shapes, dtypes, devices), a random draw without a generator.
    """
    resolved = method if isinstance(method, MergeMethod) else get_method(method)
    return resolved(base, experts, params, **options)
