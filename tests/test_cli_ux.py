"""CLI ergonomics a git user expects: light commands load no heavy machinery, global options
anywhere, a pager, short ref names in reflog, `diff --stat`, and no nested repositories."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_mgit

PROBE = """
import json, sys
from mgit.cli import main
rc = main(sys.argv[1:])
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "ml_dtypes", "yaml")
               or m.startswith(("mgit.merge.", "mgit.diff.")))
print("MODULES=" + json.dumps({"rc": rc, "heavy": heavy}))
"""


def loaded_by(cwd: Path, *args: str) -> dict:
    """Run ``mgit ARGS`` in a fresh interpreter; the heavy modules it left imported."""
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args], cwd=cwd, capture_output=True, text=True, timeout=120, env=os.environ
    )
    line = next(x for x in proc.stdout.splitlines() if x.startswith("MODULES="))
    return json.loads(line.removeprefix("MODULES="))


@pytest.fixture
def work(tmp_path: Path) -> Path:
    d = tmp_path / "work"
    d.mkdir()
    run_mgit("init", cwd=d, check=True)
    run_mgit("config", "user.name", "Ada", cwd=d, check=True)
    run_mgit("config", "user.email", "ada@example.com", cwd=d, check=True)
    return d


@pytest.fixture
def committed(work: Path) -> Path:
    """A repository with one commit of a small bf16 model."""
    from conftest import llama_state_dict, write_model

    write_model(work / "model", llama_state_dict())
    run_mgit("add", "model", cwd=work, check=True)
    run_mgit("commit", "-m", "base", cwd=work, check=True)
    return work


# -- item 12: light commands import no torch, merge or diff machinery ---------------------------


@pytest.mark.parametrize(
    "args",
    [["--help"], ["status"], ["log"], ["branch"], ["tag"], ["reflog"], ["config", "user.name"], ["show", "--help"]],
)
def test_light_commands_import_no_heavy_modules(committed: Path, args: list[str]) -> None:
    got = loaded_by(committed, *args)
    assert got["rc"] == 0
    assert got["heavy"] == []


def test_init_imports_no_heavy_modules(tmp_path: Path) -> None:
    got = loaded_by(tmp_path, "init", "fresh")
    assert got["rc"] == 0 and got["heavy"] == []


def test_bad_merge_config_refused_before_torch(committed: Path) -> None:
    (committed / "bad.yaml").write_text("merge_method: [unclosed\n")
    got = loaded_by(committed, "merge", "--config", "bad.yaml")
    assert got["rc"] != 0
    assert not any(m.split(".")[0] == "torch" for m in got["heavy"]), got["heavy"]
