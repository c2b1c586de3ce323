"""`mgit merge --verify REV` (issue 41): a merge commit computed again from its plan record,
every output chunk id compared with the commit's, nothing written."""

from __future__ import annotations

import dataclasses
import functools
import json

import pytest
import yaml
from helpers.cli import invoke
from helpers.models import SMALL, commit_model, llama_state_dict, uneven_finetune
from helpers.sketches import commit_experts

from mgit import Repository
from mgit.errors import BadInputError, NotRecomputableError
from mgit.graph import records
from mgit.graph.names import HEADER_ENTRY
from mgit.graph.snapshot import Entry, write_snapshot
from mgit.merge import engine
from mgit.merge.methods.registry import METHODS
from mgit.model import ingest
from mgit.model.chunking import chunk_size_for
from mgit.model.filetree import load_safetensors, put_safetensors_tree

MODEL = "model/model.safetensors"


@pytest.fixture(scope="module")
def merges(tmp_path_factory):
    """main: a bf16 base; math, code: uneven fine-tunes of it; chunks of ~2 KB (several per tensor).
    Every test merges on a branch of its own, nothing checked out."""
    with pytest.MonkeyPatch.context() as patch:
        small = functools.partial(chunk_size_for, target=2000)
        patch.setattr(ingest, "chunk_size_for", small)
        patch.setattr(engine, "chunk_size_for", small)
        repo = Repository.init(tmp_path_factory.mktemp("verify") / "work")
        base = llama_state_dict(SMALL, seed=3)
        commit_model(repo, base, "base")
        for k, name in enumerate(("math", "code")):
            repo.create_branch(name, "main")
            repo.commit_state_dict(uneven_finetune(base, seed=40 + k), message=name, branch=name)
        yield repo
        repo.close()


def _params(name: str) -> dict:
    """Parameters any registered method takes: its required ones, a density where it sparsifies."""
    declared = {p.name: p for p in METHODS[name].params}
    given = {"weight": 0.6, "t": 0.4}
    out = {k: v for k, v in given.items() if k in declared and declared[k].required}
    if "density" in declared:
        out["density"] = 0.5
    return out


def _experts(name: str) -> list[str]:
    most = METHODS[name].max_experts
    return ["math", "code"][: 2 if most is None else min(2, most)]


def _written(repo: Repository) -> tuple:
    """What a verification must leave as it was: chunks, graph objects, refs, the working tree."""
    objects = sorted(p.name for p in (repo.ctx.git_dir / "objects").rglob("*") if p.is_file())
    return repo.store.ids(), objects, repo.branch_info(), (repo.root / MODEL).read_bytes()


@pytest.mark.parametrize("name", sorted(METHODS))
def test_every_registered_method_verifies_bit_identical(merges, name):
    sha = merges.merge(_experts(name), name, branch=f"v-{name}", checkout=False, seed=7, **_params(name))
    before = _written(merges)
    result = merges.verify_merge(f"v-{name}")
    assert result.identical, result.differences
    assert result.commit == sha and result.method == name and result.made_by == result.verified_by
    stored = load_safetensors(merges.graph, merges.snapshot(sha)[MODEL].oid, MODEL).manifests
    assert result.tensors == len(stored) and result.chunks == sum(len(m.chunks) for m in stored.values())
    assert result.chunks > result.tensors  # tensors of several chunks: every one compared
    assert _written(merges) == before  # nothing stored, no ref moved, the working tree untouched


def test_a_config_merge_with_filters_and_gradients_verifies(merges, tmp_path):
    config = {
        "merge_method": "ties",
        "base_model": "main",
        "models": [
            {"model": "main"},
            {"model": "math", "parameters": {"density": [1.0, 0.3], "weight": 1.0}},
            {
                "model": "code",
                "parameters": {"density": 0.5, "weight": [{"filter": "mlp", "value": 0.5}, {"value": 0.2}]},
            },
        ],
        "parameters": {"normalize": True},
    }
    path = tmp_path / "merge.yml"
    path.write_text(yaml.safe_dump(config))
    sha = merges.merge([], None, config=path, branch="configured", checkout=False)
    per_tensor = {json.dumps(t["parameters"]) for t in merges.merge_record(sha)["tensors"]}
    assert len(per_tensor) > 2  # the gradient and the filter make different parameters per tensor
    path.unlink()  # verifying reads the record, not the config file
    assert merges.verify_merge(sha).identical


