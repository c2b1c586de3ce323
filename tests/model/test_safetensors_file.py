"""Header parsing: byte-exact layouts of valid files, one clear error for each lie."""

from __future__ import annotations

import json
import struct

import pytest
import torch
from safetensors.torch import save_file

from mgit.errors import BadInputError
from mgit.model.dtypes import DTYPES
from mgit.model.safetensors_file import build_header, parse_header, read_layout


def raw_file(header_obj: object, data: bytes = b"", pad: bytes = b"", header_text: bytes | None = None) -> bytes:
    body = header_text if header_text is not None else json.dumps(header_obj).encode() + pad
    return struct.pack("<Q", len(body)) + body + data


def write(tmp_path, content: bytes):
    p = tmp_path / "bad.safetensors"
    p.write_bytes(content)
    return p


def test_layout_of_a_real_file_keeps_header_bytes(tmp_path):
    p = tmp_path / "m.safetensors"
    save_file({"b": torch.zeros(3, 2), "a": torch.ones(4, dtype=torch.bfloat16)}, p, metadata={"k": "v"})
    layout = read_layout(p)
    data = p.read_bytes()
    assert data.startswith(layout.header)
    assert layout.file_size == len(data)
    assert layout.metadata == {"k": "v"}
    begins = [t.begin for t in layout.tensors]
    assert begins == sorted(begins) and {t.name for t in layout.tensors} == {"a", "b"}


def test_build_header_round_trips_through_parse():
    specs = [("x", DTYPES["F32"], (2, 3)), ("y", DTYPES["BF16"], ()), ("z", DTYPES["I8"], (0,))]
    header = build_header(specs, {"m": "1"})
    layout = parse_header(header, len(header) + 24 + 2, "built")
    assert [(t.name, t.begin, t.end) for t in layout.tensors] == [("x", 0, 24), ("y", 24, 26), ("z", 26, 26)]
    assert len(header) % 8 == 0


GOOD = {"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\x01\x02", "truncated"),
        (struct.pack("<Q", 1000) + b"{}", "beyond the end"),
        (struct.pack("<Q", 10**12) + b"{}", "exceeds"),
        (raw_file(None, header_text=b"\xff\xfe{}"), "not valid UTF-8"),
        (raw_file(None, header_text=b"{not json"), "not valid JSON"),
        (raw_file(None, header_text=b"[1, 2]"), "not a JSON object"),
        (
            raw_file(
                None,
                b"\0" * 16,
                header_text=b'{"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},'
                b' "t": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}',
            ),
            "duplicate tensor name",
        ),
        (raw_file({"t": {"dtype": "Q7", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8), "unknown dtype"),
        (raw_file({"t": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8), "needs 12 bytes"),
        (raw_file({"t": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 8]}}, b"\0" * 8), "invalid shape"),
        (raw_file({"t": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}}, b"\0" * 8), "invalid data_offsets"),
        (
            raw_file(
                {
                    "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                    "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},
                },
                b"\0" * 12,
            ),
            "overlaps",
        ),
        (raw_file({"t": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, b"\0" * 12), "gap"),
        (raw_file(GOOD, b"\0" * 4), "beyond the data"),
        (raw_file(GOOD, b"\0" * 12), "trailing bytes"),
        (raw_file({"__metadata__": {"a": 1}, **GOOD}, b"\0" * 8), "__metadata__"),
        (raw_file({"t": 5}, b""), "no dtype/shape"),
    ],
)
def test_bad_headers_give_one_clear_error(tmp_path, content, message):
    p = write(tmp_path, content)
    with pytest.raises(BadInputError) as info:
        read_layout(p, "bad.safetensors")
    text = str(info.value)
    assert message in text
    assert "\n" not in text and text.startswith("bad.safetensors:")


def test_our_validation_agrees_with_the_safetensors_reader_on_valid_files(tmp_path):
    from safetensors import safe_open

    p = tmp_path / "ok.safetensors"
    save_file({"w": torch.randn(5, 3), "e": torch.zeros(0, 4), "s": torch.tensor(1.5)}, p)
    layout = read_layout(p)
    with safe_open(p, "pt") as f:
        assert set(f.keys()) == set(layout.by_name())
        for t in layout.tensors:
            assert list(f.get_slice(t.name).get_shape()) == list(t.shape)
