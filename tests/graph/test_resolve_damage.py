"""Revisions through a damaged graph (graph/refs.py): a reflog entry or a commit's parent that
names an object which is not a commit is damage, reported as one CorruptObjectError line
(it used to escape as AttributeError: 'Blob' object has no attribute 'parents')."""

from __future__ import annotations

import pytest
from dulwich.reflog import format_reflog_line

from mgit.errors import CorruptObjectError
from mgit.graph.objects import MODE_FILE, Graph
from mgit.graph.refs import Refs

WHO = b"t <t@example.com>"


def _repo(tmp_path) -> tuple[Graph, Refs, str, str]:
    graph = Graph.init(tmp_path / ".mgit")
    refs = Refs(graph, WHO)
    blob = graph.put_blob(b"not a commit")
    tree = graph.put_tree([("f", MODE_FILE, blob)])
    commit = graph.put_commit(tree, [], "first", WHO, WHO)
    refs.advance_head(None, commit, "commit (initial)")
    return graph, refs, commit, blob


@pytest.mark.parametrize("rev", ["main@{0}", "main@{0}~1", "main@{0}^1"])
def test_reflog_entry_naming_a_blob_is_damage(tmp_path, rev):
    graph, refs, commit, blob = _repo(tmp_path)
    with open(graph.git_dir / "logs" / "refs" / "heads" / "main", "ab") as f:
        f.write(format_reflog_line(commit.encode(), blob.encode(), WHO, 0, 0, b"damaged") + b"\n")
    with pytest.raises(CorruptObjectError, match=f"object {blob[:12]} is not a commit"):
        refs.resolve(rev)


@pytest.mark.parametrize("rev", ["HEAD~1", "HEAD~2", "HEAD^1"])
def test_parent_naming_a_blob_is_damage(tmp_path, rev):
    graph, refs, commit, blob = _repo(tmp_path)
    tree = graph.commit(commit).tree
    child = graph.put_commit(tree, [blob], "child of a blob", WHO, WHO)
    refs.advance_head(commit, child, "commit")
    with pytest.raises(CorruptObjectError, match=f"object {blob[:12]} is not a commit"):
        refs.resolve(rev)
