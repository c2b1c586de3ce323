"""What a three-way merge (`mgit merge REV`) cannot decide alone (issue 39, review of the
three-way merge): each kind of conflict, criss-cross histories (several merge bases), a file on
one side where the other has a directory, dtype or shape changes a method cannot combine, what
the merge reports as changed, and the settling options' own checks."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import pytest
import torch
from helpers.branches import blob, commit_files, commit_snapshot, diverge
from helpers.cli import invoke
from helpers.models import tree_hashes
from safetensors.torch import load_file

from mgit import Repository
from mgit.errors import BadInputError, MergeConflictError, MgitError
from mgit.graph.snapshot import write_snapshot
from mgit.merge.threeway.snapshots import FileChange

W = torch.zeros(8)


def _sd(**values: float) -> dict:
    """A tiny model: tensors w and v (zeros, plus the given offsets)."""
    return {name: W + values.get(name, 0.0) for name in ("w", "v")}


def _conflicts(repo: Repository, rev: str = "feat", **settle) -> list[tuple[str, str]]:
    head, files = repo.refs.head(), tree_hashes(repo.root)
    with pytest.raises(MergeConflictError) as caught:
        repo.merge_branch(rev, **settle)
    assert repo.refs.head() == head and tree_hashes(repo.root) == files  # nothing changed
    return [(c.where, c.kind) for c in caught.value.report.conflicts]


@dataclass
class Case:
    """A history whose merge has one conflict, at ``where``, of ``kind``."""

    base: dict
    ours: dict
    theirs: dict
    where: str
    kind: str
    ours_removes: tuple[str, ...] = ()
    theirs_removes: tuple[str, ...] = ()


def _model(**values: float) -> dict:
    return {"m.safetensors": _sd(**values)}


def _meta(value: str) -> dict:
    return {"m.safetensors": (_sd(), {"k": value})}


CASES = [
    Case({"a.txt": "a\n"}, {"a.txt": "a2\n"}, {}, "a.txt", "modify/delete", theirs_removes=("a.txt",)),
    Case({"a.txt": "a\n"}, {}, {"a.txt": "a2\n"}, "a.txt", "delete/modify", ours_removes=("a.txt",)),
    Case({"x.txt": "x\n"}, {"b.bin": b"\0ours"}, {"b.bin": b"\0theirs"}, "b.bin", "add/add"),
    Case({"b.bin": b"\0"}, {"b.bin": b"\0ours"}, {"b.bin": b"\0theirs"}, "b.bin", "binary"),
    Case(_meta("0"), _meta("1"), _meta("2"), "m.safetensors:__metadata__[k]", "metadata"),
    Case(_model(), {"m.safetensors": {"w": W}}, _model(v=1), "m.safetensors:v", "delete/modify"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.kind} {c.where}")
def test_each_kind_of_conflict_is_listed_and_a_side_settles_it(repo, case):
    diverge(repo, case.base, case.ours, case.theirs, case.ours_removes, case.theirs_removes)
    assert _conflicts(repo) == [(case.where, case.kind)]
    result = repo.merge_branch("feat", theirs="*")
    assert [(s.conflict.where, s.by) for s in result.settled] == [(case.where, "theirs")]
    path = case.where.split(":")[0]
    assert repo.snapshot().get(path) == repo.snapshot("feat").get(path)  # their version, or none
    assert repo.status().clean and repo.fsck() == []


def test_a_different_kind_of_file_on_each_side_is_a_type_conflict(repo):
    base = commit_files(repo, {"x": "x\n", "m.safetensors": _sd()}, "base")
    theirs = commit_snapshot(repo, base, {"x": repo.snapshot(base)["m.safetensors"]}, "x becomes a model file")
    repo.create_branch("feat", theirs)
    commit_files(repo, {"x": "x2\n"}, "ours")
    assert _conflicts(repo) == [("x", "type")]
    repo.merge_branch("feat", ours="x")
    assert (repo.root / "x").read_text() == "x2\n"


def test_a_file_added_with_another_mode_on_each_side_is_a_mode_conflict(repo):
    commit_files(repo, {"x.txt": "x\n"}, "base")
    repo.checkout(create_branch="feat")
    commit_files(repo, {"run.sh": "echo theirs\n"}, "theirs")
    repo.checkout("main")
    (repo.root / "run.sh").write_text("echo ours\n")
    os.chmod(repo.root / "run.sh", 0o755)
    repo.add(["run.sh"])
    repo.commit("ours")
    assert _conflicts(repo) == [("run.sh", "mode")]


def test_deletions_from_one_side_are_taken_and_reported_as_deletions(repo):
    """Theirs deletes a file and a tensor and sets a metadata key; ours changes another tensor:
    each is reported as what it is (before: a deletion was "from theirs", a metadata change
    "the whole file")."""
    base = {"c.txt": "c\n", "m.safetensors": (_sd(), {"k": "0"}), "n.safetensors": (_sd(), {"k": "0"})}
    theirs = {"m.safetensors": ({"w": W}, {"k": "0"}), "n.safetensors": (_sd(), {"k": "1"})}
    diverge(repo, base, {"m.safetensors": (_sd(w=1), {"k": "0"})}, theirs, theirs_removes=["c.txt"])
    result = repo.merge_branch("feat")
    assert result.changed == {
        "c.txt": FileChange("deleted"),
        "m.safetensors": FileChange("merged", {"v": "deleted"}),
        "n.safetensors": FileChange("theirs", {}),
    }
    assert not (repo.root / "c.txt").exists() and set(load_file(repo.root / "m.safetensors")) == {"w"}
    assert torch.equal(load_file(repo.root / "m.safetensors")["w"], W + 1)
    repo.close()
    doc = json.loads(invoke("merge", "feat~0", "--json", cwd=repo.root).stdout)
    assert doc["schema"] == "mgit.branch-merge/2" and doc["kind"] == "up-to-date"


def _criss_cross(repo: Repository) -> None:
    """base x=0, w=0; A1 x=1, w=1; B1 x=2, w=2; A2 = merge(A1, B1) keeping A1's; B2 = merge(B1,
    A1) keeping B1's, then y changed on B: main (A2) and B have the two merge bases A1 and B1."""
    commit_files(repo, {"x.txt": "0\n", "y.txt": "y\n", "m.safetensors": _sd()}, "O")
    repo.checkout(create_branch="B")
    commit_files(repo, {"x.txt": "2\n", "m.safetensors": _sd(w=2)}, "B1")
    repo.checkout("main")
    a1 = commit_files(repo, {"x.txt": "1\n", "m.safetensors": _sd(w=1)}, "A1")
    repo.merge_branch("B", ours="*")
    repo.checkout("B")
    repo.merge_branch(a1, ours="*")
    commit_files(repo, {"y.txt": "y2\n"}, "B3")
    repo.checkout("main")


