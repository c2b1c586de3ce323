"""Git's merge for models (issue 39, defect 2): `mgit merge REV` without a method merges
three-way over the merge base. A tensor changed on one side is taken as it is (its manifest
blob, no chunk written); tensors changed on both sides are conflicts (listed, nothing changed,
exit 5) unless --ours/--theirs (per pattern) or --method settles them; text files are merged by
lines; uncommitted changes in the way are refused."""

from __future__ import annotations

import json

import pytest
import torch
from helpers.cli import invoke
from helpers.models import LlamaSpec, llama_state_dict, touch_later, tree_hashes, write_model
from safetensors.torch import load_file, save_file

from mgit import Repository
from mgit.errors import DirtyWorktreeError, MergeConflictError
from mgit.merge.threeway.snapshots import FileChange
from mgit.model.filetree import load_safetensors
from mgit.worktree import journal

SPEC = LlamaSpec(layers=2, hidden=32, intermediate=64, vocab=64)
Q0 = "model.layers.0.self_attn.q_proj.weight"
UP1 = "model.layers.1.mlp.up_proj.weight"
K1 = "model.layers.1.self_attn.k_proj.weight"
FILE = "model/model.safetensors"
CONFIG = {"model_type": "llama", "hidden_size": 32, "num_layers": 2, "rope_theta": 10000.0, "vocab": 64}


def _commit(repo: Repository, sd: dict, message: str, config: dict | None = None) -> str:
    """Write ``sd`` (and a config.json, one key a line, as transformers writes it) and commit."""
    write_model(repo.root / "model", sd)
    (repo.root / "model" / "config.json").write_text(json.dumps(config or CONFIG, indent=2) + "\n")
    for f in (repo.root / "model").iterdir():
        touch_later(f)
    repo.add(["model"])
    return repo.commit(message)


def _changed(sd: dict, **changes: float) -> dict:
    """``sd`` with the named tensors (Q0, UP1, K1 by variable name) moved by the given offsets."""
    names = {"q0": Q0, "up1": UP1, "k1": K1}
    out = dict(sd)
    for key, offset in changes.items():
        out[names[key]] = sd[names[key]] + offset
    return out


@pytest.fixture
def base() -> dict:
    return llama_state_dict(SPEC, seed=0, dtype=torch.float32)


def _branches(repo: Repository, base: dict, ours: dict, theirs: dict, ours_cfg=None, theirs_cfg=None) -> None:
    """main: base, then ``ours``; feat (from base): ``theirs``; main checked out."""
    _commit(repo, base, "base")
    repo.checkout(create_branch="feat")
    _commit(repo, theirs, "theirs", theirs_cfg)
    repo.checkout("main")
    _commit(repo, ours, "ours", ours_cfg)


def _manifests(repo: Repository, rev: str) -> dict[str, str]:
    return load_safetensors(repo.graph, repo.snapshot(rev)[FILE].oid, FILE).manifest_ids


def _packs(repo: Repository) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in repo.store.pack_dir.iterdir()}


def test_a_file_changed_on_one_side_is_taken_whole_and_no_chunk_is_written(repo, base):
    ours_cfg = CONFIG | {"rope_theta": 500000.0}
    _branches(repo, base, base, _changed(base, q0=1.0), ours_cfg=ours_cfg)
    packs = _packs(repo)
    result = repo.merge_branch("feat")
    assert result.kind == "merged" and result.changed == {FILE: FileChange("theirs")}
    head = repo.graph.commit(repo.refs.head())
    assert head.parents == (result.old_head, repo.resolve("feat")) and head.message == "Merge branch 'feat'"
    assert repo.snapshot()[FILE] == repo.snapshot("feat")[FILE]  # the same tree: the same bytes
    assert repo.snapshot()["model/config.json"] == repo.snapshot("main~1")["model/config.json"]
    assert _packs(repo) == packs  # nothing decoded, nothing re-encoded, no chunk written
    assert torch.equal(load_file(repo.root / FILE)[Q0], base[Q0] + 1.0)
    assert json.loads((repo.root / "model" / "config.json").read_text())["rope_theta"] == 500000.0
    st = repo.status()
    assert not (st.staged or st.unstaged or st.untracked) and repo.fsck() == []


