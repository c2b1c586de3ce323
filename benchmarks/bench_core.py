"""Core benchmark: mgit add/commit/checkout side by side with git-lfs, DVC and ``cp -r``.

Why: mgit's claim is that storing a model is cheaper than the tools people use today
(git-lfs, DVC) in both time and space, and that materialising a revision costs about what
copying the files costs. This script checks those claims on one machine, with one input,
in one run, so the numbers can be compared and reproduced:

1. generate a llama-like bf16 model (fixed seed, sharded safetensors + index + config),
   streamed to disk tensor by tensor so memory stays small; cached between runs;
2. install the baselines in their own virtual environment (DVC from PyPI; git-lfs is the
   Debian package and is skipped, with the install command printed, when missing);
3. in a fresh directory per tool holding a plain copy of the model, time storing it
   (mgit add + commit, git add + commit with git-lfs, dvc add) and measure the store;
4. time materialising the model into a working tree that lacks it (mgit checkout, git-lfs
   and DVC checkout) against ``cp -r`` of the same files, best of N, and verify that mgit
   reproduced every file byte for byte (sha256);
5. print a Markdown table and, with ``--write-docs``, replace this benchmark's section of
   docs/benchmarks.md (other sections are kept).

Targets (mgit add ≥ 1.5× faster than git-lfs, store ≤ 0.75× raw for bf16, checkout ≤ 2× cp)
are reported, never asserted. The page cache cannot be dropped here: every step runs the
same way (``sync`` first, untimed) and reads files that were just written, i.e. warm.
GB = 10^9 bytes, MB = 10^6 bytes.
"""

from __future__ import annotations

import argparse
import hashlib
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


@dataclass
class Proc:
    seconds: float
    max_rss: int  # bytes, peak resident set of the child (and its waited-for children)
    output: str


