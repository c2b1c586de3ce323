"""Core benchmark: mgit add/commit/checkout side by side with git-lfs, DVC and ``cp -r``.

Why: mgit's claim is that storing a model is cheaper than the tools people use today
(git-lfs, DVC) in both time and space, and that materialising a revision costs about what
copying the files costs. This script checks those claims on one machine, with one input,
in one run, so the numbers can be compared and reproduced:

1. generate a llama-like bf16 model (fixed seed, sharded safetensors + index + config),
   streamed to disk tensor by tensor so memory stays small; cached between runs;
2. install the baselines in their own virtual environment (DVC from PyPI; git-lfs is the
   Debian package and is skipped, with the install command printed, when missing);
3. time storing it (mgit add + commit, git add + commit with git-lfs, dvc add), each run in
   a fresh directory holding a plain copy of the model, and measure the store;
4. time materialising the model into a working tree that lacks it (mgit checkout, git-lfs
   and DVC checkout) against ``cp -r`` of the same files, and verify with sha256 that every
   run reproduced every file byte for byte;
5. print a Markdown table and, with ``--write-docs``, replace this benchmark's section of
   docs/benchmarks.md (other sections are kept).

Targets (mgit add ≥ 1.5× faster than git-lfs, store ≤ 0.75× raw for bf16, checkout ≤ 2× cp)
are reported, never asserted. The page cache cannot be dropped here, and the machine may be
shared: every timed step runs the same way (``sync``, then a wait for an idle machine, both
untimed), every step is repeated (``--reps``, best reported, all shown), and the CPU other
processes used meanwhile is reported beside it. GB = 10^9 bytes, MB = 10^6 bytes.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
import multiprocessing
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DOCS_FILE = REPO_ROOT / "docs" / "benchmarks.md"
SECTION_TITLE = "## Core: add, commit, checkout (bench_core.py)"
DOCS_INTRO = """# Benchmarks