def test_different_tensors_changed_on_each_side_merge_per_tensor(repo, base):
    ours, theirs = _changed(base, up1=0.5), _changed(base, q0=1.0)
    _branches(repo, base, ours, theirs)
    packs = _packs(repo)
    result = repo.merge_branch("feat")
    assert result.kind == "merged" and result.changed == {FILE: FileChange("merged", {Q0: "theirs"})}
    merged, mine, yours = _manifests(repo, "HEAD"), _manifests(repo, "main~1"), _manifests(repo, "feat")
    assert merged[Q0] == yours[Q0] and merged[UP1] == mine[UP1]  # each side's manifest blob, as it is
    assert {n for n in merged if merged[n] != mine[n]} == {Q0}
    assert _packs(repo) == packs
    got = load_file(repo.root / FILE)  # a valid safetensors file, its bytes as its header says
    assert got.keys() == base.keys()
    assert all(torch.equal(got[n], (theirs if n == Q0 else ours)[n]) for n in got)
    st = repo.status()
    assert not (st.staged or st.unstaged) and repo.fsck() == []


def test_a_tensor_added_on_one_side_and_metadata_merged_rebuild_the_header(repo, base):
    """Theirs adds a tensor and a metadata key, ours changes another tensor: the header is built
    anew for the chosen tensors (ours' order, then theirs' new one) and the file is valid."""
    _commit(repo, base, "base")
    repo.checkout(create_branch="feat")
    extra = dict(_changed(base, q0=1.0), **{"extra.bias": torch.arange(4, dtype=torch.float32)})
    (repo.root / "model").mkdir(exist_ok=True)
    save_file(extra, repo.root / FILE, metadata={"format": "pt", "note": "theirs"})
    touch_later(repo.root / FILE)
    repo.add(["model"])
    repo.commit("theirs")
    repo.checkout("main")
    _commit(repo, _changed(base, up1=2.0), "ours")
    result = repo.merge_branch("feat")
    taken = {Q0: "theirs", "extra.bias": "theirs", "__metadata__[note]": "theirs"}
    assert result.kind == "merged" and result.changed[FILE].tensors == taken
    from safetensors import safe_open

    with safe_open(repo.root / FILE, "pt") as f:
        assert f.metadata() == {"format": "pt", "note": "theirs"}
        assert list(f.keys()) == sorted([*base, "extra.bias"])
        assert torch.equal(f.get_tensor("extra.bias"), torch.arange(4, dtype=torch.float32))
        assert torch.equal(f.get_tensor(UP1), base[UP1] + 2.0) and torch.equal(f.get_tensor(Q0), base[Q0] + 1.0)
    st = repo.status()
    assert not (st.staged or st.unstaged) and repo.fsck() == []


def test_the_same_tensor_changed_on_both_sides_is_a_conflict_and_nothing_changes(repo, base):
    _branches(repo, base, _changed(base, q0=2.0, k1=1.0), _changed(base, q0=1.0, k1=3.0))
    head, files = repo.refs.head(), tree_hashes(repo.root)
    index = (repo.git_dir / "mgit-index.json").read_bytes()
    repo.close()
    got = invoke("merge", "feat", cwd=repo.root)
    assert got.exit_code == 5
    assert f"CONFLICT (content): tensor {Q0} of {FILE}: both sides changed it differently" in got.stdout
    assert f"tensor {K1} of {FILE}" in got.stdout and "--method task_arithmetic" in got.stdout
    assert got.stderr.startswith("error: merge of feat: 2 conflict(s) in 1 file(s)") and got.stderr.count("\n") == 1
    doc = json.loads(invoke("merge", "feat", "--json", cwd=repo.root).stdout)
    assert doc["schema"] == "mgit.merge-conflicts/2" and doc["committed"] is False
    assert {c["where"] for c in doc["conflicts"]} == {f"{FILE}:{Q0}", f"{FILE}:{K1}"}
    with Repository(repo.root) as again:
        assert again.refs.head() == head and tree_hashes(again.root) == files
        assert (again.git_dir / "mgit-index.json").read_bytes() == index
        assert not journal.exists(again.git_dir)
        with pytest.raises(MergeConflictError) as caught:
            again.merge_branch("feat")
        assert [c.tensor for c in caught.value.report.conflicts] == [Q0, K1]  # in data order


