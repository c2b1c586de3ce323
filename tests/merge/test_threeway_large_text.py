"""Text files past 4 MiB in a three-way merge (issue 39 review, finding 13): a tokenizer.json is
stored as chunks, yet merged by lines as git merges it, the result stored as `add` stores it;
past the cap (MAX_TEXT_BYTES) both sides changing it is a binary conflict, as before."""

from __future__ import annotations

import pytest
from helpers.models import touch_later

from mgit import Repository
from mgit.errors import MergeConflictError
from mgit.merge.threeway import large_text
from mgit.merge.threeway.text import merge_text
from mgit.model.ingest import LARGE_FILE_BYTES

TOKENIZER = "tokenizer.json"


def _tokenizer(vocab: int = 150_000) -> list[bytes]:
    """A tokenizer.json-like file of about 6 MB: one vocabulary entry a line."""
    head = [b'{\n  "version": "1.0",\n', b'  "model": {\n', b'    "vocab": {\n']
    entries = [f'      "\\u0120tok{i * 7919 % vocab:06d}": {i},\n'.encode() for i in range(vocab)]
    return head + entries + [b'      "<end>": 0\n', b"    }\n", b"  }\n", b"}\n"]


def _commit(repo: Repository, lines: list[bytes], message: str) -> str:
    path = repo.root / TOKENIZER
    path.write_bytes(b"".join(lines))
    touch_later(path)
    repo.add([TOKENIZER])
    return repo.commit(message)


def _diverged(repo: Repository, base: list[bytes], ours: list[bytes], theirs: list[bytes]) -> None:
    _commit(repo, base, "base")
    repo.checkout(create_branch="feat")
    _commit(repo, theirs, "theirs")
    repo.checkout("main")
    _commit(repo, ours, "ours")


def test_a_chunked_tokenizer_changed_in_different_places_merges_by_lines(repo: Repository) -> None:
    base = _tokenizer()
    ours, theirs = list(base), list(base)
    ours[1] = b'  "version": "1.1",\n'
    theirs.insert(100_000, b'      "<added>": 150000,\n')
    theirs[-5] = b'      "<end>": 1\n'
    _diverged(repo, base, ours, theirs)
    assert repo.snapshot("HEAD")[TOKENIZER].kind == "chunked" and len(b"".join(base)) > LARGE_FILE_BYTES
    result = repo.merge_branch("feat")
    want = merge_text(*(b"".join(x) for x in (base, ours, theirs)))
    assert want is not None and want == b"".join([ours[1] if i == 1 else line for i, line in enumerate(theirs)])
    assert result.kind == "merged" and (repo.root / TOKENIZER).read_bytes() == want
    merged = repo.snapshot("HEAD")[TOKENIZER]
    (repo.root / TOKENIZER).write_bytes(want)  # the same bytes written anew and added: the same entry
    touch_later(repo.root / TOKENIZER)
    repo.add([TOKENIZER])
    assert repo._index().entries[TOKENIZER].entry == merged and merged.kind == "chunked"
    assert repo.fsck() == []


def test_the_same_lines_changed_two_ways_are_a_text_conflict(repo: Repository) -> None:
    base = _tokenizer()
    ours, theirs = list(base), list(base)
    ours[50_000], theirs[50_000] = b'      "ours": 1,\n', b'      "theirs": 1,\n'
    _diverged(repo, base, ours, theirs)
    head = repo.refs.head()
    with pytest.raises(MergeConflictError) as caught:
        repo.merge_branch("feat")
    assert [(c.path, c.kind) for c in caught.value.report.conflicts] == [(TOKENIZER, "text")]
    assert repo.refs.head() == head and (repo.root / TOKENIZER).read_bytes() == b"".join(ours)
    repo.merge_branch("feat", theirs=("*",))
    assert (repo.root / TOKENIZER).read_bytes() == b"".join(theirs)


def test_a_file_crossing_the_size_limit_on_one_side_still_merges_by_lines(repo: Repository) -> None:
    """Base and theirs are blobs under 4 MiB, ours grew past it (chunked): no "type" conflict."""
    base = _tokenizer(90_000)
    assert len(b"".join(base)) < LARGE_FILE_BYTES
    ours = base[:-4] + _tokenizer(150_000)[90_003:-4] + base[-4:]
    theirs = list(base)
    theirs[1] = b'  "version": "2.0",\n'
    _diverged(repo, base, ours, theirs)
    assert [repo.snapshot(r)[TOKENIZER].kind for r in ("HEAD", "feat")] == ["chunked", "blob"]
    repo.merge_branch("feat")
    assert (repo.root / TOKENIZER).read_bytes() == b"".join([theirs[1] if i == 1 else x for i, x in enumerate(ours)])


def test_past_the_cap_both_sides_changing_it_is_a_binary_conflict(repo: Repository, monkeypatch) -> None:
    monkeypatch.setattr(large_text, "MAX_TEXT_BYTES", LARGE_FILE_BYTES)
    base = _tokenizer()
    ours, theirs = list(base), list(base)
    ours[1], theirs[-5] = b'  "version": "1.1",\n', b'      "<end>": 1\n'
    _diverged(repo, base, ours, theirs)
    with pytest.raises(MergeConflictError) as caught:
        repo.merge_branch("feat")
    assert [(c.path, c.kind) for c in caught.value.report.conflicts] == [(TOKENIZER, "binary")]