All numbers on this page come from the scripts in `benchmarks/`, each run side by side with
the peer tools on the same machine and the same inputs, in one run. Each section says which
script and which exact command produced it, on what machine, and when. GB = 10^9 bytes,
MB = 10^6 bytes.
"""
SEED = 1234
GEN_VERSION = 1  # bump when the generated model changes, so cached copies are rebuilt
META_FILE = ".bench-model.json"
MODEL_DIR = "model"
GB = 10**9
MB = 10**6
BLOCK_ELEMENTS = 1 << 22  # elements generated per piece (bounded memory)
SHARDS = 3  # the model is cut into at most this many safetensors files
TORCH_SPEC = "torch==2.13.0"  # any other spec pulls a multi-GB CUDA build


# -- the model ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """A llama-like architecture; the number of layers is chosen to hit the size."""

    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int = 32000

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def layer_tensors(self, i: int) -> list[tuple[str, tuple[int, ...]]]:
        h, m, kv = self.hidden, self.intermediate, self.kv_heads * self.head_dim
        p = f"model.layers.{i}."
        return [
            (p + "input_layernorm.weight", (h,)),
            (p + "self_attn.q_proj.weight", (h, h)),
            (p + "self_attn.k_proj.weight", (kv, h)),
            (p + "self_attn.v_proj.weight", (kv, h)),
            (p + "self_attn.o_proj.weight", (h, h)),
            (p + "post_attention_layernorm.weight", (h,)),
            (p + "mlp.gate_proj.weight", (m, h)),
            (p + "mlp.up_proj.weight", (m, h)),
            (p + "mlp.down_proj.weight", (h, m)),
        ]

    def embedding_bytes(self) -> int:
        return 2 * 2 * self.vocab * self.hidden  # embed_tokens + lm_head, bf16

    def layer_bytes(self) -> int:
        return 2 * sum(math.prod(s) for _, s in self.layer_tensors(0))


# Largest first; TinyLlama-1.1B's shapes lead. Smaller ones serve --quick / small sizes.
SHAPES = (
    Shape(hidden=2048, intermediate=5632, heads=32, kv_heads=4),
    Shape(hidden=1024, intermediate=2816, heads=16, kv_heads=4),
    Shape(hidden=512, intermediate=1408, heads=8, kv_heads=8),
)


@dataclass(frozen=True)
class ModelPlan:
    shape: Shape
    layers: int
    tensors: list[tuple[str, tuple[int, ...]]]

    @property
    def nbytes(self) -> int:
        return sum(2 * math.prod(s) for _, s in self.tensors)


def plan_model(size_bytes: int) -> ModelPlan:
    """Pick the largest shape whose embeddings fit in 70% of the size, then the layer count."""
    shape = next((s for s in SHAPES if s.embedding_bytes() <= 0.7 * size_bytes), SHAPES[-1])
    layers = max(1, round((size_bytes - shape.embedding_bytes()) / shape.layer_bytes()))
    tensors = [("model.embed_tokens.weight", (shape.vocab, shape.hidden))]
    for i in range(layers):
        tensors += shape.layer_tensors(i)
    tensors += [("model.norm.weight", (shape.hidden,)), ("lm_head.weight", (shape.vocab, shape.hidden))]
    return ModelPlan(shape, layers, tensors)


def split_shards(tensors: list[tuple[str, tuple[int, ...]]], shards: int) -> list[list[tuple[str, tuple[int, ...]]]]:
    """Cut the tensor list, in order, into at most ``shards`` runs of about equal bytes."""
    total = sum(2 * math.prod(s) for _, s in tensors)
    out: list[list[tuple[str, tuple[int, ...]]]] = [[]]
    done = 0
    for name, shape in tensors:
        if out[-1] and done >= total * len(out) / shards and len(out) < shards:
            out.append([])
        out[-1].append((name, shape))
        done += 2 * math.prod(shape)
    return out


def safetensors_header(tensors: list[tuple[str, tuple[int, ...]]]) -> bytes:
    """A safetensors header (JSON, space-padded to 8 bytes) for bf16 tensors stored in order."""
    doc: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in tensors:
        end = offset + 2 * math.prod(shape)
        doc[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, end]}
        offset = end
    header = json.dumps(doc, separators=(",", ":")).encode()
    return header + b" " * (-len(header) % 8)


def tensor_pieces(name: str, shape: tuple[int, ...], gen: object) -> Iterator[bytes]:
    """The tensor's bf16 bytes in pieces: ones for norms, N(0, 0.02) otherwise."""
    import torch

    numel = math.prod(shape)
    for start in range(0, numel, BLOCK_ELEMENTS):
        n = min(BLOCK_ELEMENTS, numel - start)
        if name.endswith("norm.weight"):
            block = torch.ones(n, dtype=torch.bfloat16)
        else:
            block = (torch.randn(n, generator=gen, dtype=torch.float32) * 0.02).to(torch.bfloat16)
        yield block.view(torch.int16).numpy().tobytes()


