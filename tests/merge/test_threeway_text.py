"""The line merge of text files (mgit.merge.threeway.text): diff3 as git applies it to
config.json and tokenizer files."""

from __future__ import annotations

import subprocess
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from mgit.merge.threeway.text import merge_text

CONFIG = b'{\n  "hidden_size": 64,\n  "num_layers": 2,\n  "vocab_size": 128,\n  "rope_theta": 10000\n}\n'


def test_edits_of_different_lines_merge_cleanly() -> None:
    ours = CONFIG.replace(b"64", b"128")
    theirs = CONFIG.replace(b"10000", b"500000")
    assert merge_text(CONFIG, ours, theirs) == CONFIG.replace(b"64", b"128").replace(b"10000", b"500000")


def test_the_same_line_changed_two_ways_is_a_conflict_unless_a_side_is_chosen() -> None:
    ours, theirs = CONFIG.replace(b"128", b"256"), CONFIG.replace(b"128", b"512")
    assert merge_text(CONFIG, ours, theirs) is None
    assert merge_text(CONFIG, ours, theirs, "ours") == ours
    assert merge_text(CONFIG, ours, theirs, "theirs") == theirs


def test_a_side_choice_applies_only_to_the_conflicting_hunks() -> None:
    ours = CONFIG.replace(b"128", b"256").replace(b"64", b"96")
    theirs = CONFIG.replace(b"128", b"512").replace(b"10000", b"1")
    assert merge_text(CONFIG, ours, theirs, "theirs") == CONFIG.replace(b"128", b"512").replace(b"64", b"96").replace(
        b"10000", b"1"
    )


def test_insertions_at_both_ends_and_deletions() -> None:
    base = b"a\nb\nc\nd\ne\n"
    assert merge_text(base, b"top\n" + base, base + b"bottom\n") == b"top\n" + base + b"bottom\n"
    assert merge_text(base, b"a\nc\nd\ne\n", b"a\nb\nc\nd\n") == b"a\nc\nd\n"
    assert merge_text(base, b"a\nx\nc\nd\ne\n", b"a\nc\nd\ne\n") is None  # modified here, deleted there


lines = st.lists(st.sampled_from([b"x\n", b"y\n", b"z\n", b"{\n", b"}\n", b"w"]), max_size=12)


@given(lines, lines, lines)
def test_a_side_left_alone_yields_to_the_other(base: list[bytes], ours: list[bytes], theirs: list[bytes]) -> None:
    b, o, t = b"".join(base), b"".join(ours), b"".join(theirs)
    assert merge_text(b, o, b) == o
    assert merge_text(b, b, t) == t
    assert merge_text(b, o, o) == o


@given(st.lists(st.integers(0, 9), min_size=12, max_size=30), st.data())
def test_disjoint_edits_merge_as_git_merge_file_does(base_ids: list[int], data: st.DataObject) -> None:
    """Edits to lines two or more apart: git merges them cleanly, and to the same text."""
    base = [f"line {i} {n}\n".encode() for i, n in enumerate(base_ids)]
    at = data.draw(st.lists(st.integers(0, len(base) - 1), min_size=2, max_size=6, unique=True))
    at = sorted(at)
    if any(b - a < 3 for a, b in zip(at, at[1:], strict=False)):
        return
    ours, theirs = list(base), list(base)
    for k, i in enumerate(at):
        (ours if k % 2 else theirs)[i] = f"edited {i}\n".encode()
    merged = merge_text(b"".join(base), b"".join(ours), b"".join(theirs))
    assert merged == _git_merge_file(b"".join(base), b"".join(ours), b"".join(theirs))


def _git_merge_file(base: bytes, ours: bytes, theirs: bytes) -> bytes:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        paths = [Path(d, n) for n in ("ours", "base", "theirs")]
        for p, text in zip(paths, (ours, base, theirs), strict=True):
            p.write_bytes(text)
        proc = subprocess.run(["git", "merge-file", "-p", *map(str, paths)], capture_output=True, check=False)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout
