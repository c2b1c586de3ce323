"""The sketch record (schema ``mgit.sketch/1``): what a sketch commit holds and how it was made,
as canonical JSON at its reserved root entry (docs/format.md). Plain data: computing is
mgit.merge.sketch.make's, storing mgit.ops.sketch's, choosing mgit.merge.budget's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mgit.errors import BadInputError

SKETCH_SCHEMA = "mgit.sketch/1"
KINDS = ("lowrank", "dare")
EXACT_BYTES = 8192  # tensors this small are cheaper read exactly than sketched
FLOATS = ("F32", "F16", "BF16", "F64")


def sketchable(shape: tuple[int, ...] | list[int], dtype: str, nbytes: int) -> bool:
    """Whether a changed tensor is sketched: 2-D, floating and above :data:`EXACT_BYTES`. The
    others (1-D norms and biases, small tensors) a sketch leaves to their exact chunks."""
    return len(shape) == 2 and dtype in FLOATS and nbytes > EXACT_BYTES


def parse_share(text: str | float) -> float:
    """``"10%"``, ``"0.1"``, ``0.1`` → 0.1: a share of the expert's stored bytes, above 0, at most 1."""
    raw = str(text).strip()
    try:
        share = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise BadInputError(f"sketch share {raw!r} is not a share like 10% or 0.1") from None
    if not 0 < share <= 1:
        raise BadInputError(f"sketch share {raw!r} must be above 0% and at most 100%")
    return share


