"""Sparse checkouts: the working tree holds only the tensors the patterns select, as valid
safetensors files, byte-exact; what they leave out is carried over by add and commit."""

from __future__ import annotations

import json
from fnmatch import fnmatchcase

import pytest
import torch
from helpers.cli import invoke
from helpers.models import commit_model, frozen_finetune, llama_state_dict, touch_later, tree_hashes
from helpers.run import run_mgit
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from mgit import Repository
from mgit.errors import BadInputError, DirtyWorktreeError
from mgit.graph.names import HEADER_ENTRY
from mgit.model.safetensors_file import read_layout

SHARD1 = "model/model-00001-of-00002.safetensors"  # embed, norm, layers 0 and 1
SHARD2 = "model/model-00002-of-00002.safetensors"  # layers 2 and 3, lm_head
INCLUDE = ["model.layers.[0-1].*"]
EXCLUDE = ["*mlp*"]


def selected(names, include=INCLUDE, exclude=EXCLUDE) -> set[str]:
    return {
        n
        for n in names
        if (not include or any(fnmatchcase(n, p) for p in include)) and not any(fnmatchcase(n, p) for p in exclude)
    }


def raw_tensors(path) -> dict[str, bytes]:
    """Each tensor's bytes exactly as they lie in the file."""
    layout = read_layout(path)
    data = path.read_bytes()
    return {t.name: data[layout.data_start + t.begin : layout.data_start + t.end] for t in layout.tensors}


@pytest.fixture
def work(tmp_path):
    """main: a two-shard llama; sft: layers 0 and 1 fine-tuned. On main, fully checked out."""
    repo = Repository.init(tmp_path / "work")
    base = llama_state_dict()
    commit_model(repo, base, "base", shards=2)
    full = {p: raw_tensors(repo.root / p) for p in (SHARD1, SHARD2)}
    files = tree_hashes(repo.root)
    repo.checkout(create_branch="sft")
    tuned = frozen_finetune(base, {2, 3}, seed=5)
    commit_model(repo, tuned, "sft", shards=2)
    repo.checkout("main")
    yield repo, base, tuned, full, files
    repo.close()


def test_sparse_files_hold_exactly_the_selected_tensors_byte_exact(work):
    repo, base, _, full, files = work
    res = repo.checkout("main", include=INCLUDE, exclude=EXCLUDE)
    want = selected(base)
    assert len(want) == 12 and res.left_out == [SHARD2]
    assert not (repo.root / SHARD2).exists()  # no tensor of it selected: not written
    path = repo.root / SHARD1
    assert set(raw_tensors(path)) == want
    assert raw_tensors(path) == {n: full[SHARD1][n] for n in want}
    loaded = load_file(path)  # a valid safetensors file for the library itself
    assert set(loaded) == want and all(torch.equal(loaded[n], base[n]) for n in want)
    with safe_open(path, framework="pt") as f:
        assert set(f.keys()) == want and f.metadata() == {"format": "pt"}
    for plain in ("model/config.json", "model/model.safetensors.index.json"):  # non-tensor files always written
        assert tree_hashes(repo.root)[plain] == files[plain]
    st = repo.status()
    assert st.clean and st.not_checked_out == [SHARD2]
    assert (st.sparse.tensors_present, st.sparse.tensors_total) == (12, len(base))
    assert st.sparse.patterns.include == tuple(INCLUDE) and st.sparse.patterns.exclude == tuple(EXCLUDE)
    assert not repo.diff(numeric=False).changed  # HEAD vs the sparse working tree: nothing changed
    index = json.loads((repo.git_dir / "mgit-index.json").read_text())
    assert index["schema"] == "mgit.index/2" and index["entries"][SHARD1]["projection"]


def test_patterns_persist_across_a_branch_switch(work):
    repo, _, tuned, _, _ = work
    repo.checkout("main", include=INCLUDE, exclude=EXCLUDE)
    res = repo.checkout("sft")
    assert res.written == [SHARD1]  # layers 0 and 1 differ: rewritten, sparse again
    loaded = load_file(repo.root / SHARD1)
    assert set(loaded) == selected(tuned) and all(torch.equal(loaded[n], tuned[n]) for n in loaded)
    assert not (repo.root / SHARD2).exists()
    assert repo.sparse_patterns().include == tuple(INCLUDE) and repo.status().clean
    repo.checkout("main")
    assert repo.status().clean and repo.status().sparse.tensors_present == 12