def test_a_budgeted_merge_is_recomputed_from_its_recorded_choice_not_planned_again(merges, monkeypatch):
    sha = merges.merge(["math", "code"], "ties", branch="budgeted", checkout=False, weight=0.5, budget="30%")
    record = merges.merge_record(sha)
    chosen = [t["expert_chunks_chosen"] for t in record["tensors"]]
    assert record["request"]["budget"] == "30%"
    candidates = sum(t["budget"]["candidates"] for t in record["tensors"] if "budget" in t)
    assert 0 < sum(len(c) for per in chosen for c in per) < candidates  # the budget left some out
    from mgit.merge.budget import restrict

    def refuse(*args, **kwargs):
        raise AssertionError("a verification plans no budget")

    monkeypatch.setattr(restrict, "restrict", refuse)
    assert merges.verify_merge(sha).identical


def _rewritten(repo: Repository, sha: str, record_change=None, tensor: str | None = None) -> str:
    """A commit like merge ``sha`` (same parents, files and records), made by the lower layers, with
    its plan record changed by ``record_change`` and ``tensor``'s first chunk pointed at another."""
    graph, snap = repo.graph, dict(repo.snapshot(sha))
    doc = repo.merge_record(sha)
    if record_change is not None:
        record_change(doc)
    if tensor is not None:
        stored = load_safetensors(graph, snap[MODEL].oid, MODEL)
        manifest = stored.manifests[tensor]
        other = next(c for m in stored.manifests.values() for c in m.chunks if c.id != manifest.chunks[0].id)
        moved = dataclasses.replace(
            manifest, chunks=(dataclasses.replace(manifest.chunks[0], id=other.id), *manifest.chunks[1:])
        )
        ids = dict(stored.manifest_ids) | {tensor: graph.put_blob(moved.to_bytes())}
        header = graph.blob(next(oid for name, _, oid in graph.tree(snap[MODEL].oid) if name == HEADER_ENTRY))
        snap[MODEL] = Entry("safetensors", put_safetensors_tree(graph, header, ids))
    info = graph.commit(sha)
    extra = records.stats_entries(graph, records.read_stats(graph, info.tree)) + records.plan_entries(graph, doc)
    who = repo.ctx.identity()
    return graph.put_commit(write_snapshot(graph, snap, extra), list(info.parents), "rewritten", who, who)


def test_a_tampered_merge_fails_naming_the_tensor_and_its_chunk(merges):
    sha = merges.merge(["math", "code"], "task_arithmetic", branch="honest", checkout=False, weight=[0.3, 0.7])
    tensor = "model.layers.1.mlp.up_proj.weight"
    tampered = _rewritten(merges, sha, tensor=tensor)
    result = merges.verify_merge(tampered)
    assert not result.identical
    assert [(d.what, d.tensor, d.chunk) for d in result.differences] == [("chunk", tensor, 0)]
    shown = invoke("merge", "--verify", tampered, cwd=merges.root)
    assert shown.exit_code == 6 and shown.stdout == ""
    assert shown.stderr.count("\n") == 1 and f"tensor {tensor!r} in {MODEL} differs at chunk 0" in shown.stderr
    doc = json.loads(invoke("merge", "--verify", tampered, "--json", cwd=merges.root).stdout)
    assert doc["schema"] == "mgit.merge-verify/1" and doc["identical"] is False
    assert doc["differences"][0]["tensor"] == tensor and doc["differences"][0]["chunk"] == 0


def test_a_random_method_is_recomputed_from_its_recorded_seed(merges):
    sha = merges.merge(["math", "code"], "dare_ties", branch="dare", checkout=False, weight=0.5, density=0.3)
    seed = merges.merge_record(sha)["seed"]
    assert merges.verify_merge(sha).identical
    reseeded = _rewritten(merges, sha, record_change=lambda doc: doc.update(seed=seed + 1))
    result = merges.verify_merge(reseeded)
    assert not result.identical and {d.what for d in result.differences} == {"chunk"}  # another seed, other drops


