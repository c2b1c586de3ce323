"""A safetensors file's chunks go through one bounded window across all its tensors (with the
kernel asked to read ahead), and give exactly the entries, statistics and stored bytes that
storing its tensors one at a time gives."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import torch
from safetensors.torch import save_file

from mgit.graph.objects import Graph
from mgit.model import ingest
from mgit.model.ingest import Ingestor
from mgit.model.manifest import TensorManifest
from mgit.model.safetensors_file import read_layout
from mgit.parallel import WORKERS, make_pool
from mgit.store.chunkstore import ChunkStore


def _model(path: Path, seed: int, tensors: int = 6, rows: int = 64, cols: int = 96) -> Path:
    g = torch.Generator().manual_seed(seed)
    sd = {
        f"layer.{i}.weight": (torch.randn(rows * (1 + i % 3), cols, generator=g) * 0.02).to(torch.bfloat16)
        for i in range(tensors)
    }
    sd["norm"] = torch.ones(cols, dtype=torch.bfloat16)
    sd["empty"] = torch.zeros(0, cols, dtype=torch.bfloat16)
    save_file(sd, str(path))
    return path


def _fine_tune(src: Path, dest: Path) -> Path:
    from safetensors.torch import load_file

    sd = load_file(str(src))
    for name, t in sd.items():
        if name.startswith("layer.") and int(name.split(".")[1]) % 2 == 0:
            sd[name] = (t.float() + 1e-3).to(torch.bfloat16)
    save_file(sd, str(dest))
    return dest


def _setup(root: Path):
    graph = Graph.init(root / "git")
    return graph, ChunkStore(root / "chunks")


def _one_at_a_time(ing: Ingestor, path: Path, rel: str) -> tuple[dict[str, str], list]:
    """What safetensors_file did before: tensor() per tensor, each draining its own window."""
    layout = read_layout(path, rel)
    ing.begin_file(rel)
    with open(path, "rb") as f:
        ids = {}
        for t in layout.tensors:
            read = ingest._file_reader(f.fileno(), layout.data_start + t.begin)
            ids[t.name] = ing.tensor(t.name, t.dtype, t.shape, t.nbytes, read)
    return ids, list(ing.file_stats)


def _pack_bytes(store: ChunkStore) -> dict[str, bytes]:
    """Every stored record, by chunk id (encodings and delta bases included)."""
    return {cid: store.export(cid).payload for cid in store.ids()}


def test_a_file_gives_the_entries_and_stored_bytes_of_its_tensors_one_by_one(tmp_path, monkeypatch):
    monkeypatch.setattr(ingest, "WINDOW", 3)  # the window spans tensors whatever its length
    monkeypatch.setattr("mgit.model.ingest.chunk_size_for", lambda shape, bits: 4096)
    base = _model(tmp_path / "base.safetensors", 0)
    tuned = _fine_tune(base, tmp_path / "tuned.safetensors")
    results = []
    for how in ("file", "tensors"):
        graph, store = _setup(tmp_path / how)
        with make_pool() as pool:
            first = Ingestor(graph, store, pool)
            first.begin_file("m.safetensors")
            entry = first.safetensors_file(base, "m.safetensors")
            parents = graph_tensors(graph, entry.oid)
            second = Ingestor(graph, store, pool, parents=lambda rel, parents=parents: parents)
            if how == "file":
                second.begin_file("m.safetensors")
                tree = second.safetensors_file(tuned, "m.safetensors").oid
                stats = second.file_stats
            else:
                ids, stats = _one_at_a_time(second, tuned, "m.safetensors")
                tree = second.safetensors_tree(read_layout(tuned, "m").header, ids)
            store.seal()
            results.append((entry.oid, tree, stats, vars(second.stats), _pack_bytes(store)))
    (e1, t1, s1, n1, p1), (e2, t2, s2, n2, p2) = results
    assert (e1, t1) == (e2, t2)
    assert s1 == s2 and len(s1) > 3  # the same relative statistics, in the same order
    assert n1 == n2 and n1["chunks"] > 10
    assert p1 == p2  # the same records: encodings, delta bases, payloads


def graph_tensors(graph: Graph, tree: str) -> dict[str, TensorManifest]:
    from mgit.model.filetree import load_safetensors

    stored = load_safetensors(graph, tree)
    return dict(stored.manifests)


def test_chunks_of_different_tensors_are_stored_at_once(tmp_path, monkeypatch):
    """Single-chunk tensors: a read of the next tensor starts while one is in flight. Before,
    each tensor's window drained first, so no two reads ever overlapped here."""
    path = _model(tmp_path / "m.safetensors", 1, tensors=4, rows=8, cols=16)
    barrier = threading.Barrier(2, timeout=20)
    read = ingest.FileReader.__call__
    met = []

    def meeting_read(self, offset, size):
        if size > 64:  # the four weight tensors, not the norm
            met.append(barrier.wait())
        return read(self, offset, size)

    monkeypatch.setattr(ingest.FileReader, "__call__", meeting_read)
    graph, store = _setup(tmp_path)
    with make_pool() as pool:
        Ingestor(graph, store, pool).file(path, "m.safetensors")
    assert sorted(met) == [0, 0, 1, 1]  # two pairs of reads met: each pair in flight together