def test_edits_to_a_sparse_file_commit_with_the_tensors_left_out(work):
    repo, base, _, full, _ = work
    repo.checkout("main", include=INCLUDE, exclude=EXCLUDE)
    path = repo.root / SHARD1
    sd = load_file(path)
    name = "model.layers.0.self_attn.q_proj.weight"
    sd[name] = sd[name] * 2
    save_file(sd, path, metadata={"format": "pt"})
    touch_later(path)
    st = repo.status()
    assert [(f.path, f.tensors.changed) for f in st.unstaged] == [(SHARD1, [name])]
    repo.add(["model"])
    assert [(f.path, f.tensors.changed, f.tensors.removed) for f in repo.status().staged] == [(SHARD1, [name], [])]
    repo.commit("double one projection")
    expected = dict(base) | {name: base[name] * 2}
    got = repo.state_dict("HEAD")
    assert set(got) == set(expected) and all(torch.equal(got[n], expected[n]) for n in expected)
    header = {rev: _header(repo, rev, SHARD1) for rev in ("HEAD", "HEAD~1")}
    assert header["HEAD"] == header["HEAD~1"]  # names, dtypes and shapes kept: the full header is reused
    assert repo.status().clean and repo.fsck() == []

    repo.checkout("HEAD", full=True)  # the whole file again: the edited tensor beside the others, untouched
    after = raw_tensors(repo.root / SHARD1)
    assert after[name] != full[SHARD1][name]
    assert {n: b for n, b in after.items() if n != name} == {n: b for n, b in full[SHARD1].items() if n != name}
    assert repo.status().clean


def test_added_and_reshaped_tensors_get_a_new_header_and_a_deleted_one_is_kept(work):
    """A tensor missing from a sparse file is carried over like those left out (never dropped:
    `mgit rm` or a full checkout removes tensors)."""
    repo, base, _, _, _ = work
    repo.checkout("main", include=INCLUDE, exclude=EXCLUDE)
    path = repo.root / SHARD1
    sd = load_file(path)
    gone, grown = "model.layers.1.self_attn.k_proj.weight", "model.layers.0.self_attn.v_proj.weight"
    del sd[gone]
    sd[grown] = torch.cat([sd[grown], sd[grown][:2]])
    sd["model.layers.0.extra.bias"] = torch.arange(8, dtype=torch.float32)
    save_file(sd, path)  # no metadata any more either
    touch_later(path)
    repo.add(["model"])
    repo.commit("reshape")
    expected = dict(base) | {grown: sd[grown], "model.layers.0.extra.bias": sd["model.layers.0.extra.bias"]}
    got = repo.state_dict("HEAD")
    assert set(got) == set(expected) and all(torch.equal(got[n], expected[n]) for n in expected)
    repo.checkout("HEAD", full=True)
    with safe_open(repo.root / SHARD1, framework="pt") as f:
        assert f.metadata() is None and "model.embed_tokens.weight" in f.keys() and gone in f.keys()
    assert repo.status().clean and repo.fsck() == []


def test_restoring_paths_follows_the_patterns(work):
    repo, base, _, full, _ = work
    repo.checkout("main", include=INCLUDE, exclude=EXCLUDE)
    (repo.root / SHARD1).unlink()
    assert [f.change for f in repo.status().unstaged] == ["deleted"]
    res = repo.checkout("HEAD", ["model"])
    assert sorted(res.written) == sorted(["model/config.json", "model/model.safetensors.index.json", SHARD1])
    assert raw_tensors(repo.root / SHARD1) == {n: full[SHARD1][n] for n in selected(base)}
    assert not (repo.root / SHARD2).exists() and repo.status().clean


