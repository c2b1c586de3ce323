"""The streaming merge engine: tensors cut into many chunks and slices merge bit for bit like
whole tensors (and like mergekit), sparsifiers decide once per expert, merged files are staged
into the working tree, and reads are counted as planned."""

from __future__ import annotations

import functools

import pytest
import torch
from helpers.models import LlamaSpec, llama_state_dict, touch_later, tree_hashes, write_model
from mergekit.merge_methods.api import merge_state_dicts

import mgit.merge.carry as carry
import mgit.merge.chunk_job as chunk_job
import mgit.merge.engine as engine
import mgit.merge.methods.task_arithmetic as methods
import mgit.model.ingest as ingest
from mgit.merge.chunk_buffers import ChunkBuffers
from mgit.model.chunking import chunk_size_for

SPEC = LlamaSpec(vocab=300, hidden=48, intermediate=112, layers=2)
NAMES = ("math", "code", "chat")


def varied_finetune(sd: dict, seed: int) -> dict:
    """A fine-tune whose tensors differ in how much they change: some not at all, some by
    deltas mostly below bf16 resolution (sparse: TIES keeps them all without sorting), some
    densely; a few base elements are -0.0, which a merge must carry through exactly."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for i, (name, t) in enumerate(sorted(sd.items())):
        scale = (0.0, 2e-5, 2e-4, 3e-3)[(i + seed) % 4]
        out[name] = t.clone() if scale == 0 else (t.float() + torch.randn(t.shape, generator=g) * scale).to(t.dtype)
    return out


@pytest.fixture
def small_pieces(monkeypatch):
    """Chunks of ~1 KB and merge slices of 77 elements (not a multiple of 8, so the
    decisions' packed bits are read from odd offsets): every path the 0.6 GB benchmark takes."""
    small = functools.partial(chunk_size_for, target=1000)
    monkeypatch.setattr(ingest, "chunk_size_for", small)
    monkeypatch.setattr(engine, "chunk_size_for", small)
    monkeypatch.setattr(chunk_job, "SLICE_ELEMENTS", 77)
    monkeypatch.setattr(methods, "COMBINE_SLICE", 50)


@pytest.fixture(params=[False, True], ids=["held", "streamed"])
def deltas(request, monkeypatch):
    """Sparsifiers' deltas from the base held whole, or made chunk by chunk as for embeddings
    (every tensor here is far below carry.STREAM_DELTAS_FROM; 0 streams them all)."""
    if request.param:
        monkeypatch.setattr(carry, "STREAM_DELTAS_FROM", 0)
    return request.param


@pytest.fixture
def varied(repo, small_pieces):
    base = llama_state_dict(SPEC, seed=5)
    base["model.norm.weight"][::7] = -0.0
    write_model(repo.root / "model", base)
    repo.add(["model"])
    repo.commit("base")
    tuned = {}
    for k, name in enumerate(NAMES):
        repo.checkout("main")
        repo.checkout(create_branch=name)
        tuned[name] = varied_finetune(base, seed=k + 1)
        write_model(repo.root / "model", tuned[name])
        touch_later(repo.root / "model" / "model.safetensors")
        repo.add(["model"])
        repo.commit(name)
    repo.checkout("main")
    return repo, base, tuned


def _bits(sd: dict) -> dict:
    return {k: v.view(torch.int16) for k, v in sd.items()}


WEIGHTS = {"math": 0.5, "code": 0.3, "chat": 0.2}
DETERMINISTIC = [
    ("task_arithmetic", {"weight": [0.5, 0.3, 0.2]}, {"weight": WEIGHTS}),
    ("ties", {"weight": [0.5, 0.3, 0.2], "density": 0.5}, {"weight": WEIGHTS, "density": 0.5}),
    ("ties", {"weight": 0.4, "density": 0.9, "rescale": True}, {"weight": 0.4, "density": 0.9, "rescale": True}),
    (
        "breadcrumbs_ties",
        {"weight": 0.5, "density": 0.7, "gamma": 0.05},
        {"density": 0.7, "gamma": 0.05, "weight": 0.5},
    ),
]


@pytest.mark.parametrize(("method", "params", "mk_params"), DETERMINISTIC)
def test_chunked_merges_equal_mergekit(varied, deltas, method, params, mk_params):
    repo, base, tuned = varied
    ref = merge_state_dicts({"base": base} | tuned, method, base="base", parameters=mk_params)
    repo.merge(list(NAMES), method, "main", branch="m", **params)
    ours = _bits(repo.state_dict("m"))
    for name, expected in _bits(ref).items():
        assert torch.equal(ours[name], expected), name


def test_tensors_really_are_cut_into_many_chunks(varied):
    repo, _, _ = varied
    from mgit.merge.plan import model_tensors

    _, manifests = model_tensors(repo.graph, repo.snapshot("main"), "model")
    assert max(len(m.chunks) for m in manifests.values()) >= 20


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("ties", {"weight": 0.5, "density": 0.5}),
        ("dare_ties", {"weight": 0.5, "density": 0.6}),
        ("della", {"weight": 0.5, "density": 0.5, "epsilon": 0.1}),
        ("breadcrumbs", {"weight": 0.5, "density": 0.8, "gamma": 0.05}),
        ("linear", {"weight": [0.2, 0.3, 0.5]}),
    ],
)
def test_chunk_by_chunk_equals_whole_tensors(varied, deltas, monkeypatch, method, params):
    """Random methods included: decisions drawn once per expert whole, in expert order."""
    repo, _, _ = varied
    a = repo.merge(list(NAMES), method, "main", branch="chunked", seed=7, **params)
    monkeypatch.setattr(engine, "_by_chunk", lambda tp, spec: False)
    b = repo.merge(list(NAMES), method, "main", branch="whole", seed=7, **params)
    assert dict(repo.snapshot(a)) == dict(repo.snapshot(b))  # the merged files (the plans' measured reads differ)


