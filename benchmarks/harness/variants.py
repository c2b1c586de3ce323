"""Models derived from the generated base, cached: merge experts, and storage's versions.

Why: bench_merge and bench_budget merge the same kind of experts; bench_storage and bench_remote
store the same fine-tunes, adapters and checkpoints. Each kind is made here once, in a spawned
child (torch stays out of the benchmark's process), and reused while its recipe is unchanged.
"""

from __future__ import annotations

import json
import math
import random
import re
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.models import SEED, SHARDS, ModelPlan, Shape, in_child, safetensors_header, split_shards, tensor_pieces
from harness.runner import MODEL_DIR, sha256_files

# -- merge experts: fine-tunes of one base --------------------------------------------------

EXPERT_VERSION = 1  # bump when the experts change, so cached copies are rebuilt
EXPERT_SEED = SEED + 100  # expert k uses EXPERT_SEED + k
FROZEN_SHARE = 1 / 3  # share of the tensors an expert leaves byte for byte as the base's
SCALE_DECADES = (-4.0, -1.0)  # log10 range of per-tensor noise scales, relative to the tensor's std


def expert_recipe(plan: ModelPlan, k: int) -> dict[str, float | None]:
    """Tensor name → noise scale relative to its std, or None for a frozen tensor (expert ``k``)."""
    rng = random.Random(EXPERT_SEED + k)
    names = [name for name, _ in plan.tensors]
    frozen = set(rng.sample(names, round(len(names) * FROZEN_SHARE)))
    return {n: None if n in frozen else 10 ** rng.uniform(*SCALE_DECADES) for n in names}


def write_expert(base: Path, dest: Path, plan: ModelPlan, k: int) -> None:
    """Stream expert ``k`` to ``dest``: the base's layout and files, tensors moved as its recipe says."""
    import torch
    from safetensors import safe_open

    recipe = expert_recipe(plan, k)
    gen = torch.Generator().manual_seed(EXPERT_SEED + k)
    index = json.loads((base / "model.safetensors.index.json").read_text())
    dest.mkdir(parents=True)
    for part in split_shards(plan.tensors, SHARDS):
        fname = index["weight_map"][part[0][0]]
        header = safetensors_header(part)
        with safe_open(str(base / fname), framework="pt") as src, open(dest / fname, "wb") as f:
            f.write(len(header).to_bytes(8, "little"))
            f.write(header)
            for name, _ in part:
                t = src.get_tensor(name)
                scale = recipe[name]
                if scale is not None:
                    x = t.float()
                    ref = float(x.std()) or float(x.square().mean().sqrt())  # norms (all ones) have no std
                    t = (x + torch.randn(x.shape, generator=gen) * (scale * ref)).to(torch.bfloat16)
                f.write(t.view(torch.int16).numpy().tobytes())
    for name in ("model.safetensors.index.json", "config.json"):
        shutil.copyfile(base / name, dest / name)


def expert_number(dest: Path) -> int:
    """k of an ``expert-k`` directory: its seed and recipe follow from it."""
    return int(dest.name.rsplit("-", 1)[1])


def write_experts(base: Path, dests: list[Path], plan: ModelPlan) -> None:
    """Write each ``expert-k`` directory as expert k, whichever of them are asked for (a cache
    missing only experts 9..16 must not get experts 1..8 again)."""
    for dest in dests:
        write_expert(base, dest, plan, expert_number(dest))


