"""Low-rank sketches of one tensor's delta Δ ≈ A·Bᵀ, stored in rank blocks so that a budget reads any
lower rank by reading a prefix of the blocks.

Fine-tunes' deltas are close to low rank. The factorization is LAPACK's through numpy (no torch):
an exact or a seeded randomized SVD. Pure functions of arrays: storing is mgit.ops.sketch's.
Details: docs/merging.md, "Notes from the code".
"""

from __future__ import annotations

import numpy as np

OVERSAMPLE = 8  # extra random directions of the range finder (accuracy of the last singular values)
NITER = 2  # power iterations: the singular values of fine-tune deltas decay slowly
EXACT_FROM = 0.25  # the exact SVD when rank + OVERSAMPLE reaches this share of min(m, n)
FACTOR_DTYPE = "BF16"  # what the factors are stored in: a sketch is lossy by name anyway
FACTOR_BYTES = 2
VERSION = 1  # of the algorithm: a record names it, so a changed one is never mistaken for this
RECORD_OVERHEAD = 64  # stored bytes a chunk costs beyond its payload (record header, zstd frame): measured ≤ 48

Array = np.ndarray


def block_ends(rank: int) -> list[int]:
    """Where the rank blocks of a rank-``rank`` sketch end: 1, 2, 4, 8, … and ``rank``. Each
    end is a rank a budget can read by prefix."""
    ends, end = [], 1
    while end < rank:
        ends.append(end)
        end *= 2
    return [*ends, rank] if rank > 0 else []


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


def factorize(delta: Array, rank: int, seed: int) -> tuple[Array, Array, list[float]]:
    """(Aᵀ, Bᵀ, σ) of an approximation of ``delta`` (float32, 2-D) of rank at most ``rank`` (less
    where σ vanishes), float32, deterministic for a seed (a generator of its own: concurrent
    sketches share no state)."""
    m, n = delta.shape
    q = min(rank + OVERSAMPLE, m, n)
    if q >= EXACT_FROM * min(m, n):
        return _from_gram(delta, rank)
    else:
        gen = np.random.Generator(np.random.PCG64(seed))
        basis = np.linalg.qr(delta @ gen.standard_normal((n, q), dtype=np.float32))[0]
        for _ in range(NITER):
            basis = np.linalg.qr(delta @ np.linalg.qr(delta.T @ basis)[0])[0]
        u_small, sigma, vh = np.linalg.svd(basis.T @ delta, full_matrices=False)
        u = basis @ u_small
    r = int(np.count_nonzero(_significant(sigma[:rank])))  # σ sorted: the significant ones lead
    a_t = np.ascontiguousarray((u[:, :r] * sigma[:r]).T, dtype=np.float32)
    return a_t, np.ascontiguousarray(vh[:r], dtype=np.float32), [float(s) for s in sigma[:r]]


def _significant(sigma: Array) -> Array:
    """Which singular values (largest first) carry a direction: above 1e-7 of σ₁, so an all-zero
    delta has none and no sketch is stored for it."""
    return sigma > (sigma[0] if len(sigma) else 0.0) * 1e-7


def _from_gram(delta: Array, rank: int) -> tuple[Array, Array, list[float]]:
    """The top ``rank`` singular triplets from the eigendecomposition of the smaller Gram matrix
    (ΔΔᵀ or ΔᵀΔ): ~8x faster than LAPACK's SVD of the whole delta at these shapes, and as exact
    for what a sketch keeps (the σ_i kept agree with the SVD's far below bf16's rounding).
    Directions whose σ is 0 (to 1e-7 of σ₁) are dropped: the rank may come out lower."""
    wide = delta.shape[0] <= delta.shape[1]
    small = delta if wide else delta.T  # k×l with k ≤ l
    # the product in float32 (BLAS sgemm, 7x faster), its eigendecomposition in float64: the
    # singular values kept then agree with float64's to ~1e-4 relative, far below bf16's 4e-3
    w, q = np.linalg.eigh((small @ small.T).astype(np.float64))
    top = np.argsort(w)[::-1][:rank]
    sigma = np.sqrt(np.clip(w[top], 0.0, None))
    keep = _significant(sigma)
    sigma, left = sigma[keep], q[:, top[keep]]
    right = (left.T.astype(np.float32) @ small) / sigma[:, None].astype(np.float32)  # the other side's, as rows
    # Δ = U·diag(σ)·Vᵀ: on a wide delta ``left`` is U, on a tall one it is V
    a_t = (left * sigma).T if wide else right * sigma[:, None]
    b_t = right if wide else left.T
    return (
        np.ascontiguousarray(a_t, dtype=np.float32),
        np.ascontiguousarray(b_t, dtype=np.float32),
        [float(x) for x in sigma],
    )


FAST_RESIDUAL = 1e-2  # the Gram identity in float32 products stands where ‖Δ − Δ̂‖² ≥ this share of ‖Δ‖²


def residuals(delta: Array, a_t: Array, b_t: Array, ends: list[int]) -> list[float]:
    """‖Δ − A_r·B_rᵀ‖ at each rank r of ``ends``. First from one product, ‖Δ‖² − 2·Σ_{i<r}
    a_iᵀΔb_i + Σ_{i,j<r} (a_iᵀa_j)(b_iᵀb_j): the products in float32 (BLAS sgemm), every sum in
    float64; their rounding, ~1e-6 of ‖Δ‖², is far below a residual of at least
    :data:`FAST_RESIDUAL` of it. A smaller residual would drown in that cancellation, so then
    each is measured on the residual itself, updated block by block (4x slower at MiniLM's
    embedding: it streams the whole tensor per block)."""
    d = np.asarray(delta, dtype=np.float32)
    a, b = np.asarray(a_t, dtype=np.float32), np.asarray(b_t, dtype=np.float32)
    energy = float(np.einsum("ij,ij->", d, d, dtype=np.float64))
    moved = b @ d.T  # row i: (Δ·b_i)ᵀ, laid out as a's rows
    cross = np.einsum("ij,ij->i", a, moved, dtype=np.float64)  # a_iᵀ Δ b_i
    gram = (a @ a.T).astype(np.float64) * (b @ b.T).astype(np.float64)
    out = []
    for r in ends:
        left = energy - 2 * float(cross[:r].sum()) + float(gram[:r, :r].sum())
        out.append(max(0.0, left) ** 0.5)
    if not out or out[-1] ** 2 >= FAST_RESIDUAL * energy:
        return out
    left_t, start, out = np.array(d, order="C"), 0, []
    for r in ends:
        if r > start:
            left_t -= a[start:r].T @ b[start:r]
        out.append(float(np.einsum("ij,ij->", left_t, left_t, dtype=np.float64)) ** 0.5)
        start = r
    return out


def rows_of(a_t: Array, b_t: Array, row0: int, row1: int) -> Array:
    """Rows ``row0:row1`` of the sketched delta (float32), from factors of any rank."""
    return np.asarray(a_t[:, row0:row1], dtype=np.float32).T @ np.asarray(b_t, dtype=np.float32)


def elements(a_t: Array, b_t: Array, start: int, stop: int) -> Array:
    """Elements ``start:stop`` of the flattened sketched delta (float32): a chunk's share, from
    the rows it covers only."""
    n = b_t.shape[1]
    row0, row1 = start // n, -(-stop // n)
    return rows_of(a_t, b_t, row0, row1).reshape(-1)[start - row0 * n : stop - row0 * n]
