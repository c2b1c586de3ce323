"""Long unified diffs of text files (a tokenizer's vocab.txt: 30,000 lines) summarised to
their first hunks and a count, so a tensor diff is not buried; ``mgit diff --full`` shows all."""

from __future__ import annotations

TEXT_DIFF_LINES = 200  # diff lines shown per file before the rest is summarised


def shorten(diff: str, path: str, limit: int = TEXT_DIFF_LINES) -> str:
    """``diff`` (unified) as is when it has at most ``limit`` lines; else its header and the
    whole hunks that fit (at least the start of the first), then one line saying how much
    was left out and how many lines were added and removed in all."""
    lines = diff.splitlines(keepends=True)
    if len(lines) <= limit:
        return diff
    start = next((i for i, line in enumerate(lines) if line.startswith("@@")), len(lines))
    header, body = lines[:start], lines[start:]
    hunks: list[list[str]] = []
    for line in body:
        if line.startswith("@@") or not hunks:
            hunks.append([])
        hunks[-1].append(line)
    shown = list(header)
    for hunk in hunks:
        if len(shown) + len(hunk) > limit:
            if len(shown) == len(header):  # the first hunk alone is too long: its start
                shown += hunk[: max(limit - len(shown), 1)]
            break
        shown += hunk
    added = sum(1 for line in body if line.startswith("+"))
    removed = sum(1 for line in body if line.startswith("-"))
    note = (
        f"… {path}: {len(lines) - len(shown)} more diff line(s) not shown ({len(lines)} in all; "
        f"+{added} -{removed}); `mgit diff --full` shows the whole diff\n"
    )
    return "".join(shown) + note
