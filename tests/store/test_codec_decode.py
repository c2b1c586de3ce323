"""The read path's decode (codec.decode): byte-exact against the format's own definition
(docs/format.md §4.5–4.6) for every group width, odd length and base length (XOR and difference
deltas), written once
into a fresh buffer (the zstd frame inflates into a reused per-thread buffer of planes)."""

from __future__ import annotations

import threading
import tracemalloc
from collections.abc import Callable

import numpy as np
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from mgit.store import codec


def _spec_decode(payload: bytes, group: int, base: bytes | None) -> bytes:
    """raw = xorprefix(ungroup(zstd_decompress(payload), group), base), as format.md writes it."""
    grouped = zstandard.ZstdDecompressor().decompress(payload)
    n = len(grouped)
    if group > 1 and n and n % group == 0:
        raw = bytearray(n)
        m = n // group
        for p in range(group):
            raw[p::group] = grouped[p * m : (p + 1) * m]  # raw[i*g + p] = grouped[p*M + i]
    else:
        raw = bytearray(grouped)
    for i in range(min(n, len(base or b""))):
        raw[i] ^= base[i]
    return bytes(raw)


def _weights(rng: np.random.Generator, n: int) -> bytes:
    """bf16/fp32-like bytes of any length (compressible high planes), so zstd has work to do."""
    words = (rng.standard_normal(n // 4 + 1).astype(np.float32) * 0.02).tobytes()
    return words[:n]


@st.composite
def chunks(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n = draw(st.one_of(st.integers(0, 64), st.integers(0, 300_000)))
    kind = draw(st.sampled_from(["weights", "noise", "zeros"]))
    raw = {"weights": _weights, "noise": lambda r, k: r.bytes(k), "zeros": lambda r, k: bytes(k)}[kind](rng, n)
    group = draw(st.sampled_from([1, 2, 3, 4, 8]))
    return rng, raw, group


@settings(max_examples=60)
@given(chunks(), st.sampled_from(["plain", "none", "shorter", "equal", "longer"]))
def test_decode_is_byte_exact_for_plain_and_delta_chunks(chunk, base_kind):
    rng, raw, group = chunk
    if base_kind == "plain":
        payload = zstandard.ZstdCompressor(level=codec.ZSTD_LEVEL).compress(codec.group_bytes(raw, group))
        out = codec.decode(codec.GROUPED_ZSTD, payload, group, len(raw))
        base = None
    else:
        size = {"none": 0, "shorter": len(raw) // 3 + 1, "equal": len(raw), "longer": len(raw) + 7}[base_kind]
        near = bytearray(raw[:size].ljust(size, b"\x5a"))
        near[:: 97 or 1] = rng.bytes(len(near[::97]))  # a base that differs here and there
        base = bytes(near)
        payload = codec.encode_delta(raw, base, group)
        out = codec.decode(codec.XOR_DELTA, payload, group, len(raw), base)
    assert bytes(out) == raw == _spec_decode(payload, group, base)
    assert not memoryview(out).readonly


def _spec_diff_decode(payload: bytes, group: int, base: bytes) -> bytes:
    """raw = base + unzigzag(ungroup(zstd_decompress(payload))) per little-endian element of
    ``group`` bytes, modulo 2^(8·group), and the ungrouped words as they are past the base's end:
    format.md §4.5, element by element with Python integers."""
    grouped = zstandard.ZstdDecompressor().decompress(payload)
    m, bits = len(grouped) // group, 8 * group
    out = bytearray()
    for i in range(m):
        z = int.from_bytes(bytes(grouped[p * m + i] for p in range(group)), "little")
        if (i + 1) * group > len(base):  # past the base's end: the word itself
            out += z.to_bytes(group, "little")
            continue
        d = (z >> 1) ^ -(z & 1)  # 0, 1, 2, 3 … → 0, −1, 1, −2 …
        b = int.from_bytes(base[i * group : (i + 1) * group], "little")
        out += ((b + d) % (1 << bits)).to_bytes(group, "little")
    return bytes(out)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.sampled_from(codec.DIFF_GROUPS),
    st.integers(1, 700),
    st.sampled_from(["shorter", "equal", "longer", "flipped", "extremes"]),
)
def test_a_difference_delta_decodes_byte_exact_by_the_formats_definition(seed, group, elements, base_kind):
    """Every element width, a base shorter or longer than the chunk, sign flips and the words
    whose difference wraps (0 − max, max − 0, the most negative difference)."""
    rng = np.random.default_rng(seed)
    raw = _weights(rng, elements * group)
    size = {"shorter": (elements // 3) * group, "longer": len(raw) + 2 * group}.get(base_kind, len(raw))
    near = np.frombuffer(bytearray(raw[:size].ljust(size, b"\x11")), dtype=np.uint8).copy()
    near[::7] = rng.integers(0, 256, len(near[::7]), dtype=np.uint8)  # small and large differences
    if base_kind == "flipped":
        near[group - 1 :: group] ^= 0x80  # every sign bit
    if base_kind == "extremes":
        words, top = near.view(f"<u{group}"), (1 << (8 * group)) - 1
        words[0::3], words[1::3] = 0, top
        raw = bytearray(raw)
        raw_words = np.frombuffer(raw, dtype=f"<u{group}")
        raw_words[0::3], raw_words[1::3] = top, 0
        raw_words[2::3] = near.view(f"<u{group}")[2::3] ^ (1 << (8 * group - 1))  # the most negative difference
        raw = bytes(raw)
    base = near.tobytes()
    assert codec.diffs(len(raw), len(base), group)
    payload = codec.encode_diff(raw, base, group)
    out = codec.decode(codec.DIFF_DELTA, payload, group, len(raw), base)
    assert bytes(out) == raw == _spec_diff_decode(payload, group, base)


def test_the_difference_delta_of_a_fine_tune_is_smaller_than_its_xor_delta():
    """Why format 3 has the encoding: on bf16 weights changed by a small dense noise (a full
    fine-tune), subtracting elements leaves the high plane zero almost everywhere, where XOR turns
    every carry into set bits (measured on bench_scale's dense fine-tune: 0.362 against 0.412)."""
    rng = np.random.default_rng(3)
    weights = (rng.standard_normal(1 << 20) * 0.02).astype(np.float32)
    tuned = weights + (rng.standard_normal(weights.size) * 0.0004).astype(np.float32)
    base, raw = (((w.view(np.uint32) + 0x8000) >> 16).astype("<u2").tobytes() for w in (weights, tuned))
    diff, xor = codec.encode_diff(raw, base, 2), codec.encode_delta(raw, base, 2)
    assert bytes(codec.decode(codec.DIFF_DELTA, diff, 2, len(raw), base)) == raw
    assert len(diff) < 0.93 * len(xor)


def test_a_difference_delta_refuses_what_is_not_whole_elements():
    assert not codec.diffs(6, 4, 4) and not codec.diffs(8, 6, 4) and not codec.diffs(8, 8, 1)
    assert not codec.diffs(0, 0, 2)
    assert not codec.diffs(9, 9, 3) and codec.diffs(8, 4, 4) and codec.diffs(8, 0, 8)
    payload = codec.encode_diff(bytes(8), bytes(8), 4)
    try:
        codec.decode(codec.DIFF_DELTA, payload, 4, 8, bytes(6))
    except ValueError as e:
        assert "difference delta" in str(e)
    else:
        raise AssertionError("a base of partial elements was accepted")


@settings(max_examples=30)
@given(st.binary(max_size=20_000), st.sampled_from([1, 2, 4]))
def test_encode_then_decode_round_trips(data, group):
    encoding, payload = codec.encode(data, group)
    assert bytes(codec.decode(encoding, payload, group, len(data))) == data


def test_a_decoded_chunk_is_its_own_buffer_not_the_reused_planes():
    rng = np.random.default_rng(3)
    first, second = _weights(rng, 1 << 20), _weights(rng, 1 << 20)
    a = codec.decode(*codec.encode(first, 2), 2, len(first))
    b = codec.decode(*codec.encode(second, 2), 2, len(second))
    assert bytes(a) == first and bytes(b) == second
    np.frombuffer(a, dtype=np.uint8)[:] = 0  # the caller may write into it
    assert bytes(codec.decode(*codec.encode(second, 2), 2, len(second))) == second


def _on_threads(work: Callable[[int], None], n: int) -> None:
    """work(0) … work(n − 1), each on its own thread, all at once."""
    threads = [threading.Thread(target=work, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_threads_decode_concurrently_into_their_own_planes():
    rng = np.random.default_rng(4)
    chunks = [_weights(rng, 1 << 19) for _ in range(4)]
    stored = [codec.encode(c, 2) for c in chunks]
    bad: list[int] = []

    def work(k: int) -> None:
        for _ in range(20):
            enc, payload = stored[k]
            if bytes(codec.decode(enc, payload, 2, len(chunks[k]))) != chunks[k]:
                bad.append(k)

    _on_threads(work, 4)
    assert not bad


def test_decoding_allocates_only_the_result():
    """The frame inflates into the thread's reused planes and the XOR happens in the result:
    decoding a 4 MiB delta allocates ~4 MiB, not one buffer per step (the old path held four)."""
    rng = np.random.default_rng(5)
    base = _weights(rng, codec.MAX_CHUNK_BYTES)
    raw = bytearray(base)
    raw[1::2] = rng.bytes(len(raw) // 2)
    payload = codec.encode_delta(raw, base, 2)
    codec.decode(codec.XOR_DELTA, payload, 2, len(raw), base)  # this thread's planes now exist
    tracemalloc.start()
    try:
        out = codec.decode(codec.XOR_DELTA, payload, 2, len(raw), base)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert bytes(out) == raw
    assert peak < 1.1 * len(raw), f"{peak / 2**20:.1f} MiB allocated to decode a {len(raw) / 2**20:.0f} MiB chunk"


def test_a_grown_chunk_s_new_rows_cost_what_they_cost_in_an_xor_delta():
    """Past the base's end (a vocabulary extension's new rows) the words are stored as they are:
    zigzagging bf16 patterns would mix the sign into the exponent plane (a 17% -> 26% cost in
    bench_storage's vocab case before this rule)."""
    rng = np.random.default_rng(5)
    weights = (rng.standard_normal(3 << 18) * 0.02).astype(np.float32)
    words = ((weights.view(np.uint32) + 0x8000) >> 16).astype("<u2")
    base, raw = words[: 1 << 18].tobytes(), words.tobytes()  # two thirds new rows
    diff, xor = codec.encode_diff(raw, base, 2), codec.encode_delta(raw, base, 2)
    assert bytes(codec.decode(codec.DIFF_DELTA, diff, 2, len(raw), base)) == raw
    assert len(diff) <= 1.01 * len(xor)


@pytest.mark.parametrize("dtype, group", [(np.float16, 2), (np.float32, 4), (np.float64, 8)])
@pytest.mark.parametrize("noise", [0.001, 0.02, 0.2])
def test_the_difference_delta_beats_xor_for_every_float_width(dtype, group, noise):
    """mgit tries only the difference delta where it is defined (format.md §4.7), so it must not
    lose to XOR there: measured 2-7% smaller for f16/f32, 0.2-2% for f64."""
    rng = np.random.default_rng(int(noise * 1000) + group)
    weights = (rng.standard_normal(1 << 18) * 0.02).astype(dtype)
    tuned = (weights + (rng.standard_normal(weights.size) * 0.02 * noise).astype(dtype)).astype(dtype)
    base, raw = weights.tobytes(), tuned.tobytes()
    assert len(codec.encode_diff(raw, base, group)) < len(codec.encode_delta(raw, base, group))


def _spec_group(raw: bytes, group: int) -> bytes:
    """grouped[p·M + i] = raw[i·g + p] (format.md §4.5), byte by byte."""
    if group <= 1 or not raw or len(raw) % group:
        return raw
    return b"".join(raw[p::group] for p in range(group))


@settings(max_examples=40, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.sampled_from([2, 3, 4, 8]),
    st.integers(1, 400),
    st.sampled_from([0, 1, 3, 100, 399, 500]),
)
def test_encoding_in_blocks_matches_the_formats_definition(seed, group, elements, base_elements):
    """Grouping and the difference delta work block by block (codec._BLOCK elements, here made
    tiny so that a chunk spans many blocks and the base can end inside any of them); the planes
    are the format's, and the delta decodes to the chunk."""
    rng = np.random.default_rng(seed)
    raw = _weights(rng, elements * group)
    base = bytes(a ^ b for a, b in zip(raw, rng.bytes(len(raw)), strict=True))[: base_elements * group]
    base = base.ljust(base_elements * group, b"\x33")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(codec, "_BLOCK", 7)
        assert bytes(codec.group_bytes(raw, group)) == _spec_group(raw, group)
        if codec.diffs(len(raw), len(base), group):
            payload = codec.encode_diff(raw, base, group)
            assert _spec_diff_decode(payload, group, base) == raw
            assert bytes(codec.decode(codec.DIFF_DELTA, payload, group, len(raw), base)) == raw


def test_encoding_allocates_nothing_chunk_sized_but_zstd_s_output():
    """The differences are taken, zigzagged and split into planes block by block inside this
    thread's reused buffers: encoding a 4 MiB fine-tuned chunk allocates zstd's output (a buffer
    of its compression bound, ~the raw size) and nothing chunk-sized besides (the old path held
    three fresh 4 MiB buffers more; a fresh buffer costs a page fault per 4 KiB)."""
    rng = np.random.default_rng(6)
    weights = (rng.standard_normal(codec.MAX_CHUNK_BYTES // 4) * 0.02).astype(np.float32)
    tuned = weights + (rng.standard_normal(weights.size) * 0.0004).astype(np.float32)
    base, raw = weights.tobytes(), tuned.tobytes()
    codec.encode_diff(raw, base, 4)  # this thread's buffers now exist
    codec.encode(raw, 4)
    tracemalloc.start()
    try:
        payload = codec.encode_diff(raw, base, 4)
        diff_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        held = tracemalloc.get_traced_memory()[0]  # the payload above
        plain = codec.encode(raw, 4)[1]
        plain_peak = tracemalloc.get_traced_memory()[1] - held
    finally:
        tracemalloc.stop()
    assert len(payload) < len(plain) < len(raw)
    assert diff_peak < 1.1 * len(raw), f"{diff_peak / 2**20:.1f} MiB to encode a 4 MiB chunk"
    assert plain_peak < 1.1 * len(raw), f"{plain_peak / 2**20:.1f} MiB to encode a 4 MiB chunk"


def test_threads_encode_concurrently_into_their_own_planes():
    rng = np.random.default_rng(7)
    pairs = [(_weights(rng, 1 << 19), _weights(rng, 1 << 19)) for _ in range(4)]
    bad: list[int] = []

    def work(k: int) -> None:
        raw, base = pairs[k]
        for _ in range(10):
            diff = codec.encode_diff(raw, base, 2)
            plain = codec.encode(raw, 2)
            if bytes(codec.decode(codec.DIFF_DELTA, diff, 2, len(raw), base)) != raw:
                bad.append(k)
            if bytes(codec.decode(*plain, 2, len(raw))) != raw:
                bad.append(k)

    _on_threads(work, 4)
    assert not bad
