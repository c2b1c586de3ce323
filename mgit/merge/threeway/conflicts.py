"""What a three-way merge could not decide alone, and what the user said to do about it.

A :class:`Conflict` is one place both sides changed differently: a whole file (``tensor`` and
``key`` None), one tensor of a safetensors file, or one ``__metadata__`` key of its header. A
:class:`Resolution` settles conflicts: fnmatch patterns taking our side or theirs (matched
against ``PATH`` and ``PATH:TENSOR``, so ``--theirs 'model/*'`` and ``--theirs '*q_proj*'`` both
work), and tensors a merge method computed (mgit.ops.threeway). Only conflicts are settled:
a change made on one side only is taken whatever the patterns say, as git's ``-X ours`` does.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from mgit.errors import BadInputError

Side = Literal["ours", "theirs"]
METADATA = "__metadata__"  # how a metadata key's place is named (no tensor may take the name)

# Why both sides' versions cannot both be kept (git's CONFLICT (...) words where they exist).
KINDS = {
    "content": "both sides changed it differently",
    "add/add": "both sides added it, differently",
    "modify/delete": "changed on our side, deleted on theirs",
    "delete/modify": "deleted on our side, changed on theirs",
    "type": "it is a different kind of file on each side",
    "binary": "both sides changed a binary or chunked file",
    "text": "both sides changed the same lines",
    "metadata": "both sides set this __metadata__ key differently",
    "mode": "both sides changed the file's mode differently",
    "dtype/shape": "both sides changed it, to a different dtype or shape (no method can combine them)",
    "file/directory": "a file on one side, a directory of files on the other",
    "criss-cross": "the merge bases (a criss-cross history) hold it differently and the sides do not agree",
}


@dataclass(frozen=True)
class Conflict:
    path: str
    kind: str  # a key of KINDS
    tensor: str | None = None  # a tensor of a safetensors file
    key: str | None = None  # a __metadata__ key (tensor is then METADATA)

    @property
    def where(self) -> str:
        """``PATH``, ``PATH:TENSOR`` or ``PATH:__metadata__[KEY]``."""
        if self.key is not None:
            return f"{self.path}:{METADATA}[{self.key}]"
        return self.path if self.tensor is None else f"{self.path}:{self.tensor}"

    @property
    def method_can_merge(self) -> bool:
        """A tensor both sides changed from a common base: a merge method can combine the changes
        (its dtype and shape permitting; mgit.ops.threeway checks those)."""
        return self.kind == "content" and self.tensor is not None and self.key is None

    def matches(self, pattern: str) -> bool:
        targets = [self.path, self.where] + ([f"{self.path}:{self.tensor}"] if self.tensor is not None else [])
        return any(fnmatch.fnmatchcase(t, pattern) for t in targets)

    def describe(self) -> str:
        if self.key is not None:
            return f"__metadata__ key {self.key!r} of {self.path}: {KINDS[self.kind]}"
        if self.tensor is not None:
            return f"tensor {self.tensor} of {self.path}: {KINDS[self.kind]}"
        return f"{self.path}: {KINDS[self.kind]}"


@dataclass(frozen=True)
class Resolution:
    """How conflicts are settled: by side, per pattern, or by tensors a merge method computed
    (``computed``: (path, tensor) → the merged tensor's manifest blob id)."""

    ours: tuple[str, ...] = ()
    theirs: tuple[str, ...] = ()
    computed: Mapping[tuple[str, str], str] = field(default_factory=dict)

    def side(self, conflict: Conflict) -> Side | None:
        """The side the patterns choose for ``conflict`` (None: no pattern matches it)."""
        ours = any(conflict.matches(p) for p in self.ours)
        theirs = any(conflict.matches(p) for p in self.theirs)
        if ours and theirs:
            raise BadInputError(f"{conflict.where} is matched by both --ours and --theirs patterns; choose one")
        return "ours" if ours else "theirs" if theirs else None

    def computed_for(self, conflict: Conflict) -> str | None:
        if conflict.tensor is None or conflict.key is not None:
            return None
        return self.computed.get((conflict.path, conflict.tensor))


@dataclass(frozen=True)
class Settled:
    """A conflict and how it was settled: ``by`` "ours", "theirs" or "method"."""

    conflict: Conflict
    by: str


Value = str | None  # a tree entry's key, a manifest blob id, a metadata value; None: absent
T = TypeVar("T")


def pick(base: T | None, ours: T | None, theirs: T | None) -> tuple[bool, T | None]:
    """Git's rule for one place: (True, the value) when one side alone changed it (or both the
    same way), else (False, None): a conflict."""
    if ours == theirs or base == theirs:
        return True, ours
    if base == ours:
        return True, theirs
    return False, None


def pick_over(bases: Sequence[T | None], ours: T | None, theirs: T | None) -> tuple[bool, T | None]:
    """:func:`pick` over every merge base of a criss-cross history (several best common
    ancestors): the place is decided only when each base decides it, and the same way; where
    merging over one base would give another result than over the other, it is a conflict."""
    outcomes = {pick(base, ours, theirs) for base in bases}
    return outcomes.pop() if len(outcomes) == 1 else (False, None)


def conflict_kind(bases: Sequence[Value], ours: Value, theirs: Value) -> str:
    """What kind of conflict both sides changing one place differently is."""
    if len(set(bases)) > 1:
        return "criss-cross"
    if bases[0] is None:
        return "add/add"
    if ours is None:
        return "delete/modify"
    if theirs is None:
        return "modify/delete"
    return "content"


def resolve(
    conflict: Conflict, resolution: Resolution, ours: Value, theirs: Value, settled: list[Settled]
) -> tuple[bool, Value]:
    """A conflict the resolution settles: (True, the value taken), recorded in ``settled``;
    else (False, None)."""
    computed = resolution.computed_for(conflict)
    if computed is not None:
        settled.append(Settled(conflict, "method"))
        return True, computed
    side = resolution.side(conflict)
    if side is None:
        return False, None
    settled.append(Settled(conflict, side))
    return True, ours if side == "ours" else theirs
