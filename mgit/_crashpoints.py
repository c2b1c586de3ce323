"""Crash injection for the crash tests (tests/ops/test_crash_points.py, benchmarks/crash_points.py).

``MGIT_CRASH_AT=<kind>:<n>`` makes the process SIGKILL itself just before its n-th crash point of
``kind`` (``rename``, ``fsync``, ``unlock``, ``write``, ``prepare`` or ``any``);
``MGIT_CRASH_LOG`` lists the points reached, ``MGIT_CRASH_SIGNAL=INT`` sends SIGINT instead.
Unset, nothing is wrapped: ``point`` is one test of a module global. Each kind:
docs/design.md, "Notes from the code".
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import Any

KINDS = ("rename", "fsync", "unlock", "write", "prepare")
_active = False
_target: tuple[str, int] | None = None
_log: str | None = None
_counts: dict[str, int] = {}
_signal = signal.SIGKILL
_lock = threading.Lock()


def point(kind: str) -> None:
    """A crash point: die here if this is the one asked for."""
    if not _active:
        return
    with _lock:
        if _log is not None:
            with open(_log, "a") as f:
                f.write(kind + "\n")
        if _target is None:
            return
        for key in (kind, "any"):
            _counts[key] = _counts.get(key, 0) + 1
        want, n = _target
        if _counts.get(want) == n:
            os.kill(os.getpid(), _signal)


def _wrap(kind: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        point(kind)
        return fn(*args, **kwargs)

    return wrapper


def install() -> None:
    """Read the environment once (the CLI's start); wrap the calls that are crash points."""
    global _active, _target, _log, _signal
    spec, log = os.environ.get("MGIT_CRASH_AT"), os.environ.get("MGIT_CRASH_LOG")
    if _active or (not spec and not log):
        return
    if spec:
        kind, _, n = spec.partition(":")
        if kind not in (*KINDS, "any") or not n.isdigit():
            raise SystemExit(f"MGIT_CRASH_AT={spec!r}: expected <{'|'.join((*KINDS, 'any'))}>:<n>")
        _target = (kind, int(n))
    _log = log
    _signal = signal.Signals[f"SIG{os.environ.get('MGIT_CRASH_SIGNAL', 'KILL')}"]
    _active = True
    os.replace = _wrap("rename", os.replace)
    os.rename = _wrap("rename", os.rename)
    os.fsync = _wrap("fsync", os.fsync)