def test_a_left_out_file_written_anew_keeps_its_tensors(work):
    repo, base, _, _, _ = work
    repo.checkout("main", include=INCLUDE, exclude=EXCLUDE)
    extra = torch.arange(6, dtype=torch.float32)
    save_file({"model.extra.weight": extra}, repo.root / SHARD2)
    repo.add(["model"])
    repo.commit("a tensor more in the left-out shard")
    got = repo.state_dict("HEAD")
    assert set(got) == set(base) | {"model.extra.weight"}
    assert all(torch.equal(got[n], base[n]) for n in base) and torch.equal(got["model.extra.weight"], extra)


def test_committing_from_memory_keeps_a_sparse_file_safe_to_add(work):
    repo, base, _, _, _ = work
    repo.checkout("main", include=INCLUDE, exclude=EXCLUDE)
    left_out, kept = "model.layers.0.mlp.up_proj.weight", "model.layers.1.self_attn.o_proj.weight"
    changed = dict(base) | {left_out: base[left_out] * 3}
    repo.commit_state_dict(changed, model="model", message="from memory")
    st = repo.status()
    assert st.staged == [] and SHARD1 not in [f.path for f in st.unstaged]  # it shows what a checkout writes
    path = repo.root / SHARD1
    sd = load_file(path)
    sd[kept] = sd[kept] + 1
    save_file(sd, path, metadata={"format": "pt"})
    touch_later(path)
    repo.add([SHARD1])
    repo.commit("edit the sparse file")
    got, expected = repo.state_dict("HEAD"), changed | {kept: base[kept] + 1}
    assert set(got) == set(expected) and all(torch.equal(got[n], expected[n]) for n in expected)


def test_back_to_a_full_checkout(work):
    repo, _, _, _, files = work
    repo.checkout("main", include=INCLUDE)
    repo.checkout(full=True)  # no revision: HEAD
    assert tree_hashes(repo.root) == files
    assert repo.sparse_patterns() is None and not (repo.git_dir / "sparse.json").exists()
    st = repo.status()
    assert st.clean and st.sparse is None and st.not_checked_out == []
    assert json.loads((repo.git_dir / "mgit-index.json").read_text())["schema"] == "mgit.index/1"


def test_a_dirty_sparse_file_blocks_checkouts(work):
    repo, _, _, _, _ = work
    repo.checkout("main", include=INCLUDE, exclude=EXCLUDE)
    path = repo.root / SHARD1
    sd = load_file(path)
    sd["model.layers.1.input_layernorm.weight"] += 1
    save_file(sd, path, metadata={"format": "pt"})
    touch_later(path)
    edited, state = path.read_bytes(), (repo.git_dir / "sparse.json").read_text()
    with pytest.raises(DirtyWorktreeError, match=SHARD1):
        repo.checkout("sft")
    with pytest.raises(DirtyWorktreeError, match=SHARD1):
        repo.checkout("main", include=["model.layers.0.*"])
    with pytest.raises(DirtyWorktreeError, match=SHARD1):
        repo.checkout("main", full=True)
    assert path.read_bytes() == edited and (repo.git_dir / "sparse.json").read_text() == state
    assert repo.refs.current_branch() == "main"


def test_bad_patterns_are_refused_and_change_nothing(work):
    repo, _, _, _, files = work
    for kwargs, message in (
        ({"include": ["nothing.matches.*"]}, "no tensor of main matches"),
        ({"include": [""]}, "non-empty"),
        ({"include": INCLUDE, "full": True}, "--full"),
    ):
        with pytest.raises(BadInputError, match=message):
            repo.checkout("main", **kwargs)
    with pytest.raises(BadInputError, match="not with paths"):
        repo.checkout("main", ["model"], include=INCLUDE)
    assert tree_hashes(repo.root) == files and repo.sparse_patterns() is None


def test_gc_and_fsck_keep_what_the_sparse_files_need(work):
    repo, _, _, _, _ = work
    repo.checkout("sft", include=INCLUDE, exclude=EXCLUDE)
    repo.gc(grace_seconds=0)
    assert repo.fsck() == []
    projection = repo._index().entries[SHARD1].projection
    assert repo.graph.has(projection)
    assert repo.status().clean
    repo.checkout("main")  # local chunks and the store still serve the sparse file
    assert repo.status().clean


