"""The memory policy as a merge lives it (mgit/memory.py): a library process that opens a
repository, makes a pool and merges leaves glibc's allocator alone (only the `mgit` command, or an
explicit opt-in, tunes it), and a merge's peak memory follows its chunks, not the model's size."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.models import LlamaSpec, commit_model, frozen_finetune, llama_state_dict

from mgit import Repository

WATCH_ALLOCATOR = r"""
import ctypes, json, sys

calls = []
real_cdll = ctypes.CDLL


class Recorded:
    def __init__(self, name, fn):
        self.__dict__.update(name=name, fn=fn)

    def __setattr__(self, key, value):  # argtypes, restype: the real function's
        setattr(self.fn, key, value)

    def __call__(self, *args):
        calls.append(self.name)
        return self.fn(*args)


class Watched:
    def __init__(self, lib):
        self.lib = lib

    def __getattr__(self, name):
        fn = getattr(self.lib, name)
        return Recorded(name, fn) if name.startswith("malloc") or name == "mallopt" else fn


ctypes.CDLL = lambda name, *a, **k: Watched(real_cdll(name, *a, **k)) if name is None else real_cdll(name, *a, **k)

import mgit
from mgit.parallel import make_pool

repo = mgit.Repository(sys.argv[1])
make_pool().shutdown()
repo.merge(["math", "code"], "task_arithmetic", weight=[0.5, 0.5], branch="ta", checkout=False)
repo.merge(["math", "code"], "ties", weight=[0.5, 0.5], density=0.5, branch="ties", checkout=False)
library = list(calls)
from mgit.cli import main

main(["-C", sys.argv[1], "-q", "status"])
print(json.dumps({"library": library, "command": calls[len(library):]}))
"""


def test_a_library_process_leaves_the_allocator_alone(experts):
    """Import, open, pool, merges (one that ranks whole tensors and drops its buffers): no mallopt,
    no malloc_trim. The same process running the `mgit` command's entry point does tune it."""
    proc = subprocess.run(
        [sys.executable, "-c", WATCH_ALLOCATOR, str(experts.root)], capture_output=True, text=True, check=True
    )
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["library"] == []
    assert seen["command"] == ["mallopt", "mallopt"]


PEAK = r"""
import json, resource, sys
import torch  # loaded before: the merges' own growth is measured, not torch's
from mgit.cli import main

def merge(root, branch):
    assert main(["-C", root, "-q", "merge", "math", "code", "--method=task_arithmetic", "--weights=0.5,0.5",
                 "-b", branch, "--no-checkout"]) == 0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

small = merge(sys.argv[1], "m")
large = merge(sys.argv[2], "m")
print(json.dumps({"small": small, "large": large}))
"""


def _experts(root: Path, layers: int) -> int:
    """A repository at ``root``: a bf16 base of ``layers`` layers on main, fine-tunes of it on
    math and code; returns the model's bytes."""
    repo = Repository.init(root)
    spec = LlamaSpec(layers=layers, hidden=128, intermediate=352, vocab=256)
    base = llama_state_dict(spec, seed=3)
    commit_model(repo, base, "base")
    for k, name in enumerate(("math", "code")):
        repo.checkout("main")
        repo.checkout(create_branch=name)
        commit_model(repo, frozen_finetune(base, set(), seed=30 + k), name)
    repo.checkout("main")
    repo.close()
    return sum(t.numel() * t.element_size() for t in base.values())


@pytest.mark.slow
def test_a_merges_peak_memory_follows_its_chunks_not_the_models_size(tmp_path):
    """The same merge of a 1-layer and then a 16-layer model (same tensor shapes), in one `mgit`
    process: the second's peak RSS (ru_maxrss) passes the first's by less than half its inputs
    (base and two experts of 16x the layers; ~1x one model measured: the output pack's pages), since
    a merge holds a few chunks per worker and each thread's scratch is capped."""
    _experts(tmp_path / "small", 1)
    model = _experts(tmp_path / "large", 16)
    proc = subprocess.run(
        [sys.executable, "-c", PEAK, str(tmp_path / "small"), str(tmp_path / "large")],
        capture_output=True,
        text=True,
        check=True,
    )
    peaks = json.loads(proc.stdout.strip().splitlines()[-1])
    assert peaks["large"] - peaks["small"] < 3 * model / 2, (peaks, model)
