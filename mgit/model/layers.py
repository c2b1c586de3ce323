"""Where a tensor sits in a transformer: its layer index and module group.

Names follow the common conventions (llama `model.layers.N.self_attn.q_proj`, BERT
`encoder.layer.N.attention`, GPT-2 `h.N.mlp`, MoE `experts.N`); anything else falls in
group "other". Lives with the model (not with diff) because diff summaries and merge
configurations (per-layer weights, layer ranges) name tensors the same way.
"""

from __future__ import annotations

import re

_LAYER = re.compile(r"(?:^|\.)(?:layers?|h|blocks?|block)\.(\d+)(?:\.|$)")
_EXPERT = re.compile(r"(?:^|\.)experts\.(\d+)(?:\.|$)")
_MODULES = (
    ("embed", re.compile(r"embed|wte|wpe|word_embeddings|position_embeddings|token_type|lm_head|tok_embeddings")),
    ("norm", re.compile(r"norm|(?:^|\.)ln(?:_|\.|\d)|layer_norm|LayerNorm")),
    ("attn", re.compile(r"attn|attention|q_proj|k_proj|v_proj|o_proj|query|key|value|qkv")),
    (
        "mlp",
        re.compile(
            r"mlp|ffn|feed_forward|gate_proj|up_proj|down_proj|fc\d|intermediate|(?:^|\.)output\.dense|w[123]\.|router|gate\."
        ),
    ),
)


def layer_of(name: str) -> int | None:
    m = _LAYER.search(name)
    return int(m.group(1)) if m else None


def module_of(name: str) -> str:
    """attn / mlp / norm / embed / experts.N / other."""
    expert = _EXPERT.search(name)
    if expert:
        return f"experts.{expert.group(1)}"
    for group, pattern in _MODULES:
        if pattern.search(name):
            return group
    return "other"