def test_concurrent_and_sequential_decisions_agree(varied, deltas, monkeypatch):
    repo, _, _ = varied
    monkeypatch.setattr(chunk_job, "DECIDE_MEMORY", 2**40)
    monkeypatch.setattr(chunk_job, "WORKERS", 4)
    a = repo.merge(list(NAMES), "ties", "main", branch="together", weight=0.5, density=0.4)
    monkeypatch.setattr(chunk_job, "DECIDE_MEMORY", 0)
    b = repo.merge(list(NAMES), "ties", "main", branch="apart", weight=0.5, density=0.4)
    assert repo.graph.commit(a).tree == repo.graph.commit(b).tree


@pytest.mark.parametrize("method", ["task_arithmetic", "ties"])
def test_staged_files_are_the_committed_files(varied, method):
    repo, _, _ = varied
    params = {"weight": 0.5} | ({"density": 0.5} if method == "ties" else {})
    repo.merge(list(NAMES), method, "main", branch="m", **params)
    written = tree_hashes(repo.root)
    assert repo.status().clean
    assert not any((repo.git_dir / "staging").iterdir())
    repo.checkout("main")
    repo.checkout("m")
    assert tree_hashes(repo.root) == written
    # on HEAD too
    repo.checkout("main")
    repo.checkout(create_branch="on-head")
    repo.merge(list(NAMES), method, **params)
    assert tree_hashes(repo.root) == written and repo.status().clean


def test_sparsifiers_read_each_differing_chunk_twice_as_planned(varied, deltas):
    repo, _, _ = varied
    plan, _ = repo.merge_plan(list(NAMES), "ties", "main", weight=0.5, density=0.5)
    assert plan.expert_passes == 2
    commit = repo.merge(list(NAMES), "ties", "main", branch="m", weight=0.5, density=0.5)
    b = repo.merge_record(commit)["bytes"]
    assert b["expert_passes"] == 2
    assert b["experts_measured"] == b["experts_estimated"] > 0
    assert b["expert_chunks_measured"] == b["expert_chunks_estimated"]
    assert b["base_measured"] == b["base_estimated"]
    ta = repo.merge_record(repo.merge(list(NAMES), "task_arithmetic", "main", branch="t", weight=0.5))["bytes"]
    assert ta["expert_passes"] == 1 and ta["experts_measured"] == ta["experts_estimated"] == b["experts_measured"] // 2


