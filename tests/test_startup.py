"""Light commands start light (issue 39, item 6): `--help`, `status` on a clean tree, `log`,
`branch` (and `branch -v`), `tag -n` and `reflog` must not import what only reading or writing
chunks needs. The time itself is measured beside git in benchmarks/bench_core.py (no timing
here); what is pinned is the cause of the time: the modules a command imports, each a real
process as a user starts it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.models import LlamaSpec, commit_model, llama_state_dict

from mgit import Repository

# Loaded only to read or write chunks, merge or compute: never needed to list or look.
HEAVY = (
    "numpy",
    "torch",
    "ml_dtypes",
    "zstandard",
    "blake3",
    "safetensors",
    "yaml",
    "boto3",
    "mgit.store.codec",
    "mgit.store.chunkstore",
    "mgit.remote.transfer",
    "mgit.model.ingest",
    "mgit.merge",
    "rich.progress",
)

PROBE = """
import json, sys
from mgit.cli import main
rc = main(sys.argv[1:])
print(json.dumps({"rc": rc, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def _imported(cwd: Path, *args: str) -> set[str]:
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    report = json.loads(proc.stderr.strip().splitlines()[-1])
    assert report["rc"] == 0, proc.stderr
    return set(report["modules"])


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


@pytest.fixture
def committed(repo: Repository) -> Path:
    commit_model(repo, llama_state_dict(LlamaSpec(layers=1, hidden=16, intermediate=32, vocab=32), seed=0), "a")
    past = time.time() - 60  # the model helper stamps files ahead of the clock; a user's files are older
    for f in (repo.root / "model").iterdir():
        os.utime(f, (past, past))
    assert repo.status().clean  # hashes them once and vouches for their stats from now on
    repo.close()
    return repo.root


@pytest.mark.parametrize(
    "args",
    [("status",), ("log",), ("log", "--oneline"), ("branch",), ("branch", "-v"), ("tag", "-n"), ("reflog",)],
)
def test_a_light_command_loads_no_chunk_machinery(committed: Path, args: tuple[str, ...]) -> None:
    assert _heavy(_imported(committed, *args)) == []


def test_help_loads_neither_the_graph_nor_rich(tmp_path: Path) -> None:
    modules = _imported(tmp_path, "--help")
    assert _heavy(modules) == []
    assert not {m for m in modules if m.startswith(("dulwich", "rich"))}


THREADS = """
import sys, threading
from mgit import Repository

errors = []

def use(path):
    try:
        with Repository(path) as repo:
            repo.log()
            repo.status()
            repo.checkout("main")
    except Exception as exc:  # noqa: BLE001 (reported below)
        errors.append(repr(exc))

threads = [threading.Thread(target=use, args=(path,)) for path in sys.argv[1:]]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("\\n".join(errors))
sys.exit(1 if errors else 0)
"""


def test_the_first_calls_may_come_from_many_threads_at_once(committed: Path) -> None:
    """Each operation's module is imported on first use: eight threads making a fresh process's
    first calls at once must each get the whole module (importlib's LazyLoader, used before,
    handed some of them a half-made one on Python 3.11)."""
    copies = [str(shutil.copytree(committed, committed.parent / f"copy{i}", symlinks=True)) for i in range(8)]
    for _ in range(3):  # each in a fresh process: the first calls are the ones that import
        proc = subprocess.run([sys.executable, "-c", THREADS, *copies], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
