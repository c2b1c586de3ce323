"""Whether the installed torch computes task arithmetic as :mod:`affine_arrays` replays it.

The array kernel copies torch's CPU order of operations (float32 steps rounded to the dtype, sums
over up to 16 experts in order); another torch build or CPU could sum otherwise. So before the
kernel is used, a few order-sensitive slices are merged both ways and compared bit for bit; on any
difference :func:`affine_arrays.affine_kernel` declines and torch merges every chunk. The probe
imports torch, which the kernel exists to avoid, so its verdict is kept on disk per torch build and
CPU (``$XDG_CACHE_HOME/mgit``, else ``~/.cache/mgit``): once per process, and torch imported only
the first time a build is seen.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import platform
import threading
from pathlib import Path
from typing import Any

import numpy as np

from mgit.durable import atomic_write

VERDICTS = "torch-replays.json"  # {probe name: {"build": what the verdict holds for, "same": bool}}
_lock = threading.Lock()


def cache_dir() -> Path:
    """Where verdicts about the installed torch are kept."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mgit"


def _cpu_features() -> str:
    """The CPU's flags (x86) or features (Arm): which vector kernels torch picks."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return " ".join(sorted(value.split()))
    except OSError:
        pass
    return platform.processor()


def torch_build() -> str | None:
    """What decides torch's CPU arithmetic, read without importing torch: its version, where it is
    installed and when, the machine, the CPU's features and ``ATEN_CPU_CAPABILITY``. None where
    torch is not installed."""
    try:
        dist = importlib.metadata.distribution("torch")
    except importlib.metadata.PackageNotFoundError:
        return None
    init = Path(str(dist.locate_file("torch/__init__.py")))
    try:
        installed = init.stat().st_mtime_ns
    except OSError:
        installed = 0
    capability = os.environ.get("ATEN_CPU_CAPABILITY", "")
    return f"{dist.version} {init} {installed} {platform.machine()} {capability} {_cpu_features()}"


def _read(name: str, build: str) -> bool | None:
    try:
        entry = json.loads((cache_dir() / VERDICTS).read_text()).get(name)
    except (OSError, ValueError, AttributeError):
        return None
    if isinstance(entry, dict) and entry.get("build") == build and isinstance(entry.get("same"), bool):
        return bool(entry["same"])
    return None


def _write(name: str, build: str, same: bool) -> None:
    path = cache_dir() / VERDICTS
    try:
        verdicts: dict[str, Any] = json.loads(path.read_text())
        if not isinstance(verdicts, dict):
            verdicts = {}
    except (OSError, ValueError):
        verdicts = {}
    verdicts[name] = {"build": build, "same": same}
    try:
        atomic_write(path, json.dumps(verdicts, indent=1).encode(), sync_dir=False)
    except OSError:
        pass  # not kept: the next process probes again


@functools.cache
def affine_reproduces_torch() -> bool:
    """Whether :mod:`affine_arrays` gives the installed torch's bits (see the module docstring).
    Where torch is not installed there is nothing to differ from: True."""
    with _lock:
        build = torch_build()
        if build is None:
            return True
        same = _read("affine_arrays", build)
        if same is None:
            same = probe_affine()
            _write("affine_arrays", build, same)
        return same


def probe_affine() -> bool:
    """Order-sensitive bf16 and fp16 slices merged by the array kernel and by torch's task
    arithmetic (one torch thread, as on the pool): the same bits in every case the kernel takes?"""
    import torch

    from mgit.merge.methods.affine_arrays import BLOCK, replayed_kernel
    from mgit.merge.methods.registry import get_method
    from mgit.merge.methods.task_arithmetic import TaskArithmetic

    method = get_method("task_arithmetic")
    assert isinstance(method, TaskArithmetic)
    rng = np.random.default_rng(7)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for dtype, low in (("BF16", -30), ("F16", -12)):
            for count, n, weights, normalize, lam in (
                (1, 3 * BLOCK + 5, [0.3], False, 1.0),
                (3, 7, [0.3, -0.7, 1.1], True, 1.0),
                (4, BLOCK + 37, [0.0625, 0.5, -0.25, 2.0], False, 0.7),
                (9, 64 * BLOCK, [0.11 * (k + 1) for k in range(9)], True, 1.3),
                (16, 16 * BLOCK, [1.0] * 16, False, 1.0),
            ):
                params = method.resolve({"weight": weights, "normalize": normalize, "lambda": lam}, count)
                kernel = replayed_kernel(dtype, params["weight"], params["normalize"], params["lambda"])
                if kernel is None:
                    return False
                base = _order_sensitive(rng, n, low, 4)
                experts = [base + _order_sensitive(rng, n, low, 2) for _ in range(count)]
                tensors = [torch.from_numpy(x).to(getattr(torch, _TORCH[dtype])) for x in (base, *experts)]
                out = np.empty(n, np.uint16)
                if not kernel.merge(_bits(tensors[0]), [_bits(t) for t in tensors[1:]], None, out):
                    return False
                expected = method.combine_slice(tensors[0], tensors[1:], params, None, 0, None)
                if not np.array_equal(out, _bits(expected)):
                    return False
    finally:
        torch.set_num_threads(before)
    return True


_TORCH = {"BF16": "bfloat16", "F16": "float16"}


def _bits(t: Any) -> np.ndarray:
    import torch

    return np.asarray(t.contiguous().view(torch.int16).numpy().view(np.uint16))


def _order_sensitive(rng: np.random.Generator, n: int, lowest: int, highest: int) -> np.ndarray:
    """±m·2^e with 8 mantissa bits, exponents in [lowest, highest): float32 sums of such values are
    often inexact, so the order of a sum shows in its rounding; a ninth of them ±0."""
    e = rng.integers(lowest, highest, n).astype(np.float32)
    m = rng.integers(128, 256, n).astype(np.float32) / 128
    sign = np.where(rng.random(n) < 0.5, -1.0, 1.0).astype(np.float32)
    x = sign * m * np.exp2(e)
    x[: n // 9] = 0.0
    x[n // 9 : n // 7] = -0.0
    return x.astype(np.float32)
