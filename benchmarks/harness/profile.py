"""Where a command's time goes: py-spy samples every thread of the measured process, and each
sample is put in one step (decode, verify, math, encode, hash, statistics, write, start-up, other
Python), so a benchmark can print where the time went beside its timings.

Why py-spy: it samples native stacks of all threads from outside the process (cProfile sees one
thread and slows the rest), and it installs from PyPI into the baselines' environment (never the
test environment), as the other peer tools do.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.tools import BASELINES_VENV, pip_install

RATE = 100  # samples per second and thread

# (step, frame patterns): a sample belongs to the first step one of whose patterns matches one of its
# frames ("function (path" prefixes, py-spy's raw format). Order matters: a chunk id computed while
# decoding is verification, one computed while ingesting is hashing.
STEPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("start-up (imports)", ("_find_and_load (", "_call_with_frames_removed (")),
    ("verify (BLAKE3 of decoded chunks)", ("decode_verified (",)),  # refined below: only its chunk_id
    ("decode (zstd)", ("inflate (", "_inflate_into (", "_inflate_unsized (")),  # names old and new
    (
        "decode (un-group, undo delta)",
        # not encode's XOR or difference: those are under encode_delta / encode_diff
        ("ungroup_bytes (", "_ungroup_into (", "_xor_into (", "_undiff_into (", "decode (mgit/store/codec"),
    ),
    ("math (merge method)", ("merge_one (", "MergeMethod.", "mgit/merge/methods/", "mgit/merge/sparsify")),
    ("encode (delta, group, zstd)", ("encode_delta (", "encode_diff (", "encode (mgit/store", "group_bytes (")),
    ("hash (BLAKE3 of new chunks)", ("chunk_id (",)),
    ("statistics (L2, max)", ("chunk_stats (", "delta_l2 (", "stats_against (")),  # before and after affe700
    ("write (store, working tree)", ("PackWriter.", "_pwrite_all (", "write_entry (", "StagedFile.")),
)
OTHER = "other Python (control, copies, reads)"


def step_of(frames: Sequence[str]) -> str:
    """The step one sampled stack (root first) belongs to."""
    for step, patterns in STEPS:
        hit = next((i for i, f in enumerate(frames) if any(p in f for p in patterns)), None)
        if hit is None:
            continue
        if step.startswith("verify"):
            below = frames[hit + 1 :]
            if any("chunk_id (" in f for f in below):
                return step
            continue  # decoding proper: the steps below classify it
        return step
    return OTHER


def classify(raw: str) -> Counter[str]:
    """Samples per step of py-spy's raw output (``stack count`` lines)."""
    counts: Counter[str] = Counter()
    for line in raw.splitlines():
        stack, _, n = line.rstrip().rpartition(" ")
        if not stack or not n.isdigit():
            continue
        counts[step_of(stack.split(";"))] += int(n)
    return counts


@dataclass
class Profile:
    """A profiled run: its wall time and the samples of each step."""

    wall_s: float
    samples: Counter[str] = field(default_factory=Counter)
    rate: int = RATE

    @property
    def busy_s(self) -> float:
        """Thread-seconds spent running Python or native code (idle waits are not sampled)."""
        return sum(self.samples.values()) / self.rate

    def cores_used(self) -> float:
        """Average number of threads busy over the run (2.0: both cores, all the time)."""
        return self.busy_s / self.wall_s if self.wall_s > 0 else 0.0

    def rows(self) -> list[tuple[str, float, float]]:
        """(step, thread-seconds, share of busy time), in STEPS order, steps without samples left out."""
        total = sum(self.samples.values()) or 1
        order = [s for s, _ in STEPS] + [OTHER]
        return [(s, self.samples[s] / self.rate, self.samples[s] / total) for s in order if self.samples[s]]


def ensure_py_spy(venv: Path = BASELINES_VENV) -> Path | None:
    """py-spy in the baselines' environment (installed from PyPI when missing); None when that fails."""
    exe = venv / "bin" / "py-spy"
    if exe.exists():
        return exe
    try:
        print("installing py-spy from PyPI into the baselines' environment", flush=True)
        pip_install(venv, "py-spy")
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"could not install py-spy ({exc}); no profile")
        return None
    return exe if exe.exists() else None


def record_command(py_spy: Path, cmd: Sequence[str], raw_out: Path, rate: int = RATE) -> list[str]:
    """The command line that runs ``cmd`` under py-spy, writing raw stacks to ``raw_out``."""
    return [str(py_spy), "record", "-f", "raw", "-r", str(rate), "--nonblocking", "-o", str(raw_out), "--", *cmd]


def read_profile(raw_out: Path, wall_s: float, rate: int = RATE) -> Profile:
    text = raw_out.read_text() if raw_out.exists() else ""
    return Profile(wall_s, classify(text), rate)


def profile_table(profiles: Sequence[tuple[str, Profile]]) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of a Markdown table: one column per profiled run, seconds and share per step."""
    order = [s for s, _ in STEPS] + [OTHER]
    header = ["step", *[label for label, _ in profiles]]
    rows = []
    for step in order:
        if not any(p.samples[step] for _, p in profiles):
            continue
        cells = []
        for _, p in profiles:
            total = sum(p.samples.values()) or 1
            cells.append(f"{p.samples[step] / p.rate:.1f} s ({p.samples[step] / total:.0%})")
        rows.append([step, *cells])
    rows.append(["busy thread-seconds / wall time", *[f"{p.busy_s:.1f} / {p.wall_s:.1f} s" for _, p in profiles]])
    rows.append(["share of two cores used", *[f"{p.cores_used() / 2:.0%}" for _, p in profiles]])
    return header, rows
