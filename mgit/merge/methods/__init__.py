"""Merge methods: each computes ONE output tensor; one file per method or family, one registry.

Every method takes the base tensor (or ``None``), the expert tensors and the parameters for one
output tensor, and returns the merged tensor. Nothing here reads files or knows about models.
The interface (what a method declares, so nothing else branches on its name) is
:mod:`~mgit.merge.methods.base`; the names are listed in :mod:`~mgit.merge.methods.registry`
only. Elementwise methods also merge slices on their own (:meth:`MergeMethod.prepare`, then
:meth:`MergeMethod.merge_slice`), which the engine uses to stream a tensor chunk by chunk; the
sparsifiers the task arithmetic family uses live in :mod:`mgit.merge.sparsify`.

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

This package's names (the registry's, and the sparsifier helpers tests and callers use) load
torch only when a torch-side name is asked for: the declarations stay torch-free.
"""

from __future__ import annotations

from typing import Any

from mgit.merge.methods.base import MergeMethod, Weights
from mgit.merge.methods.registry import METHODS, check_method, get_method, merge_tensor, method_names
from mgit.merge.params import REQUIRED, Param, Scope

_SPARSIFY = (
    "Sampling", "dare_drop", "dare_mask", "dare_probabilities", "della_mask", "della_probabilities",
    "della_prune", "rescale_l1", "seeded_generator", "trim_magnitude", "trim_outliers",
)  # fmt: skip

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