def test_every_chunk_is_read_ahead_before_it_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr("mgit.model.ingest.chunk_size_for", lambda shape, bits: 1024)
    # sizes fixed here: WINDOW follows the CPU count, and READ_AHEAD is WINDOW from 8 cores on
    monkeypatch.setattr(ingest, "WINDOW", 4)
    monkeypatch.setattr(ingest, "READ_AHEAD", 12)
    path = _model(tmp_path / "m.safetensors", 2, tensors=3)
    events: list[tuple[str, int]] = []
    lock = threading.Lock()
    advise = os.posix_fadvise
    read = ingest.FileReader.__call__

    def advised(fd, offset, size, how):
        assert how == os.POSIX_FADV_WILLNEED
        with lock:
            events.append(("advise", offset))
        advise(fd, offset, size, how)

    def reading(self, offset, size):
        with lock:
            events.append(("read", self.base + offset))
        return read(self, offset, size)

    monkeypatch.setattr(os, "posix_fadvise", advised)
    monkeypatch.setattr(ingest.FileReader, "__call__", reading)
    graph, store = _setup(tmp_path)
    with make_pool() as pool:
        Ingestor(graph, store, pool).file(path, "m.safetensors")
    reads = [o for e, o in events if e == "read"]
    assert len(reads) > 20
    for offset in reads:
        assert events.index(("advise", offset)) < events.index(("read", offset))
    # read-ahead runs READ_AHEAD chunks ahead, further than the window of chunks worked on: by the
    # first read, that many have been asked for
    assert sum(1 for e, _ in events[: events.index(("read", reads[0]))] if e == "advise") >= 12


def test_a_file_that_shrinks_while_read_is_an_error(tmp_path):
    path = _model(tmp_path / "m.safetensors", 3)
    graph, store = _setup(tmp_path)
    layout = read_layout(path, "m.safetensors")
    with open(path, "r+b") as f:
        f.truncate(layout.data_start + 100)
    with make_pool() as pool:
        try:
            Ingestor(graph, store, pool).safetensors_file(path, "m.safetensors", layout)
        except OSError as exc:
            assert "shrank" in str(exc)
        else:
            raise AssertionError("a shrunk file was stored")


def test_workers_run_on_past_a_slow_chunk(tmp_path, monkeypatch):
    """The first chunk's read is held up until more chunks than the default window (two per
    worker) were read after it: with only that window, the workers would stop and wait."""
    monkeypatch.setattr("mgit.model.ingest.chunk_size_for", lambda shape, bits: 1024)
    path = _model(tmp_path / "m.safetensors", 4, tensors=2)
    others, go = [], threading.Event()
    read = ingest.FileReader.__call__

    def slow_first(self, offset, size):
        if self.base + offset == read_layout(path, "m").data_start:
            assert go.wait(timeout=20), "no worker ran past the slow chunk"
        else:
            others.append(offset)
            if len(others) > 2 * WORKERS:
                go.set()
        return read(self, offset, size)

    monkeypatch.setattr(ingest.FileReader, "__call__", slow_first)
    graph, store = _setup(tmp_path)
    with make_pool() as pool:
        Ingestor(graph, store, pool).file(path, "m.safetensors")
    assert go.is_set()


