"""The accepted range of every merge parameter, checked before anything is read (and before torch
is imported: this module and its callers stay torch-free).

The ranges are what the parameters mean in mergekit 0.1.5 (docs/merging.md, "Parameter ranges";
each one's reason: "Notes from the code"); each method declares its own ``Param`` values.
"""

from __future__ import annotations

import enum
import math
import numbers
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from mgit.errors import BadInputError


class _Required:
    """Sentinel default of a parameter that must be given."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()


class Scope(enum.Enum):
    """Along which axis a parameter takes values."""

    GLOBAL = "global"  # one value for the output tensor
    EXPERT = "expert"  # one value per expert (a scalar is broadcast)


@dataclass(frozen=True)
class Param:
    """One parameter a method accepts: its mergekit name, type, scope and default."""

    name: str
    kind: type  # float, int or bool
    scope: Scope
    default: Any = REQUIRED
    nullable: bool = False  # None is a valid value (mergekit's Optional[float])
    doc: str = ""
    range: Range | None = None  # this method's own range, where the name means something else than RANGES'

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def coerce(self, value: Any, method: str) -> Any:
        """Validate one value (numbers for floats, bools or 0/1 for bools), as mergekit's pydantic would."""
        if value is None and self.nullable:
            return None
        if self.kind is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, numbers.Integral) and value in (0, 1):
                return bool(value)
            raise BadInputError(f"{method}: parameter {self.name} must be true or false, got {value!r}")
        if self.kind is int:
            if _is_whole(value):
                return int(value)
            raise BadInputError(f"{method}: parameter {self.name} must be a whole number, got {value!r}")
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            return float(value)
        raise BadInputError(f"{method}: parameter {self.name} must be a number, got {value!r}")


def _is_whole(value: Any) -> bool:
    """An integer, or a float without a fraction (pydantic's lax int: ``--param max_iter=5`` is 5.0)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    return isinstance(value, numbers.Integral) or (math.isfinite(value) and float(value).is_integer())


@dataclass(frozen=True)
class Range:
    """A closed or half-open interval of finite numbers (None: unbounded on that side)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    meaning: str = ""

    def holds(self, x: float) -> bool:
        if not math.isfinite(x):
            return False
        if self.low is not None and (x <= self.low if self.low_open else x < self.low):
            return False
        return self.high is None or (x < self.high if self.high_open else x <= self.high)

    def __str__(self) -> str:
        if self.low is None and self.high is None:
            return "any finite number"
        low = "-inf" if self.low is None else f"{self.low:g}"
        high = "inf" if self.high is None else f"{self.high:g}"
        opening = "(" if self.low_open or self.low is None else "["
        closing = ")" if self.high_open or self.high is None else "]"
        return f"{opening}{low}, {high}{closing}"


FINITE = Range()
RANGES: dict[str, Range] = {
    "weight": FINITE,
    "lambda": FINITE,
    "scale": FINITE,
    "density": Range(0.0, 1.0, low_open=True, meaning="fraction of each delta kept"),
    "gamma": Range(0.0, 1.0, high_open=True, meaning="fraction of largest magnitudes dropped"),
    "epsilon": Range(0.0, 1.0, high_open=True, meaning="spread of keep probabilities; density ± epsilon in (0, 1)"),
    "t": Range(0.0, 1.0, meaning="0 = the base, 1 = the expert"),
    "max_iter": FINITE,  # karcher: a whole number (WHOLE); <= 0 takes no step, as mergekit's range()
    "tol": FINITE,  # karcher
    "select_topk": FINITE,  # sce: <= 0 keeps nothing, >= 1 everything (mergekit takes any float)
    # multislerp: 0 would divide a zero delta (an expert equal to the base) by 0
    "eps": Range(0.0, None, low_open=True, meaning="added to norms before dividing by them"),
    "r": FINITE,  # ramplus_tl
    # ramplus_tl: below 0 the clamp's bounds cross (mergekit then scales by 1 + r·alpha everywhere)
    "alpha": Range(0.0, None, meaning="the most the shared/unique ratio counts"),
}
FLAGS = frozenset(
    {"normalize", "rescale", "int8_mask", "filter_wise", "nuslerp_row_wise", "nuslerp_flatten", "normalize_weights"}
)
NULLABLE = frozenset({"scale"})
WHOLE = frozenset({"max_iter"})  # whole numbers (mergekit's int parameters)


def _values(value: Any) -> Iterable[Any]:
    """The scalars in a parameter value: one, or one per expert."""
    if isinstance(value, list | tuple):
        return value
    return (value,)


def check_value(name: str, value: Any, where: str, own: Range | None = None) -> None:
    """One parameter's value (a scalar or one per expert): its type and range (``own``, the
    method's, else the name's in RANGES), or one line naming the parameter, the value and what is
    accepted. Unknown names pass (the method refuses them with its list of accepted ones)."""
    for v in _values(value):
        if name in FLAGS:
            if not (isinstance(v, bool) or (isinstance(v, numbers.Integral) and v in (0, 1))):
                raise BadInputError(f"{where}: {name} = {v!r} must be true or false")
            continue
        rng = own or RANGES.get(name)
        if rng is None or (v is None and name in NULLABLE):
            continue
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise BadInputError(f"{where}: {name} = {v!r} must be a number; accepted: {rng}")
        if name in WHOLE and not _is_whole(v):
            raise BadInputError(f"{where}: {name} = {v!r} must be a whole number")
        if not rng.holds(float(v)):
            meaning = f" ({rng.meaning})" if rng.meaning else ""
            raise BadInputError(f"{where}: {name} = {v!r} is out of range; accepted: {rng}{meaning}")


def check_della(density: Any, epsilon: Any, where: str) -> None:
    """mergekit's DELLA condition: where density < 1, density ± epsilon lies inside (0, 1)."""
    densities, epsilons = list(_values(density)), list(_values(epsilon))
    if len(densities) == 1:
        densities *= len(epsilons)
    if len(epsilons) == 1:
        epsilons *= len(densities)
    for d, e in zip(densities, epsilons, strict=False):
        if not all(isinstance(x, numbers.Real) and not isinstance(x, bool) for x in (d, e)):
            continue  # type errors are check_value's
        if d < 1 and not (0 < d - e and d + e < 1):
            raise BadInputError(
                f"{where}: epsilon = {e!r} with density = {d!r} is out of range; "
                "accepted: density - epsilon > 0 and density + epsilon < 1"
            )


def check_params(params: Mapping[str, Any], where: str, own: Mapping[str, Range] | None = None) -> None:
    """Every given parameter in range (``own``: the method's ranges that replace RANGES';
    conditions joining several are the method's: :meth:`mgit.merge.methods.base.MergeMethod.check_params`)."""
    for name, value in params.items():
        check_value(name, value, where, (own or {}).get(name))
