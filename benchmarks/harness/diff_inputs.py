"""The diff benchmark's inputs: from a model A, a dense fine-tune B (noise on every tensor, so every
chunk changes) and B' (a quarter of the layers from B, every other byte A's), cached.

Why: `mgit diff` claims to cost what changed, not what the model weighs; B is the case where
everything changed, B' the usual one where a part did. Both keep A's files, headers and tensor
order, so only tensor bytes differ; they are rebuilt only when A or the recipe changes.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import time
from collections.abc import Iterator
from pathlib import Path

from harness.models import BLOCK_ELEMENTS, SEED, ModelPlan, in_child
from harness.runner import sha256_files

VARIANT_VERSION = 1  # bump when the derived versions change, so cached copies are rebuilt
NOISE_SEED = SEED + 1
NOISE = 0.05  # noise std relative to the tensor's scale (0.02 for weights, 1 for norms)
VERSIONS = ("dense", "partial")  # B and B', also their branches in the benchmark's repository


def read_header(path: Path) -> tuple[int, dict[str, dict]]:
    """(offset of the tensor data, the header's tensor entries) of a safetensors file."""
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    header.pop("__metadata__", None)
    return 8 + size, header


def changed_layers(layers: int) -> list[int]:
    """The last quarter of the layers (at least one): what B' takes from B."""
    n = max(1, round(layers / 4))
    return list(range(layers - n, layers))


def in_layers(name: str, layers: list[int]) -> bool:
    return any(name.startswith(f"model.layers.{i}.") for i in layers)


def tensor_files(base: Path, dest: Path) -> Iterator[tuple[Path, int, list[tuple[str, dict]]]]:
    """Make ``dest`` and copy every other file of ``base`` into it; yield each safetensors file of
    ``base``: (its path, the offset of its tensor data, its (name, entry) pairs in data order)."""
    dest.mkdir(parents=True)
    for src in sorted(base.iterdir()):
        if src.suffix != ".safetensors":
            shutil.copyfile(src, dest / src.name)
            continue
        start, header = read_header(src)
        yield src, start, sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0])


def write_dense(base: Path, dest: Path) -> None:
    """B = bf16(A + N(0, (NOISE·scale)²)) for every tensor, streamed piece by piece; same files."""
    import torch

    gen = torch.Generator().manual_seed(NOISE_SEED)
    for src, start, entries in tensor_files(base, dest):
        with open(src, "rb") as fin, open(dest / src.name, "wb") as fout:
            fout.write(fin.read(start))  # same header: same names, shapes, offsets
            for name, entry in entries:
                scale = NOISE * (1.0 if name.endswith("norm.weight") else 0.02)
                begin, end = entry["data_offsets"]
                fin.seek(start + begin)
                for pos in range(begin, end, 2 * BLOCK_ELEMENTS):
                    raw = bytearray(fin.read(min(2 * BLOCK_ELEMENTS, end - pos)))
                    a = torch.frombuffer(raw, dtype=torch.bfloat16).float()
                    b = (a + torch.randn(a.numel(), generator=gen) * scale).to(torch.bfloat16)
                    fout.write(b.view(torch.int16).numpy().tobytes())


def write_partial(base: Path, dense: Path, dest: Path, layers: list[int]) -> None:
    """B' = B's bytes for the tensors of ``layers``, A's bytes for every other tensor and file."""
    for src, start, entries in tensor_files(base, dest):
        with open(src, "rb") as fa, open(dense / src.name, "rb") as fb, open(dest / src.name, "wb") as fout:
            fout.write(fa.read(start))
            for name, entry in entries:
                begin, end = entry["data_offsets"]
                f = fb if in_layers(name, layers) else fa
                f.seek(start + begin)
                fout.write(f.read(end - begin))


def derive(base: Path, home: Path, layers: list[int]) -> None:
    write_dense(base, home / "dense")
    write_partial(base, home / "dense", home / "partial", layers)


def ensure_versions(workdir: Path, base: Path, plan: ModelPlan, base_sums: dict[str, str]) -> dict[str, Path]:
    """B and B' derived from A (reused when already there, for the same A): name → directory."""
    home = workdir / f"versions-{plan.nbytes}"
    layers = changed_layers(plan.layers)
    want = {
        "version": VARIANT_VERSION,
        "seed": NOISE_SEED,
        "noise": NOISE,
        "layers": layers,
        "base": hashlib.sha256(json.dumps(base_sums, sort_keys=True).encode()).hexdigest(),
    }
    meta_path = home / "meta.json"
    dirs = {name: home / name for name in VERSIONS}
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if {k: meta.get(k) for k in want} == want and all(sha256_files(d) == meta[n] for n, d in dirs.items()):
            print(f"reusing the derived versions in {home}")
            return dirs
    shutil.rmtree(home, ignore_errors=True)
    print(f"deriving B (dense) and B' (layers {layers[0]}-{layers[-1]} of {plan.layers} from B)")
    t0 = time.perf_counter()
    in_child(derive, base, home, layers, what="deriving the fine-tuned versions")
    meta_path.write_text(json.dumps({**want, **{n: sha256_files(d) for n, d in dirs.items()}}, indent=2) + "\n")
    print(f"  derived in {time.perf_counter() - t0:.1f} s")
    return dirs


def changed_bytes(model: Path, layers: list[int] | None) -> tuple[set[str], int]:
    """(names of the tensors a version changed, their bytes in both versions); None: all layers."""
    names, total = set(), 0
    for path in sorted(model.glob("*.safetensors")):
        for name, entry in read_header(path)[1].items():
            if layers is None or in_layers(name, layers):
                names.add(name)
                total += 2 * (entry["data_offsets"][1] - entry["data_offsets"][0])
    return names, total