def test_ours_and_theirs_patterns_settle_conflicts_per_tensor(repo, base):
    ours, theirs = _changed(base, q0=2.0, k1=1.0), _changed(base, q0=1.0, k1=3.0, up1=0.25)
    _branches(repo, base, ours, theirs)
    with pytest.raises(MergeConflictError) as caught:  # one pattern settles only one of the two
        repo.merge_branch("feat", theirs="*q_proj*")
    assert [c.tensor for c in caught.value.report.conflicts] == [K1]
    result = repo.merge_branch("feat", theirs=["*q_proj*"], ours=[f"{FILE}:*k_proj*"])
    assert {(s.conflict.tensor, s.by) for s in result.settled} == {(Q0, "theirs"), (K1, "ours")}
    got = load_file(repo.root / FILE)
    assert torch.equal(got[Q0], theirs[Q0]) and torch.equal(got[K1], ours[K1]) and torch.equal(got[UP1], theirs[UP1])
    assert "Conflicts settled:" in repo.graph.commit(repo.refs.head()).message


def test_a_bare_theirs_flag_settles_every_conflict_from_the_cli(repo, base):
    theirs = _changed(base, q0=1.0, k1=3.0)
    _branches(repo, base, _changed(base, q0=2.0, k1=1.0), theirs)
    repo.close()
    both = invoke("merge", "feat", "--ours", f"{FILE}:{Q0}", "--theirs", cwd=repo.root)  # Q0 matched by both
    assert both.exit_code == 2 and "is matched by both --ours and --theirs" in both.stderr
    got = invoke("merge", "feat", "--theirs", cwd=repo.root)
    assert got.exit_code == 0, got.stderr
    assert got.stdout.startswith("Merge made by the 'three-way' strategy.")
    assert f" settled {FILE}:{Q0} by theirs" in got.stdout
    merged = load_file(repo.root / FILE)
    assert torch.equal(merged[Q0], theirs[Q0]) and torch.equal(merged[K1], theirs[K1])


def test_method_applies_both_changes_over_the_merge_base(repo, base):
    """--method task_arithmetic (weights 1, 1 by default): base + Δours + Δtheirs on the
    conflicting tensors only; what one side changed is still taken as it is."""
    ours, theirs = _changed(base, q0=2.0, up1=0.5), _changed(base, q0=-0.75, k1=1.0)
    _branches(repo, base, ours, theirs)
    repo.close()
    got = invoke("merge", "--method", "task_arithmetic", "feat", cwd=repo.root)  # one diverged REV: three-way
    assert got.exit_code == 0, got.stderr
    with Repository(repo.root) as again:
        assert again.graph.commit(again.refs.head()).parents[1] == again.resolve("feat")
        merged = load_file(again.root / FILE)
        expected = base[Q0] + (ours[Q0] - base[Q0]) + (theirs[Q0] - base[Q0])
        assert torch.allclose(merged[Q0], expected, atol=1e-6)
        assert torch.equal(merged[UP1], ours[UP1]) and torch.equal(merged[K1], theirs[K1])
        mine, here = _manifests(again, "main~1"), _manifests(again, "HEAD")
        assert here[UP1] == mine[UP1] and here[K1] == _manifests(again, "feat")[K1]
        assert "task_arithmetic over" in again.graph.commit(again.refs.head()).message
        st = again.status()
        assert not (st.staged or st.unstaged) and again.fsck() == []


