"""One merge request, built once (issue 40): `mgit merge` and Repository.merge / merge_plan build
the same MergeRequest from the same options, every request field is an option of each by its
own name (so a new option is one field, one click option and one keyword), and a plan is a value
that makes its own record, the one its merge records."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
from helpers.cli import invoke

from mgit import Repository
from mgit.cli.merge import cmd_merge
from mgit.errors import BadInputError
from mgit.merge.record import PlanRecord
from mgit.merge.request import MergeRequest
from mgit.ops import merge as ops_merge

# Fields the CLI fills from options it reads itself (paths made absolute, flags inverted, the
# method's parameters gathered); every other field is a click option of the same name.
CLI_OWN = {"experts", "method", "params", "config", "model", "checkout"}


def _fields() -> set[str]:
    return {f.name for f in dataclasses.fields(MergeRequest)}


def test_every_request_field_is_a_cli_option_by_its_own_name() -> None:
    names = {p.name for p in cmd_merge.params}
    assert _fields() - CLI_OWN <= names
    assert CLI_OWN - {"params", "checkout"} <= names  # the rest: --weights ..., --no-checkout


def test_every_request_field_is_a_keyword_of_the_python_api() -> None:
    keywords = {*inspect.signature(ops_merge.merge).parameters, *inspect.signature(ops_merge.merge_plan).parameters}
    assert _fields() <= keywords
    assert keywords - {"ctx"} <= _fields()  # nothing the adapters take is dropped on the way


def test_the_cli_and_the_python_api_build_the_same_request(repo, monkeypatch) -> None:
    asked: list[MergeRequest] = []

    def capture(ctx, request):
        asked.append(request)
        raise BadInputError("request captured")

    # `mgit merge`'s first: monkeypatch looks the old value up, which makes the facade's method from
    # ops.merge.merge_with and keeps it on the class; patched first, a capture would be kept there
    monkeypatch.setattr(Repository, "_merge_with", lambda self, request: capture(self.ctx, request))
    monkeypatch.setattr(ops_merge, "merge_with", capture)  # behind Repository.merge
    options = ["--budget", "10%", "--budget-fairness", "global", "--no-sketches", "--seed", "7", "--dtype", "F32"]
    options += ["--weights", "0.3,0.7", "--density", "0.5", "--param", "lambda=2", "-b", "side", "--no-checkout"]
    shown = invoke("merge", "math", "code", "--method", "ties", *options, cwd=repo.root)
    assert (shown.exit_code, shown.stderr.strip()) == (2, "error: request captured")
    with pytest.raises(BadInputError, match="request captured"):
        repo.merge(
            ["math", "code"],
            "ties",
            budget="10%",
            budget_fairness="global",
            budget_sketches=False,
            seed=7,
            dtype="F32",
            branch="side",
            checkout=False,
            weight=[0.3, 0.7],
            density=0.5,
            **{"lambda": 2.0},
        )
    assert len(asked) == 2 and asked[0] == asked[1]
    assert asked[0] == MergeRequest(
        experts=("math", "code"),
        method="ties",
        params={"weight": [0.3, 0.7], "density": 0.5, "lambda": 2.0},
        budget="10%",
        budget_fairness="global",
        budget_sketches=False,
        seed=7,
        dtype="F32",
        branch="side",
        checkout=False,
    )


def test_a_request_is_keyword_only_and_frozen() -> None:
    with pytest.raises(TypeError):
        MergeRequest(("a",), "ties")  # type: ignore[misc]
    request = MergeRequest(experts=("a",), method="ties")
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.budget = "10%"  # type: ignore[misc]


def test_a_plan_unpacks_and_records_itself_as_its_merge_records_it(experts) -> None:
    planned = experts.merge_plan(["math", "code"], "task_arithmetic", weight=0.5, budget="50%")
    plan, setup = planned
    assert setup.request.budget == "50%"  # the request travels whole with its resolution
    record = planned.record()
    assert [e.name for e in record.experts] == ["math", "code"]
    assert [e.commit for e in record.experts] == setup.expert_commits
    sha = experts.merge(["math", "code"], "task_arithmetic", weight=0.5, budget="50%", branch="m", checkout=False)
    merged = PlanRecord.from_json(experts.merge_record(sha))
    assert merged.parameters == record.parameters and merged.seed == record.seed == 0
    assert [t.expert_chunks_chosen for t in merged.tensors] == [t.expert_chunks_chosen for t in record.tensors]
