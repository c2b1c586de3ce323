"""The one quiet-machine policy, and a description of the machine for the reports.

Why: timings are only comparable when nothing else runs. Before every timed command the runner
waits, untimed, until (1) no other benchmark script of this repository runs (up to a limit; one that
sits idle for a whole poll is itself waiting, so waiting for it would deadlock) and (2), after a
``sync``, under ``IDLE_BELOW`` of all CPUs are busy (up to a limit). The decisions are pure
functions (``other_benchmark_decision``) so they can be tested without a busy machine.
"""

from __future__ import annotations

import fcntl
import functools
import os
import platform
import re
import subprocess
import time
import timeit
from collections.abc import Callable
from pathlib import Path

IDLE_BELOW = 0.15  # the machine counts as idle below this fraction of all cores busy
BENCH_SCRIPT = re.compile(r"bench_\w+\.py$")  # an argv element naming a benchmark script
POLL_S = 10.0  # seconds between looks at the other benchmarks (measuring the CPU meanwhile)
DROP_CACHES = Path("/proc/sys/vm/drop_caches")


def cpu_busy_seconds() -> float:
    """CPU-seconds the whole machine has spent busy since boot (user, nice, system, irq, softirq)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]
    user, nice, system, _idle, _iowait, irq, softirq = map(int, fields)
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def busy_fraction(seconds: float = 0.5) -> float:
    """The share of all CPUs busy over the next ``seconds``."""
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


def can_drop_caches(path: Path = DROP_CACHES) -> bool:
    """Whether this process may drop the page cache (root, with /proc/sys writable)."""
    return path.exists() and os.access(path, os.W_OK)


def drop_caches(path: Path = DROP_CACHES) -> None:
    """Write back dirty pages, then drop the page cache, dentries and inodes: the next read of any
    file comes from the disk (a cold cache, as after a reboot, for every tool alike)."""
    os.sync()
    path.write_text("3\n")


def process_table() -> tuple[dict[int, int], dict[int, list[str]]]:
    """(pid → parent pid, pid → argv) of every process."""
    parents, argv = {}, {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            parents[int(d.name)] = int(stat.rsplit(")", 1)[1].split()[1])
            argv[int(d.name)] = (d / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except (OSError, ValueError, IndexError):
            continue
    return parents, argv


def own_line(parents: dict[int, int], me: int) -> set[int]:
    """``me``, its ancestors (a shell or `timeout` that started it) and its descendants (its tools)."""
    line, p = {me}, me
    while p in parents and parents[p] > 1:
        p = parents[p]
        line.add(p)
    descendants, grew = {me}, True
    while grew:
        new = {c for c, par in parents.items() if par in descendants and c not in descendants}
        grew = bool(new)
        descendants |= new
    return line | descendants


def benchmark_lines(parents: dict[int, int], argv: dict[int, list[str]], me: int) -> list[str]:
    """Command lines of benchmark scripts (bench_*.py) running outside ``me``'s own process line."""
    mine = own_line(parents, me)
    return [
        " ".join(a for a in args if a)
        for pid, args in sorted(argv.items())
        if pid not in mine and any(BENCH_SCRIPT.search(a) for a in args)
    ]


def other_benchmarks() -> list[str]:
    """Command lines of this repository's other benchmarks running now (they would disturb timings)."""
    return benchmark_lines(*process_table(), os.getpid())


def other_benchmark_decision(others: list[str], busy: float | None, waited: float, limit: float) -> str:
    """What to do about other benchmarks: "go" (none, or waited ``limit`` already), "idle" (the
    other one sat idle a whole poll: it waits itself, so go on), or "wait"."""
    if not others or waited >= limit:
        return "go"
    if busy is not None and busy < IDLE_BELOW:
        return "idle"
    return "wait"


def wait_for_other_benchmarks(limit: float, poll: float = POLL_S) -> float:
    """Wait (polling) until no other benchmark runs, at most ``limit`` seconds; the seconds waited."""
    t0 = time.monotonic()
    told = False
    busy: float | None = None
    while True:
        others = other_benchmarks()
        decision = other_benchmark_decision(others, busy, time.monotonic() - t0, limit)
        if decision == "idle":
            print(f"  {others[0][:80]} is idle (waiting for this one?); going on", flush=True)
        if decision != "wait":
            if others and decision == "go" and limit > 0:
                print(f"  still running after {limit:.0f} s, going on: {others[0][:100]}", flush=True)
            return time.monotonic() - t0
        if not told:
            print(f"  waiting for another benchmark to finish: {others[0][:100]}", flush=True)
            told = True
        busy = busy_fraction(poll)


