"""Merge benchmark: `mgit merge` side by side with `mergekit-yaml`, same inputs, same outputs.

Why: mgit claims that a merge of K fine-tunes of one base costs what the fine-tunes changed,
not K + 1 whole models: the base's chunks are read once, an expert's chunks equal to the
base's are never read, tensors stream one name at a time, and the result is the same,
bit for bit, as mergekit's. mergekit (`mergekit-yaml`, the tool people use) reads every
expert in full. This script checks speed, memory and equality on one machine, in one run:

1. generate a llama-like bf16 base model (bench_core's generator, fixed seed, cached) and K
   experts from it, as fine-tunes touch models: a third of the tensors frozen (byte for
   byte the base's), every other tensor moved by Gaussian noise whose scale, relative to
   the tensor's std, is drawn log-uniformly per tensor over 1e-4 … 1e-1 (cached);
2. install mergekit from PyPI into its own virtual environment (created when missing);
3. commit the base on `main` and each expert on a branch `expert-N` of one fresh mgit
   repository (untimed);
4. for task_arithmetic and ties (density 0.5), weights 1/K, K = 2, 4, 8: time
   `mergekit-yaml` on the model directories and `mgit merge` on the branches, each a
   separate process (wall time, peak RSS and the peak of its anonymous part), after an
   untimed wait for other benchmarks and an idle machine; count the bytes each must read;
5. load mergekit's output and mgit's merged tensors (`Repository.state_dict`) and compare
   them tensor by tensor: bit-identical, and the largest absolute difference;
6. print Markdown tables and, with ``--write-docs``, replace this benchmark's section of
   docs/benchmarks.md (other sections are kept).

Targets (mgit ≥ 2× faster than mergekit at K = 8, peak RSS ≤ half of mergekit's) are
reported, never asserted. The page cache cannot be dropped: both tools read warm files.
GB = 10^9 bytes, MB = 10^6 bytes.
"""

from __future__ import annotations

import argparse
import fcntl
import importlib.metadata
import json
import math
import multiprocessing
import os
import random
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from bench_core import (  # benchmarks/ is on sys.path when this runs as a script
    GB,
    IDLE_BELOW,
    MB,
    MODEL_DIR,
    REPO_ROOT,
    SEED,
    SHARDS,
    ModelPlan,
    Proc,
    Runner,
    best_of,
    busy_fraction,
    ensure_model,
    filesystem,
    load_share,
    machine,
    mgit_command,
    pip_install,
    safetensors_header,
    sha256_files,
    split_shards,
    tool_env,
    update_docs,
    version_of,
)

if TYPE_CHECKING:
    from mgit import Repository

SECTION_TITLE = "## Merge (bench_merge.py)"
BENCH_DIR = Path(__file__).resolve().parent
EXPERT_VERSION = 1  # bump when the experts change, so cached copies are rebuilt
EXPERT_SEED = SEED + 100  # expert k uses EXPERT_SEED + k
FROZEN_SHARE = 1 / 3  # share of the tensors an expert leaves byte for byte as the base's
SCALE_DECADES = (-4.0, -1.0)  # log10 range of per-tensor noise scales, relative to the tensor's std
METHODS: dict[str, dict[str, float]] = {"task_arithmetic": {}, "ties": {"density": 0.5}}
KS, QUICK_KS = (2, 4, 8), (2, 4)
DEFAULT_SIZE_GB, QUICK_SIZE_GB = 0.65, 0.1
OTHER_BENCHMARKS = re.compile(r"bench_(core|storage|diff|budget)\.py")
MERGEKIT_FLAGS = ("--no-cuda", "--no-lazy-unpickle", "--no-copy-tokenizer", "--quiet")


# -- the experts --------------------------------------------------------------------------


def expert_recipe(plan: ModelPlan, k: int) -> dict[str, float | None]:
    """Tensor name → noise scale relative to its std, or None for a frozen tensor (expert ``k``)."""
    rng = random.Random(EXPERT_SEED + k)
    names = [name for name, _ in plan.tensors]
    frozen = set(rng.sample(names, round(len(names) * FROZEN_SHARE)))
    return {n: None if n in frozen else 10 ** rng.uniform(*SCALE_DECADES) for n in names}


