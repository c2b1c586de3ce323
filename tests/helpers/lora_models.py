"""Tiny real Llama models and real PEFT LoRA adapters made by peft (B drawn at random, so the
update is not zero), and a repository holding the base and one adapter: the inputs of the
`MODEL+LORA` merge tests (tests/merge/test_lora_inputs.py, test_verify_features.py)."""

from __future__ import annotations

from pathlib import Path

import torch

from mgit import Repository

LLAMA = {
    "vocab_size": 64,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "attention_bias": True,
}
# adapter "a": plain LoRA; adapter "b": rsLoRA with a per-module rank and alpha, a trained bias
# of the adapted layers (bias: lora_only) and lm_head saved whole (modules_to_save)
ADAPTERS = {
    "a": {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj", "down_proj"]},
    "b": {
        "r": 8,
        "lora_alpha": 4,
        "use_rslora": True,
        "rank_pattern": {"up_proj": 2},
        "alpha_pattern": {"layers.1.self_attn.o_proj": 16},
        "target_modules": ["k_proj", "o_proj", "up_proj"],
        "modules_to_save": ["lm_head"],
        "bias": "lora_only",
    },
}


def save_model(path: Path, seed: int, dtype: torch.dtype) -> None:
    import transformers

    torch.manual_seed(seed)
    transformers.LlamaForCausalLM(transformers.LlamaConfig(**LLAMA)).to(dtype).save_pretrained(path)


def save_adapter(model: Path, path: Path, seed: int, **config: object) -> None:
    """A real PEFT adapter of ``model``: B and the other trained tensors drawn at random."""
    import peft
    import transformers

    wrapped = peft.get_peft_model(transformers.LlamaForCausalLM.from_pretrained(model), peft.LoraConfig(**config))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in wrapped.named_parameters():
            if p.requires_grad and "lora_A" not in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    wrapped.save_pretrained(path)


def lora_inputs(root: Path) -> Path:
    """bf16 and f32 base models, an expert, adapters a and b of each base, under ``root``."""
    for tag, dtype in (("bf16", torch.bfloat16), ("f32", torch.float32)):
        save_model(root / tag / "base", 0, dtype)
        for k, (name, config) in enumerate(ADAPTERS.items()):
            save_adapter(root / tag / "base", root / tag / f"adapter-{name}", 10 + k, **config)
    save_model(root / "bf16" / "other", 1, torch.bfloat16)
    return root


def lora_repo(path: Path, inputs: Path, tag: str = "bf16") -> Repository:
    """A repository: the base on main; adapter b committed on branch adapters under lora/b."""
    repo = Repository.init(path)
    (path / "model").mkdir()
    for f in (inputs / tag / "base").iterdir():
        (path / "model" / f.name).write_bytes(f.read_bytes())
    repo.add(["."])
    repo.commit("base")
    repo.create_branch("adapters")
    repo.switch("adapters")
    (path / "lora" / "b").mkdir(parents=True)
    for f in ("adapter_config.json", "adapter_model.safetensors"):
        (path / "lora" / "b" / f).write_bytes((inputs / tag / "adapter-b" / f).read_bytes())
    repo.add(["lora"])
    repo.commit("adapter b")
    repo.switch("main")
    return repo