def write_model(dest: Path, plan: ModelPlan, shards: int) -> None:
    """Stream the model to ``dest`` (a directory) shard by shard, tensor by tensor."""
    import torch

    gen = torch.Generator().manual_seed(SEED)
    dest.mkdir(parents=True)
    parts = split_shards(plan.tensors, shards)
    weight_map = {}
    for k, part in enumerate(parts, 1):
        fname = f"model-{k:05d}-of-{len(parts):05d}.safetensors"
        header = safetensors_header(part)
        with open(dest / fname, "wb") as f:
            f.write(len(header).to_bytes(8, "little"))
            f.write(header)
            for name, shape in part:
                for piece in tensor_pieces(name, shape, gen):
                    f.write(piece)
                weight_map[name] = fname
    index = {"metadata": {"total_size": plan.nbytes}, "weight_map": weight_map}
    (dest / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    s = plan.shape
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": s.hidden,
        "intermediate_size": s.intermediate,
        "num_hidden_layers": plan.layers,
        "num_attention_heads": s.heads,
        "num_key_value_heads": s.kv_heads,
        "vocab_size": s.vocab,
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    (dest / "config.json").write_text(json.dumps(config, indent=2) + "\n")


def check_model(model: Path, plan: ModelPlan) -> None:
    """Read the shards back with the safetensors library: every tensor, right shape and dtype."""
    import torch
    from safetensors import safe_open

    index = json.loads((model / "model.safetensors.index.json").read_text())
    seen = {}
    for fname in sorted(set(index["weight_map"].values())):
        with safe_open(str(model / fname), framework="pt") as f:
            for name in f.keys():
                seen[name] = f.get_slice(name).get_shape()
            probe = next(n for n in f.keys() if not n.endswith("norm.weight"))
            t = f.get_tensor(probe)
            if t.dtype != torch.bfloat16 or not 0.015 < float(t.float().std()) < 0.025:
                raise RuntimeError(f"generated tensor {probe} does not look like N(0, 0.02) in bf16")
    want = {n: list(s) for n, s in plan.tensors}
    if seen != want:
        raise RuntimeError("generated shards do not hold the planned tensors")


def generate(dest: Path, plan: ModelPlan, shards: int) -> None:
    write_model(dest, plan, shards)
    check_model(dest, plan)


def sha256_files(root: Path) -> dict[str, str]:
    """Relative path → sha256 of every file under ``root``."""
    out = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while block := f.read(8 * 2**20):
                h.update(block)
        out[path.relative_to(root).as_posix()] = h.hexdigest()
    return out


def ensure_model(workdir: Path, size_gb: float, shards: int) -> tuple[Path, ModelPlan, dict[str, str]]:
    """The generated model for this size (reused when already there): path, plan, sha256s."""
    plan = plan_model(int(size_gb * GB))
    home = workdir / f"model-{plan.nbytes}"
    meta_path = home / META_FILE
    want = {"version": GEN_VERSION, "seed": SEED, "bytes": plan.nbytes, "shards": shards}
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if {k: meta.get(k) for k in want} == want and sha256_files(home / MODEL_DIR) == meta["sha256"]:
            print(f"reusing the generated model in {home / MODEL_DIR}")
            return home / MODEL_DIR, plan, meta["sha256"]
    shutil.rmtree(home, ignore_errors=True)
    print(f"generating a {plan.nbytes / GB:.2f} GB bf16 model ({plan.layers} layers, hidden {plan.shape.hidden})")
    t0 = time.perf_counter()
    # In a child process: torch stays out of this one, whose memory every timed child inherits
    # at fork (and so would inflate their peak RSS).
    child = multiprocessing.get_context("spawn").Process(target=generate, args=(home / MODEL_DIR, plan, shards))
    child.start()
    child.join()
    if child.exitcode != 0:
        raise RuntimeError(f"generating the model failed (exit {child.exitcode})")
    sums = sha256_files(home / MODEL_DIR)
    meta_path.write_text(json.dumps({**want, "sha256": sums}, indent=2) + "\n")
    print(f"  generated and checked in {time.perf_counter() - t0:.1f} s")
    return home / MODEL_DIR, plan, sums


# -- running and measuring ----------------------------------------------------------------

IDLE_BELOW = 0.15  # the machine counts as idle below this fraction of all cores busy


def cpu_busy_seconds() -> float:
    """CPU-seconds the whole machine has spent busy since boot (user, nice, system, irq, softirq)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]
    user, nice, system, _idle, _iowait, irq, softirq = map(int, fields)
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def busy_fraction(seconds: float = 0.5) -> float:
    before = cpu_busy_seconds()
    time.sleep(seconds)
    return (cpu_busy_seconds() - before) / (seconds * (os.cpu_count() or 1))


def wait_for_idle(limit: float) -> None:
    """Wait (up to ``limit`` seconds) until other work on this machine, writeback included, settles."""
    deadline = time.monotonic() + limit
    told = False
    while (busy := busy_fraction()) >= IDLE_BELOW and time.monotonic() < deadline:
        if not told:
            print(f"  waiting for the machine to go idle ({busy:.0%} of the CPUs busy)", flush=True)
            told = True


@dataclass
class Proc:
    seconds: float
    max_rss: int  # bytes, peak resident set of the child (and its waited-for children)
    background: float  # CPU-seconds other processes (and kernel threads) used meanwhile
    output: str
    parts: tuple[float, ...] = ()  # seconds of each command, when several make one measurement


@dataclass
class Runner:
    """Runs the tools' commands in a fixed environment; timed runs start from a settled machine."""

    env: dict[str, str]
    idle_wait: float

    def run(self, cmd: Sequence[str], cwd: Path, timed: bool = False) -> Proc:
        """Run a command; with ``timed``, first sync and wait for idle (both untimed)."""
        if timed:
            os.sync()
            wait_for_idle(self.idle_wait)
        with tempfile.TemporaryFile() as out:  # not in cwd, where `git add .` would pick it up
            busy0, t0 = cpu_busy_seconds(), time.perf_counter()
            proc = subprocess.Popen(list(cmd), cwd=cwd, env=self.env, stdout=out, stderr=subprocess.STDOUT)
            _, status, usage = os.wait4(proc.pid, 0)
            seconds, busy1 = time.perf_counter() - t0, cpu_busy_seconds()
            out.seek(0)
            text = out.read().decode(errors="replace")
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise RuntimeError(f"`{shlex.join(cmd)}` failed in {cwd} (exit {proc.returncode}):\n{text}")
        background = max(0.0, busy1 - busy0 - usage.ru_utime - usage.ru_stime)
        return Proc(seconds, usage.ru_maxrss * 1024, background, text)

    def steps(self, cmds: Sequence[Sequence[str]], cwd: Path) -> Proc:
        """Several timed commands as one measurement: times and background add up, RSS is the peak."""
        procs = [self.run(cmd, cwd, timed=True) for cmd in cmds]
        return Proc(
            sum(p.seconds for p in procs),
            max(p.max_rss for p in procs),
            sum(p.background for p in procs),
            "".join(p.output for p in procs),
            tuple(p.seconds for p in procs),
        )


def disk_usage(path: Path) -> int:
    """Bytes of disk used under ``path`` (like ``du -s``: allocated blocks, hard links once)."""
    seen, total = set(), 0
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            st = os.lstat(os.path.join(root, name))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


def fresh_copy(model: Path, run_dir: Path) -> Path:
    """A new directory holding a plain byte copy (no hard links) of the model."""
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    shutil.copytree(model, run_dir / MODEL_DIR, copy_function=shutil.copyfile)
    return run_dir


def tool_env(workdir: Path) -> dict[str, str]:
    """A fixed identity and no user/system git config, so runs do not depend on the host."""
    gitconfig = workdir / "gitconfig"
    gitconfig.write_text("[init]\n\tdefaultBranch = main\n")
    env = dict(os.environ)
    env.update(
        GIT_AUTHOR_NAME="bench",
        GIT_AUTHOR_EMAIL="bench@example.invalid",
        GIT_COMMITTER_NAME="bench",
        GIT_COMMITTER_EMAIL="bench@example.invalid",
        GIT_CONFIG_GLOBAL=str(gitconfig),
        GIT_CONFIG_NOSYSTEM="1",
        DVC_NO_ANALYTICS="1",
        DVC_SITE_CACHE_DIR=str(workdir / "dvc-site-cache"),
    )
    return env


# -- tools --------------------------------------------------------------------------------


@dataclass
class Tools:
    mgit: list[str]  # command prefix running the mgit under test
    git_lfs: bool
    dvc: str | None
    versions: dict[str, str] = field(default_factory=dict)


def version_of(cmd: Sequence[str]) -> str | None:
    """The first version number a command prints (None when it fails)."""
    try:
        res = subprocess.run(list(cmd), capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    found = re.search(r"\d+\.\d+(\.\d+)?", res.stdout or res.stderr)
    return found.group(0) if found else "?"


def ensure_baselines_venv(venv: Path) -> Path:
    """The baselines' virtual environment (created when missing); returns its pip constraints file.

    The constraints pin torch, should a baseline want it: any other spec pulls a CUDA build.
    """
    if not (venv / "bin" / "python").exists():
        print(f"creating {venv} for the baselines")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    constraints = venv / "constraints.txt"
    constraints.write_text(TORCH_SPEC + "\n")
    return constraints


def pip_install(venv: Path, *specs: str) -> None:
    """Install packages from PyPI into the baselines' environment (creating it when missing)."""
    constraints = ensure_baselines_venv(venv)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "-c", str(constraints), *specs], check=True)


