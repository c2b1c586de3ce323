"""A merge request resolved once (mgit.merge.request): what a dry run records is what the merge
records, and the budget restricts a new plan, leaving the full one as it was."""

from __future__ import annotations

import copy
import json

import yaml
from helpers.run import run_mgit


def test_a_dry_run_records_the_configs_dtypes_as_the_merge_does(experts, tmp_path):
    repo = experts
    path = tmp_path / "merge.yml"
    doc = {
        "merge_method": "task_arithmetic",
        "base_model": "main",
        "models": [{"model": "math", "parameters": {"weight": 0.5}}, {"model": "code", "parameters": {"weight": 0.5}}],
        "dtype": "float32",
        "out_dtype": "bfloat16",
    }
    path.write_text(yaml.safe_dump(doc))
    shown = run_mgit("merge", "--config", str(path), "--dry-run", "--json", cwd=repo.root, check=True)
    planned = json.loads(shown.stdout)
    assert (planned["dtype"], planned["out_dtype"]) == ("F32", "BF16")
    merged = repo.merge_record(repo.merge([], None, config=path))
    assert (merged["dtype"], merged["out_dtype"]) == ("F32", "BF16")
    assert planned["bytes"]["output_logical"] == merged["bytes"]["output_logical"]


def test_a_budget_leaves_the_full_plan_as_it_was(experts):
    from mgit.merge.budget.analyze import Analysis
    from mgit.merge.budget.restrict import restrict

    repo = experts
    plan, setup = repo.merge_plan(["math", "code"], "task_arithmetic", weight=0.5)
    before = copy.deepcopy(plan)
    norms = {
        (tp.experts[k].chunks[i].id, tp.base.chunks[i].id): 1.0
        for tp in plan.tensors
        for k, reads in enumerate(tp.reads)
        for i in reads
    }
    limit = plan.expert_bytes // 2
    cheaper, report = restrict(
        plan,
        setup.method,
        lambda tp: setup.params,
        Analysis(norms),
        given="50%",
        limit=limit,
        select="importance",
        seed=0,
    )
    assert plan == before and plan.budget is None
    assert cheaper is not plan and cheaper.budget is report
    assert cheaper.expert_bytes <= limit < plan.expert_bytes
    assert all(len(tp.skipped) == len(tp.experts) for tp in cheaper.tensors)