def write_expert(base: Path, dest: Path, plan: ModelPlan, k: int) -> None:
    """Stream expert ``k`` to ``dest``: the base's layout and files, tensors moved as its recipe says."""
    import torch
    from safetensors import safe_open

    recipe = expert_recipe(plan, k)
    gen = torch.Generator().manual_seed(EXPERT_SEED + k)
    index = json.loads((base / "model.safetensors.index.json").read_text())
    dest.mkdir(parents=True)
    for part in split_shards(plan.tensors, SHARDS):
        fname = index["weight_map"][part[0][0]]
        header = safetensors_header(part)
        with safe_open(str(base / fname), framework="pt") as src, open(dest / fname, "wb") as f:
            f.write(len(header).to_bytes(8, "little"))
            f.write(header)
            for name, _ in part:
                t = src.get_tensor(name)
                scale = recipe[name]
                if scale is not None:
                    x = t.float()
                    ref = float(x.std()) or float(x.square().mean().sqrt())  # norms (all ones) have no std
                    t = (x + torch.randn(x.shape, generator=gen) * (scale * ref)).to(torch.bfloat16)
                f.write(t.view(torch.int16).numpy().tobytes())
    for name in ("model.safetensors.index.json", "config.json"):
        shutil.copyfile(base / name, dest / name)


def write_experts(base: Path, dests: list[Path], plan: ModelPlan) -> None:
    for k, dest in enumerate(dests, 1):
        write_expert(base, dest, plan, k)


def ensure_experts(workdir: Path, base: Path, plan: ModelPlan, sums: dict[str, str], count: int) -> list[Path]:
    """The experts' model directories (reused when cached for this base and recipe)."""
    home = workdir / f"experts-{plan.nbytes}"
    meta_path = home / "meta.json"
    want = {"version": EXPERT_VERSION, "seed": EXPERT_SEED, "frozen": FROZEN_SHARE, "scales": list(SCALE_DECADES)}
    want["base"] = sums
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    if {k: meta.get(k) for k in want} != want:
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True)
        meta = {**want, "sha256": {}}
    dests = [home / f"expert-{k}" for k in range(1, count + 1)]
    todo = [d for d in dests if d.name not in meta["sha256"] or sha256_files(d) != meta["sha256"][d.name]]
    if todo:
        print(f"generating {len(todo)} expert(s) in {home}", flush=True)
        t0 = time.perf_counter()
        for d in todo:
            shutil.rmtree(d, ignore_errors=True)
        # In a child process: torch stays out of this one, whose memory every timed child inherits.
        child = multiprocessing.get_context("spawn").Process(target=write_experts, args=(base, todo, plan))
        child.start()
        child.join()
        if child.exitcode != 0:
            raise RuntimeError(f"generating the experts failed (exit {child.exitcode})")
        for d in todo:
            meta["sha256"][d.name] = sha256_files(d)
        meta_path.write_text(json.dumps(meta, indent=2) + "\n")
        print(f"  generated in {time.perf_counter() - t0:.1f} s", flush=True)
    else:
        print(f"reusing the generated experts in {home}")
    return dests


def frozen_byte_share(plan: ModelPlan, k: int) -> float:
    """The share of the model's bytes expert ``k`` leaves as the base's."""
    sizes = {name: 2 * math.prod(shape) for name, shape in plan.tensors}
    return sum(sizes[n] for n, s in expert_recipe(plan, k).items() if s is None) / plan.nbytes


# -- the tools ----------------------------------------------------------------------------


def ensure_mergekit(venv: Path) -> Path:
    """`mergekit-yaml` from PyPI in its own virtual environment (created when missing)."""
    exe = venv / "bin" / "mergekit-yaml"
    if not exe.exists():
        print(f"installing mergekit from PyPI into {venv}", flush=True)
        pip_install(venv, "mergekit")
    return exe


def package_version(python: Path | str, name: str) -> str:
    code = f"import importlib.metadata as m; print(m.version({name!r}))"
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def mgit_pythonpath(mgit: list[str]) -> str:
    """The PYTHONPATH under which the measured mgit imports ('' for the installed working tree)."""
    return next((a.split("=", 1)[1] for a in mgit if a.startswith("PYTHONPATH=")), "")