def lock_workdir(workdir: Path, script: str) -> int:
    """Hold an exclusive lock on the workdir for this process's life: two runs in one workdir would
    delete each other's files (each starts from fresh ones)."""
    workdir.mkdir(parents=True, exist_ok=True)
    fd = os.open(workdir / ".lock", os.O_CREAT | os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise SystemExit(f"another {script} run uses {workdir}; wait for it or pass another --workdir") from None
    return fd


def cpuinfo_fields(text: str) -> dict[str, str]:
    """The first processor's fields of a /proc/cpuinfo text (name → value)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        name, _, value = line.partition(":")
        fields.setdefault(name.strip(), value.strip())
    return fields


# widest first: (flag in /proc/cpuinfo, name in a report)
SIMD_FLAGS = (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX"), ("sse4_2", "SSE4.2"), ("asimd", "NEON"))


def simd_level(flags: set[str]) -> str:
    """The widest vector instructions a CPU offers (from its /proc/cpuinfo flags), as a report names
    them: mgit's per-byte work (zstd, BLAKE3, numpy's byte planes) runs on them, so two hosts that
    /proc/cpuinfo both calls "AMD EPYC" can differ twofold in mgit's time and not in cp's."""
    for flag, name in SIMD_FLAGS:
        if flag in flags:
            return name
    return "no SIMD flags"


def cpu_label(fields: dict[str, str]) -> str:
    """A CPU as a report names it: model name, x86 family/model numbers (the model name alone
    hides the generation on VMs) and SIMD level."""
    parts = [fields.get("model name") or fields.get("Model name") or "?"]
    if "cpu family" in fields and "model" in fields:
        parts.append(f"family {fields['cpu family']} model {fields['model']}")
    flags = fields.get("flags") or fields.get("Features") or ""
    parts.append(simd_level(set(flags.split())))
    return ", ".join(parts)


def describe() -> dict[str, str]:
    """CPU, RAM, OS and Python of this machine, for a report's header."""
    try:
        cpu = cpu_label(cpuinfo_fields(Path("/proc/cpuinfo").read_text()))
    except OSError:
        cpu = "?"
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


RATE_BYTES = 32 * 2**20  # per measurement: past the L3 caches of these hosts, so memcpy meets memory
RATE_REPS = 5


def _best_rate(fn: Callable[[], object], nbytes: int, reps: int) -> float:
    """GB/s of the fastest of ``reps`` calls of ``fn`` over ``nbytes``."""
    return nbytes / min(timeit.repeat(fn, number=1, repeat=reps)) / 1e9


@functools.cache
def core_rates(nbytes: int = RATE_BYTES, reps: int = RATE_REPS) -> dict[str, float]:
    """GB/s of one thread of this host for the operations that mgit's per-byte work is made of,
    measured here and now: zstd (level 1) decompressing bf16 weights split into byte planes,
    BLAKE3, and a memory copy. A report shows them beside its timings, so that runs on different
    hosts are compared by what the host allows, not only by the peers' times (which are mostly
    I/O and barely move with the CPU). Once per process (~1 s)."""
    import blake3
    import numpy as np
    import zstandard

    rng = np.random.default_rng(0)
    bf16 = (rng.standard_normal(nbytes // 2, dtype=np.float32) * 0.02).view(np.uint32) >> 16
    planes = np.concatenate([(bf16 & 0xFF).astype(np.uint8), (bf16 >> 8).astype(np.uint8)])
    frame = zstandard.ZstdCompressor(level=1).compress(planes.tobytes())
    dctx = zstandard.ZstdDecompressor()
    target = np.empty_like(planes)
    return {
        "zstd decompress": _best_rate(lambda: dctx.decompress(frame), planes.nbytes, reps),
        "BLAKE3": _best_rate(lambda: blake3.blake3(planes).digest(), planes.nbytes, reps),
        "memcpy": _best_rate(lambda: np.copyto(target, planes), planes.nbytes, reps),
    }


def rates_line(rates: dict[str, float]) -> str:
    """A report's line of :func:`core_rates`."""
    shown = ", ".join(f"{name} {rate:.2f}" for name, rate in rates.items())
    return f"Per-core rates (one thread, GB/s, measured as this report was written): {shown}"


def filesystem(path: Path) -> str:
    """The filesystem type ``path`` is on (``df -T``), or "?"."""
    res = subprocess.run(["df", "-T", str(path)], capture_output=True, text=True)
    lines = res.stdout.strip().splitlines()
    return lines[-1].split()[1] if res.returncode == 0 and len(lines) > 1 else "?"