def ensure_experts(workdir: Path, base: Path, plan: ModelPlan, sums: dict[str, str], count: int) -> list[Path]:
    """The experts' model directories (reused when cached for this base and recipe)."""
    home = workdir / f"experts-{plan.nbytes}"
    meta_path = home / "meta.json"
    want = {"version": EXPERT_VERSION, "seed": EXPERT_SEED, "frozen": FROZEN_SHARE, "scales": list(SCALE_DECADES)}
    want["base"] = sums
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    if {k: meta.get(k) for k in want} != want:
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True)
        meta = {**want, "sha256": {}}
    dests = [home / f"expert-{k}" for k in range(1, count + 1)]
    todo = [d for d in dests if d.name not in meta["sha256"] or sha256_files(d) != meta["sha256"][d.name]]
    if todo:
        print(f"generating {len(todo)} expert(s) in {home}", flush=True)
        t0 = time.perf_counter()
        for d in todo:
            shutil.rmtree(d, ignore_errors=True)
        in_child(write_experts, base, todo, plan, what="generating the experts")
        for d in todo:
            meta["sha256"][d.name] = sha256_files(d)
        meta_path.write_text(json.dumps(meta, indent=2) + "\n")
        print(f"  generated in {time.perf_counter() - t0:.1f} s", flush=True)
    else:
        print(f"reusing the generated experts in {home}")
    return dests


def frozen_byte_share(plan: ModelPlan, k: int) -> float:
    """The share of the model's bytes expert ``k`` leaves as the base's."""
    sizes = {name: 2 * math.prod(shape) for name, shape in plan.tensors}
    return sum(sizes[n] for n, s in expert_recipe(plan, k).items() if s is None) / plan.nbytes


# -- storage versions: variants of the base and a chain of checkpoints ------------------------

VARIANT_VERSION = 1  # bump when the variants change, so cached copies are rebuilt
META_FILE = ".bench-variant.json"
CHANGES_FILE = ".bench-changes.json"
INDEX_FILE = "model.safetensors.index.json"
CONFIG_FILE = "config.json"
EMBED, LM_HEAD, FINAL_NORM = "model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"
DENSE_NOISE = 0.02  # dense fine-tune: + N(0, (2% of the tensor's std)²)
STEP_NOISE = 0.01  # one training-checkpoint step: + N(0, (1% of the tensor's std)²)
LORA_RANK, LORA_STD = 16, 0.01  # W + B @ A with A, B ~ N(0, 0.01²)
NEW_ROWS = 100  # vocabulary extension
CHAIN = 5  # checkpoints in the chain


@dataclass(frozen=True)
class Spec:
    """One version derived from another: a variant of the base, or a checkpoint of the chain."""

    name: str  # also its branch (variants) or tag (every version) in the repositories
    kind: str
    parent: str  # "base" or another spec's name
    what: str

    @property
    def branch(self) -> str:
        return "chain" if self.kind == "step" else self.name


SPECS = (
    Spec("dense", "dense", "base", "dense full fine-tune: every tensor + N(0, (2% σ)²)"),
    Spec("frozen-half", "frozen-half", "base", "lower half of the layers and embed_tokens frozen, the rest as dense"),
    Spec("lora", "lora", "base", f"LoRA rank {LORA_RANK} merged into every q_proj and v_proj"),
    Spec("vocab", "vocab", "base", f"vocabulary + {NEW_ROWS} rows (embed_tokens, lm_head)"),
    Spec("layer", "layer", "base", "one layer appended (to the last shard)"),
    *(
        Spec(f"chain-{k}", "step", "base" if k == 1 else f"chain-{k - 1}", "previous + N(0, (1% σ)²), every tensor")
        for k in range(1, CHAIN + 1)
    ),
)


@dataclass
class Version:
    """A model directory to store: the base or one of the specs, with what changed from its parent."""

    name: str
    parent: str
    what: str
    model: Path
    sums: dict[str, str]
    changes: dict[str, int] = field(default_factory=dict)

    @property
    def raw(self) -> int:
        return sum((self.model / name).stat().st_size for name in self.sums)

    @property
    def changed(self) -> int:
        """Raw bytes of what changed: modified tensors whole, plus new rows and new tensors."""
        return self.changes.get("modified_bytes", 0) + self.changes.get("new_bytes", 0)


