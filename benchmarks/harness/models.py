"""The one generated input: a llama-like bf16 model, streamed to disk and cached per size.

Why: every benchmark measures the same kind of model, made the same way (fixed seed, sharded
safetensors + index + config), so their numbers can be set side by side. Generation runs in a
spawned child (``in_child``): torch stays out of the benchmark's own process, whose memory
every timed child inherits at fork (and so would inflate their peak RSS).
"""

from __future__ import annotations

import json
import math
import multiprocessing
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.runner import MODEL_DIR, sha256_files

SEED = 1234
GEN_VERSION = 1  # bump when the generated model changes, so cached copies are rebuilt
META_FILE = ".bench-model.json"
GB = 10**9
MB = 10**6
BLOCK_ELEMENTS = 1 << 22  # elements generated per piece (bounded memory)
SHARDS = 3  # the model is cut into at most this many safetensors files

Tensors = list[tuple[str, tuple[int, ...]]]


@dataclass(frozen=True)
class Shape:
    """A llama-like architecture; the number of layers is chosen to hit the size."""

    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int = 32000

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def layer_tensors(self, i: int) -> Tensors:
        h, m, kv = self.hidden, self.intermediate, self.kv_heads * self.head_dim
        p = f"model.layers.{i}."
        return [
            (p + "input_layernorm.weight", (h,)),
            (p + "self_attn.q_proj.weight", (h, h)),
            (p + "self_attn.k_proj.weight", (kv, h)),
            (p + "self_attn.v_proj.weight", (kv, h)),
            (p + "self_attn.o_proj.weight", (h, h)),
            (p + "post_attention_layernorm.weight", (h,)),
            (p + "mlp.gate_proj.weight", (m, h)),
            (p + "mlp.up_proj.weight", (m, h)),
            (p + "mlp.down_proj.weight", (h, m)),
        ]

    def embedding_bytes(self) -> int:
        return 2 * 2 * self.vocab * self.hidden  # embed_tokens + lm_head, bf16

    def layer_bytes(self) -> int:
        return 2 * sum(math.prod(s) for _, s in self.layer_tensors(0))


# Largest first; TinyLlama-1.1B's shapes lead. Smaller ones serve --quick / small sizes.
SHAPES = (
    Shape(hidden=2048, intermediate=5632, heads=32, kv_heads=4),
    Shape(hidden=1024, intermediate=2816, heads=16, kv_heads=4),
    Shape(hidden=512, intermediate=1408, heads=8, kv_heads=8),
)


# Shapes by name, for a benchmark that fixes the architecture and picks the layer count
# (bench_scale: TinyLlama-1.1B's own 22 layers, or fewer for --quick); "tiny" is for tests.
NAMED_SHAPES = {
    "tinyllama": SHAPES[0],
    "medium": SHAPES[1],
    "small": SHAPES[2],
    "tiny": Shape(hidden=256, intermediate=704, heads=4, kv_heads=4, vocab=1024),
}


@dataclass(frozen=True)
class ModelPlan:
    shape: Shape
    layers: int
    tensors: Tensors

    @property
    def nbytes(self) -> int:
        return sum(2 * math.prod(s) for _, s in self.tensors)


def plan_model(size_bytes: int) -> ModelPlan:
    """Pick the largest shape whose embeddings fit in 70% of the size, then the layer count."""
    shape = next((s for s in SHAPES if s.embedding_bytes() <= 0.7 * size_bytes), SHAPES[-1])
    return plan_layers(shape, max(1, round((size_bytes - shape.embedding_bytes()) / shape.layer_bytes())))


def plan_layers(shape: Shape, layers: int) -> ModelPlan:
    """The model of ``shape`` with ``layers`` layers: embeddings, the layers, final norm, lm_head."""
    if layers < 1:
        raise ValueError("a model has at least one layer")
    tensors: Tensors = [("model.embed_tokens.weight", (shape.vocab, shape.hidden))]
    for i in range(layers):
        tensors += shape.layer_tensors(i)
    tensors += [("model.norm.weight", (shape.hidden,)), ("lm_head.weight", (shape.vocab, shape.hidden))]
    return ModelPlan(shape, layers, tensors)


def split_shards(tensors: Tensors, shards: int) -> list[Tensors]:
    """Cut the tensor list, in order, into at most ``shards`` runs of about equal bytes."""
    total = sum(2 * math.prod(s) for _, s in tensors)
    out: list[Tensors] = [[]]
    done = 0
    for name, shape in tensors:
        if out[-1] and done >= total * len(out) / shards and len(out) < shards:
            out.append([])
        out[-1].append((name, shape))
        done += 2 * math.prod(shape)
    return out


def safetensors_header(tensors: Tensors) -> bytes:
    """A safetensors header (JSON, space-padded to 8 bytes) for bf16 tensors stored in order."""
    doc: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in tensors:
        end = offset + 2 * math.prod(shape)
        doc[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, end]}
        offset = end
    header = json.dumps(doc, separators=(",", ":")).encode()
    return header + b" " * (-len(header) % 8)


def safetensors_bytes(dirs: Sequence[Path]) -> int:
    """The size of the safetensors files in ``dirs`` (what a tool reading them whole reads)."""
    return sum(p.stat().st_size for d in dirs for p in d.glob("*.safetensors"))