def test_method_weights_scale_each_side(repo, base):
    ours, theirs = _changed(base, q0=2.0), _changed(base, q0=-1.0)
    _branches(repo, base, ours, theirs)
    repo.merge_branch("feat", method="task_arithmetic", weight=[0.5, 0.25])
    expected = base[Q0] + 0.5 * (ours[Q0] - base[Q0]) + 0.25 * (theirs[Q0] - base[Q0])
    assert torch.allclose(load_file(repo.root / FILE)[Q0], expected, atol=1e-6)


def test_config_lines_changed_apart_merge_and_the_same_line_conflicts(repo, base):
    ours_cfg, theirs_cfg = CONFIG | {"hidden_size": 48}, CONFIG | {"vocab": 128}
    _branches(repo, base, _changed(base, up1=1.0), _changed(base, q0=1.0), ours_cfg, theirs_cfg)
    result = repo.merge_branch("feat")
    assert "model/config.json" in result.changed
    merged = json.loads((repo.root / "model" / "config.json").read_text())
    assert merged == CONFIG | {"hidden_size": 48, "vocab": 128}
    st = repo.status()
    assert not (st.staged or st.unstaged)


def test_a_config_line_both_sides_changed_is_a_conflict_text_cannot_take_a_method(repo, base):
    ours_cfg, theirs_cfg = CONFIG | {"rope_theta": 1.0}, CONFIG | {"rope_theta": 2.0}
    _branches(repo, base, _changed(base, up1=1.0), _changed(base, q0=1.0), ours_cfg, theirs_cfg)
    with pytest.raises(MergeConflictError) as caught:
        repo.merge_branch("feat", method="task_arithmetic")
    assert [(c.path, c.kind) for c in caught.value.report.conflicts] == [("model/config.json", "text")]
    assert "--method merges only tensors" in str(caught.value)
    repo.merge_branch("feat", theirs="model/config.json")
    assert json.loads((repo.root / "model" / "config.json").read_text())["rope_theta"] == 2.0


def test_uncommitted_changes_in_a_file_the_merge_writes_are_refused(repo, base):
    _branches(repo, base, _changed(base, up1=1.0), _changed(base, q0=1.0))
    write_model(repo.root / "model", _changed(base, k1=9.0))  # an unstaged change to the model file
    (repo.root / "model" / "config.json").write_text(json.dumps(CONFIG, indent=2) + "\n")
    touch_later(repo.root / FILE)
    head, files = repo.refs.head(), tree_hashes(repo.root)
    with pytest.raises(DirtyWorktreeError, match=f"merge would overwrite uncommitted changes in {FILE}"):
        repo.merge_branch("feat")
    assert repo.refs.head() == head and tree_hashes(repo.root) == files and not journal.exists(repo.git_dir)
    repo.close()
    assert invoke("merge", "feat", cwd=repo.root).exit_code == 4


def test_uncommitted_changes_elsewhere_stay_as_they_are(repo, base):
    _branches(repo, base, _changed(base, up1=1.0), _changed(base, q0=1.0))
    (repo.root / "notes.txt").write_text("mine\n")
    repo.merge_branch("feat")
    assert (repo.root / "notes.txt").read_text() == "mine\n"
    assert repo.status().untracked == ["notes.txt"]


def test_several_revisions_without_a_method_is_one_line_naming_method(repo, base):
    _branches(repo, base, _changed(base, up1=1.0), _changed(base, q0=1.0))
    repo.close()
    got = invoke("merge", "feat", "main~1", cwd=repo.root)
    assert got.exit_code == 2 and "--method" in got.stderr and got.stderr.count("\n") == 1
    bare = invoke("merge", "--theirs", "feat", cwd=repo.root)  # --theirs took feat as its pattern
    assert bare.exit_code == 2 and "mgit merge REV --theirs" in bare.stderr
    assert "--ours" in invoke("merge", "--help", cwd=repo.root).stdout
    assert "--budget" in invoke("merge", "--help", cwd=repo.root).stdout  # the model merge's options stay