def test_another_mgit_versions_merge_and_an_older_record_still_verify(merges):
    sha = merges.merge(["math", "code"], "ties", branch="older", checkout=False, weight=0.5, density=0.5)

    def older(doc):
        doc.update(mgit_version="0.0.1")
        del doc["request"]  # a record from before the request's options were kept

    result = merges.verify_merge(_rewritten(merges, sha, record_change=older))
    assert result.identical and result.made_by == "0.0.1" and not result.same_version
    shown = invoke("merge", "--verify", _rewritten(merges, sha, record_change=older), cwd=merges.root)
    assert shown.exit_code == 0 and "made by mgit 0.0.1, verified with mgit" in shown.stdout

    def later(doc):
        doc["request"]["a_later_option"] = 1  # a later mgit's option: left out, and said so

    later_sha = _rewritten(merges, sha, record_change=later)
    assert merges.verify_merge(later_sha).unknown_options == ["a_later_option"]
    shown = invoke("merge", "--verify", later_sha, cwd=merges.root)
    assert shown.exit_code == 0 and "options this mgit does not know: a_later_option" in shown.stderr


def test_the_cli_says_verified_and_refuses_what_is_no_merge(merges):
    sha = merges.merge(["math", "code"], "linear", branch="cli", checkout=False, weight=[0.25, 0.75])
    shown = invoke("merge", "--verify", "cli", cwd=merges.root)
    assert shown.exit_code == 0 and shown.stdout.startswith(f"verified: {merges.verify_merge(sha).tensors} tensors")
    assert "bit-identical" in shown.stdout
    doc = json.loads(invoke("merge", "--verify", "cli", "--json", cwd=merges.root).stdout)
    assert doc["schema"] == "mgit.merge-verify/1" and doc["identical"] is True and doc["differences"] == []
    plain = invoke("merge", "--verify", "main", cwd=merges.root)
    assert plain.exit_code == 2 and plain.stderr.count("\n") == 1 and "is not a model merge commit" in plain.stderr
    with pytest.raises(BadInputError, match="not a model merge commit"):
        merges.verify_merge("math")
    mixed = invoke("merge", "--verify", "cli", "--method", "ties", cwd=merges.root)
    assert mixed.exit_code == 2 and "--verify REV takes no other option" in mixed.stderr


def test_a_merge_in_a_partial_clone_verifies_fetching_only_its_inputs(merges, tmp_path):
    sha = merges.merge(["math", "code"], "ties", branch="shared", checkout=False, weight=0.5, budget="50%")
    merges.remote_add("origin", str(tmp_path / "remote.mgit"))
    for branch in ("main", "math", "code", "shared"):
        merges.push("origin", branch)
    partial = Repository.clone(str(tmp_path / "remote.mgit"), tmp_path / "p", partial=True)
    held = partial.store.ids()
    result = partial.verify_merge("origin/shared")
    assert result.identical and result.fetched_bytes > 0
    fetched = partial.store.ids() - held
    inputs = set()
    for rev in ("main", "math", "code"):
        for m in load_safetensors(merges.graph, merges.snapshot(rev)[MODEL].oid, MODEL).manifests.values():
            inputs |= {c.id for c in m.chunks}
    assert fetched and fetched <= inputs  # what the merge computed from; none of the commit's own chunks
    assert partial.verify_merge(sha).fetched_bytes == 0  # fetched once
    partial.close()


def test_a_sketched_budget_is_recomputed_from_the_sketches_it_read(repo):
    commit_experts(repo, 10)
    for name in ("e1", "e2"):
        repo.sketch(name, share="10%")
    sha = repo.merge(["e1", "e2"], "task_arithmetic", branch="m", checkout=False, budget="10%", weight=[0.5, 0.5])
    notes = [s for t in repo.merge_record(sha)["tensors"] for s in t.get("sketches") or () if s is not None]
    assert notes and all(n["blocks"] and n["chunks"] for n in notes)
    assert repo.verify_merge(sha).identical
    repo.sketch("e1", share="50%", force=True)  # another sketch than the one the merge read
    with pytest.raises(NotRecomputableError, match="sketch of tensor"):
        repo.verify_merge(sha)
