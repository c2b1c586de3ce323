"""The patch delta: a chunk compressed by zstd with its base chunk as a dictionary.

A large non-tensor file's edit may move the bytes after it; zstd's "patch-from" mode finds moved
bytes in the base, so the frame holds about the edit. The window and hash table grow with the
sizes so zstd sees the whole base. Details: docs/design.md, "Notes from the code".
"""

from __future__ import annotations

import zstandard

PATCH_LEVEL = 1  # zstd's fastest strategy finds the long verbatim runs a patch is made of
MIN_HASH_LOG = 6  # zstd's smallest table
MIN_WINDOW_LOG = 10  # zstd's smallest window
Bytes = bytes | bytearray | memoryview


def _log2_ceil(n: int) -> int:
    return max(0, (n - 1).bit_length())


def _dictionary(base: Bytes) -> zstandard.ZstdCompressionDict:
    return zstandard.ZstdCompressionDict(base, dict_type=zstandard.DICT_TYPE_RAWCONTENT)


def encode(raw: Bytes, base: Bytes) -> bytes:
    """One zstd frame of ``raw`` (its size in the header, no checksum) that decodes only with
    ``base`` as its dictionary (:func:`decompressor`)."""
    params = zstandard.ZstdCompressionParameters.from_level(
        PATCH_LEVEL,
        window_log=max(MIN_WINDOW_LOG, _log2_ceil(len(raw) + len(base))),
        hash_log=max(MIN_HASH_LOG, _log2_ceil(len(base)) - 3),
        write_content_size=True,
        write_checksum=False,
    )
    return zstandard.ZstdCompressor(dict_data=_dictionary(base), compression_params=params).compress(raw)


def decompressor(base: Bytes) -> zstandard.ZstdDecompressor:
    """A decompressor for frames :func:`encode` made against ``base`` (one per chunk: the
    dictionary is the base itself)."""
    return zstandard.ZstdDecompressor(dict_data=_dictionary(base))