def ensure_dvc(workdir: Path, venv: Path | None = None) -> str | None:
    """dvc in its own virtual environment (default: under the workdir; created when missing)."""
    venv = venv or workdir / ".venv-baselines"
    dvc = venv / "bin" / "dvc"
    if dvc.exists():
        return str(dvc)
    try:
        ensure_baselines_venv(venv)
        print("installing dvc from PyPI into it")
        pip_install(venv, "dvc")
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"could not install dvc ({exc}); skipping the DVC baseline")
        return None
    return str(dvc)


def mgit_command(workdir: Path, rev: str) -> tuple[list[str], str]:
    """(command prefix, label) for mgit as committed at ``rev``, or as installed for "worktree".

    A committed revision is exported into the workdir and run from there, so edits made to
    the working tree while the benchmark runs cannot change what is measured.
    """
    if rev == "worktree":
        installed = Path(sys.executable).with_name("mgit")
        return [str(installed) if installed.exists() else "mgit"], "working tree"
    sha = subprocess.run(
        ["git", "rev-parse", "--verify", f"{rev}^{{commit}}"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    dest = workdir / f"mgit-{sha[:12]}"
    if not (dest / "mgit" / "__init__.py").exists():
        archive = subprocess.run(["git", "archive", sha, "mgit"], cwd=REPO_ROOT, capture_output=True, check=True)
        tmp = dest.with_name(dest.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(tmp, filter="data")
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(tmp, dest)
    return ["env", f"PYTHONPATH={dest}", sys.executable, "-m", "mgit"], f"commit {sha[:12]}"


def find_tools(workdir: Path, mgit_rev: str, with_dvc: bool, baselines_venv: Path | None = None) -> Tools:
    """The mgit under test, git-lfs when installed, and dvc (installed into ``baselines_venv``)."""
    mgit, where = mgit_command(workdir, mgit_rev)
    tools = Tools(mgit, False, None)
    tools.versions["mgit"] = f"{version_of([*mgit, '--version']) or '?'} ({where})"
    tools.versions["git"] = version_of(["git", "--version"]) or "?"
    lfs = version_of(["git", "lfs", "version"])
    if lfs:
        tools.git_lfs = True
        tools.versions["git-lfs"] = lfs
    else:
        print("git-lfs is missing; skipping that baseline. Install it with:\n  apt-get install -y git-lfs")
    if with_dvc:
        tools.dvc = ensure_dvc(workdir, baselines_venv)
        if tools.dvc:
            tools.versions["dvc"] = version_of([tools.dvc, "--version"]) or "?"
    return tools


# -- the measurements ---------------------------------------------------------------------


@dataclass(frozen=True)
class Contender:
    """One tool: how to set up a repository, store the model in it, and materialise it again."""

    name: str
    setup: list[list[str]]  # untimed, in a fresh directory holding the model
    store: list[list[str]]  # timed together: storing the model
    store_label: str
    store_dir: str  # what holds the stored model, measured like `du -s`
    checkout: list[str]  # timed: bring back the deleted model directory
    checkout_label: str


def contenders(tools: Tools) -> list[Contender]:
    mgit = [*tools.mgit, "-q"]
    out = [
        Contender(
            "mgit",
            [[*mgit, "init"]],
            [[*mgit, "add", MODEL_DIR], [*mgit, "commit", "-m", "base"]],
            "add + commit",
            ".mgit",
            [*mgit, "checkout", "--force", "main"],
            "checkout --force main",
        )
    ]
    if tools.git_lfs:
        out.append(
            Contender(
                "git + git-lfs",
                [["git", "init", "-q"], ["git", "lfs", "install", "--local"]],
                [["git", "lfs", "track", "*.safetensors"], ["git", "add", "."], ["git", "commit", "-q", "-m", "base"]],
                "lfs track + add + commit",
                ".git",
                ["git", "checkout", "--", MODEL_DIR],
                "checkout -- model",
            )
        )
    if tools.dvc:
        dvc = tools.dvc
        out.append(
            Contender(
                "dvc",
                [[dvc, "init", "--no-scm", "-q"]],
                [[dvc, "add", "-q", MODEL_DIR]],
                "add",
                ".dvc/cache",
                [dvc, "checkout", "-q"],
                "checkout",
            )
        )
    return out


@dataclass
class Result:
    tool: str
    step: str
    best: Proc
    times: list[float]
    store_bytes: int | None = None
    identical: bool | None = None  # checkouts: every run reproduced the model byte for byte


def best_of(reps: int, prepare: Callable[[], None], measure: Callable[[], Proc]) -> tuple[Proc, list[float]]:
    """Run prepare() then measure(), ``reps`` times: (the fastest run, every run's seconds)."""
    procs = []
    for _ in range(reps):
        prepare()
        procs.append(measure())
    return min(procs, key=lambda p: p.seconds), [p.seconds for p in procs]


def bench(c: Contender, model: Path, run_dir: Path, runner: Runner, sums: dict[str, str], reps: int) -> list[Result]:
    """Store the model ``reps`` times (a fresh directory each), then check it out ``reps`` times."""

    def prepare_store() -> None:
        fresh_copy(model, run_dir)
        for cmd in c.setup:
            runner.run(cmd, run_dir)

    best, times = best_of(reps, prepare_store, lambda: runner.steps(c.store, run_dir))
    stored = Result(c.name, c.store_label, best, times, store_bytes=disk_usage(run_dir / c.store_dir))
    identical = True

    def checkout() -> Proc:
        nonlocal identical
        proc = runner.run(c.checkout, run_dir, timed=True)
        identical &= sha256_files(run_dir / MODEL_DIR) == sums
        return proc

    best, times = best_of(reps, lambda: shutil.rmtree(run_dir / MODEL_DIR), checkout)
    return [stored, Result(c.name, c.checkout_label, best, times, identical=identical)]


def bench_cp(model: Path, run_dir: Path, runner: Runner, sums: dict[str, str], reps: int) -> Result:
    """cp -r of the model directory into a new directory beside it."""
    src = fresh_copy(model, run_dir)
    identical = True

    def copy() -> Proc:
        nonlocal identical
        proc = runner.run(["cp", "-r", MODEL_DIR, "copy"], src, timed=True)
        identical &= sha256_files(src / "copy") == sums
        return proc

    best, times = best_of(reps, lambda: shutil.rmtree(src / "copy", ignore_errors=True), copy)
    return Result("cp -r", "copy the model directory", best, times, identical=identical)


# -- reporting ----------------------------------------------------------------------------


def machine() -> dict[str, str]:
    cpu = "?"
    try:
        cpu = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        pass
    ram = "?"
    try:
        kb = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))  # type: ignore[union-attr]
        ram = f"{kb * 1024 / 2**30:.1f} GiB"
    except (OSError, AttributeError):
        pass
    return {
        "cpu": f"{os.cpu_count()} cores ({cpu})",
        "ram": ram,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
    }


def filesystem(path: Path) -> str:
    res = subprocess.run(["df", "-T", str(path)], capture_output=True, text=True)
    lines = res.stdout.strip().splitlines()
    return lines[-1].split()[1] if res.returncode == 0 and len(lines) > 1 else "?"


def fmt_gb(n: int | None) -> str:
    return "" if n is None else f"{n / GB:.3f}"


def load_share(p: Proc) -> float:
    """The share of all CPUs that other processes used during a run."""
    return p.background / (p.seconds * (os.cpu_count() or 1)) if p.seconds > 0 else 0.0


def results_table(results: list[Result], raw: int) -> str:
    rows = [
        "| tool | step | wall time (s) | MB/s | store (GB) | store / raw | peak RSS (MB) | other load "
        "| byte-identical | all runs (s) | fastest run by command (s) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---|---|",
    ]
    for r in results:
        p = r.best
        cells = [
            r.tool,
            r.step,
            f"{p.seconds:.2f}",
            f"{raw / MB / p.seconds:.0f}" if p.seconds > 0 else "",
            fmt_gb(r.store_bytes),
            "" if r.store_bytes is None else f"{r.store_bytes / raw:.3f}",
            f"{p.max_rss / MB:.0f}",
            f"{load_share(p):.0%}",
            "" if r.identical is None else ("yes" if r.identical else "**NO**"),
            " / ".join(f"{t:.2f}" for t in r.times),
            " + ".join(f"{t:.2f}" for t in p.parts) if len(p.parts) > 1 else "",
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def find(results: list[Result], tool: str, stored: bool) -> Result | None:
    return next((r for r in results if r.tool == tool and (r.store_bytes is not None) == stored), None)


def targets_table(results: list[Result], raw: int) -> str:
    rows = ["| metric | value | target | met |", "|---|---:|---:|---|"]

    def row(metric: str, value: float | None, target: str, ok: bool | None) -> None:
        shown = "n/a (baseline skipped)" if value is None else f"{value:.2f}"
        met = "n/a" if ok is None else ("yes" if ok else "**no**")
        rows.append(f"| {metric} | {shown} | {target} | {met} |")

    m_add, lfs_add = find(results, "mgit", True), find(results, "git + git-lfs", True)
    speedup = lfs_add.best.seconds / m_add.best.seconds if m_add and lfs_add else None
    row("mgit add + commit speed vs git-lfs (× faster)", speedup, "≥ 1.5", None if speedup is None else speedup >= 1.5)
    ratio = m_add.store_bytes / raw if m_add and m_add.store_bytes else None
    row("mgit store / raw size", ratio, "≤ 0.75", None if ratio is None else ratio <= 0.75)
    m_co, cp = find(results, "mgit", False), find(results, "cp -r", False)
    slow = m_co.best.seconds / cp.best.seconds if m_co and cp else None
    row("mgit checkout time / cp -r time", slow, "≤ 2", None if slow is None else slow <= 2)
    return "\n".join(rows)


def spread_note(results: list[Result]) -> str:
    """How far repeated runs of one step drifted apart, and why the fastest is the one shown."""
    r = max(results, key=lambda r: max(r.times) / min(r.times))
    lo, hi = min(r.times), max(r.times)
    return (
        f"Spread: repeated runs of one step differ by up to {hi / lo:.1f}× ({r.tool} {r.step}: {lo:.2f} to "
        f"{hi:.2f} s). Every step writes about the model's size into the page cache, and how fast fresh memory "
        "is handed out can vary a lot (notably on virtual machines); the fastest run is the least disturbed "
        "one, so the ratios above compare fastest runs."
    )


def report(
    results: list[Result],
    raw: int,
    plan: ModelPlan,
    tools: Tools,
    workdir: Path,
    reps: int,
    command: str,
    rss_floor: int,
) -> str:
    """This benchmark's docs section (also printed to stdout)."""
    m = machine()
    versions = ", ".join(f"{k} {v}" for k, v in tools.versions.items())
    skipped = [name for name, ok in (("git-lfs", tools.git_lfs), ("dvc", tools.dvc)) if not ok]
    mgit_co = find(results, "mgit", False)
    identical = bool(mgit_co and mgit_co.identical)
    s = plan.shape
    lines = [
        SECTION_TITLE,
        "",
        f"Command: `{command}`  ",
        f"Date: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}  ",
        f"Machine: {m['cpu']}, {m['ram']} RAM, {m['os']}, {filesystem(workdir)} disk; Python {m['python']}  ",
        f"Versions: {versions}",
        "",
        f"Input: a generated llama-like bf16 model of {raw / GB:.3f} GB (all files of the model directory; "
        f"{plan.layers} layers, hidden {s.hidden}, intermediate {s.intermediate}, vocab {s.vocab}, "
        f"{len(plan.tensors)} tensors, weights N(0, 0.02) from seed {SEED}, norms ones), in "
        f"{len(split_shards(plan.tensors, SHARDS))} safetensors shards with `model.safetensors.index.json` and "
        "`config.json`. Each tool works in a fresh directory holding a plain copy of it.",
        "",
        results_table(results, raw),
        "",
        targets_table(results, raw),
        "",
        f"mgit checkout reproduced every file byte for byte (sha256, every run): **{'yes' if identical else 'NO'}**.",
        "",
        "How it was measured: every step is a separate process timed by wall clock, after an untimed `sync` and "
        f"a wait (up to the `--idle-wait` limit) until under {IDLE_BELOW:.0%} of the CPUs are busy. The page cache "
        "cannot be dropped, so every tool reads files written moments before (warm). Each tool stores the model "
        f"{reps} times, each time in a fresh directory, and checks it out {reps} times into its working tree after "
        "the model directory was deleted (mgit: `mgit checkout --force main`; git: `git checkout -- model`; "
        "DVC: `dvc checkout`); the table shows the fastest run, `all runs` every one, and the last column "
        "splits the fastest run into its commands (e.g. add + commit). Store size is disk usage "
        "like `du -s` of `.mgit/`, `.git/` (its `lfs/objects` hold the file contents) and `.dvc/cache`. MB/s is "
        "the model's size over the wall time. Peak RSS is the largest resident set of the timed process(es) as "
        f"the kernel reports it; it includes about {rss_floor / MB:.0f} MB inherited from the launching process "
        "at fork (what `true` reports), and the pages of memory-mapped files it touched (mgit maps its pack "
        "files), which are page cache rather than memory the process allocated. Other load is the share of all "
        "CPUs that other processes and kernel threads (writeback included) used during the fastest run. "
        "Byte-identical: sha256 of every file after "
        "every run equals the generated model's. Targets are reported, not asserted.",
    ]
    lines += ["", spread_note(results)]
    if skipped:
        lines += ["", f"Skipped baselines: {', '.join(skipped)} (not installed; see the script's output)."]
    return "\n".join(lines) + "\n"


def update_docs(section: str, path: Path = DOCS_FILE, title: str = SECTION_TITLE) -> None:
    """Create or replace the section headed ``title`` (this benchmark's); keep every other section as it is."""
    text = path.read_text() if path.exists() else DOCS_INTRO
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip() == title), None)
    if start is None:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        rest = "".join(lines[end:])
        text = "".join(lines[:start]) + section + ("\n" + rest if rest else "")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