@dataclass(frozen=True)
class TensorSketch:
    """One tensor's sketch, nested in levels a budget reads by prefix: a low-rank sketch's rank
    blocks (``rank``: its rank; ``sigma``: the singular values) or a DARE sketch's tiers
    (``rates``: each tier's keep rate, lowest first; ``rank``: how many; ``stream``: the seed
    its positions are drawn from). ``energy`` is ‖Δ‖² of the exact delta; ``residuals`` holds,
    at each level's end, ‖Δ − Δ̂‖ measured with the stored values (what an affine merge's error
    bound adds up); a DARE sketch's ``kept``, the energy of Δ along Δ̂ there."""

    file: str
    name: str
    shape: tuple[int, int]
    rank: int
    sigma: list[float]
    energy: float  # ‖Δ‖²
    residuals: list[float]  # ‖Δ − Δ̂‖ at each level's end
    stored_bytes: int  # of every level
    rates: list[float] = field(default_factory=list)  # DARE only
    kept: list[float] = field(default_factory=list)  # DARE only
    stream: int = 0  # DARE only

    @property
    def kind(self) -> str:
        return "dare" if self.rates else "lowrank"

    def ends(self) -> list[int]:
        """The levels a budget can read by prefix: rank-block ends, or tier counts 1 … T."""
        from mgit.merge.sketch.lowrank import block_ends

        return list(range(1, self.rank + 1)) if self.rates else block_ends(self.rank)

    def captured(self, level: int) -> float:
        """What a budget values the prefix ending at ``level`` at, in units of ‖Δ‖². Low-rank:
        ‖Δ‖² − ‖Δ − Δ̂_r‖² at a block end, as measured with the stored factors (Σ_{i≤r} σ_i² for
        an exact SVD), else Σ_{i≤r} σ_i². DARE: :func:`mgit.merge.sketch.dare.value`."""
        if self.rates:
            from mgit.merge.sketch.dare import value

            return value(self.energy, self.kept[level - 1])
        ends = self.ends()
        if level in ends:
            return max(0.0, self.energy - self.residuals[ends.index(level)] ** 2)
        return sum(s * s for s in self.sigma[:level])

    def norm_bound(self, level: int) -> float:
        """At least ‖Δ̂‖ of the prefix ending at ``level``: what the reconstructed expert's
        rounding is proportional to (low-rank: ‖Δ̂‖ itself; DARE: ‖Δ‖ + ‖Δ − Δ̂‖)."""
        if self.rates:
            return self.energy**0.5 + self.residual(level)
        return self.captured(level) ** 0.5

    def residual(self, level: int) -> float:
        """‖Δ − Δ̂‖ of the prefix ending at ``level`` (a level's end)."""
        return self.residuals[self.ends().index(level)]

    def to_json(self) -> dict[str, Any]:
        share = min(1.0, self.captured(self.rank) / self.energy) if self.energy > 0 else 1.0
        head = {"file": self.file, "name": self.name, "shape": list(self.shape)}
        if self.rates:
            return head | {
                "tiers": self.rank,
                "rates": self.rates,
                "stream": self.stream,
                "energy": self.energy,
                "kept": self.kept,
                "residuals": self.residuals,
                "captured_share": share,
                "stored_bytes": self.stored_bytes,
            }
        return head | {
            "rank": self.rank,
            "sigma": self.sigma,
            "energy": self.energy,
            "residuals": self.residuals,
            "captured_share": share,
            "stored_bytes": self.stored_bytes,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> TensorSketch:
        m, n = doc["shape"]
        common = (doc["file"], doc["name"], (int(m), int(n)))
        if "rates" in doc:
            return cls(
                *common,
                int(doc["tiers"]),
                [],
                float(doc["energy"]),
                [float(r) for r in doc["residuals"]],
                int(doc["stored_bytes"]),
                [float(p) for p in doc["rates"]],
                [float(k) for k in doc["kept"]],
                int(doc["stream"]),
            )
        return cls(
            *common,
            int(doc["rank"]),
            [float(s) for s in doc["sigma"]],
            float(doc["energy"]),
            [float(r) for r in doc["residuals"]],
            int(doc["stored_bytes"]),
        )


@dataclass(frozen=True)
class SketchRecord:
    """A commit's sketch against ``parent``: the tensors sketched, those left to exact chunks
    (``exact``: 1-D, small, or no rank fits the share) and the parameters that made it."""

    commit: str
    parent: str
    kind: str
    share: float
    seed: int
    params: dict[str, Any]
    tensors: list[TensorSketch]
    exact: int = 0
    expert_bytes: int = 0  # stored bytes of the sketched tensors' chunks that differ from the parent
    schema: str = SKETCH_SCHEMA
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def stored_bytes(self) -> int:
        return sum(t.stored_bytes for t in self.tensors)

    @property
    def captured_share(self) -> float:
        energy = sum(t.energy for t in self.tensors)
        return sum(t.captured(t.rank) for t in self.tensors) / energy if energy > 0 else 1.0

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "commit": self.commit,
            "parent": self.parent,
            "kind": self.kind,
            "share": self.share,
            "seed": self.seed,
            "params": self.params,
            "expert_bytes": self.expert_bytes,
            "stored_bytes": self.stored_bytes,
            "exact_tensors": self.exact,
            "tensors": [t.to_json() for t in self.tensors],
        } | self.extra

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> SketchRecord:
        """The record; one of a kind this version does not know keeps no tensors (none is offered)."""
        known = {
            "schema",
            "commit",
            "parent",
            "kind",
            "share",
            "seed",
            "params",
            "expert_bytes",
            "stored_bytes",
            "exact_tensors",
        } | ({"tensors"} if doc["kind"] in KINDS else set())
        return cls(
            doc["commit"],
            doc["parent"],
            doc["kind"],
            float(doc["share"]),
            int(doc["seed"]),
            dict(doc["params"]),
            [TensorSketch.from_json(t) for t in doc["tensors"]] if doc["kind"] in KINDS else [],
            int(doc.get("exact_tensors", 0)),
            int(doc.get("expert_bytes", 0)),
            doc.get("schema", SKETCH_SCHEMA),
            {k: v for k, v in doc.items() if k not in known},
        )


def factor_name(tensor: str, block: int, factor: str) -> str:
    """The name a level's block is stored under in the sketch commit's file: a rank block of a
    factor (``a``: Aᵀ, ``b``: Bᵀ) or a DARE tier's values (``v``). Names differ from every other
    tensor's blocks: the suffix is fixed."""
    return f"{tensor}.sketch.{block}.{factor}"


def block_factors(kind: str) -> str:
    """The factors each level of a sketch of ``kind`` stores a block of."""
    return "v" if kind == "dare" else "ab"
