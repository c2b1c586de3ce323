"""ZipNN, the peer that compresses every file of every version on its own: its sizes per version.

Why: ZipNN compresses a bf16 safetensors file well but shares nothing between versions; its size
per version (all files, and only the files that changed: what ZipNN plus file-level dedup would
add) is the yardstick for what mgit's cross-version sharing saves. ZipNN runs in the baselines'
environment (tools.ensure_zipnn), never in this process, through ``WORKER``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.runner import Runner
from harness.variants import Version

BENCH_DIR = Path(__file__).resolve().parents[1]
# Run by the baselines' python: ``-c WORKER BENCH_DIR OUT FILE...`` (this module needs only the stdlib there).
WORKER = "import sys; sys.path.insert(0, sys.argv[1]); from harness.zipnn import worker; worker(sys.argv[2:])"


def worker(argv: Sequence[str]) -> None:
    """In the baselines' environment: zipnn-compress each file of ``argv[1:]`` whole, as its file script
    does, and write each one's size, seconds and round trip to ``argv[0]`` (JSON)."""
    import time

    from zipnn import ZipNN

    out, files = Path(argv[0]), argv[1:]
    sizes = {}
    for path in files:
        data = Path(path).read_bytes()
        t0 = time.perf_counter()
        # compress() rewrites its input buffer in place (sign-bit reordering): give it a copy
        packed = ZipNN(is_streaming=True, bytearray_dtype="bfloat16").compress(bytearray(data))
        seconds = time.perf_counter() - t0
        restored = ZipNN(is_streaming=True, bytearray_dtype="bfloat16").decompress(bytes(packed))
        sizes[path] = {"bytes": len(packed), "seconds": seconds, "roundtrip": bytes(restored) == data}
    out.write_text(json.dumps(sizes))


@dataclass
class Zipped:
    all_files: int  # every file: safetensors compressed, the rest as they are
    changed_files: int  # the same, only files that differ from the parent version's
    seconds: float  # compressing the version's safetensors files


def zipnn_all(python: str, versions: list[Version], runner: Runner, workdir: Path) -> tuple[dict[str, Zipped], bool]:
    """zipnn sizes per version (each distinct file compressed once); and whether every round trip held."""
    first: dict[str, str] = {}  # sha256 → a path holding it
    for v in versions:
        for name, digest in v.sums.items():
            if name.endswith(".safetensors"):
                first.setdefault(digest, str(v.model / name))
    out = workdir / "zipnn-sizes.json"
    runner.run([python, "-c", WORKER, str(BENCH_DIR), str(out), *first.values()], workdir)
    by_path = json.loads(out.read_text())
    by_sha = {digest: by_path[path] for digest, path in first.items()}
    result = {}
    parents = {v.name: v for v in versions}
    for v in versions:
        parent = parents.get(v.parent)
        zipped = Zipped(0, 0, 0.0)
        for name, digest in v.sums.items():
            size = by_sha[digest]["bytes"] if digest in by_sha else (v.model / name).stat().st_size
            zipped.all_files += size
            if parent is None or parent.sums.get(name) != digest:
                zipped.changed_files += size
            zipped.seconds += by_sha[digest]["seconds"] if digest in by_sha else 0.0
        result[v.name] = zipped
    return result, all(e["roundtrip"] for e in by_path.values())
