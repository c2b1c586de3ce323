"""Sparsifying task vectors (deltas): TIES trim, Model Breadcrumbs, DARE, DELLA — as mergekit.

A sparsifier looks at one expert's whole delta and returns a ``Sparsity`` (which elements it keeps,
by what factor), applied elementwise, so the engine decides once per tensor and expert and applies
chunk by chunk. Random ones draw exactly mergekit's draws from an explicit generator
(docs/merging.md, "Notes from the code").
"""

from __future__ import annotations

import functools
import hashlib
import numbers
from dataclasses import dataclass

import numpy as np
import torch

from mgit.errors import BadInputError
from mgit.memory import give_back_freed_memory
from mgit.merge.sort_select import sorted_range

_RESCALE_EPS = 1e-7
# torch.sort's scratch beyond the values: the int64 indices and the int64 range it fills them from.
_SORT_SCRATCH_PER_ELEMENT = 16
_TRIM_BEFORE_SORTING = 64 * 2**20  # scratch at least this large: give freed heap memory back first
# Rankings of at least this many elements find their kept range with sort_select instead of
# sorting (below it torch.sort takes at most a few ms); both give the same elements.
SELECT_FROM = 1 << 14
# Peak bytes per element of ranking a bf16 delta: sorting adds torch.sort's 16 to the delta's 2 (and
# 4 where magnitudes need a float32 copy); sort_select adds at most 4 (original positions) and 1 (the mask).
SORT_BYTES_PER_ELEMENT = 22
SELECT_BYTES_PER_ELEMENT = 8


@dataclass(frozen=True)
class Sampling:
    """Where a random method gets its keep-masks: an injected mask for an expert, else the generator."""

    generator: torch.Generator | None = None
    masks: tuple[torch.Tensor | None, ...] | None = None
    where: str = "merge"  # for error messages

    def mask(self, expert: int) -> torch.Tensor | None:
        return None if self.masks is None else self.masks[expert]

    def draw(self, probabilities: torch.Tensor) -> torch.Tensor:
        """Bernoulli draws with the given keep probabilities (same dtype and shape)."""
        return torch.bernoulli(probabilities, generator=self._generator())

    def indices(self, high: int, count: int) -> torch.Tensor:
        """``count`` indices drawn uniformly from [0, high), with replacement (``torch.randint``)."""
        return torch.randint(high, (count,), generator=self._generator())

    def _generator(self) -> torch.Generator:
        if self.generator is None:
            raise BadInputError(f"{self.where}: is random and needs a seeded generator (or a mask for every expert)")
        return self.generator


def seeded_generator(seed: int, tensor_name: str | None = None, device: str | torch.device = "cpu") -> torch.Generator:
    """A generator for one tensor of a random merge.

    Without a name it is seeded with ``seed`` itself, so it draws exactly what mergekit draws after
    ``torch.manual_seed(seed)``. With a name the seed is derived from (seed, name), giving every
    tensor its own stream, so a merge is reproducible whatever order or parallelism it runs in.
    """
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise BadInputError(f"a merge seed must be a non-negative integer, got {seed!r}")
    value = int(seed)
    if tensor_name is not None:
        digest = hashlib.blake2b(f"{value}\0{tensor_name}".encode(), digest_size=8).digest()
        value = int.from_bytes(digest, "little") & (2**63 - 1)
    return torch.Generator(device=device).manual_seed(value)


