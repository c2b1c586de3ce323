"""The patch delta: a chunk compressed by zstd with its base chunk as a dictionary.

A chunk of a large non-tensor file (a GGUF, a pickled checkpoint) has no elements to subtract
or XOR: an edit may have moved the bytes after it by any amount. zstd finds such moved bytes
if it may copy them from the base, which is what its "patch-from" mode does: the base's raw
bytes are a raw-content dictionary, so the frame holds only what the base lacks and where to
copy the rest from (a one-row edit of a 1 MiB chunk: ~120 bytes; a few bytes inserted: the same).

Two parameters make zstd see the whole base: the window covers the base and the chunk
(matches reach back at most one window), and the hash table is large enough that zstd loads
all of the dictionary (below the "btultra" strategies zstd loads only its last
``8 << hash_log`` bytes). Both grow with the sizes, so a small chunk costs a small table.
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