def test_merging_into_a_sparse_working_tree(work):
    repo, base, tuned, _, _ = work
    repo.checkout("main", include=INCLUDE, exclude=EXCLUDE)
    merged = repo.merge(["sft"], "linear", weight=[1.0], normalize=True)
    assert set(load_file(repo.root / SHARD1)) == selected(base) and not (repo.root / SHARD2).exists()
    assert repo.status().clean
    got = repo.state_dict(merged)
    assert set(got) == set(base) and torch.equal(
        got["model.layers.0.mlp.up_proj.weight"], tuned["model.layers.0.mlp.up_proj.weight"]
    )


def test_cli_sparse_checkout_status_and_full(work):
    repo, _, _, _, files = work
    root = repo.root
    proc = run_mgit("checkout", "main", "--include", INCLUDE[0], "--exclude", EXCLUDE[0], cwd=root, check=True)
    assert "sparse checkout" in proc.stderr and "left out" in proc.stderr
    text = invoke("status", cwd=root, check=True).stdout
    assert "Sparse checkout" in text and f"12 of {len(llama_state_dict())} tensors present" in text
    assert "nothing to commit" in text
    st = json.loads(invoke("status", "--json", cwd=root, check=True).stdout)
    assert st["sparse"] == {"include": INCLUDE, "exclude": EXCLUDE, "tensors_present": 12, "tensors_total": 39}
    bad = invoke("checkout", "main", "--include", "zzz*", cwd=root)
    assert bad.returncode != 0 and bad.stderr.startswith("error: no tensor") and "Traceback" not in bad.stderr
    invoke("checkout", "--full", cwd=root, check=True)
    assert tree_hashes(root) == files
    assert json.loads(invoke("status", "--json", cwd=root, check=True).stdout)["sparse"] is None


def _header(repo: Repository, rev: str, path: str) -> bytes:
    tree = dict((name, oid) for name, _, oid in repo.graph.tree(repo.snapshot(rev)[path].oid))
    return repo.graph.blob(tree[HEADER_ENTRY])


def test_an_interrupted_checkout_changing_the_patterns_loses_nothing(work, monkeypatch):
    """Files already rewritten for the new patterns while the index still records the old
    selection (the checkout died before saving it): add and commit still keep every tensor,
    also of a shard deleted because the new patterns select none of it."""
    repo, base, _, _, _ = work
    repo.checkout("main", include=["model.layers.*", "lm_head.weight"])
    before = repo.resolve("HEAD")
    from mgit.model.placing import Replacement

    def dying(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(Replacement, "apply", dying)  # every file prepared, none renamed into place
    with pytest.raises(KeyboardInterrupt):  # shard 1 deleted (nothing selected), shard 2 not yet written
        repo.checkout("main", include=["model.layers.3.*"], exclude=["*mlp*"])
    monkeypatch.undo()
    assert not (repo.root / SHARD1).exists()  # deleted: the new patterns select none of it
    repo.add(["model"])
    with pytest.raises(Exception, match="nothing to commit"):
        repo.commit("after an interrupted checkout")
    assert repo.resolve("HEAD") == before
    got = repo.state_dict("HEAD")
    assert set(got) == set(base) and all(torch.equal(got[n], base[n]) for n in base)


def test_patterns_given_again_rewrite_what_differs_even_without_sparse_json(work):
    """The recovery a damaged sparse.json's message gives (delete it, check out with --full)
    restores every tensor; a pattern given as a plain string is one pattern."""
    repo, base, _, _, files = work
    repo.checkout("main", include="model.layers.0.*")
    assert repo.sparse_patterns().include == ("model.layers.0.*",)
    assert set(load_file(repo.root / SHARD1)) == {n for n in base if n.startswith("model.layers.0.")}
    (repo.git_dir / "sparse.json").write_text("{broken")
    with pytest.raises(Exception, match="damaged"):
        repo.status()
    (repo.git_dir / "sparse.json").unlink()
    repo.checkout("HEAD", full=True)
    assert tree_hashes(repo.root) == files and repo.status().clean and repo.status().sparse is None
