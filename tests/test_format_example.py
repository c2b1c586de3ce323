"""docs/format.md §17's worked example, rebuilt as its recipe says: every `git ls-tree` line and
every blob it prints must be what mgit writes today.

Why: the example is the format's reference for other implementers, and its ids hang on every
byte of the manifests and statistics. It went stale twice unnoticed (float32 sums changed the
last digits of `l2`, then the sign of a zero's `max_abs` depended on the CPU); this test makes
such a change fail here instead of leaving the spec wrong.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from mgit import Repository

FORMAT_MD = Path(__file__).resolve().parent.parent / "docs" / "format.md"
GIT = shutil.which("git")


def _example_section() -> str:
    text = FORMAT_MD.read_text()
    start = text.index("## 17. Worked example")
    return text[start : text.index("### 17.4 gc", start)]


def _quoted_commands(section: str) -> list[tuple[list[str], str]]:
    """(git arguments, expected output) of each `$ git --git-dir=.mgit ...` in the section's blocks."""
    quoted = []
    for block in re.findall(r"```\n(.*?)```", section, re.S):
        parts = re.split(r"^\$ git --git-dir=\.mgit (.*)$", block, flags=re.M)
        for args, output in zip(parts[1::2], parts[2::2], strict=True):
            quoted.append((args.split(), output.strip("\n")))
    return quoted


def _save(model: Path, embed: torch.Tensor, lm_head: torch.Tensor) -> None:
    tensors = {
        "model.embed.weight": embed,
        "a/b": torch.tensor([1.0, -2.5], dtype=torch.bfloat16),
        "lm_head.weight": lm_head,
        ".hidden": torch.tensor([1.0, float("nan")], dtype=torch.float16),
    }
    save_file(tensors, str(model / "model.safetensors"), metadata={"format": "pt"})


def _build(work: Path) -> None:
    """The three commits of §17's recipe."""
    repo = Repository.init(work)
    try:
        repo.config_set("user.name", "Ada Lovelace")
        repo.config_set("user.email", "ada@example.com")
        model = work / "model"
        model.mkdir()
        embed = torch.arange(12, dtype=torch.float32).reshape(3, 4)
        lm_head = torch.zeros(2048, 2048, dtype=torch.bfloat16)
        _save(model, embed, lm_head)
        (model / "config.json").write_text('{"hidden_size": 4}\n')
        repo.add([str(model)])
        repo.commit("base")
        noise = 0.02 * np.random.default_rng(0).standard_normal((2048, 2048))
        lm_head = torch.from_numpy(noise.astype(np.float32)).to(torch.bfloat16)
        _save(model, embed, lm_head)
        repo.add([str(model)])
        repo.commit("random")
        tweaked = lm_head.float()
        tweaked[:1024] += 0.001
        _save(model, embed + 0.5, tweaked.to(torch.bfloat16))
        repo.add([str(model)])
        repo.commit("tweak")
    finally:
        repo.close()


@pytest.mark.skipif(GIT is None, reason="the example's commands are git's")
def test_the_worked_example_of_the_format_spec_is_what_mgit_writes(tmp_path):
    quoted = _quoted_commands(_example_section())
    assert len(quoted) >= 8, "format.md §17 lost its git commands"
    work = tmp_path / "example"
    _build(work)
    for args, expected in quoted:
        got = subprocess.run(
            [str(GIT), "--git-dir=.mgit", *args], cwd=work, capture_output=True, text=True, check=True
        ).stdout
        assert got.strip("\n") == expected, f"format.md §17: `git {' '.join(args)}` prints otherwise today"