def test_a_criss_cross_merge_conflicts_where_the_merge_bases_disagree(repo):
    """Before: the first merge base was taken (git's resolve strategy) and x=2 was merged
    silently although A2 and B2 settled the same conflict differently (git reports CONFLICT)."""
    _criss_cross(repo)
    assert len(repo.merge_bases(["main", "B"])) == 2
    assert _conflicts(repo, "B") == [("m.safetensors:w", "criss-cross"), ("x.txt", "criss-cross")]
    result = repo.merge_branch("B", theirs="*")
    assert len(result.bases) == 2 and {s.conflict.where for s in result.settled} == {"x.txt", "m.safetensors:w"}
    assert (repo.root / "x.txt").read_text() == "2\n" and (repo.root / "y.txt").read_text() == "y2\n"
    assert torch.equal(load_file(repo.root / "m.safetensors")["w"], W + 2)


def test_a_file_where_the_other_side_has_a_directory_is_a_conflict(repo):
    """Before: both were kept, the tree held the name twice and the commit lost ours' file."""
    diverge(repo, {"a.txt": "a\n"}, {"data": "file\n"}, {"data/x.txt": "x\n"})
    assert _conflicts(repo) == [("data", "file/directory")]
    result = repo.merge_branch("feat", theirs="data")
    assert result.changed == {"data": FileChange("deleted"), "data/x.txt": FileChange("theirs")}
    assert (repo.root / "data" / "x.txt").read_text() == "x\n" and repo.status().clean and repo.fsck() == []
    repo.reset("HEAD~1", mode="hard")
    repo.merge_branch("feat", ours="*")
    assert (repo.root / "data").read_text() == "file\n" and set(repo.snapshot()) == {"a.txt", "data"}


