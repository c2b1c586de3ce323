"""What a bench_scale run holds on disk at its peak, and what of it is already there.

Why: at the size users merge (a 2.2 GB base, 16 experts, a dozen merge results) a run needs tens
of GB; it must say how much before it starts and stop, writing nothing, when the disk is short.
The need is estimated from shares of the model's raw size measured on smaller runs, less the
generated inputs already cached from an earlier run.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from harness.models import GB, ModelPlan, model_home
from harness.runner import MODEL_DIR, disk_usage

# What the disk must hold, as shares of the model's raw size (measured at 0.25-0.6 GB by bench_merge,
# bench_budget and a --quick run: the base stores at 0.68 of it, an expert committed on it at 0.16, a
# merge's result, stored as deltas against the base's chunks and carrying the base's where it keeps
# them, at about 0.2).
BASE_STORE_SHARE = 0.7
EXPERT_STORE_SHARE = 0.2
OUTPUT_STORE_SHARE = 0.4
DISK_MARGIN = 1.1  # and 10% for what these shares miss (pack files being rewritten, logs, the index)
INPUT_PARTS = ("base model", "dense fine-tune", "experts")  # the generated inputs, kept between runs


def disk_need(raw: int, ks: Sequence[int], parts: Sequence[str], mergekit: bool, outputs: int) -> dict[str, int]:
    """Bytes the run holds at its peak, by what, for a model of ``raw`` bytes, experts up to max(ks),
    ``outputs`` distinct merge results and the parts run: the generated inputs (kept, cached), then
    the larger of the storage part (one tool at a time, each run directory deleted after it) and the
    merge part (which follows it)."""
    need = {INPUT_PARTS[0]: raw}
    if "store" in parts:
        need[INPUT_PARTS[1]] = raw
    if "merge" in parts:
        need[INPUT_PARTS[2]] = max(ks) * raw
    # storage: the copy in a tool's run directory and its store of both versions (git-lfs, DVC: whole files)
    storage = 3 * raw if "store" in parts else 0
    merging = 0
    if "merge" in parts:
        # two repositories (for the merges checked out and those with --no-checkout) sharing one store of the
        # base and the experts (the copy hard-links the packs), each with its working tree; each merge's result
        # stored in one of them
        inputs = BASE_STORE_SHARE + max(ks) * EXPERT_STORE_SHARE
        shares = inputs + 2 + outputs * OUTPUT_STORE_SHARE
        merging = round(raw * shares) + (raw if mergekit else 0)  # and mergekit's output
    if merging >= storage and merging:
        need["merges (mgit repository, working tree" + (", mergekit's output)" if mergekit else ")")] = merging
    elif storage:
        need["storage runs (one tool at a time)"] = storage
    return need


def disk_total(need: dict[str, int], cached: int) -> int:
    """What must be free: the parts, plus a margin, less the inputs already on the disk (cached; those
    beyond what this run uses, e.g. 16 experts cached for a run of 8, free nothing)."""
    inputs = sum(n for part, n in need.items() if part in INPUT_PARTS)
    return max(0, round(sum(need.values()) * DISK_MARGIN) - min(cached, inputs))


def cached_inputs(workdir: Path, plan: ModelPlan, parts: Sequence[str]) -> int:
    """Bytes of the generated inputs already cached in ``workdir`` (a rerun does not write them again)."""
    home = model_home(workdir, plan, sized=False)
    dirs = [home]
    if "merge" in parts:
        dirs.append(workdir / f"experts-{plan.nbytes}")
    if "store" in parts and (home / MODEL_DIR).is_dir():
        files = sum(f.stat().st_size for f in (home / MODEL_DIR).rglob("*") if f.is_file())
        dirs.append(workdir / f"variants-{files}" / "dense")  # as variants.variants_root names it
    return sum(disk_usage(d) for d in dirs if d.is_dir())


def describe_need(need: dict[str, int], cached: int, free: int) -> str:
    parts = ", ".join(f"{name} {n / GB:.1f}" for name, n in need.items())
    return (
        f"disk: this run needs about {disk_total(need, cached) / GB:.1f} GB ({parts} GB, + {DISK_MARGIN - 1:.0%}; "
        f"{cached / GB:.1f} GB of inputs already cached); {free / GB:.1f} GB free"
    )