def test_tensors_read_ahead_what_they_will_read_and_nothing_carried(tmp_path):
    """A ``read`` with ``will_need`` (a merge's inputs) hears of each chunk before it is read;
    carried chunks are neither announced nor read."""
    from mgit.model.dtypes import lookup
    from mgit.model.ingest import TensorJob

    bf16 = lookup("BF16")
    graph, store = _setup(tmp_path)
    data = {n: bytes([n]) * 4096 for n in range(3)}
    events: list[tuple[str, int, int]] = []
    lock = threading.Lock()

    class Reads:
        def __init__(self, n: int):
            self.n = n

        def __call__(self, offset: int, size: int) -> bytes:
            with lock:
                events.append(("read", self.n, offset))
            return data[self.n][offset : offset + size]

        def will_need(self, offset: int, size: int) -> None:
            with lock:
                events.append(("ahead", self.n, offset))

    with make_pool() as pool:
        ing = Ingestor(graph, store, pool)
        kept = ing.tensors([TensorJob("t0", bf16, (2048,), 4096, Reads(0))])  # stores t0's chunk
        manifest = TensorManifest.from_bytes(graph.blob(kept[0]))
        events.clear()
        jobs = [
            TensorJob("t1", bf16, (2048,), 4096, Reads(1)),
            TensorJob("t2", bf16, (2048,), 4096, Reads(2), carried=lambda i: manifest.chunks[0]),
        ]
        ids = ing.tensors(jobs)
    assert len(ids) == 2
    assert not any(n == 2 for _, n, _ in events)  # carried: nothing announced, nothing read
    reads = [(n, o) for kind, n, o in events if kind == "read"]
    assert reads and all(events.index(("ahead", n, o)) < events.index(("read", n, o)) for n, o in reads)


def test_a_chunk_its_parent_holds_takes_the_parents_statistics_without_computing_them(tmp_path, monkeypatch):
    """A frozen layer's chunks are its parent's: their statistics come from the parent's manifest
    (the numbers the parent computed from these very bytes), so the manifest is the one a fresh add
    gives and no chunk is measured twice."""
    monkeypatch.setattr("mgit.model.ingest.chunk_size_for", lambda shape, bits: 4096)
    base = _model(tmp_path / "base.safetensors", 0)
    tuned = _fine_tune(base, tmp_path / "tuned.safetensors")
    graph, store = _setup(tmp_path / "repo")
    measured: list[bytes] = []
    real = ingest.chunk_stats

    def counting(raw, dtype):
        measured.append(bytes(raw))
        return real(raw, dtype)

    with make_pool() as pool:
        first = Ingestor(graph, store, pool)
        first.begin_file("m.safetensors")
        parents = graph_tensors(graph, first.safetensors_file(base, "m.safetensors").oid)
        fresh = Ingestor(graph, store, pool)  # no parent: every chunk measured
        fresh.begin_file("m.safetensors")
        want = graph_tensors(graph, fresh.safetensors_file(tuned, "m.safetensors").oid)
        monkeypatch.setattr(ingest, "chunk_stats", counting)
        second = Ingestor(graph, store, pool, parents=lambda rel: parents)
        second.begin_file("m.safetensors")
        got = graph_tensors(graph, second.safetensors_file(tuned, "m.safetensors").oid)
    assert got == want  # the same manifests, statistics included
    held = {c.id for m in parents.values() for c in m.chunks}
    unchanged = [c for name, m in got.items() for c in m.chunks if c in parents[name].chunks]
    assert len(unchanged) > 10  # the odd layers, the norm: frozen
    assert not [raw for raw in measured if ingest.chunk_id(raw) in held]
