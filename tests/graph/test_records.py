"""The reserved per-commit records (graph/records.py): statistics and merge plan."""

from __future__ import annotations

import json

from mgit.graph import records
from mgit.graph.objects import MODE_FILE, Graph, canonical_json
from mgit.graph.snapshot import read_snapshot, write_snapshot

TRIPLES = [["a" * 64, "b" * 64, 0.25], ["c" * 64, "d" * 64, 1.5]]


def test_stats_round_trip_through_a_commit_tree(tmp_path):
    graph = Graph.init(tmp_path / ".mgit")
    staged = records.put_file_stats(graph, TRIPLES)
    assert staged is not None and records.file_stats(graph, staged) == TRIPLES
    assert json.loads(graph.blob(staged)) == {"schema": "mgit.filestats/1", "chunks": TRIPLES}
    extra = records.stats_entries(graph, {"m/model.safetensors": TRIPLES, "m/other.safetensors": []})
    assert [(name, mode) for name, mode, _ in extra] == [(".mgit-stats", MODE_FILE)]
    blob = canonical_json({"schema": "mgit.stats/1", "files": {"m/model.safetensors": TRIPLES}})
    assert graph.blob(extra[0][2]) == blob  # byte for byte what commits have always held
    tree = write_snapshot(graph, {}, extra)
    assert records.read_stats(graph, tree) == {"m/model.safetensors": TRIPLES}
    assert records.read_plan(graph, tree) is None
    assert read_snapshot(graph, tree) == {}  # a reserved entry is not a file


def test_no_statistics_no_entry(tmp_path):
    graph = Graph.init(tmp_path / ".mgit")
    assert records.put_file_stats(graph, []) is None
    assert records.stats_entries(graph, {"a": []}) == []
    assert records.read_stats(graph, write_snapshot(graph, {}, [])) == {}


def test_plan_round_trips_beside_the_stats(tmp_path):
    graph = Graph.init(tmp_path / ".mgit")
    plan = {"schema": "mgit.plan/1", "method": "linear", "tensors": []}
    extra = records.stats_entries(graph, {"m": TRIPLES}) + records.plan_entries(graph, plan)
    tree = write_snapshot(graph, {}, extra)
    assert records.read_plan(graph, tree) == plan
    assert graph.blob(extra[1][2]) == canonical_json(plan)
    assert records.read_stats(graph, tree) == {"m": TRIPLES}
