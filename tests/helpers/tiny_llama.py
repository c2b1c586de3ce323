"""Tiny real transformers models with tokenizers, built offline: a 2-layer Llama (hidden size 32)
and a small BPE tokenizer made with the ``tokenizers`` library, saved with ``save_pretrained``.
The tokenizer-merge tests give two of them different vocabularies (added tokens)."""

from __future__ import annotations

from pathlib import Path

import torch


def tokenizer(added: list[str], specials: list[str]):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for c in "abcdefghijklmnopqrstuvwxyz":
        vocab[c] = len(vocab)
    merges = [("a", "b"), ("c", "d"), ("e", "f")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    if added:
        fast.add_tokens(added)
    if specials:
        fast.add_special_tokens({"additional_special_tokens": specials})
    return fast


def write_llama(path: Path, seed: int, added: list[str] = (), specials: list[str] = (), tied: bool = False) -> Path:
    """A 2-layer Llama in bf16 whose tokenizer is the base one plus ``added`` and ``specials``
    (its embeddings resized to match), saved to ``path``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    tok = tokenizer(list(added), list(specials))
    cfg = LlamaConfig(
        vocab_size=32,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=tied,
    )
    model = LlamaForCausalLM(cfg)
    if len(tok) != cfg.vocab_size:
        model.resize_token_embeddings(len(tok), mean_resizing=False)
    model.to(torch.bfloat16).save_pretrained(path)
    tok.save_pretrained(path)
    return path