@dataclass(frozen=True)
class Sparsity:
    """A sparsifier's decision for one whole delta; :meth:`apply` carries it out on any slice.

    Applied to elements ``[start, start + n)`` of the flattened delta ``d``:
    ``(d.to(dtype) * keep[start:start + n]) * ratio``, cast back to ``d``'s dtype — exactly the
    operations the sparsifiers perform on the whole delta, element by element.
    """

    keep: torch.Tensor | None = None  # flat keep-mask: bool, or an injected float mask; None = untouched
    bits: np.ndarray | None = None  # the bool mask packed 8 per byte (see packed()), instead of keep
    ratio: torch.Tensor | None = None  # 0-dim L1 rescale factor
    dtype: torch.dtype | None = None  # computed in this dtype (None: the delta's)
    zero: bool = False  # every element becomes 0

    def packed(self) -> Sparsity:
        """The same decision with a bool mask held as bits (an eighth of the memory)."""
        if self.keep is None or self.keep.dtype != torch.bool:
            return self
        bits = np.packbits(self.keep.cpu().numpy())
        return Sparsity(None, bits, self.ratio, self.dtype, self.zero)

    def _mask(self, start: int, count: int) -> torch.Tensor | None:
        if self.keep is not None:
            return self.keep[start : start + count]
        if self.bits is None:
            return None
        first, shift = divmod(start, 8)
        window = self.bits[first : (start + count + 7) // 8]
        return torch.from_numpy(np.unpackbits(window)[shift : shift + count])

    def apply(self, delta: torch.Tensor, start: int = 0) -> torch.Tensor:
        if self.zero:
            return torch.zeros_like(delta)
        mask = self._mask(start, delta.numel())
        if mask is None:
            return delta
        work = self.dtype or delta.dtype
        kept = delta.to(work) * mask.reshape(delta.shape).to(device=delta.device, dtype=work)
        if self.ratio is not None:
            kept = kept * self.ratio
        return kept.to(delta.dtype)


UNTOUCHED = Sparsity()


def _l1_ratio(delta: torch.Tensor, keep: torch.Tensor, rescale: bool) -> torch.Tensor | None:
    """mergekit's ``rescale``: sum |delta| over sum |kept| (both in the delta's dtype, the mask
    too, in the delta's shape), or None when not rescaling or either sum is below 1e-7."""
    if not rescale:
        return None
    keep = keep.reshape(delta.shape).to(delta.dtype)
    before = delta.abs().sum()
    after = (delta * keep).abs().sum()
    if before < _RESCALE_EPS or after < _RESCALE_EPS:
        return None
    return before / after


def rescale_l1(delta: torch.Tensor, keep: torch.Tensor, rescale: bool) -> torch.Tensor:
    """Apply a keep-mask; with ``rescale``, scale what is kept back to the delta's L1 norm.

    mergekit's ``rescale`` matches the L1 norm (sum of |x| before over after, both summed in the
    delta's dtype), not a factor 1/density: for DARE the two agree in expectation, but the L1 form is
    what mergekit computes, also for TIES/breadcrumbs/DELLA when ``rescale`` is set. When either sum
    is below 1e-7 the masked delta is returned unscaled.
    """
    kept = delta * keep
    ratio = _l1_ratio(delta, keep, rescale)
    return kept if ratio is None else kept * ratio


def _sampling_dtype(delta: torch.Tensor) -> torch.dtype:
    """mergekit samples in bf16 for bf16 and otherwise in float32 on CPU (torch has no fp16 bernoulli
    there; float64 is downcast too); on other devices in the delta's own dtype."""
    if delta.device.type != "cpu" or delta.dtype == torch.bfloat16:
        return delta.dtype
    return torch.float32


# dtypes whose numbers torch's CPU sort compares exactly as their float32 copies: converting them
# to float32 is exact, so std::sort sees the same comparisons and yields the same permutation.
_EXACT_IN_FLOAT32 = (torch.bfloat16, torch.float16, torch.float32)


@functools.cache
def _sorts_as_float32(dtype: torch.dtype) -> bool:
    """Whether torch orders numbers held in ``dtype`` exactly as their float32 copies, ties included.

    True when both go through the same comparison sort (torch's std::sort path), since their
    comparisons agree; a torch built with x86-simd-sort sorts float32 with another algorithm, whose
    ties fall otherwise. Checked once per process on tie-heavy probes, both directions."""
    if dtype == torch.float32:
        return True
    generator = torch.Generator().manual_seed(0)
    for n in (4099, 1 << 18):
        probe = torch.randint(0, 97, (n,), generator=generator).to(dtype)
        for descending in (True, False):
            own = torch.argsort(probe, descending=descending)
            if not torch.equal(own, torch.argsort(probe.float(), descending=descending)):
                return False
    return True


def _magnitude_order(delta: torch.Tensor, descending: bool, overwrite: bool = False) -> torch.Tensor:
    """Indices of |delta| (as float32, flattened) in sorted order, ties broken exactly as
    ``torch.argsort`` of the float32 magnitudes breaks them (mergekit's ranking).

    Memory is what decides here (TIES sorts whole embeddings): the magnitudes are sorted in the
    delta's own dtype where that gives the same order (half of float32's bytes for bf16), and with
    ``overwrite`` in the delta's own buffer. torch.sort adds int64 indices and an int64 range it
    fills them from, 16 bytes per element, which no choice here avoids."""
    flat = delta.reshape(-1)
    if delta.device.type == "cpu" and delta.dtype in _EXACT_IN_FLOAT32 and _sorts_as_float32(delta.dtype):
        values = flat.abs_() if overwrite else flat.abs()
    else:
        values = flat.abs().float()
    if delta.device.type == "cpu" and values.numel() * _SORT_SCRATCH_PER_ELEMENT >= _TRIM_BEFORE_SORTING:
        give_back_freed_memory()  # the sort's scratch then reuses it instead of adding to it
    order = torch.empty(values.shape, dtype=torch.int64, device=delta.device)
    torch.sort(values, descending=descending, out=(values, order))
    return order


# The largest magnitude bit pattern that is a number, per dtype whose magnitudes sort_select
# compares as unsigned bit patterns (non-negative floats order like their bits): above it, NaN.
_LARGEST_BITS = {torch.bfloat16: 0x7F80, torch.float16: 0x7C00}


def _comparable_magnitudes(delta: torch.Tensor, overwrite: bool) -> np.ndarray | None:
    """|delta| flattened as a numpy array that compares exactly as its float32 copy does: the bf16
    or fp16 bit patterns (with ``overwrite`` in the delta's own buffer), float32 itself, else a
    float32 copy (mergekit ranks float32 copies). None when a magnitude is NaN: torch orders
    NaNs by its own rule, so those are left to it."""
    flat = delta.reshape(-1)
    if delta.dtype in _LARGEST_BITS:
        magnitudes = flat.abs_() if overwrite else flat.abs()
        bits = magnitudes.view(torch.int16).numpy().view(np.uint16)
        return None if len(bits) and int(bits.max()) > _LARGEST_BITS[delta.dtype] else bits
    values = (flat.abs_() if overwrite and delta.dtype == torch.float32 else flat.abs().float()).numpy()
    return None if bool(np.isnan(values.max())) else values


@functools.cache
def select_reproduces_torch() -> bool:
    """Whether sort_select picks the elements torch's CPU argsort of float32 puts in a range, ties
    included: it replays libstdc++'s introsort, which a torch built with another sort (x86-simd-sort)
    does not use. Checked once per process on tie-heavy probes, both directions."""
    generator = torch.Generator().manual_seed(1)
    for n, distinct in ((4099, 7), (1 << 18, 97), (1 << 18, 3000)):
        probe = torch.randint(0, distinct, (n,), generator=generator).float()
        for descending, lo, hi in ((True, 0, n // 3), (False, n // 5, n - n // 7)):
            order = torch.argsort(probe, descending=descending)
            mask = sorted_range(probe.numpy().copy(), lo, hi, descending)
            if mask is None or not torch.equal(torch.from_numpy(mask), _mask_of(order[lo:hi], n, probe.device)):
                return False
    return True


def _ranked(
    delta: torch.Tensor, lo: int, hi: int, descending: bool, overwrite: bool, nonzero_upto: int | None = None
) -> torch.Tensor:
    """Flat bool mask of the elements ``torch.argsort(|delta| as float32)`` (mergekit's ranking)
    puts at positions [lo, hi): found by sort_select where it reproduces torch, else by sorting.
    With ``nonzero_upto``, at most that many non-zero magnitudes are all kept without ranking
    (TIES' top k holds them all then, and which zeros join them changes no bit)."""
    n = delta.numel()
    if delta.device.type == "cpu" and n >= SELECT_FROM and select_reproduces_torch():
        if n * SELECT_BYTES_PER_ELEMENT >= _TRIM_BEFORE_SORTING:
            give_back_freed_memory()  # its positions and mask then reuse that memory
        values = _comparable_magnitudes(delta, overwrite)
        if values is not None:
            if nonzero_upto is not None and np.count_nonzero(values) <= nonzero_upto:
                return torch.from_numpy(values != 0)
            mask = sorted_range(values, lo, hi, descending)
            if mask is not None:
                return torch.from_numpy(mask)
        # NaN, or introsort would have switched to heapsort (values are back in their order): sort
    if nonzero_upto is not None and int(torch.count_nonzero(delta)) <= nonzero_upto:
        return (delta != 0).reshape(-1)
    order = _magnitude_order(delta, descending, overwrite)
    return _mask_of(order[lo:hi], n, delta.device)


def _mask_of(indices: torch.Tensor, n: int, device: torch.device) -> torch.Tensor:
    keep = torch.zeros(n, dtype=torch.bool, device=device)
    keep[indices] = True
    return keep


def magnitude_sparsity(delta: torch.Tensor, density: float, rescale: bool = False, overwrite: bool = False) -> Sparsity:
    """TIES trim: keep the ``k = max(1, int(density * n))`` largest magnitudes, zero the rest.

    Ranking uses ``torch.argsort(|delta| as float32, descending=True)`` like mergekit's CPU path,
    so ties between equal magnitudes (common in bf16) are broken identically. density >= 1 leaves
    the delta untouched (no rescale); density <= 0 or an empty tensor gives zeros. When at most k
    elements are non-zero they are all kept without sorting: which zeros join them changes no bit.
    With ``overwrite`` the ranking may use the delta's buffer (a caller done with the delta saves
    a copy of it); rescaling needs the delta afterwards and keeps it.
    """
    if density >= 1:
        return UNTOUCHED
    n = delta.numel()
    if density <= 0 or n == 0:
        return Sparsity(zero=True)
    k = max(1, int(density * n))
    keep = _ranked(delta, 0, k, descending=True, overwrite=overwrite and not rescale, nonzero_upto=k)
    return Sparsity(keep, ratio=_l1_ratio(delta, keep, rescale))


def trim_magnitude(delta: torch.Tensor, density: float, rescale: bool = False) -> torch.Tensor:
    """The TIES-trimmed delta (see :func:`magnitude_sparsity`)."""
    return magnitude_sparsity(delta, density, rescale).apply(delta)


def outlier_sparsity(
    delta: torch.Tensor, density: float, gamma: float, rescale: bool = False, overwrite: bool = False
) -> Sparsity:
    """Model Breadcrumbs: drop the ``int(gamma * n)`` largest magnitudes (outliers) and the smallest,
    keeping ``int(density * n)`` values.

    As in mergekit, the outlier cut shrinks when density + gamma > 1 (the smallest
    ``max(0, n - kept - outliers)`` are dropped first, then ``kept`` values are taken upwards), and
    the ranking is ``torch.sort(|delta| as float32)`` ascending. Deterministic; density >= 1 leaves
    the delta untouched. ``overwrite`` as for :func:`magnitude_sparsity`.
    """
    if density >= 1:
        return UNTOUCHED
    n = delta.numel()
    kept = int(density * n)
    dropped_low = max(0, n - kept - int(gamma * n))
    keep = _ranked(delta, dropped_low, dropped_low + kept, descending=False, overwrite=overwrite and not rescale)
    return Sparsity(keep, ratio=_l1_ratio(delta, keep, rescale))


def trim_outliers(delta: torch.Tensor, density: float, gamma: float, rescale: bool = False) -> torch.Tensor:
    """The Breadcrumbs-trimmed delta (see :func:`outlier_sparsity`)."""
    return outlier_sparsity(delta, density, gamma, rescale).apply(delta)


def _drawn(delta: torch.Tensor, keep: torch.Tensor, rescale: bool, work: torch.dtype, rows: torch.Tensor) -> Sparsity:
    """A random method's decision from its keep-mask (drawn 0/1 values become bools)."""
    ratio = _l1_ratio(rows.to(work), keep, rescale)
    flat = keep.reshape(-1)
    if bool(((flat == 0) | (flat == 1)).all()):
        flat = flat != 0
    return Sparsity(flat, ratio=ratio, dtype=work)


def dare_probabilities(delta: torch.Tensor, density: float) -> torch.Tensor:
    """DARE's keep probabilities: ``density`` everywhere, filled in the sampling dtype, so in bf16 the
    keep probability is density rounded to bf16 (mergekit does the same)."""
    return torch.full_like(delta, density, dtype=_sampling_dtype(delta))


def dare_mask(delta: torch.Tensor, density: float, sampling: Sampling) -> torch.Tensor:
    """DARE's keep-mask: each element independently kept with probability ``density``."""
    return sampling.draw(dare_probabilities(delta, density))


def dare_sparsity(
    delta: torch.Tensor, density: float, rescale: bool, sampling: Sampling, mask: torch.Tensor | None = None
) -> Sparsity:
    """DARE: drop delta elements at random (keep probability ``density``) and optionally rescale
    (L1, see :func:`rescale_l1`). Computed in the sampling dtype and returned in the delta's dtype.
    density >= 1 leaves the delta untouched and draws nothing; density <= 0 still draws (as mergekit)."""
    if density >= 1:
        return UNTOUCHED
    work = _sampling_dtype(delta)
    keep = dare_mask(delta, density, sampling) if mask is None else mask.to(device=delta.device, dtype=work)
    return _drawn(delta, keep, rescale, work, delta)


def dare_drop(
    delta: torch.Tensor, density: float, rescale: bool, sampling: Sampling, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """The DARE-dropped delta (see :func:`dare_sparsity`)."""
    return dare_sparsity(delta, density, rescale, sampling, mask).apply(delta)


def _della_rows(delta: torch.Tensor, method: str) -> torch.Tensor:
    """DELLA ranks along dim 1; mergekit views a 1-D tensor as one row and cannot rank fewer than 2
    elements per row (it fails), so neither do we."""
    rows = delta.unsqueeze(0) if delta.dim() < 2 else delta
    if delta.dim() == 0 or rows.shape[1] < 2:
        raise BadInputError(
            f"{method}: cannot rank magnitudes of a tensor of shape {tuple(delta.shape)} "
            "(needs at least 2 elements along dimension 1; mergekit fails on it too)"
        )
    return rows


def della_probabilities(delta: torch.Tensor, density: float, epsilon: float, method: str = "della") -> torch.Tensor:
    """DELLA's MagPrune keep probabilities: rising linearly with the magnitude rank.

    Per row (dim 1; a 1-D tensor is one row) ranks r = 1..n of |delta| (``argsort`` of ``argsort``,
    ties broken by torch's argsort as in mergekit) are normalised to [0, 1] and mapped to
    p = (density - epsilon) + r_norm * 2 * epsilon, so the mean keep rate is density. Ranks are held
    in the sampling dtype, hence rounded in bf16 (as mergekit does). The result has the row shape.
    """
    rows = _della_rows(delta, method)
    ranks = torch.argsort(rows.abs(), dim=1).argsort(dim=1).to(_sampling_dtype(delta)) + 1
    lowest = ranks.min(dim=1, keepdim=True).values
    highest = ranks.max(dim=1, keepdim=True).values
    normalised = ((ranks - lowest) / (highest - lowest)).clamp(0, 1)
    return (density - epsilon) + normalised * 2 * epsilon


def della_mask(
    delta: torch.Tensor, density: float, epsilon: float, sampling: Sampling, method: str = "della"
) -> torch.Tensor:
    """DELLA's keep-mask: one Bernoulli draw per element with :func:`della_probabilities`."""
    return sampling.draw(della_probabilities(delta, density, epsilon, method))


def della_sparsity(
    delta: torch.Tensor,
    density: float,
    epsilon: float,
    rescale: bool,
    sampling: Sampling,
    mask: torch.Tensor | None = None,
    method: str = "della",
) -> Sparsity:
    """DELLA (MagPrune): drop at random, large magnitudes less likely, then optionally rescale (L1).

    density >= 1 leaves the delta untouched, density <= 0 gives zeros (no draws); otherwise
    density +/- epsilon must lie strictly inside (0, 1), as mergekit requires.
    """
    if density >= 1:
        return UNTOUCHED
    if density <= 0:
        return Sparsity(zero=True)
    if density + epsilon >= 1 or density - epsilon <= 0:
        raise BadInputError(
            f"{method}: epsilon must keep density +/- epsilon inside (0, 1); got density={density}, epsilon={epsilon}"
        )
    work = _sampling_dtype(delta)
    rows = _della_rows(delta, method)
    if mask is None:
        keep = della_mask(delta, density, epsilon, sampling, method)
    else:
        keep = mask.to(device=delta.device, dtype=work).reshape(rows.shape)
    return _drawn(delta, keep, rescale, work, rows)


def della_prune(
    delta: torch.Tensor,
    density: float,
    epsilon: float,
    rescale: bool,
    sampling: Sampling,
    mask: torch.Tensor | None = None,
    method: str = "della",
) -> torch.Tensor:
    """The DELLA-pruned delta (see :func:`della_sparsity`)."""
    return della_sparsity(delta, density, epsilon, rescale, sampling, mask, method).apply(delta)