def run(cmd: Sequence[str], cwd: Path, env: dict[str, str], timed: bool = False) -> Proc:
    """Run a command; with ``timed``, sync first (untimed) so earlier writes do not bleed in."""
    if timed:
        os.sync()
    log = cwd / ".bench-output"
    with open(log, "wb") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(list(cmd), cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    text = log.read_text(errors="replace")
    log.unlink()
    if proc.returncode != 0:
        raise RuntimeError(f"`{shlex.join(cmd)}` failed in {cwd} (exit {proc.returncode}):\n{text}")
    return Proc(seconds, usage.ru_maxrss * 1024, text)


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
    mgit: str
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


def ensure_dvc(workdir: Path) -> str | None:
    """dvc in its own virtual environment under the workdir (created when missing)."""
    venv = workdir / ".venv-baselines"
    dvc = venv / "bin" / "dvc"
    if dvc.exists():
        return str(dvc)
    try:
        if not (venv / "bin" / "python").exists():
            print(f"creating {venv} for the baselines")
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        constraints = venv / "constraints.txt"
        constraints.write_text(TORCH_SPEC + "\n")  # should a dependency want torch, never a CUDA build
        print("installing dvc from PyPI into it")
        subprocess.run(
            [str(venv / "bin" / "pip"), "install", "-q", "-c", str(constraints), "dvc"],
            check=True,
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"could not install dvc ({exc}); skipping the DVC baseline")
        return None
    return str(dvc)


def find_tools(workdir: Path, with_dvc: bool) -> Tools:
    mgit = Path(sys.executable).with_name("mgit")
    tools = Tools(str(mgit) if mgit.exists() else (shutil.which("mgit") or "mgit"), False, None)
    tools.versions["mgit"] = version_of([tools.mgit, "--version"]) or "?"
    tools.versions["git"] = version_of(["git", "--version"]) or "?"
    lfs = version_of(["git", "lfs", "version"])
    if lfs:
        tools.git_lfs = True
        tools.versions["git-lfs"] = lfs
    else:
        print("git-lfs is missing; skipping that baseline. Install it with:\n  apt-get install -y git-lfs")
    if with_dvc:
        tools.dvc = ensure_dvc(workdir)
        if tools.dvc:
            tools.versions["dvc"] = version_of([tools.dvc, "--version"]) or "?"
    return tools


# -- the measurements ---------------------------------------------------------------------


@dataclass
class Result:
    tool: str
    step: str
    seconds: float
    detail: str = ""
    store_bytes: int | None = None
    max_rss: int | None = None


def best_of(reps: int, prepare: Callable[[], None], measure: Callable[[], Proc]) -> tuple[Proc, list[float]]:
    """Run prepare() then measure(), ``reps`` times: (the fastest run, every run's seconds)."""
    procs = []
    for _ in range(reps):
        prepare()
        procs.append(measure())
    return min(procs, key=lambda p: p.seconds), [p.seconds for p in procs]


def remove_model(run_dir: Path) -> None:
    shutil.rmtree(run_dir / MODEL_DIR)


def times_text(times: list[float]) -> str:
    return "runs " + " / ".join(f"{t:.2f}" for t in times) + " s"


def bench_mgit(
    model: Path, run_dir: Path, env: dict[str, str], tools: Tools, sums: dict[str, str], reps: int
) -> tuple[list[Result], bool]:
    """mgit init; add; commit; then checkout into a tree without the model, verified by sha256."""
    fresh_copy(model, run_dir)
    mgit = [tools.mgit, "-q"]
    run([*mgit, "init"], run_dir, env)
    add = run([*mgit, "add", MODEL_DIR], run_dir, env, timed=True)
    commit = run([*mgit, "commit", "-m", "base"], run_dir, env, timed=True)
    detail = f"add {add.seconds:.2f} s, commit {commit.seconds:.2f} s"
    store = Result("mgit", "add + commit", add.seconds + commit.seconds, detail, disk_usage(run_dir / ".mgit"))
    store.max_rss = max(add.max_rss, commit.max_rss)
    identical = True

    def checkout() -> Proc:
        nonlocal identical
        proc = run([*mgit, "checkout", "--force", "main"], run_dir, env, timed=True)
        identical &= sha256_files(run_dir / MODEL_DIR) == sums
        return proc

    best, times = best_of(reps, lambda: remove_model(run_dir), checkout)
    co = Result("mgit", "checkout --force main", best.seconds, times_text(times), None, best.max_rss)
    return [store, co], identical


def bench_git_lfs(model: Path, run_dir: Path, env: dict[str, str], reps: int) -> list[Result]:
    """git init; git lfs track '*.safetensors'; git add .; git commit; then git checkout -- model."""
    fresh_copy(model, run_dir)
    run(["git", "init", "-q"], run_dir, env)
    run(["git", "lfs", "install", "--local"], run_dir, env)
    steps = [
        ("track", ["git", "lfs", "track", "*.safetensors"]),
        ("add", ["git", "add", "."]),
        ("commit", ["git", "commit", "-q", "-m", "base"]),
    ]
    procs = [(label, run(cmd, run_dir, env, timed=True)) for label, cmd in steps]
    detail = ", ".join(f"{label} {p.seconds:.2f} s" for label, p in procs)
    total = sum(p.seconds for _, p in procs)
    store = Result("git + git-lfs", "lfs track + add + commit", total, detail, disk_usage(run_dir / ".git"))
    store.max_rss = max(p.max_rss for _, p in procs)
    best, times = best_of(
        reps,
        lambda: remove_model(run_dir),
        lambda: run(["git", "checkout", "--", MODEL_DIR], run_dir, env, timed=True),
    )
    return [store, Result("git + git-lfs", "checkout -- model", best.seconds, times_text(times), None, best.max_rss)]


def bench_dvc(model: Path, run_dir: Path, env: dict[str, str], dvc: str, reps: int) -> list[Result]:
    """dvc init --no-scm; dvc add model; then dvc checkout."""
    fresh_copy(model, run_dir)
    run([dvc, "init", "--no-scm", "-q"], run_dir, env)
    add = run([dvc, "add", "-q", MODEL_DIR], run_dir, env, timed=True)
    store = Result("dvc", "add", add.seconds, "", disk_usage(run_dir / ".dvc" / "cache"), add.max_rss)
    best, times = best_of(
        reps,
        lambda: remove_model(run_dir),
        lambda: run([dvc, "checkout", "-q"], run_dir, env, timed=True),
    )
    return [store, Result("dvc", "checkout", best.seconds, times_text(times), None, best.max_rss)]


def bench_cp(model: Path, run_dir: Path, env: dict[str, str], reps: int) -> Result:
    """cp -r of the model directory into a new directory beside it."""
    src = fresh_copy(model, run_dir)
    best, times = best_of(
        reps,
        lambda: shutil.rmtree(src / "copy", ignore_errors=True),
        lambda: run(["cp", "-r", MODEL_DIR, "copy"], src, env, timed=True),
    )
    return Result("cp -r", "cp -r model copy", best.seconds, times_text(times), None, best.max_rss)


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


def results_table(results: list[Result], raw: int) -> str:
    rows = [
        "| tool | step | wall time (s) | MB/s | store (GB) | store / raw | peak RSS (MB) | notes |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        ratio = "" if r.store_bytes is None else f"{r.store_bytes / raw:.3f}"
        rss = "" if r.max_rss is None else f"{r.max_rss / MB:.0f}"
        speed = f"{raw / MB / r.seconds:.0f}" if r.seconds > 0 else ""
        cells = [r.tool, r.step, f"{r.seconds:.2f}", speed, fmt_gb(r.store_bytes), ratio, rss, r.detail]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def find(results: list[Result], tool: str, step_prefix: str) -> Result | None:
    return next((r for r in results if r.tool == tool and r.step.startswith(step_prefix)), None)


def targets_table(results: list[Result], raw: int) -> str:
    rows = ["| metric | value | target | met |", "|---|---:|---:|---|"]

    def row(metric: str, value: float | None, target: str, ok: bool | None) -> None:
        shown = "n/a (baseline skipped)" if value is None else f"{value:.2f}"
        met = "n/a" if ok is None else ("yes" if ok else "**no**")
        rows.append(f"| {metric} | {shown} | {target} | {met} |")

    m_add, lfs_add = find(results, "mgit", "add"), find(results, "git + git-lfs", "lfs")
    speedup = lfs_add.seconds / m_add.seconds if m_add and lfs_add else None
    row("mgit add + commit speed vs git-lfs (× faster)", speedup, "≥ 1.5", None if speedup is None else speedup >= 1.5)
    ratio = m_add.store_bytes / raw if m_add and m_add.store_bytes else None
    row("mgit store / raw size", ratio, "≤ 0.75", None if ratio is None else ratio <= 0.75)
    m_co, cp = find(results, "mgit", "checkout"), find(results, "cp -r", "cp")
    slow = m_co.seconds / cp.seconds if m_co and cp else None
    row("mgit checkout time / cp -r time", slow, "≤ 2", None if slow is None else slow <= 2)
    return "\n".join(rows)


def report(
    results: list[Result],
    raw: int,
    plan: ModelPlan,
    identical: bool,
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
    s = plan.shape
    lines = [
        SECTION_TITLE,
        "",
        f"Command: `{command}`  ",
        f"Date: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}  ",
        f"Machine: {m['cpu']}, {m['ram']} RAM, {m['os']}, {filesystem(workdir)} disk; Python {m['python']}  ",
        f"Versions: {versions}",
        "",
        f"Input: a generated llama-like bf16 model of {raw / GB:.3f} GB (files in the model directory, "
        f"{plan.layers} layers, hidden {s.hidden}, intermediate {s.intermediate}, vocab {s.vocab}, "
        f"{len(plan.tensors)} tensors, weights N(0, 0.02) with seed {SEED}, norms ones), in "
        f"{len(split_shards(plan.tensors, SHARDS))} safetensors shards with `model.safetensors.index.json` and "
        "`config.json`. Each tool works in a fresh directory holding a plain copy of it.",
        "",
        results_table(results, raw),
        "",
        targets_table(results, raw),
        "",
        f"mgit checkout reproduced every file byte for byte (sha256): **{'yes' if identical else 'NO'}**.",
        "",
        "How it was measured: every step is a separate process, timed by wall clock, after an untimed `sync`; "
        "the page cache cannot be dropped, so reads hit files written moments before (warm) for every tool. "
        "Store size is disk usage like `du -s`: `.mgit/` for mgit, `.git/` for git-lfs (its `lfs/objects` hold "
        "the file contents), `.dvc/cache` for DVC. A checkout starts from a working tree whose model directory "
        f"was deleted (mgit: `mgit checkout --force main`; git: `git checkout -- model`; DVC: `dvc checkout`); "
        f"checkouts and `cp -r` are the best of {reps} runs. MB/s is the raw model size over the wall time. "
        "Peak RSS is the largest resident set of the timed process(es), as the kernel reports it at exit; it "
        f"includes about {rss_floor / MB:.0f} MB inherited from the launching process at fork (what `true` "
        "reports). Targets are reported, not asserted.",
    ]
    if skipped:
        lines += ["", f"Skipped baselines: {', '.join(skipped)} (not installed; see the script's output)."]
    return "\n".join(lines) + "\n"


def update_docs(section: str, path: Path = DOCS_FILE) -> None:
    """Create or replace this benchmark's section; keep every other section as it is."""
    text = path.read_text() if path.exists() else DOCS_INTRO
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip() == SECTION_TITLE), None)
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
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--workdir", type=Path, default=REPO_ROOT / "bench-work", help="scratch directory (git-ignored)")
    p.add_argument("--size-gb", type=float, default=1.0, help="model size in GB (10^9 bytes); default 1")
    p.add_argument("--quick", action="store_true", help="a ~0.1 GB model (overrides --size-gb)")
    p.add_argument("--reps", type=int, default=3, help="runs of each checkout / copy; the best is reported")
    p.add_argument("--no-dvc", action="store_true", help="skip the DVC baseline (and its installation)")
    p.add_argument("--keep", action="store_true", help="keep the per-tool run directories afterwards")
    p.add_argument("--write-docs", action="store_true", help=f"replace this benchmark's section in {DOCS_FILE}")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    command = shlex.join(["python", *sys.argv]) if argv is None else shlex.join(["python", __file__, *argv])
    size_gb = 0.1 if args.quick else args.size_gb
    workdir = args.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    tools = find_tools(workdir, not args.no_dvc)
    model, plan, sums = ensure_model(workdir, size_gb, SHARDS)
    raw = sum((model / name).stat().st_size for name in sums)
    env = tool_env(workdir)
    runs = workdir / "runs"
    print("mgit ...", flush=True)
    results, identical = bench_mgit(model, runs / "mgit", env, tools, sums, args.reps)
    if tools.git_lfs:
        print("git + git-lfs ...", flush=True)
        results += bench_git_lfs(model, runs / "git-lfs", env, args.reps)
    if tools.dvc:
        print("dvc ...", flush=True)
        results += bench_dvc(model, runs / "dvc", env, tools.dvc, args.reps)
    print("cp -r ...", flush=True)
    results.append(bench_cp(model, runs / "cp", env, args.reps))
    results.sort(key=lambda r: r.store_bytes is None)  # storing first, then materialising (stable)
    rss_floor = run(["true"], workdir, env).max_rss
    section = report(results, raw, plan, identical, tools, workdir, args.reps, command, rss_floor)
    print()
    print(section)
    if args.write_docs:
        update_docs(section)
        print(f"updated {DOCS_FILE.relative_to(REPO_ROOT)}")
    if not args.keep:
        shutil.rmtree(runs, ignore_errors=True)
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
