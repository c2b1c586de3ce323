"""The working tree filesystem's own clock, which the index's stat cache compares with.

A stat vouches for a file only if it is strictly older than a marker file touched just before it
was taken, read from the filesystem rather than ``time.time_ns()``, so the rule holds on coarse
clocks and file servers without a safety margin. Details: docs/design.md, "Notes from the code".
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

MARKER = "clock"  # .mgit/clock: empty; only its mtime is used
MAX_WAIT_NS = 2_500_000_000  # a little over the coarsest timestamps there are (FAT: 2 s)
NS_PER_BYTE = 1  # what re-hashing a racy file costs, about (1 GB/s: read + BLAKE3); bounds a wait


@dataclass(frozen=True)
class Reading:
    """The marker's mtime just after it was touched, and its filesystem: only a stat of a
    file on that device (``st_dev``), taken after the touch, may be compared with it."""

    ns: int
    dev: int


def read(git_dir: Path) -> Reading | None:
    """Touch the marker and read the filesystem's time; None where the repository cannot be
    written (a read-only mount): stats are then recorded without a reading."""
    path = git_dir / MARKER
    try:
        try:
            os.utime(path)
        except FileNotFoundError:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))
            os.utime(path)
        st = os.stat(path)
    except OSError:
        return None
    return Reading(st.st_mtime_ns, st.st_dev)


def read_past(git_dir: Path, written: Sequence[tuple[int, int]]) -> Reading | None:
    """A reading later than the files just ``written`` (each: its newest timestamp, its size),
    waiting for the filesystem's clock to tick past them, but never longer than re-hashing
    the bytes the first reading leaves racy would take (nor ``MAX_WAIT_NS``). A multigrain
    filesystem (Linux 6.13+: ext4, xfs, btrfs, tmpfs) is past at the second touch, a coarse
    kernel clock within a few ms; on FAT only files worth 2 s of hashing are waited for."""
    reading = read(git_dir)
    if reading is None or not written:
        return reading
    newest = max(stamp for stamp, _ in written)
    racy = sum(size for stamp, size in written if stamp >= reading.ns)
    deadline = time.monotonic_ns() + min(MAX_WAIT_NS, racy * NS_PER_BYTE)
    pause_ns = 0  # a multigrain filesystem stamps a second touch finely: try again at once
    while reading is not None and reading.ns <= newest and (not pause_ns or time.monotonic_ns() + pause_ns <= deadline):
        if pause_ns:
            time.sleep(pause_ns / 1e9)
        pause_ns = min(max(pause_ns * 2, 500_000), 250_000_000)
        reading = read(git_dir)
    return reading
