"""Reversible encoding of tensor names as git tree entry names, and reserved names.

Tree entry names cannot contain '/' or NUL, and '.'/'..' are special. We percent-encode
('%XX', UTF-8) every byte outside [A-Za-z0-9_.~-], and a leading '.', so an encoded
tensor name never starts with '.': every entry beginning with '.mgit-' is ours.
The empty tensor name is encoded as '%' alone (never produced otherwise).
"""

from __future__ import annotations

from urllib.parse import quote, unquote

RESERVED_PREFIX = ".mgit-"
HEADER_ENTRY = ".mgit-header"  # in a safetensors file tree: the verbatim header bytes
CHUNKED_ENTRY = ".mgit-chunks"  # in a chunked-file tree: its FileManifest
TMP_MARK = ".mgit-tmp-"  # in a working file's name: a checkout's temporary, never a file of the tree


def encode_tensor_name(name: str) -> str:
    if name == "":
        return "%"
    encoded = quote(name, safe="")
    if encoded.startswith("."):
        encoded = "%2E" + encoded[1:]
    return encoded


def decode_tensor_name(entry: str) -> str:
    return "" if entry == "%" else unquote(entry, errors="strict")


def is_reserved(entry_name: str) -> bool:
    return entry_name.startswith(RESERVED_PREFIX)