def test_streamed_deltas_hold_neither_the_base_nor_an_expert_whole(varied, monkeypatch):
    """Made chunk by chunk, after the idle chunk buffers are freed; the base's chunks are read
    again for each expert and for the merge, as the plan estimates; the result is the same."""
    repo, _, _ = varied
    params = {"weight": 0.5, "density": 0.5}
    held = repo.merge_record(repo.merge(list(NAMES), "ties", "main", branch="held", **params))
    monkeypatch.setattr(carry, "STREAM_DELTAS_FROM", 0)
    from mgit.merge.tensor_inputs import TensorInputs

    monkeypatch.setattr(TensorInputs, "read_base", lambda *a, **k: pytest.fail("the base read whole"))
    monkeypatch.setattr(TensorInputs, "expert", lambda *a, **k: pytest.fail("an expert read whole"))
    drops: list[int] = []
    real_drop = ChunkBuffers.drop
    monkeypatch.setattr(ChunkBuffers, "drop", lambda self: drops.append(1) or real_drop(self))
    sha = repo.merge(list(NAMES), "ties", "main", branch="streamed", **params)
    streamed = repo.merge_record(sha)
    assert dict(repo.snapshot(sha)) == dict(repo.snapshot("held"))
    merged = [t for t in streamed["tensors"] if t.get("decision", "merged") == "merged"]
    assert len(drops) >= 1 and len(drops) <= len(merged)
    b, h = streamed["bytes"], held["bytes"]
    assert b["base_measured"] == b["base_estimated"] > h["base_measured"] == h["base_estimated"]
    assert b["experts_measured"] == h["experts_measured"]


def test_killed_merge_leaves_staging_to_the_next_merge(varied):
    repo, _, _ = varied
    staging = repo.git_dir / "staging"
    staging.mkdir(exist_ok=True)
    (staging / "leftover-model.safetensors").write_bytes(b"x" * 100)
    repo.merge(list(NAMES), "task_arithmetic", "main", branch="m", weight=0.5)
    assert not any(staging.iterdir())


@pytest.mark.parametrize(
    ("method", "params", "per_tensor"), [("task_arithmetic", {}, False), ("ties", {"density": 0.5}, True)]
)
def test_a_files_tensors_go_through_the_pool_together(varied, monkeypatch, method, params, per_tensor):
    """Workers go from one tensor's last chunk to the next's first (before, the window drained at
    every tensor: measured ~7 of 36 thread-seconds idle in a K = 8 merge); a sparsifier's tensor
    still runs alone, its decisions held only while it is merged."""
    repo, _, _ = varied
    calls: list[int] = []
    tensors = ingest.Ingestor.tensors

    def counted(self, jobs):
        calls.append(len(jobs))
        return tensors(self, jobs)

    monkeypatch.setattr(ingest.Ingestor, "tensors", counted)
    repo.merge(list(NAMES), method, "main", branch="m", weight=0.5, **params)
    chunked = len([tp for tp in repo.merge_plan(list(NAMES), method, "main", weight=0.5, **params)[0].tensors])
    assert sum(calls) == chunked
    assert calls == [1] * chunked if per_tensor else calls == [chunked]


def test_a_merges_inputs_are_read_ahead_before_they_are_read(varied, monkeypatch):
    """Every planned chunk (the base's where computed, the chosen experts') is asked of the disk a
    window ahead, chunk by chunk across tensors, before a worker reads it."""
    from mgit.store.chunkstore import ChunkStore

    repo, _, _ = varied
    asked: set[str] = set()
    late: list[str] = []
    prefetch, get = ChunkStore.prefetch, ChunkStore.get

    def recording_prefetch(self, cids):
        cids = list(cids)
        asked.update(cids)
        return prefetch(self, cids)

    def checked_get(self, cid, *args, **kwargs):
        if cid not in asked:
            late.append(cid)
        return get(self, cid, *args, **kwargs)

    monkeypatch.setattr(ChunkStore, "prefetch", recording_prefetch)
    monkeypatch.setattr(ChunkStore, "get", checked_get)
    repo.merge(list(NAMES), "task_arithmetic", "main", branch="m", weight=0.5, checkout=False)
    assert asked and not late
