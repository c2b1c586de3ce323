"""Byte budgets as users write them: ``2GB`` (10^9), ``500MiB`` (2^20), ``123B`` bytes, or
``10%`` of what the unbudgeted operation would read. One parser for merge, checkout and
clone, so all read ``--budget`` the same way. A bare number is refused: ``--budget 10``
could mean 10 bytes or 10%, and read as bytes it silently reads nothing (a Python ``int``
is unambiguous and means bytes)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from mgit.errors import BadInputError

_UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-z]*)\s*", re.IGNORECASE)


FORMS = "a size like 500MB / 2GiB (or 4096B) or a share like 10%"


@dataclass(frozen=True)
class Budget:
    """A cap in bytes, or a share (0..1] of the full need, resolved once that is known."""

    nbytes: int | None = None
    share: float | None = None

    def resolve(self, full: int) -> int:
        """Bytes allowed when the unbudgeted operation would read ``full`` bytes."""
        if self.nbytes is not None:
            return self.nbytes
        assert self.share is not None
        return int(full * self.share)

    def __str__(self) -> str:
        return f"{self.share * 100:g}%" if self.share is not None else f"{self.nbytes} bytes"


def parse_budget(text: str | int | Budget) -> Budget:
    """``"2GB"``, ``"1.5GiB"``, ``"10%"``, ``"4096B"``, ``4096`` → Budget; a clear error otherwise."""
    if isinstance(text, Budget):
        return text
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise BadInputError(f"budget {text} is negative")
        return Budget(nbytes=text)
    raw = str(text).strip()
    if raw.endswith("%"):
        try:
            pct = float(raw[:-1])
        except ValueError:
            raise BadInputError(f"budget {raw!r} is not a percentage like 10%") from None
        if not 0 <= pct <= 100:
            raise BadInputError(f"budget {raw!r} must be between 0% and 100%")
        return Budget(share=pct / 100)
    m = _SIZE.fullmatch(raw)
    if m is not None and not m.group(2):
        raise BadInputError(f"budget {raw!r} needs a unit or %: {FORMS}")
    if m is None or m.group(2).lower() not in _UNITS:
        raise BadInputError(f"budget {raw!r} is not {FORMS}")
    return Budget(nbytes=int(float(m.group(1)) * _UNITS[m.group(2).lower()]))