def shard_tensors(path: Path) -> list[str]:
    """Tensor names of a safetensors file in data-offset order."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        doc = json.loads(f.read(n))
    doc.pop("__metadata__", None)
    return sorted(doc, key=lambda name: doc[name]["data_offsets"][0])


def trained_in_half(name: str, layers: int) -> bool:
    """frozen-half: the upper half of the layers, the final norm and lm_head train; the rest is frozen."""
    found = re.match(r"model\.layers\.(\d+)\.", name)
    return int(found.group(1)) >= layers // 2 if found else name in (FINAL_NORM, LM_HEAD)


def generated(name: str, shape: tuple[int, ...], gen: Any) -> Any:
    """A new tensor drawn like the base's (bench_core's generator: N(0, 0.02), norms ones)."""
    import torch

    data = bytearray(b"".join(tensor_pieces(name, shape, gen)))
    return torch.frombuffer(data, dtype=torch.bfloat16).reshape(shape)


def noisy(t: Any, rel: float, gen: Any) -> Any:
    """t + N(0, (rel·σ)²), σ the tensor's std (its RMS when constant, e.g. norms of ones), in fp32."""
    import torch

    x = t.float()
    scale = float(x.std()) or float(x.pow(2).mean().sqrt())
    return (x + torch.randn(x.shape, generator=gen) * (rel * scale)).to(torch.bfloat16)


def changed_tensor(kind: str, name: str, t: Any, layers: int, gen: Any) -> Any:
    """The variant's version of one tensor of its parent."""
    import torch

    if kind == "dense" or (kind == "frozen-half" and trained_in_half(name, layers)):
        return noisy(t, DENSE_NOISE, gen)
    if kind == "step":
        return noisy(t, STEP_NOISE, gen)
    if kind == "lora" and name.endswith(("self_attn.q_proj.weight", "self_attn.v_proj.weight")):
        out_dim, in_dim = t.shape
        a = torch.randn(LORA_RANK, in_dim, generator=gen) * LORA_STD
        b = torch.randn(out_dim, LORA_RANK, generator=gen) * LORA_STD
        return (t.float() + b @ a).to(torch.bfloat16)
    if kind == "vocab" and name in (EMBED, LM_HEAD):
        return torch.cat([t, generated(name, (NEW_ROWS, t.shape[1]), gen)])
    return t


def extra_tensors(kind: str, config: dict, gen: Any) -> list[tuple[str, Any]]:
    """New tensors of the variant (appended to the last shard): one more layer for "layer"."""
    if kind != "layer":
        return []
    shape = Shape(
        config["hidden_size"], config["intermediate_size"], config["num_attention_heads"], config["num_key_value_heads"]
    )
    return [(name, generated(name, s, gen)) for name, s in shape.layer_tensors(config["num_hidden_layers"])]


def account(changes: Counter, old: Any, new: Any) -> None:
    """Add what differs between a parent tensor (None: none) and its new version."""
    import torch

    nbytes = 2 * new.numel()
    changes["tensors"] += 1
    if old is None:
        changes["new_bytes"] += nbytes
        changes["changed_tensors"] += 1
        return
    if old.shape == new.shape:
        diff = int((old.view(torch.int16) != new.view(torch.int16)).sum())
        changes["elements"] += new.numel()
        changes["changed_elements"] += diff
        if diff:
            changes["modified_bytes"] += nbytes
            changes["changed_tensors"] += 1
        return
    rows = old.shape[0]
    changes["changed_tensors"] += 1
    if old.shape[1:] == new.shape[1:] and torch.equal(new[:rows].view(torch.int16), old.view(torch.int16)):
        changes["new_bytes"] += nbytes - 2 * old.numel()
    else:
        changes["modified_bytes"] += nbytes


def write_shard(path: Path, tensors: list[tuple[str, Any]]) -> None:
    import torch

    if any(t.dtype != torch.bfloat16 for _, t in tensors):
        raise RuntimeError("the generated models hold bf16 tensors only")
    header = safetensors_header([(name, tuple(t.shape)) for name, t in tensors])
    with open(path, "wb") as f:
        f.write(len(header).to_bytes(8, "little"))
        f.write(header)
        for _, t in tensors:
            f.write(t.contiguous().view(torch.int16).numpy().tobytes())


