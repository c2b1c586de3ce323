"""Low-rank sketches of one tensor's delta Δ = E − P (m×n): Δ ≈ A·Bᵀ, A = U·diag(σ), B = V,
from a seeded randomised SVD (Halko, Martinsson & Tropp: a Gaussian range finder with power
iterations, then the exact SVD of the small projection).

Fine-tunes' deltas are close to low rank, so a rank that fits a tenth of a tensor's bytes keeps
most of ‖Δ‖², and a merge with it loses little accuracy where dropping nine tenths of the chunks
loses much (docs/merging.md). The factors are kept transposed (Aᵀ: r×m, Bᵀ: r×n, rows by
descending σ), so the first r' rows of both are the rank-r' truncation; they are stored in rank
blocks ``BLOCKS`` (1, 1, 2, 4, 8, … rows) so that a budget reads any of those lower ranks by
reading a prefix of the blocks. Pure functions of tensors: storing is mgit.ops.sketch's. torch
is imported where used: a plan prices blocks without it (a merge of array kernels never loads it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

OVERSAMPLE = 8  # extra random directions of the range finder (accuracy of the last singular values)
NITER = 2  # power iterations: the singular values of fine-tune deltas decay slowly
FACTOR_DTYPE = "BF16"  # what the factors are stored in: a sketch is lossy by name anyway
FACTOR_BYTES = 2
VERSION = 1  # of the algorithm: a record names it, so a changed one is never mistaken for this


RECORD_OVERHEAD = 64  # stored bytes a chunk costs beyond its payload (record header, zstd frame): measured ≤ 48


def stored_bound(shape: tuple[int, int], rank: int) -> int:
    """At most what a rank-``rank`` sketch's blocks take stored: their raw bytes (zstd never
    grows them by more than a frame) plus a record's overhead per chunk (one per MiB or part)."""
    m, n = shape
    out, start = 0, 0
    for end in block_ends(rank):
        for width in (m, n):
            raw = FACTOR_BYTES * width * (end - start)
            out += raw + RECORD_OVERHEAD * (1 + raw // 2**20)
        start = end
    return out


def rank_for(shape: tuple[int, int], budget_bytes: int) -> int:
    """The largest rank whose stored factors surely fit in ``budget_bytes`` (:func:`stored_bound`)."""
    m, n = shape
    rank = max(0, min(m, n, budget_bytes // (FACTOR_BYTES * (m + n))))
    while rank > 0 and stored_bound(shape, rank) > budget_bytes:
        rank -= 1
    return rank


def block_ends(rank: int) -> list[int]:
    """Where the rank blocks of a rank-``rank`` sketch end: 1, 2, 4, 8, … and ``rank``. Each
    end is a rank a budget can read by prefix."""
    ends, end = [], 1
    while end < rank:
        ends.append(end)
        end *= 2
    return [*ends, rank] if rank > 0 else []


def factorize(delta: torch.Tensor, rank: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, list[float]]:
    """(Aᵀ, Bᵀ, σ) of a rank-``rank`` approximation of ``delta`` (float32, 2-D), deterministic
    for a seed: a generator of its own, so concurrent sketches never share a random state."""
    import torch

    m, n = delta.shape
    q = min(rank + OVERSAMPLE, m, n)
    gen = torch.Generator().manual_seed(seed)
    omega = torch.randn(n, q, generator=gen, dtype=torch.float32)
    basis = torch.linalg.qr(delta @ omega).Q
    for _ in range(NITER):
        basis = torch.linalg.qr(delta @ torch.linalg.qr(delta.T @ basis).Q).Q
    u_small, sigma, vh = torch.linalg.svd(basis.T @ delta, full_matrices=False)
    u = basis @ u_small[:, :rank]
    a_t = (u * sigma[:rank]).T.contiguous()
    return a_t, vh[:rank].contiguous(), [float(s) for s in sigma[:rank]]


def rows_of(a_t: torch.Tensor, b_t: torch.Tensor, row0: int, row1: int) -> torch.Tensor:
    """Rows ``row0:row1`` of the sketched delta (float32), from factors of any rank."""
    return a_t[:, row0:row1].float().T @ b_t.float()


def elements(a_t: torch.Tensor, b_t: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """Elements ``start:stop`` of the flattened sketched delta (float32): a chunk's share, from
    the rows it covers only."""
    n = b_t.shape[1]
    row0, row1 = start // n, -(-stop // n)
    return rows_of(a_t, b_t, row0, row1).reshape(-1)[start - row0 * n : stop - row0 * n]
