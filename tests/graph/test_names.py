"""Tensor names as git tree entry names: reversible, never reserved, never a path."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mgit.graph.names import decode_tensor_name, encode_tensor_name, is_reserved


@given(st.text())
def test_round_trip_and_safe(name):
    entry = encode_tensor_name(name)
    assert decode_tensor_name(entry) == name
    assert "/" not in entry and "\0" not in entry and entry
    assert not entry.startswith(".")
    assert not is_reserved(entry)
    assert entry not in (".", "..")


def test_examples():
    assert encode_tensor_name("model.layers.0.weight") == "model.layers.0.weight"
    assert encode_tensor_name("a/b") == "a%2Fb"
    assert encode_tensor_name(".mgit-header") == "%2Emgit-header"
    assert encode_tensor_name("..") == "%2E."
    assert encode_tensor_name("") == "%"
    assert decode_tensor_name("%25") == "%"