# -- main ---------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workdir", type=Path, default=REPO_ROOT / "bench-work", help="scratch directory (git-ignored)")
    p.add_argument("--size-gb", type=float, default=1.0, help="model size in GB (10^9 bytes); default 1")
    p.add_argument("--quick", action="store_true", help="a ~0.1 GB model (overrides --size-gb)")
    p.add_argument("--reps", type=int, default=5, help="runs of every store and checkout step; the best is reported")
    p.add_argument("--idle-wait", type=float, default=120, help="most seconds to wait for an idle machine per step")
    p.add_argument(
        "--mgit-rev",
        default="HEAD",
        help="the mgit to measure: a commit of this repository (exported, so edits during the run do not count) "
        "or 'worktree' for the installed working tree; default HEAD",
    )
    p.add_argument("--no-dvc", action="store_true", help="skip the DVC baseline (and its installation)")
    p.add_argument("--keep", action="store_true", help="keep the per-tool run directories afterwards")
    p.add_argument("--write-docs", action="store_true", help="replace this benchmark's section in docs/benchmarks.md")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    command = shlex.join(["python", *sys.argv]) if argv is None else shlex.join(["python", __file__, *argv])
    workdir = args.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    tools = find_tools(workdir, args.mgit_rev, not args.no_dvc)
    model, plan, sums = ensure_model(workdir, 0.1 if args.quick else args.size_gb, SHARDS)
    raw = sum((model / name).stat().st_size for name in sums)
    runner = Runner(tool_env(workdir), args.idle_wait)
    runs = workdir / "runs"
    results: list[Result] = []
    for c in contenders(tools):
        print(f"{c.name} ...", flush=True)
        results += bench(c, model, runs / c.name.replace(" ", ""), runner, sums, args.reps)
    print("cp -r ...", flush=True)
    results.append(bench_cp(model, runs / "cp", runner, sums, args.reps))
    results.sort(key=lambda r: r.store_bytes is None)  # storing first, then materialising (stable)
    rss_floor = runner.run(["true"], workdir).max_rss
    section = report(results, raw, plan, tools, workdir, args.reps, command, rss_floor)
    print()
    print(section)
    if args.write_docs:
        update_docs(section)
        print(f"updated {DOCS_FILE.relative_to(REPO_ROOT)}")
    if not args.keep:
        shutil.rmtree(runs, ignore_errors=True)
    mgit_co = find(results, "mgit", False)
    return 0 if mgit_co and mgit_co.identical else 1


if __name__ == "__main__":
    sys.exit(main())