def test_a_directory_on_our_side_where_theirs_has_a_file_is_a_conflict(repo):
    """Before: refused as "would overwrite uncommitted changes" on a clean tree."""
    diverge(repo, {"a.txt": "a\n"}, {"data/x.txt": "x\n"}, {"data": "file\n"})
    assert _conflicts(repo) == [("data", "file/directory")]
    repo.merge_branch("feat", theirs="*")
    assert (repo.root / "data").read_text() == "file\n" and repo.status().clean


def test_a_tree_never_holds_one_name_twice(repo):
    with pytest.raises(MgitError, match="'data' both as a file and as a directory"):
        write_snapshot(repo.graph, {"data": blob(repo, b"f"), "data/x.txt": blob(repo, b"x")})


def test_a_dtype_or_shape_change_is_not_offered_to_a_method(repo):
    """Before: listed as method-mergeable and suggested, then --method failed naming no file."""
    diverge(repo, _model(), {"m.safetensors": {"w": torch.zeros(2, 4), "v": W}}, _model(w=1))
    assert _conflicts(repo) == [("m.safetensors:w", "dtype/shape")]
    with pytest.raises(MergeConflictError, match="--method merges only tensors"):
        repo.merge_branch("feat", method="task_arithmetic")
    repo.close()
    got = invoke("merge", "feat", cwd=repo.root)
    assert got.exit_code == 5 and "CONFLICT (dtype/shape): tensor w of m.safetensors" in got.stdout
    assert "--method" not in got.stdout
    with Repository(repo.root) as again:
        again.merge_branch("feat", theirs="*")
        assert torch.equal(load_file(again.root / "m.safetensors")["w"], W + 1)


def test_parameters_without_a_method_are_refused(repo):
    """Before: merge_branch("feat", ff_only=True, weight=0.5) merged, both ignored."""
    diverge(repo, {"a.txt": "a\n"}, {"b.txt": "b\n"}, {"c.txt": "c\n"})
    head = repo.refs.head()
    with pytest.raises(BadInputError, match="unknown option.s. ff_only, weight: merge parameters need a method"):
        repo.merge_branch("feat", ff_only=True, weight=0.5)
    with pytest.raises(BadInputError, match="unknown option.s. weight"):
        repo.revert("HEAD", weight=1.0)
    assert repo.refs.head() == head


def test_a_conflict_both_patterns_match_is_refused(repo):
    diverge(repo, {"m.safetensors": _sd()}, {"m.safetensors": _sd(w=1)}, {"m.safetensors": _sd(w=2)})
    head = repo.refs.head()
    with pytest.raises(BadInputError, match="matched by both --ours and --theirs"):
        repo.merge_branch("feat", ours="m.safetensors", theirs="*:w")
    assert repo.refs.head() == head


def test_a_random_method_records_its_seed_and_the_seed_makes_it_again(repo):
    """Before: dare's seed came from secrets.randbits and was recorded nowhere."""
    diverge(repo, {"m.safetensors": _sd()}, {"m.safetensors": _sd(w=1)}, {"m.safetensors": _sd(w=2)})
    ours = repo.refs.head()
    first = repo.merge_branch("feat", method="dare_linear", density=0.5)
    assert first.seed is not None and first.changed == {"m.safetensors": FileChange("merged", {"w": "method"})}
    assert f"dare_linear over {first.bases[0][:12]} (seed {first.seed})" in repo.graph.commit(first.commit).message
    repo.reset(ours, mode="hard")
    again = repo.merge_branch("feat", method="dare_linear", density=0.5, seed=first.seed)
    assert repo.snapshot(again.commit)["m.safetensors"] == repo.snapshot(first.commit)["m.safetensors"]
    repo.reset(ours, mode="hard")
    assert repo.merge_branch("feat", method="task_arithmetic").seed is None  # nothing random to record