def other_benchmarks(pattern: re.Pattern[str] = OTHER_BENCHMARKS) -> list[str]:
    """Command lines of this repository's other benchmarks running now (they would disturb timings)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if int(proc.name) != os.getpid() and pattern.search(cmdline):
            found.append(cmdline.strip())
    return found


def wait_for_other_benchmarks(limit: float, poll: float, pattern: re.Pattern[str] = OTHER_BENCHMARKS) -> float:
    """Wait (polling) until no other benchmark runs; returns the seconds waited.

    Another benchmark that leaves the machine idle for a whole poll is waiting itself (bench_storage
    waits for every other bench_*.py, this one included): waiting for it would deadlock, so go on.
    """
    t0 = time.monotonic()
    told = False
    while (running := other_benchmarks(pattern)) and time.monotonic() - t0 < limit:
        if busy_fraction(poll) < IDLE_BELOW:
            print(f"  {running[0][:80]} is idle (waiting for this one?); going on", flush=True)
            break
        if not told:
            print(f"  waiting for another benchmark to finish: {running[0][:100]}", flush=True)
            told = True
    return time.monotonic() - t0


def children(parent: int) -> set[int]:
    """The process ids of ``parent``'s children."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == parent:
            found.add(int(stat.parent.name))
    return found


class RssSampler:
    """Samples the running timed command's anonymous and file-backed resident memory (peaks, bytes).

    The kernel's peak RSS (ru_maxrss) adds both; file-backed pages are memory-mapped files the
    process touched (page cache), anonymous ones what it allocated.
    """

    def __init__(self, interval: float = 0.1) -> None:
        self.interval = interval
        self.peaks = {"RssAnon": 0, "RssFile": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        # Children from before the timed command (e.g. multiprocessing's resource tracker) are not it.
        me, pid = os.getpid(), None
        earlier = children(me)
        while not self._stop.wait(self.interval):
            pid = pid or min(children(me) - earlier, default=None)
            if pid is None:
                continue
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                pid = None
                continue
            for key, kb in re.findall(r"^(RssAnon|RssFile):\s+(\d+)", status, re.M):
                self.peaks[key] = max(self.peaks[key], int(kb) * 1024)


@dataclass
class SampledProc(Proc):
    peaks: dict[str, int] = field(default_factory=dict)  # RssSampler's peaks (bytes)


@dataclass
class PoliteRunner(Runner):
    """bench_core's Runner; a timed run first waits until no other benchmark runs, and is sampled."""

    other_wait: float = 3600
    poll: float = 30
    waited: float = 0.0  # seconds spent waiting for other benchmarks
    others: re.Pattern[str] = OTHER_BENCHMARKS  # the benchmarks to wait for

    def run(self, cmd: Sequence[str], cwd: Path, timed: bool = False) -> Proc:
        if not timed:
            return super().run(cmd, cwd)
        self.waited += wait_for_other_benchmarks(self.other_wait, self.poll, self.others)
        with RssSampler() as sampler:
            proc = super().run(cmd, cwd, timed)
        return SampledProc(**vars(proc), peaks=sampler.peaks)


# -- the merges ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    method: str
    k: int

    @property
    def weight(self) -> float:
        return 1 / self.k

    @property
    def params(self) -> dict[str, float]:
        return {"weight": self.weight, **METHODS[self.method]}

    @property
    def label(self) -> str:
        return f"{self.method}-{self.k}"


def mergekit_config(case: Case, base: Path, experts: Sequence[Path]) -> str:
    """mergekit's YAML (JSON is YAML) for the case: base, K experts with their parameters, bf16."""
    doc = {
        "merge_method": case.method,
        "base_model": str(base),
        "models": [{"model": str(e), "parameters": case.params} for e in experts[: case.k]],
        "dtype": "bfloat16",
    }
    return json.dumps(doc, indent=2) + "\n"


def mergekit_cmd(exe: Path, config: Path, out: Path) -> list[str]:
    return [str(exe), str(config), str(out), *MERGEKIT_FLAGS]


def mgit_merge_cmd(mgit: list[str], case: Case, branch: str) -> list[str]:
    flags = [f"--weights={case.weight!r}", *(f"--{k}={v!r}" for k, v in METHODS[case.method].items())]
    experts = [f"expert-{i}" for i in range(1, case.k + 1)]
    return [*mgit, "-q", "merge", f"--method={case.method}", *flags, "--dtype=BF16", "--base=main", "-b", branch,
            "-m", f"bench {branch}", *experts]  # fmt: skip


def build_repo(runner: Runner, mgit: list[str], repo: Path, base: Path, experts: Sequence[Path]) -> None:
    """A fresh mgit repository: the base on `main`, expert N on branch `expert-N` (untimed)."""
    shutil.rmtree(repo, ignore_errors=True)
    repo.mkdir(parents=True)
    m = [*mgit, "-q"]
    runner.run([*m, "init"], repo)
    for branch, src in [("main", base), *((f"expert-{i}", e) for i, e in enumerate(experts, 1))]:
        if branch != "main":
            runner.run([*m, "checkout", "-b", branch, "main"], repo)
        shutil.rmtree(repo / MODEL_DIR, ignore_errors=True)
        shutil.copytree(src, repo / MODEL_DIR, copy_function=shutil.copyfile)
        runner.run([*m, "add", MODEL_DIR], repo)
        runner.run([*m, "commit", "-m", branch], repo)
    runner.run([*m, "checkout", "main"], repo)


def compare_main() -> None:
    """In a child (``python -c``): mgit's merged tensors at REV vs mergekit's output directory; prints JSON."""
    import torch
    from safetensors import safe_open

    from mgit import Repository

    repo_dir, rev, out_dir = sys.argv[1:4]
    with Repository(repo_dir) as repo:
        ours = repo.state_dict(rev)
        own, deltas = expert_chunks(repo, rev)
    seen, identical, max_abs, problems = set(), 0, 0.0, []
    for path in sorted(Path(out_dir).glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                theirs, mine = f.get_tensor(name), ours.get(name)
                seen.add(name)
                if mine is None or mine.dtype != theirs.dtype or mine.shape != theirs.shape:
                    problems.append(name)
                    continue
                identical += bool(torch.equal(mine.view(torch.int16), theirs.view(torch.int16)))
                max_abs = max(max_abs, float((mine.float() - theirs.float()).abs().max()))
    problems += sorted(set(ours) - seen)
    doc = {"tensors": len(ours), "identical": identical, "max_abs": max_abs, "problems": problems}
    print(json.dumps(doc | {"expert_own_bytes": own, "expert_delta_chunks": deltas}))


def expert_chunks(repo: Repository, rev: str) -> tuple[int, int]:
    """(stored bytes of the expert chunks the merge at ``rev`` read, without their delta bases; how many
    of them are stored as deltas): what the record's measured bytes would be if delta bases already in
    memory (the base's chunks) were not decoded again."""
    record = repo.merge_record(rev)
    assert record is not None, f"{rev} is not a merge"
    experts = [e["commit"] for e in record["experts"]]
    plan, _ = repo.merge_plan(experts, record["method"], record["base"], **record["parameters"])
    own = deltas = 0
    for tp in plan.tensors:
        for m, indexes in zip(tp.experts, tp.reads, strict=True):
            for i in indexes:
                loc = repo.store.locate(m.chunks[i].id)
                own += loc.length
                deltas += loc.base is not None
    return own, deltas


@dataclass
class Comparison:
    tensors: int
    identical: int  # tensors equal bit for bit
    max_abs: float
    problems: list[str]  # tensors missing on one side or of another dtype/shape
    expert_own_bytes: int  # stored bytes of the expert chunks read, without their delta bases
    expert_delta_chunks: int  # of those chunks, how many are XOR deltas (against the base's chunk)

    @property
    def bit_identical(self) -> bool:
        return not self.problems and self.identical == self.tensors


def compare(runner: Runner, mgit: list[str], repo: Path, rev: str, out: Path) -> Comparison:
    code = "from bench_merge import compare_main; compare_main()"
    env_path = os.pathsep.join(p for p in (mgit_pythonpath(mgit), str(BENCH_DIR)) if p)
    proc = runner.run(["env", f"PYTHONPATH={env_path}", sys.executable, "-c", code, str(repo), rev, str(out)], repo)
    return Comparison(**json.loads(proc.output.strip().splitlines()[-1]))


@dataclass
class Outcome:
    case: Case
    mergekit: Proc
    mergekit_times: list[float]
    mergekit_bytes: int  # the safetensors files it must read: base + K experts
    mgit: Proc
    mgit_times: list[float]
    mgit_bytes: dict[str, int]  # the merge record's measured bytes
    same: Comparison

    @property
    def mgit_read(self) -> int:
        return self.mgit_bytes["base_measured"] + self.mgit_bytes["experts_measured"]

    @property
    def speedup(self) -> float:
        return self.mergekit.seconds / self.mgit.seconds

    @property
    def rss_ratio(self) -> float:
        return self.mgit.max_rss / self.mergekit.max_rss


@dataclass
class Setup:
    runner: PoliteRunner
    mgit: list[str]
    mergekit: Path
    repo: Path
    base: Path
    experts: list[Path]
    scratch: Path
    reps: int


def safetensors_bytes(dirs: Sequence[Path]) -> int:
    return sum(p.stat().st_size for d in dirs for p in d.glob("*.safetensors"))


def run_mergekit(s: Setup, case: Case) -> tuple[Proc, list[float], Path]:
    config = s.scratch / f"{case.label}.yml"
    config.write_text(mergekit_config(case, s.base, s.experts))
    out = s.scratch / f"mergekit-{case.label}"
    cmd = mergekit_cmd(s.mergekit, config, out)
    best, times = best_of(
        s.reps, lambda: shutil.rmtree(out, ignore_errors=True), lambda: s.runner.run(cmd, s.scratch, timed=True)
    )
    return best, times, out


def run_mgit(s: Setup, case: Case) -> tuple[Proc, list[float], str]:
    branches = iter(f"merge-{case.label}-{i}" for i in range(1, s.reps + 1))
    branch = ""

    def prepare() -> None:
        nonlocal branch
        branch = next(branches)
        s.runner.run([*s.mgit, "-q", "checkout", "main"], s.repo)  # every merge starts from the base's tree

    best, times = best_of(
        s.reps, prepare, lambda: s.runner.run(mgit_merge_cmd(s.mgit, case, branch), s.repo, timed=True)
    )
    return best, times, branch


def bench_case(s: Setup, case: Case) -> Outcome:
    print(f"{case.method}, K = {case.k}: mergekit ...", flush=True)
    mk, mk_times, out = run_mergekit(s, case)
    print(f"  {mk.seconds:.1f} s, {fmt_rss(mk)} MB; mgit ...", flush=True)
    mg, mg_times, branch = run_mgit(s, case)
    print(f"  {mg.seconds:.1f} s, {fmt_rss(mg)} MB; comparing the outputs ...", flush=True)
    shown = s.runner.run([*s.mgit, "show", "--json", branch], s.repo)
    record = json.loads(shown.output[shown.output.index("{") :])["plan"]
    same = compare(s.runner, s.mgit, s.repo, branch, out)
    print(f"  bit-identical tensors {same.identical}/{same.tensors}, max |Δ| {same.max_abs:g}", flush=True)
    shutil.rmtree(out, ignore_errors=True)
    read = safetensors_bytes([s.base, *s.experts[: case.k]])
    return Outcome(case, mk, mk_times, read, mg, mg_times, record["bytes"], same)


# -- reporting ----------------------------------------------------------------------------


def relative(text: str) -> str:
    """``text`` with paths inside the repository written relative to its root."""
    return text.replace(f"{REPO_ROOT}/", "")


def fmt_times(times: list[float]) -> str:
    return " / ".join(f"{t:.1f}" for t in times)


def fmt_rss(p: Proc) -> str:
    """Peak RSS (MB), with the sampled peak of its anonymous part (allocated, not mapped files)."""
    anon = p.peaks.get("RssAnon") if isinstance(p, SampledProc) else None
    return f"{p.max_rss / MB:.0f}" + (f" ({anon / MB:.0f})" if anon else "")


def anon_ratio(o: Outcome) -> float | None:
    mk, mg = (p.peaks.get("RssAnon") if isinstance(p, SampledProc) else None for p in (o.mergekit, o.mgit))
    return mg / mk if mk and mg else None


def equal_cell(c: Comparison) -> str:
    if c.bit_identical:
        return f"bit-identical ({c.tensors}/{c.tensors} tensors, max abs diff {c.max_abs:g})"
    missing = f", {len(c.problems)} missing/mismatched" if c.problems else ""
    return f"**NO**: {c.identical}/{c.tensors} bit-identical, max abs diff {c.max_abs:.3g}{missing}"


def results_table(outcomes: list[Outcome]) -> str:
    rows = [
        "| method | K | mergekit time (s) | mgit time (s) | speedup (×) | mergekit peak RSS (MB) "
        "| mgit peak RSS (MB) | RSS mgit / mergekit | mergekit reads (GB) | mgit reads (GB) | outputs equal "
        "| other load (mergekit / mgit) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for o in outcomes:
        ratio = anon_ratio(o)
        cells = [
            o.case.method,
            str(o.case.k),
            fmt_times(o.mergekit_times),
            fmt_times(o.mgit_times),
            f"{o.speedup:.2f}",
            fmt_rss(o.mergekit),
            fmt_rss(o.mgit),
            f"{o.rss_ratio:.2f}" + (f" ({ratio:.2f})" if ratio else ""),
            f"{o.mergekit_bytes / GB:.3f}",
            f"{o.mgit_read / GB:.3f}",
            equal_cell(o.same),
            f"{load_share(o.mergekit):.0%} / {load_share(o.mgit):.0%}",
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def reads_table(outcomes: list[Outcome]) -> str:
    rows = [
        "| method | K | mgit: base chunks (GB) | mgit: expert chunks (GB) | expert chunks read "
        "| of which XOR deltas | their own stored bytes (GB) | expert bytes planned (GB) "
        "| mergekit: base + K experts (GB) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for o in outcomes:
        b = o.mgit_bytes
        cells = [
            o.case.method,
            str(o.case.k),
            f"{b['base_measured'] / GB:.3f}",
            f"{b['experts_measured'] / GB:.3f}",
            str(b["expert_chunks_measured"]),
            str(o.same.expert_delta_chunks),
            f"{o.same.expert_own_bytes / GB:.3f}",
            f"{b['experts_estimated'] / GB:.3f}",
            f"{o.mergekit_bytes / GB:.3f}",
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def targets_table(outcomes: list[Outcome]) -> str:
    """The targets at the largest K, plus the anonymous-memory ratio for information."""
    rows = ["| method | K | metric | value | target | met |", "|---|---:|---|---:|---:|---|"]
    kmax = max(o.case.k for o in outcomes)
    for o in (o for o in outcomes if o.case.k == kmax):
        anon = anon_ratio(o)
        checks: list[tuple[str, str, str, bool]] = [
            ("mgit speedup over mergekit (×)", f"{o.speedup:.2f}", "≥ 2", o.speedup >= 2),
            ("mgit peak RSS / mergekit's", f"{o.rss_ratio:.2f}", "≤ 0.5", o.rss_ratio <= 0.5),
            ("outputs bit-identical", "yes" if o.same.bit_identical else "no", "yes", o.same.bit_identical),
        ]
        if anon is not None:
            checks.insert(
                2, ("(for information) the same, anonymous memory only", f"{anon:.2f}", "(≤ 0.5)", anon <= 0.5)
            )
        for metric, shown, target, ok in checks:
            rows.append(f"| {o.case.method} | {kmax} | {metric} | {shown} | {target} | {'yes' if ok else '**no**'} |")
    return "\n".join(rows)


@dataclass
class Context:
    command: str
    versions: dict[str, str]
    plan: ModelPlan
    raw: int
    experts: int
    workdir: Path
    reps: int
    example: Case
    example_cmds: list[str]
    rss_floor: int
    wall: float  # seconds the whole run took, waits for other benchmarks excluded
    waited: float  # seconds spent waiting for other benchmarks


def report(outcomes: list[Outcome], c: Context) -> str:
    """This benchmark's docs section (also printed to stdout)."""
    m = machine()
    s = c.plan.shape
    shares = [frozen_byte_share(c.plan, k) for k in range(1, c.experts + 1)]
    lines = [
        *section_header(SECTION_TITLE, c.command, c.wall, c.waited, c.workdir, c.versions, m),
        f"Input: a generated llama-like bf16 base model of {c.raw / GB:.3f} GB ({c.plan.layers} layers, hidden "
        f"{s.hidden}, intermediate {s.intermediate}, vocab {s.vocab}, {len(c.plan.tensors)} tensors, weights "
        f"N(0, 0.02) from seed {SEED}, norms ones; {len(split_shards(c.plan.tensors, SHARDS))} safetensors shards, "
        "index and a `LlamaForCausalLM` config.json) and "
        f"{c.experts} experts made from it like fine-tunes: each leaves a random third of the tensors byte for byte "
        f"as the base's ({min(shares):.0%}–{max(shares):.0%} of the bytes, as the tensors drawn differ in size) and "
        "adds Gaussian noise to every other tensor, at a scale drawn log-uniformly per tensor from "
        f"1e{SCALE_DECADES[0]:.0f} to 1e{SCALE_DECADES[1]:.0f} of the tensor's std (of its RMS for the norms, "
        "whose std is 0), then rounds to bf16 (seeds "
        f"{EXPERT_SEED + 1}…{EXPERT_SEED + c.experts}). mergekit reads the model directories; mgit has the base on "
        "`main` and expert N on branch `expert-N` of one repository. Merges use the first K experts, weights "
        "1/K, ties with density 0.5, everything else the methods' defaults, bf16 throughout.",
        "",
        results_table(outcomes),
        "",
        targets_table(outcomes),
        "",
        "What each read: mergekit memory-maps and reads the base and every expert in full (the safetensors "
        "files' size); mgit's numbers are its merge record's measured stored (compressed) bytes "
        "(`mgit show --json`, `plan.bytes`): the base's chunks once, and per expert only the chunks whose id "
        "differs from the base's — twice for ties, which decides on each expert's whole delta before merging "
        "chunk by chunk (`plan.bytes.expert_passes` = 2; the experts' own stored bytes are counted once). "
        "`mgit commit` stores most chunks of a fine-tune as XOR deltas against the "
        "base's chunk at the same place, which decoding needs: the experts' own stored bytes (from the chunk "
        "store's index) are the least their reads can cost; measured bytes above them mean delta bases were "
        "read again. Planned: the plan's estimate (`experts_estimated`).",
        "",
        reads_table(outcomes),
        "",
        f"Commands, e.g. for {c.example.method} at K = {c.example.k} (mergekit's YAML names the model "
        "directories and gives each expert `parameters: {weight: 1/K}` (ties: and `density: 0.5`) and "
        "`dtype: bfloat16`; paths relative to the repository root):",
        "",
        "```",
        *c.example_cmds,
        "```",
        "",
        "How it was measured: every merge is a separate process timed by wall clock, after untimed waits until "
        "no other benchmark of this repository runs and under "
        f"{IDLE_BELOW:.0%} of the CPUs are busy, and an untimed `sync`. mergekit writes its output directory "
        "(deleted before each run); `mgit merge` writes the merged tensors into its store, commits (parents base + "
        "K experts, plan recorded) on a new branch and checks it out, i.e. also writes the merged model into the "
        "working tree (it starts from a checkout of `main`). "
        + (
            f"Each merge ran {c.reps} times; the time columns show every run, the other columns the fastest. "
            if c.reps > 1
            else "Each merge ran once. "
        )
        + "The page cache cannot be dropped, so both tools read files written minutes before (warm, as far as "
        "RAM holds them). Peak RSS is the largest resident set of the process as the kernel reports "
        f"it; it includes about {c.rss_floor / MB:.0f} MB inherited at fork (what `true` reports) and the "
        "touched pages of memory-mapped files (mergekit maps the input safetensors files, mgit its pack files). "
        "In parentheses: the peak of the anonymous part alone (RssAnon, sampled from /proc every 0.1 s), i.e. "
        "memory the process allocated, without mapped files; the ratio in parentheses compares those. "
        "Outputs equal: mgit's merged tensors, loaded with `Repository.state_dict(branch)`, against the tensors "
        "of mergekit's output directory, per tensor, compared bit for bit (as int16) and by the largest absolute "
        "difference in float32. Other load is the share of all CPUs that other processes used during the run. "
        "Targets are reported, not asserted.",
    ]
    return "\n".join(lines) + "\n"


# -- main ---------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--workdir", type=Path, default=REPO_ROOT / "bench-work" / "merge", help="scratch directory (git-ignored)"
    )
    p.add_argument("--size-gb", type=float, default=DEFAULT_SIZE_GB, help="base model size in GB (10^9 bytes)")
    p.add_argument("--quick", action="store_true", help=f"a ~{QUICK_SIZE_GB} GB model and K = 2, 4")
    p.add_argument("--ks", type=lambda v: tuple(int(x) for x in v.split(",")), help="expert counts, e.g. 2,4,8")
    p.add_argument("--methods", default=",".join(METHODS), help="comma-separated, of: " + ", ".join(METHODS))
    p.add_argument("--reps", type=int, default=1, help="runs of every merge per tool; the fastest is reported")
    add_run_options(p)
    p.add_argument("--write-docs", action="store_true", help="replace this benchmark's section in docs/benchmarks.md")
    return p.parse_args(argv)


def section_header(
    title: str, command: str, wall: float, waited: float, workdir: Path, versions: dict[str, str], m: dict[str, str]
) -> list[str]:
    """The first lines of a merge benchmark's docs section: how, when, where and with what it ran."""
    return [
        title,
        "",
        f"Command: `{command}` (took {wall / 60:.0f} min, plus {waited / 60:.0f} min waiting for other benchmarks)  ",
        f"Date: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}  ",
        f"Machine: {m['cpu']}, {m['ram']} RAM, {m['os']}, {filesystem(workdir)} disk; Python {m['python']}  ",
        f"Versions: {', '.join(f'{k} {v}' for k, v in versions.items())}",
        "",
    ]


def add_run_options(p: argparse.ArgumentParser) -> None:
    """Options of every merge benchmark: waiting for a quiet machine, the mgit measured,
    mergekit's environment, keeping the repository."""
    p.add_argument("--idle-wait", type=float, default=120, help="most seconds to wait for an idle machine per run")
    p.add_argument("--other-wait", type=float, default=3600, help="most seconds to wait for other benchmarks")
    p.add_argument(
        "--mgit-rev",
        default="HEAD",
        help="the mgit to measure: a commit of this repository (exported, so edits during the run do not count) "
        "or 'worktree' for the installed working tree; default HEAD",
    )
    p.add_argument(
        "--mergekit-venv", type=Path, help="mergekit's virtual environment (default: bench-work/.venv-mergekit)"
    )
    p.add_argument("--keep", action="store_true", help="keep the mgit repository afterwards")


def lock_workdir(workdir: Path, script: str = "bench_merge.py") -> int:
    """Hold an exclusive lock on the workdir for this process's life: two runs in one workdir would
    delete each other's repository (each starts from a fresh one)."""
    workdir.mkdir(parents=True, exist_ok=True)
    fd = os.open(workdir / ".lock", os.O_CREAT | os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise SystemExit(f"another {script} run uses {workdir}; wait for it or pass another --workdir") from None
    return fd


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    command = shlex.join(["python", *sys.argv]) if argv is None else shlex.join(["python", __file__, *argv])
    workdir = args.workdir.resolve()
    lock_workdir(workdir)
    ks = args.ks or (QUICK_KS if args.quick else KS)
    methods = [m for m in args.methods.split(",") if m]
    if unknown := set(methods) - set(METHODS):
        raise SystemExit(f"unknown method(s): {', '.join(sorted(unknown))}")
    venv = (args.mergekit_venv or REPO_ROOT / "bench-work" / ".venv-mergekit").resolve()
    mergekit = ensure_mergekit(venv)
    mgit, where = mgit_command(workdir, args.mgit_rev)
    versions = {
        "mgit": f"{version_of([*mgit, '--version']) or '?'} ({where})",
        "mergekit": package_version(venv / "bin" / "python", "mergekit"),
        "torch (mergekit's venv / mgit's)": f"{package_version(venv / 'bin' / 'python', 'torch')} / "
        f"{importlib.metadata.version('torch')}",
    }
    base, plan, sums = ensure_model(workdir, QUICK_SIZE_GB if args.quick else args.size_gb, SHARDS)
    experts = ensure_experts(workdir, base, plan, sums, max(ks))
    env = tool_env(workdir)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HOME=str(workdir / "hf-home"))
    runner = PoliteRunner(env, args.idle_wait, other_wait=args.other_wait)
    scratch = workdir / "runs"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    print("committing the base and the experts to a fresh mgit repository ...", flush=True)
    s = Setup(runner, mgit, mergekit, scratch / "repo", base, experts, scratch, args.reps)
    build_repo(runner, mgit, s.repo, base, experts)
    cases = [Case(m, k) for m in methods for k in ks]
    print("warming up both tools (untimed) ...", flush=True)
    runner.run([str(mergekit), "--help"], scratch)
    runner.run([*mgit, "--help"], scratch)
    outcomes = [bench_case(s, case) for case in cases]
    last = cases[-1]
    example = [
        relative(shlex.join(mergekit_cmd(mergekit, scratch / f"{last.label}.yml", scratch / f"mergekit-{last.label}"))),
        relative(shlex.join(mgit_merge_cmd([*mgit, "-C", str(s.repo)], last, f"merge-{last.label}-1"))),
    ]
    rss_floor = runner.run(["true"], workdir).max_rss
    raw = sum((base / name).stat().st_size for name in sums)
    wall = time.perf_counter() - started - runner.waited
    ctx = Context(command, versions, plan, raw, max(ks), workdir, args.reps, last, example, rss_floor, wall,
                  runner.waited)  # fmt: skip
    section = report(outcomes, ctx)
    print()
    print(section)
    if args.write_docs:
        update_docs(section, title=SECTION_TITLE)
        print("updated docs/benchmarks.md")
    if not args.keep:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0 if all(o.same.bit_identical for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
