"""The line merge of text files (mgit.merge.threeway.text): as `git merge-file` merges
config.json and tokenizer files, byte for byte, conflicts where git's are (compared with git
itself on random files of repeated lines)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from mgit.merge.threeway import linediff
from mgit.merge.threeway.linediff import diff
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


def test_a_deletion_touching_the_other_sides_deletion_is_a_conflict_as_in_git() -> None:
    """The review's case: with difflib's alignment theirs deleted the first ``f`` and the merge
    was a clean ``f``; git's minimal diff slides that deletion down against ours' deletion of
    ``a e`` (no line between them): a conflict."""
    base, ours, theirs = b"f\nf\na\ne\n", b"f\nf\n", b"f\na\ne\n"
    assert _git_merge_file(base, ours, theirs) is None
    assert merge_text(base, ours, theirs) is None
    assert merge_text(base, ours, theirs, "ours") == _git_merge_file(base, ours, theirs, "--ours") == ours


def test_config_blocks_closed_by_the_same_line_merge_as_git_merges_them() -> None:
    """Many identical ``},`` lines: edits in neighbouring blocks merge, edits touching at a
    block's end conflict, as in git."""
    blocks = [f'  "b{i}": {{\n    "x": {i},\n    "y": {i}\n  }},\n' for i in range(6)]
    base = "{\n" + "".join(blocks) + '  "end": 0\n}\n'
    ours = base.replace('"x": 2,', '"x": 20,').replace('"y": 3\n', '"y": 3,\n    "z": 3\n')
    theirs = base.replace('"y": 1\n', '"y": 11\n').replace('"b4": {', '"b4": {\n    "w": 4,')
    touching = base.replace('  },\n  "b4"', '    "q": 1\n  },\n  "b4"')  # right after ours' edit
    merged = [merge_text(*(x.encode() for x in (base, ours, t))) for t in (theirs, touching)]
    assert merged == [_git_merge_file(*(x.encode() for x in (base, ours, t))) for t in (theirs, touching)]
    assert merged[0] is not None and merged[1] is None


LINES = [b"a\n", b"b\n", b"c\n", b"},\n", b"x"]
edits = st.lists(st.tuples(st.sampled_from("dir"), st.integers(0, 15), st.sampled_from(LINES)), max_size=4)


def _edited(base: list[bytes], changes: list[tuple[str, int, bytes]]) -> bytes:
    out = list(base)
    for op, at, line in changes:
        if op == "i":
            out.insert(at % (len(out) + 1), line)
        elif out and op == "d":
            del out[at % len(out)]
        elif out:
            out[at % len(out)] = line
    return b"".join(out)


@given(st.lists(st.sampled_from(LINES), max_size=12), edits, edits)
def test_every_merge_is_git_merge_files(base: list[bytes], ours: list, theirs: list) -> None:
    """Both sides edit a file of a few repeated lines (where alignments are most ambiguous):
    clean exactly where git is, with git's bytes, and with a side chosen (``--ours`` /
    ``--theirs``) git's bytes."""
    b, o, t = b"".join(base), _edited(base, ours), _edited(base, theirs)
    assert merge_text(b, o, t) == _git_merge_file(b, o, t)
    assert merge_text(b, o, t, "ours") == _git_merge_file(b, o, t, "--ours")
    assert merge_text(b, o, t, "theirs") == _git_merge_file(b, o, t, "--theirs")


@given(st.lists(st.integers(0, 3), max_size=40), st.lists(st.integers(0, 3), max_size=40), st.integers(1, 3))
def test_a_diff_cut_short_by_its_cost_is_still_a_diff(a: list[int], b: list[int], cost: int) -> None:
    """Past MAX_COST a stretch is split at its unique lines or changed whole: coarser, but its
    changes still turn one file into the other, and none touches the next."""
    saved = linediff.MAX_COST
    linediff.MAX_COST = cost
    try:
        changes = diff(a, b)
    finally:
        linediff.MAX_COST = saved
    rebuilt, at = [], 0
    for c in changes:
        assert c.a >= at and (c.a_len or c.b_len)
        rebuilt += a[at : c.a] + b[c.b : c.b + c.b_len]
        at = c.a + c.a_len
    assert rebuilt + a[at:] == b
    assert all(x.a + x.a_len < y.a for x, y in zip(changes, changes[1:], strict=False))


def test_a_large_file_rewritten_by_one_side_and_edited_by_the_other_conflicts_quickly() -> None:
    """Theirs reorders 50k lines in blocks (far past MAX_COST edits); ours edits one line inside
    a moved block: a conflict, found without a quadratic search. Ours alone: ours' bytes."""
    base = [f'    "tok{i * 7919 % 50000}": {i},\n'.encode() for i in range(50_000)]
    blocks = [base[i : i + 1000] for i in range(0, len(base), 1000)]
    theirs = [line for block in blocks[1::2] + blocks[::2] for line in block]
    ours = list(base)
    ours[2500] = b'    "edited": 1,\n'
    b, o, t = b"".join(base), b"".join(ours), b"".join(theirs)
    assert merge_text(b, o, t) is None
    assert merge_text(b, o, b) == o and merge_text(b, b, t) == t


def _git_merge_file(base: bytes, ours: bytes, theirs: bytes, *flags: str) -> bytes | None:
    """What `git merge-file -p` makes of the three (None: it found a conflict)."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        paths = [Path(d, n) for n in ("ours", "base", "theirs")]
        for p, text in zip(paths, (ours, base, theirs), strict=True):
            p.write_bytes(text)
        proc = subprocess.run(["git", "merge-file", "-p", *flags, *map(str, paths)], capture_output=True, check=False)
        assert proc.returncode >= 0, proc.stderr
        return proc.stdout if proc.returncode == 0 else None
