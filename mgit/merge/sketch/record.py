"""The sketch record (schema ``mgit.sketch/1``): what a sketch commit holds and how it was made,
as canonical JSON at its reserved root entry (docs/format.md). Plain data: computing is
mgit.ops.sketch's, choosing mgit.merge.budget's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mgit.errors import BadInputError

SKETCH_SCHEMA = "mgit.sketch/1"
KINDS = ("lowrank",)


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
    """One tensor's sketch: the singular values, ‖Δ‖² of the exact delta and, at each of its
    rank blocks' ends (:func:`mgit.merge.sketch.lowrank.block_ends`), ‖Δ − Δ̂‖ measured with
    the stored factors (what an affine merge's error bound adds up)."""

    file: str
    name: str
    shape: tuple[int, int]
    rank: int
    sigma: list[float]
    energy: float  # ‖Δ‖²
    residuals: list[float]  # ‖Δ − Δ̂_r‖ at each block end r
    stored_bytes: int  # of every block of both factors

    def captured(self, rank: int) -> float:
        """What the rank-``rank`` prefix keeps of ‖Δ‖²: ‖Δ‖² − ‖Δ − Δ̂_r‖² at a block end, as
        measured with the stored factors (Σ_{i≤r} σ_i² for an exact SVD), else Σ_{i≤r} σ_i²."""
        from mgit.merge.sketch.lowrank import block_ends

        ends = block_ends(self.rank)
        if rank in ends:
            return max(0.0, self.energy - self.residuals[ends.index(rank)] ** 2)
        return sum(s * s for s in self.sigma[:rank])

    def residual(self, rank: int) -> float:
        """‖Δ − Δ̂‖ of the prefix ending at ``rank`` (a block end)."""
        from mgit.merge.sketch.lowrank import block_ends

        return self.residuals[block_ends(self.rank).index(rank)]

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "name": self.name,
            "shape": list(self.shape),
            "rank": self.rank,
            "sigma": self.sigma,
            "energy": self.energy,
            "residuals": self.residuals,
            "captured_share": min(1.0, self.captured(self.rank) / self.energy) if self.energy > 0 else 1.0,
            "stored_bytes": self.stored_bytes,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> TensorSketch:
        m, n = doc["shape"]
        return cls(
            doc["file"], doc["name"], (int(m), int(n)), int(doc["rank"]), [float(s) for s in doc["sigma"]],
            float(doc["energy"]), [float(r) for r in doc["residuals"]], int(doc["stored_bytes"]),
        )  # fmt: skip


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
        known = {"schema", "commit", "parent", "kind", "share", "seed", "params", "expert_bytes", "stored_bytes",
                 "exact_tensors", "tensors"}  # fmt: skip
        return cls(
            doc["commit"], doc["parent"], doc["kind"], float(doc["share"]), int(doc["seed"]), dict(doc["params"]),
            [TensorSketch.from_json(t) for t in doc["tensors"]], int(doc.get("exact_tensors", 0)),
            int(doc.get("expert_bytes", 0)), doc.get("schema", SKETCH_SCHEMA),
            {k: v for k, v in doc.items() if k not in known},
        )  # fmt: skip


def factor_name(tensor: str, block: int, factor: str) -> str:
    """The name a rank block of a factor (``a``: Aᵀ, ``b``: Bᵀ) is stored under in the sketch
    commit's file (names differ from every other tensor's blocks: the suffix is fixed)."""
    return f"{tensor}.sketch.{block}.{factor}"
