"""Three-way merges of text files (config.json, tokenizer files, READMEs) line by line, as git
merges them, with merge3 (the diff3 algorithm). A file is text when it is UTF-8 without a NUL
byte; anything else both sides changed is a binary conflict."""

from __future__ import annotations

from mgit.merge.threeway.conflicts import Side


def is_text(data: bytes) -> bool:
    if b"\0" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def merge_text(base: bytes, ours: bytes, theirs: bytes, side: Side | None = None) -> bytes | None:
    """The merged text, or None when both sides changed the same lines (a conflict) and no
    ``side`` was chosen for such hunks (``side``: take that side's lines there, git's ``-X``)."""
    import merge3  # only a merge of text files both sides changed needs it

    merged: list[bytes] = []
    groups = merge3.Merge3(base.splitlines(True), ours.splitlines(True), theirs.splitlines(True)).merge_groups()
    for group in groups:
        if group[0] == "conflict":  # ("conflict", base lines, our lines, their lines)
            if side is None:
                return None
            merged += group[2] if side == "ours" else group[3]  # type: ignore[misc]
        else:
            merged += group[1]
    return b"".join(merged)
