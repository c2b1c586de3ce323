"""The plan record as a typed PlanRecord (mgit.merge.record): reading a recorded plan and
writing it back gives the same JSON, byte for byte, for every shape of record mgit writes."""

from __future__ import annotations

import pytest

from mgit.graph.objects import canonical_json
from mgit.merge.record import PLAN_SCHEMA, PlanRecord


@pytest.mark.parametrize(
    ("method", "params", "extra"),
    [
        ("task_arithmetic", {"weight": 0.5}, {"budget": "50%"}),
        ("ties", {"weight": 0.5, "density": 0.5}, {}),
        ("ties", {"weight": 0.5, "density": 0.5}, {"budget": "30%"}),  # a budget without an error bound
        ("linear", {"weight": 0.5}, {}),  # no base: a reference, base null
    ],
)
def test_recorded_plans_round_trip_byte_for_byte(experts, method, params, extra):
    repo = experts
    sha = repo.merge(["math", "code"], method, branch=f"m-{method}", **params, **extra)
    doc = repo.merge_record(sha)
    record = PlanRecord.from_json(doc)
    assert record.schema == PLAN_SCHEMA and record.method == method
    assert [e.name for e in record.experts] == ["math", "code"]
    assert (record.base is None) == (method == "linear") and (record.reference is not None) == (method == "linear")
    assert (record.budget is not None) == ("budget" in extra)
    again = record.to_json()
    assert canonical_json(again) == canonical_json(doc)  # the blob sorts its keys
    # --dry-run --json prints the record unsorted: the keys in their documented order
    order = ["schema", "mgit_version", "method", "parameters", "seed", "dtype", "out_dtype", "model", "base"]
    order += ["experts", "bytes", "tensors"] + [k for k in ("reference", "budget", "request") if k in doc]
    assert list(again) == order


def test_keys_a_later_mgit_adds_are_kept():
    doc = {"schema": PLAN_SCHEMA, "method": "linear", "tensors": [], "future": {"x": 1}}
    assert PlanRecord.from_json(doc).to_json()["future"] == {"x": 1}


def test_keys_a_later_mgit_adds_inside_bytes_and_tensors_are_kept():
    tensor = {"name": "w", "file": "m.safetensors", "chunks": 1, "expert_chunks_read": [1]}
    tensor |= {"expert_bytes_estimated": [9], "budget": {"candidates": 1, "chosen": 1, "captured_share": 1.0}}
    doc = {
        "schema": PLAN_SCHEMA,
        "method": "linear",
        "bytes": {"base_estimated": 1, "experts_estimated": 2, "expert_chunks_estimated": 3, "later": 4},
        "tensors": [tensor | {"later": [1]}],
    }
    record = PlanRecord.from_json(doc)
    assert record.bytes.base_read == 1 and record.bytes.output_logical is None
    assert record.tensors[0].decision is None and not record.tensors[0].executed and not record.tensors[0].unchanged
    again = record.to_json()
    assert again["bytes"]["later"] == 4 and "output_logical" not in again["bytes"]
    assert again["tensors"][0]["later"] == [1] and "decision" not in again["tensors"][0]
    assert again["tensors"][0]["budget"]["error_bound"] is None  # an older record lacked it: read as None