def derive(kind: str, src: Path, dest: Path, seed: int) -> None:
    """Write the ``kind`` variant of the model in ``src`` to ``dest``, and what changed to CHANGES_FILE."""
    import torch
    from safetensors import safe_open

    index = json.loads((src / INDEX_FILE).read_text())
    config = json.loads((src / CONFIG_FILE).read_text())
    layers = config["num_hidden_layers"]
    shards = sorted(set(index["weight_map"].values()))
    changes: Counter = Counter()
    weight_map: dict[str, str] = {}
    total = 0
    dest.mkdir(parents=True)
    i = 0
    for k, fname in enumerate(shards):
        out = []
        with safe_open(str(src / fname), framework="pt") as f:
            for name in shard_tensors(src / fname):
                old = f.get_tensor(name)
                new = changed_tensor(kind, name, old, layers, torch.Generator().manual_seed(seed * 100_003 + i))
                account(changes, old, new)
                out.append((name, new))
                i += 1
        if k == len(shards) - 1:
            for name, t in extra_tensors(kind, config, torch.Generator().manual_seed(seed * 100_003 + i)):
                account(changes, None, t)
                out.append((name, t))
        write_shard(dest / fname, out)
        weight_map.update({name: fname for name, _ in out})
        total += sum(2 * t.numel() for _, t in out)
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (dest / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n")
    if kind == "vocab":
        config["vocab_size"] += NEW_ROWS
    if kind == "layer":
        config["num_hidden_layers"] += 1
    (dest / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    (dest.parent / CHANGES_FILE).write_text(json.dumps(dict(changes)) + "\n")


def ensure_versions(workdir: Path, base: Path, base_sums: dict[str, str]) -> list[Version]:
    """The base and every spec's model directory (each reused when already generated and intact)."""
    root = variants_root(workdir, base, base_sums)
    versions = {"base": base_version(base, base_sums)}
    for spec in SPECS:
        versions[spec.name] = ensure_spec(root, spec, versions[spec.parent])
    return list(versions.values())


def ensure_variant(workdir: Path, base: Path, base_sums: dict[str, str], name: str) -> Version:
    """One spec's model directory and those it derives from (e.g. only "dense"), as ensure_versions makes them."""
    specs = {s.name: s for s in SPECS}
    if name not in specs:
        raise ValueError(f"no variant {name!r}; there are: {', '.join(specs)}")
    chain = [specs[name]]
    while chain[-1].parent != "base":
        chain.append(specs[chain[-1].parent])
    root = variants_root(workdir, base, base_sums)
    version = base_version(base, base_sums)
    for spec in reversed(chain):
        version = ensure_spec(root, spec, version)
    return version


def variants_root(workdir: Path, base: Path, base_sums: dict[str, str]) -> Path:
    """Where the variants of this base are cached (by the base's size)."""
    return workdir / f"variants-{sum((base / n).stat().st_size for n in base_sums)}"


def base_version(base: Path, base_sums: dict[str, str]) -> Version:
    return Version("base", "", "the generated base model", base, base_sums)


def ensure_spec(root: Path, spec: Spec, parent: Version) -> Version:
    """``spec``'s model directory under ``root``, derived from ``parent`` (reused when already generated and intact)."""
    home = root / spec.name
    want = {
        "version": VARIANT_VERSION,
        "seed": SEED + 1000 * (SPECS.index(spec) + 1),
        "kind": spec.kind,
        "parent_sums": parent.sums,
    }
    meta_path = home / META_FILE
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    if {k: meta.get(k) for k in want} != want or sha256_files(home / MODEL_DIR) != meta.get("sums"):
        shutil.rmtree(home, ignore_errors=True)
        print(f"generating {spec.name}: {spec.what}", flush=True)
        t0 = time.perf_counter()
        in_child(derive, spec.kind, parent.model, home / MODEL_DIR, want["seed"], what=f"generating {spec.name}")
        changes = json.loads((home / CHANGES_FILE).read_text())
        meta = {**want, "sums": sha256_files(home / MODEL_DIR), "changes": changes}
        meta_path.write_text(json.dumps(meta, indent=2) + "\n")
        print(f"  done in {time.perf_counter() - t0:.1f} s", flush=True)
    return Version(spec.name, spec.parent, spec.what, home / MODEL_DIR, meta["sums"], meta["changes"])
