"""Tensor-name conventions shared by diff and merge."""

from mgit.model.layers import layer_of, module_of


def test_layer_of_common_conventions():
    assert layer_of("model.layers.3.self_attn.q_proj.weight") == 3
    assert layer_of("encoder.layer.11.attention.self.query.weight") == 11
    assert layer_of("h.0.mlp.c_fc.weight") == 0
    assert layer_of("model.embed_tokens.weight") is None


def test_module_of_groups():
    assert module_of("model.layers.0.self_attn.q_proj.weight") == "attn"
    assert module_of("model.layers.0.mlp.down_proj.weight") == "mlp"
    assert module_of("model.layers.0.input_layernorm.weight") == "norm"
    assert module_of("model.embed_tokens.weight") == "embed"
    assert module_of("model.layers.0.block_sparse_moe.experts.7.w1.weight") == "experts.7"
    assert module_of("something.else") == "other"
