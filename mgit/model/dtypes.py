"""The safetensors dtype table: names, widths, and the numpy view of each (resolved on first
use, so that parsing a header, as `status` and `log` do, loads neither numpy nor ml_dtypes).
The numbers themselves (float views, statistics) are mgit.model.stats."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class DType:
    """One safetensors dtype: its name, width in bits, and numpy view (None: no stats)."""

    name: str
    bits: int
    spec: str | None  # numpy dtype string, or "ml_dtypes.NAME" (resolved on first use)

    @property
    def numpy(self) -> np.dtype | None:
        return None if self.spec is None else _numpy_dtype(self.spec)

    @property
    def has_numbers(self) -> bool:
        """Whether its elements can be read as numbers (not sub-byte packed), asked without
        resolving the numpy dtype: for bf16 that would import ml_dtypes, which the bit-shift
        paths here never need."""
        return self.spec is not None

    @property
    def mergeable(self) -> bool:
        """A floating-point type stored whole (not F4 / F6, packed): what merges compute on.
        Asked without torch, which has these and only these as floating point."""
        return self.spec is not None and (self.name.startswith("F") or self.name == "BF16")

    @property
    def group(self) -> int:
        """Bytes per element for byte grouping (1 for sub-byte types)."""
        return max(1, self.bits // 8)


@functools.cache
def _numpy_dtype(spec: str) -> np.dtype:
    """The numpy dtype of a spec. ml_dtypes is imported here, not at module load: it costs
    ~0.5 s, which commands that only parse headers (status, log) should not pay; nor numpy."""
    import numpy as np

    if spec.startswith("ml_dtypes."):
        import ml_dtypes

        scalar: type[np.generic] = getattr(ml_dtypes, spec.removeprefix("ml_dtypes."))
        return np.dtype(scalar)
    return np.dtype(spec)


DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        DType("F64", 64, "<f8"),
        DType("F32", 32, "<f4"),
        DType("F16", 16, "<f2"),
        DType("BF16", 16, "ml_dtypes.bfloat16"),
        DType("I64", 64, "<i8"),
        DType("I32", 32, "<i4"),
        DType("I16", 16, "<i2"),
        DType("I8", 8, "i1"),
        DType("U64", 64, "<u8"),
        DType("U32", 32, "<u4"),
        DType("U16", 16, "<u2"),
        DType("U8", 8, "u1"),
        DType("BOOL", 8, "u1"),
        DType("F8_E4M3", 8, "ml_dtypes.float8_e4m3fn"),
        DType("F8_E4M3FNUZ", 8, "ml_dtypes.float8_e4m3fnuz"),
        DType("F8_E5M2", 8, "ml_dtypes.float8_e5m2"),
        DType("F8_E5M2FNUZ", 8, "ml_dtypes.float8_e5m2fnuz"),
        DType("F8_E8M0", 8, "ml_dtypes.float8_e8m0fnu"),
        DType("C64", 64, "<c8"),
        # Sub-byte types are packed; we chunk and store them but keep no statistics.
        DType("F4", 4, None),
        DType("F6_E2M3", 6, None),
        DType("F6_E3M2", 6, None),
    )
}


def lookup(name: str) -> DType | None:
    return DTYPES.get(name)
