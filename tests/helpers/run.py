"""The real CLI in a subprocess, as a user types it: for walkthroughs and crash tests that need a
separate process (output-only checks can run in-process instead)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_mgit(*args: str, cwd: Path, check: bool = False, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the real CLI in a subprocess (what a user types)."""
    full_env = {**os.environ, **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-m", "mgit", *args], cwd=cwd, capture_output=True, text=True, env=full_env, timeout=300
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"mgit {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc
