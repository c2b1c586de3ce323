"""Merge methods: each computes ONE output tensor; one file per method or family, one registry.

Nothing here reads files or knows about models. The interface is ``base``, the names are listed
in ``registry`` only, and the conventions (parameters, base, dtypes, randomness, where mgit
departs from mergekit) are chosen so results equal mergekit 0.1.5's: docs/merging.md, "Notes
from the code". Names load torch only when a torch-side one is asked for.
"""

from __future__ import annotations

from typing import Any

from mgit.merge.methods.base import MergeMethod, Weights
from mgit.merge.methods.registry import METHODS, check_method, get_method, merge_tensor, method_names
from mgit.merge.params import REQUIRED, Param, Scope

_SPARSIFY = (
    "Sampling",
    "dare_drop",
    "dare_mask",
    "dare_probabilities",
    "della_mask",
    "della_probabilities",
    "della_prune",
    "rescale_l1",
    "seeded_generator",
    "trim_magnitude",
    "trim_outliers",
)

__all__ = [
    "METHODS",
    "REQUIRED",
    "MergeMethod",
    "Param",
    "Prepared",
    "Scope",
    "Weights",
    "check_method",
    "get_method",
    "merge_tensor",
    "method_names",
    *_SPARSIFY,
]


def __getattr__(name: str) -> Any:
    """The sparsifier helpers and Prepared, imported (with torch) when first asked for."""
    if name in _SPARSIFY:
        from mgit.merge import sparsify

        return getattr(sparsify, name)
    if name == "Prepared":
        from mgit.merge.methods.inputs import Prepared

        return Prepared
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
