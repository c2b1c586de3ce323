"""Is a merge's result another one's: bit for bit, by the largest difference, by the relative error.

Why: bench_merge and bench_scale check mgit's merge against mergekit's output bit for bit, and
bench_budget measures how far a budgeted merge lands from the exact one; all three load the tensors
in a child (torch stays out of the process whose memory timed children inherit at fork) and
compare them tensor by tensor. Here the comparison is written once, with its one record.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.runner import Runner
from harness.tools import script_child


@dataclass
class Sameness:
    """One result against a reference: how many tensors are equal bit for bit, the largest absolute
    difference, and (bench_budget) the relative error against the exact merge."""

    tensors: int
    identical: int  # of those, equal bit for bit to the other's
    max_abs: float = 0.0  # largest absolute difference, in float32
    problems: list[str] = field(default_factory=list)  # tensors missing on one side, or of another dtype or shape
    sq: float = 0.0  # Σ of the squared differences, float64, over all tensors
    rel_error: float | None = None  # ‖M − M_ref‖ / ‖M_ref − base‖, where measured
    dtypes: list[str] = field(default_factory=list)  # the result's tensor dtypes, e.g. ["torch.bfloat16"]

    @property
    def bit_identical(self) -> bool:
        return not self.problems and self.identical == self.tensors


def compare_tensors(ours: dict, theirs: Iterable[tuple[str, Any]]) -> dict:
    """In a child: the tensors ``ours`` against the (name, tensor) pairs ``theirs``, as Sameness's fields."""
    import torch

    seen, identical, max_abs, sq, problems = set(), 0, 0.0, 0.0, []
    dtypes = sorted({str(t.dtype) for t in ours.values()})
    for name, other in theirs:
        mine = ours.get(name)
        seen.add(name)
        if mine is None or mine.dtype != other.dtype or mine.shape != other.shape:
            problems.append(name)
            continue
        identical += bool(torch.equal(mine.reshape(-1).view(torch.uint8), other.reshape(-1).view(torch.uint8)))
        max_abs = max(max_abs, float((mine.float() - other.float()).abs().max()))
        sq += float((mine.double() - other.double()).square().sum())
    problems += sorted(set(ours) - seen)
    return {
        "tensors": len(ours),
        "identical": identical,
        "max_abs": max_abs,
        "problems": problems,
        "sq": sq,
        "dtypes": dtypes,
    }


def safetensors_dir(out_dir: Path) -> Iterator[tuple[str, Any]]:
    """The tensors of a directory's safetensors files, one at a time (another tool's output)."""
    from safetensors import safe_open

    for path in sorted(out_dir.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                yield name, f.get_tensor(name)


def same_main() -> None:
    """In a child (``python -c``): mgit's tensors at REV vs a safetensors directory's; prints JSON."""
    from mgit import Repository

    repo_dir, rev, out_dir = sys.argv[1:4]
    with Repository(repo_dir) as repo:
        ours = repo.state_dict(rev)
    print(json.dumps(compare_tensors(ours, safetensors_dir(Path(out_dir)))))


def last_json(output: str) -> dict:
    """The JSON document a child printed on its last line."""
    return json.loads(output.strip().splitlines()[-1])


def same_as(runner: Runner, mgit: list[str], repo: Path, rev: str, out: Path) -> Sameness:
    """Whether the merge at ``rev`` equals the tensors of the safetensors files in ``out``, bit for bit."""
    code = "from harness.sameness import same_main; same_main()"
    proc = runner.run(script_child(mgit, code, str(repo), rev, str(out)), repo)
    return Sameness(**last_json(proc.output))


def errors_main() -> None:
    """In a child (``python -c``): every result against the exact merge; prints JSON.

    argv: repository, base revision, exact revision, another tool's output directory ('' for none),
    then the revisions to compare. The denominator ‖M_full − base‖² is float64, over all tensors.
    """
    from mgit import Repository

    repo_dir, base_rev, exact_rev, out_dir, *revs = sys.argv[1:]
    out: dict[str, Any] = {}
    with Repository(repo_dir) as repo:
        base = repo.state_dict(base_rev)
        full = repo.state_dict(exact_rev)
        out["denominator"] = sum(float((t.double() - base[n].double()).square().sum()) for n, t in full.items())
        del base
        for rev in revs:
            out[rev] = compare_tensors(repo.state_dict(rev), full.items())
    if out_dir:
        out["mergekit"] = compare_tensors(full, safetensors_dir(Path(out_dir)))
    print(json.dumps(out))


def relative_errors(
    runner: Runner, mgit: list[str], repo: Path, exact: str, revs: Sequence[str], out: Path | None
) -> tuple[float, dict[str, Sameness]]:
    """(‖M_full − base‖, per revision and "mergekit" (``out``'s tensors): the comparison with the exact
    merge at ``exact``, its relative error set)."""
    code = "from harness.sameness import errors_main; errors_main()"
    proc = runner.run(script_child(mgit, code, str(repo), "main", exact, str(out or ""), *revs), repo)
    return read_errors(last_json(proc.output))


def read_errors(doc: dict) -> tuple[float, dict[str, Sameness]]:
    """errors_main's JSON as (‖M_full − base‖, each result's Sameness with its relative error)."""
    denom = math.sqrt(doc.pop("denominator"))
    found = {}
    for key, fields in doc.items():
        same = found[key] = Sameness(**fields)
        same.rel_error = math.sqrt(same.sq) / denom if denom else math.nan
    return denom, found


def same_cell(c: Sameness | None, max_abs: bool = False) -> str:
    """A table cell: bit-identical (with the largest difference when ``max_abs``), or a bold NO and how far."""
    if c is None:
        return ""
    if c.bit_identical:
        detail = f" tensors, max abs diff {c.max_abs:g}" if max_abs else ""
        return f"bit-identical ({c.tensors}/{c.tensors}{detail})"
    missing = f", {len(c.problems)} missing/mismatched" if c.problems else ""
    return f"**NO**: {c.identical}/{c.tensors} bit-identical, max abs diff {c.max_abs:.3g}{missing}"