def tensor_pieces(name: str, shape: tuple[int, ...], gen: Any) -> Iterator[bytes]:
    """The tensor's bf16 bytes in pieces: ones for norms, N(0, 0.02) otherwise."""
    import torch

    numel = math.prod(shape)
    for start in range(0, numel, BLOCK_ELEMENTS):
        n = min(BLOCK_ELEMENTS, numel - start)
        if name.endswith("norm.weight"):
            block = torch.ones(n, dtype=torch.bfloat16)
        else:
            block = (torch.randn(n, generator=gen, dtype=torch.float32) * 0.02).to(torch.bfloat16)
        yield block.view(torch.int16).numpy().tobytes()


def write_model(dest: Path, plan: ModelPlan, shards: int) -> None:
    """Stream the model to ``dest`` (a directory) shard by shard, tensor by tensor."""
    import torch

    gen = torch.Generator().manual_seed(SEED)
    dest.mkdir(parents=True)
    parts = split_shards(plan.tensors, shards)
    weight_map = {}
    for k, part in enumerate(parts, 1):
        fname = f"model-{k:05d}-of-{len(parts):05d}.safetensors"
        header = safetensors_header(part)
        with open(dest / fname, "wb") as f:
            f.write(len(header).to_bytes(8, "little"))
            f.write(header)
            for name, shape in part:
                for piece in tensor_pieces(name, shape, gen):
                    f.write(piece)
                weight_map[name] = fname
    index = {"metadata": {"total_size": plan.nbytes}, "weight_map": weight_map}
    (dest / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    s = plan.shape
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": s.hidden,
        "intermediate_size": s.intermediate,
        "num_hidden_layers": plan.layers,
        "num_attention_heads": s.heads,
        "num_key_value_heads": s.kv_heads,
        "vocab_size": s.vocab,
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    (dest / "config.json").write_text(json.dumps(config, indent=2) + "\n")


def check_model(model: Path, plan: ModelPlan) -> None:
    """Read the shards back with the safetensors library: every tensor, right shape and dtype."""
    import torch
    from safetensors import safe_open

    index = json.loads((model / "model.safetensors.index.json").read_text())
    seen = {}
    for fname in sorted(set(index["weight_map"].values())):
        with safe_open(str(model / fname), framework="pt") as f:
            for name in f.keys():
                seen[name] = f.get_slice(name).get_shape()
            probe = next(n for n in f.keys() if not n.endswith("norm.weight"))
            t = f.get_tensor(probe)
            if t.dtype != torch.bfloat16 or not 0.015 < float(t.float().std()) < 0.025:
                raise RuntimeError(f"generated tensor {probe} does not look like N(0, 0.02) in bf16")
    want = {n: list(s) for n, s in plan.tensors}
    if seen != want:
        raise RuntimeError("generated shards do not hold the planned tensors")


def generate(dest: Path, plan: ModelPlan, shards: int) -> None:
    write_model(dest, plan, shards)
    check_model(dest, plan)


def in_child(target: Callable[..., None], *args: object, what: str) -> None:
    """Run ``target(*args)`` in a spawned child (torch stays out of this process); fail loudly."""
    child = multiprocessing.get_context("spawn").Process(target=target, args=args)
    child.start()
    child.join()
    if child.exitcode != 0:
        raise RuntimeError(f"{what} failed (exit {child.exitcode})")


def model_home(workdir: Path, plan: ModelPlan, sized: bool = True) -> Path:
    """Where the model of ``plan`` is cached: by its size when the size chose the plan, else by shape too."""
    if sized:
        return workdir / f"model-{plan.nbytes}"
    return workdir / f"model-h{plan.shape.hidden}-v{plan.shape.vocab}-l{plan.layers}-{plan.nbytes}"


def ensure_model(
    workdir: Path, size_gb: float | None, shards: int = SHARDS, plan: ModelPlan | None = None
) -> tuple[Path, ModelPlan, dict[str, str]]:
    """The generated model for this size, or of this ``plan`` (reused when already there): path, plan, sha256s."""
    sized = plan is None
    if plan is None:
        if size_gb is None:
            raise ValueError("ensure_model needs a size or a plan")
        plan = plan_model(int(size_gb * GB))
    home = model_home(workdir, plan, sized)
    meta_path = home / META_FILE
    want: dict[str, object] = {"version": GEN_VERSION, "seed": SEED, "bytes": plan.nbytes, "shards": shards}
    if not sized:
        want["shape"] = [plan.shape.hidden, plan.shape.intermediate, plan.shape.heads, plan.shape.kv_heads]
        want["vocab"], want["layers"] = plan.shape.vocab, plan.layers
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if {k: meta.get(k) for k in want} == want and sha256_files(home / MODEL_DIR) == meta["sha256"]:
            print(f"reusing the generated model in {home / MODEL_DIR}")
            return home / MODEL_DIR, plan, meta["sha256"]
    shutil.rmtree(home, ignore_errors=True)
    print(f"generating a {plan.nbytes / GB:.2f} GB bf16 model ({plan.layers} layers, hidden {plan.shape.hidden})")
    t0 = time.perf_counter()
    in_child(generate, home / MODEL_DIR, plan, shards, what="generating the model")
    sums = sha256_files(home / MODEL_DIR)
    meta_path.write_text(json.dumps({**want, "sha256": sums}, indent=2) + "\n")
    print(f"  generated and checked in {time.perf_counter() - t0:.1f} s")
    return home / MODEL_DIR, plan, sums


def model_bytes(model: Path, sums: dict[str, str]) -> int:
    """All files of a model directory (as hashed): its raw size."""
    return sum((model / name).stat().st_size for name in sums)
