"""Header depth limit (issue 12, item 24): deep nesting is refused in one line before the
recursive JSON parser sees it; brackets inside strings never count."""

from __future__ import annotations

import json
import struct

import pytest

from mgit.errors import BadInputError
from mgit.model.safetensors_file import MAX_HEADER_DEPTH, json_depth, parse_header


def _header(body: bytes, data: int = 0) -> tuple[bytes, int]:
    body += b" " * (-len(body) % 8)
    header = struct.pack("<Q", len(body)) + body
    return header, len(header) + data


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("", 0),
        ('{"a": {"b": [1, 2]}}', 3),
        ('{"[[[[": "{{{{", "x\\"[[": []}', 2),  # brackets inside strings, an escaped quote
        ('{"a\\\\": [[1]]}', 3),  # an escaped backslash ends the string where JSON does
        ("[" * 1000 + "]" * 1000, 1000),
    ],
)
def test_json_depth_counts_brackets_outside_strings(text, depth):
    assert json_depth(text) == depth


def test_a_header_nested_past_the_limit_is_refused_naming_the_file():
    nested = "[" * (MAX_HEADER_DEPTH + 1) + "]" * (MAX_HEADER_DEPTH + 1)
    header, size = _header(json.dumps({"__metadata__": {"k": "v"}, "t": {"x": json.loads(nested)}}).encode())
    with pytest.raises(BadInputError, match=r"^model\.safetensors: safetensors header nests JSON 35 levels deep"):
        parse_header(header, size, "model.safetensors")


def test_a_million_levels_is_refused_without_recursion():
    header, size = _header(b"[" * 1_000_000)
    with pytest.raises(BadInputError, match="nests JSON 1000000 levels deep"):
        parse_header(header, size, "m.safetensors")


def test_brackets_in_names_and_metadata_are_data():
    name = 'w[[[[{{"]]'
    obj = {"__metadata__": {"note": "[" * 100}, name: {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}
    header, size = _header(json.dumps(obj).encode(), data=8)
    layout = parse_header(header, size, "m.safetensors")
    assert [t.name for t in layout.tensors] == [name] and layout.metadata == {"note": "[" * 100}
