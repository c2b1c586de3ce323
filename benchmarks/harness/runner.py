"""The one runner: a tool's command in a fixed environment, timed runs measured the same way.

Why: every benchmark compares separate processes by wall clock, so every timed run must start
alike: the quiet-machine policy first (machine.py: other benchmarks, ``sync``, idle CPUs; all
untimed), then the command with its peak RSS (``wait4``) and the CPU other processes used
meanwhile, and what it read from and wrote to the disk (``/proc/<pid>/io``, read after it exited
and before it is reaped, so its waited-for children count too); optionally the peaks of its
anonymous and file-backed memory, sampled from /proc, and a cold page cache before it starts.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness import machine

MODEL_DIR = "model"  # the model directory inside every working tree
IO_FIELDS = ("rchar", "wchar", "read_bytes", "write_bytes", "cancelled_write_bytes")


def parse_proc_io(text: str) -> dict[str, int]:
    """The counters of a ``/proc/<pid>/io`` file (``name: value`` lines), those of IO_FIELDS only.

    read_bytes / write_bytes are what the process made the storage layer read / dirtied for it to
    write (page-cache hits and tmpfs count nothing); rchar / wchar every byte passed to read/write.
    """
    out = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() in IO_FIELDS and value.strip().isdigit():
            out[name.strip()] = int(value)
    return out


def read_proc_io(pid: int) -> dict[str, int]:
    """``/proc/<pid>/io`` of a process (a zombie's too: its reaped children are included); {} when unreadable."""
    try:
        return parse_proc_io(Path(f"/proc/{pid}/io").read_text())
    except OSError:
        return {}


def wait_measured(pid: int) -> tuple[int, os.struct_rusage, dict[str, int]]:
    """Wait for child ``pid`` to exit; read its I/O counters while it is a zombie, then reap it:
    (wait status, resource usage, I/O counters)."""
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    io = read_proc_io(pid)
    _, status, usage = os.wait4(pid, 0)
    return status, usage, io


@dataclass
class Proc:
    """What one measurement saw."""

    seconds: float
    max_rss: int  # bytes, peak resident set of the child (and its waited-for children)
    background: float  # CPU-seconds other processes (and kernel threads) used meanwhile
    output: str
    parts: tuple[float, ...] = ()  # seconds of each command, when several make one measurement
    peaks: dict[str, int] = field(default_factory=dict)  # sampled RssAnon / RssFile peaks (bytes), if sampled
    io: dict[str, int] = field(default_factory=dict)  # its /proc/<pid>/io counters at exit (IO_FIELDS), if readable

    @property
    def disk_read(self) -> int | None:
        """Bytes it made the disk read (its read_bytes); None when the counters were unreadable."""
        return self.io.get("read_bytes")

    @property
    def disk_written(self) -> int | None:
        """Bytes it dirtied for writing to the disk (its write_bytes); None when the counters were unreadable."""
        return self.io.get("write_bytes")

    @property
    def load_share(self) -> float:
        """The share of all CPUs that other processes used during the run."""
        return self.background / (self.seconds * (os.cpu_count() or 1)) if self.seconds > 0 else 0.0


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
        self._earlier: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RssSampler:
        # Children from before the timed command (e.g. multiprocessing's resource tracker) are not
        # it. Listed here, before the command starts: listed in the thread, the command might
        # already run and be taken for one of them (then nothing is sampled).
        self._earlier = children(os.getpid())
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        me, pid, earlier = os.getpid(), None, self._earlier
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
class Runner:
    """Runs the tools' commands in a fixed environment; timed runs start from a quiet machine."""

    env: dict[str, str]
    idle_wait: float  # most seconds to wait for idle CPUs before a timed run
    other_wait: float = 0.0  # most seconds to wait for other benchmarks before a timed run
    sample: bool = False  # sample the timed command's RssAnon / RssFile
    waited: float = 0.0  # seconds spent waiting for other benchmarks so far
    cold: bool = False  # drop the page cache before every timed run (needs root: see machine.can_drop_caches)

    def quiet(self, drop: bool = True) -> None:
        """The quiet-machine policy (untimed): no other benchmark, written data synced (and, when
        ``cold`` and ``drop``, the page cache dropped), idle CPUs."""
        self.waited += machine.wait_for_other_benchmarks(self.other_wait)
        os.sync()
        if self.cold and drop:
            machine.drop_caches()
        machine.wait_for_idle(self.idle_wait)

    def run(self, cmd: Sequence[str], cwd: Path, timed: bool = False, *, drop: bool = True) -> Proc:
        """Run a command (failing loudly); with ``timed``, after the quiet-machine policy (``drop``: False
        keeps the page cache of a cold runner, for the later commands of one measurement)."""
        if timed:
            self.quiet(drop)
        sampler = RssSampler() if timed and self.sample else None
        # the output goes to a temporary file, not into cwd, where `git add .` would pick it up
        with tempfile.TemporaryFile() as out, sampler or contextlib.nullcontext():
            busy0, t0 = machine.cpu_busy_seconds(), time.perf_counter()
            proc = subprocess.Popen(list(cmd), cwd=cwd, env=self.env, stdout=out, stderr=subprocess.STDOUT)
            status, usage, io = wait_measured(proc.pid)
            seconds, busy1 = time.perf_counter() - t0, machine.cpu_busy_seconds()
            out.seek(0)
            text = out.read().decode(errors="replace")
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise RuntimeError(f"`{shlex.join(cmd)}` failed in {cwd} (exit {proc.returncode}):\n{text}")
        background = max(0.0, busy1 - busy0 - usage.ru_utime - usage.ru_stime)
        peaks = sampler.peaks if sampler else {}
        return Proc(seconds, usage.ru_maxrss * 1024, background, text, peaks=peaks, io=io)

    def steps(self, cmds: Sequence[Sequence[str]], cwd: Path) -> Proc:
        """Several timed commands as one measurement: times, background and I/O add up, RSS is the peak.
        A cold runner drops the page cache before the first only (as a user runs `add` then `commit`)."""
        procs = [self.run(cmd, cwd, timed=True, drop=i == 0) for i, cmd in enumerate(cmds)]
        return Proc(
            sum(p.seconds for p in procs),
            max(p.max_rss for p in procs),
            sum(p.background for p in procs),
            "".join(p.output for p in procs),
            tuple(p.seconds for p in procs),
            io=add_io(p.io for p in procs),
        )

    def rss_floor(self, cwd: Path) -> int:
        """The peak RSS a child inherits at fork (what `true` reports)."""
        return self.run(["true"], cwd).max_rss


def add_io(ios: Iterable[dict[str, int]]) -> dict[str, int]:
    """The I/O counters of several runs added up ({} when any run's were unreadable)."""
    ios = list(ios)
    if not ios or not all(ios):
        return {}
    return {k: sum(io.get(k, 0) for io in ios) for k in ios[0]}


def best_of(reps: int, prepare: Callable[[], object], measure: Callable[[], Proc]) -> tuple[Proc, list[float]]:
    """Run prepare() then measure(), ``reps`` times: (the fastest run, every run's seconds)."""
    procs = []
    for _ in range(reps):
        prepare()
        procs.append(measure())
    return min(procs, key=lambda p: p.seconds), [p.seconds for p in procs]


@dataclass
class Result:
    """One tool's step, measured ``reps`` times (the fastest shown)."""

    tool: str
    step: str
    best: Proc
    times: list[float]
    store_bytes: int | None = None
    identical: bool | None = None  # checkouts: every run reproduced the model byte for byte


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


def place_model(src: Path, repo: Path) -> None:
    """Make the working tree's model directory a plain byte copy of ``src`` (as a training run would)."""
    shutil.rmtree(repo / MODEL_DIR, ignore_errors=True)
    shutil.copytree(src, repo / MODEL_DIR, copy_function=shutil.copyfile)


# Files of an mgit repository that are never written again once they exist: sealed packs and their
# indexes (a write session appends to a new pack, renamed into place when sealed) and git's loose
# objects (named by their content). Two copies of a repository may share them by hard link.
IMMUTABLE_PARTS = ((".mgit", "chunks", "packs"), (".mgit", "objects"))


def copy_repository(src: Path, dst: Path) -> Path:
    """A copy of the mgit repository ``src`` at ``dst`` that shares its immutable files (see
    IMMUTABLE_PARTS) by hard link and copies everything else byte for byte: what a second repository
    costs on the disk is then its working tree and what it stores after the copy."""

    def link_or_copy(s: str, d: str) -> str:
        parts = Path(s).relative_to(src).parts
        if any(parts[: len(p)] == p for p in IMMUTABLE_PARTS):
            os.link(s, d)
            return d
        return shutil.copy2(s, d)

    shutil.copytree(src, dst, symlinks=True, copy_function=link_or_copy)
    return dst


def fresh_dir(path: Path) -> Path:
    """``path`` as a new, empty directory."""
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def fresh_copy(model: Path, run_dir: Path) -> Path:
    """A new directory holding a plain byte copy (no hard links) of the model."""
    place_model(model, fresh_dir(run_dir))
    return run_dir


def checked_best_of(
    tool: str,
    step: str,
    reps: int,
    prepare: Callable[[], object],
    measure: Callable[[], Proc],
    tree: Path,
    sums: dict[str, str],
) -> Result:
    """best_of for a step that writes a model: after every run, ``tree`` must hold exactly the files
    of ``sums`` (sha256); the Result says whether every run did (a fast wrong checkout is no result)."""
    identical = True

    def checked() -> Proc:
        nonlocal identical
        proc = measure()
        identical &= sha256_files(tree) == sums
        return proc

    best, times = best_of(reps, prepare, checked)
    return Result(tool, step, best, times, identical=identical)


def time_cp(model: Path, run_dir: Path, runner: Runner, sums: dict[str, str], reps: int) -> Result:
    """``cp -r`` of the model directory into a new directory beside it: the yardstick of materialising."""
    src = fresh_copy(model, run_dir)
    return checked_best_of(
        "cp -r",
        "copy the model directory",
        reps,
        lambda: shutil.rmtree(src / "copy", ignore_errors=True),
        lambda: runner.run(["cp", "-r", MODEL_DIR, "copy"], src, timed=True),
        src / "copy",
        sums,
    )
