"""Merge requests refused before anything is read (budgets without a unit, parameters out of
range); the analyze step capped by what the merge it plans costs; no-base merges that take
nothing from HEAD."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
import yaml
from helpers.cli import invoke
from helpers.models import commit_model, frozen_finetune, llama_state_dict, touch_later, uneven_finetune, write_model
from helpers.run import run_mgit
from mergekit.merge_methods.api import merge_state_dicts

from mgit.budget import parse_budget
from mgit.errors import BadInputError

# -- budgets ----------------------------------------------------------------------------------


@pytest.mark.parametrize("bare", ["10", "0", "1.5", " 4096 "])
def test_a_bare_number_is_no_budget(bare):
    with pytest.raises(BadInputError, match=r"needs a unit or %.*500MB / 2GiB.*10%"):
        parse_budget(bare)


def test_budgets_with_a_unit_still_parse():
    assert parse_budget("4096B").nbytes == 4096
    assert parse_budget("10 kB").nbytes == 10_000
    assert parse_budget(4096).nbytes == 4096  # a Python int is bytes: unambiguous
    assert parse_budget("10%").share == 0.1


@pytest.fixture
def experts(repo):
    """main: a bf16 base; math and code: fine-tunes of it."""
    base = llama_state_dict(seed=3)
    commit_model(repo, base, "base")
    tuned = {}
    for i, name in enumerate(("math", "code")):
        repo.checkout("main")
        repo.checkout(create_branch=name)
        tuned[name] = frozen_finetune(base, {i}, seed=30 + i)
        commit_model(repo, tuned[name], name)
    repo.checkout("main")
    return repo, base, tuned


def test_cli_refuses_a_bare_budget_before_reading(experts):
    repo = experts[0]
    head = repo.resolve("HEAD")
    for cmd in (
        ("merge", "--method", "task_arithmetic", "--weights", "0.5", "math", "code", "--budget", "10"),
        ("checkout", "math", "--budget", "10"),
    ):
        proc = invoke(*cmd, cwd=repo.root)
        assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "needs a unit or %" in lines[0] and "10%" in lines[0], proc.stderr
    assert repo.resolve("HEAD") == head and repo.refs.current_branch() == "main"


# -- parameter ranges -------------------------------------------------------------------------

OUT_OF_RANGE = [
    ("ties", {"weight": 0.5, "density": 1.5}, "density = 1.5", "(0, 1]"),
    ("ties", {"weight": 0.5, "density": 0}, "density = 0", "(0, 1]"),
    ("dare_ties", {"weight": 0.5, "density": [0.5, -0.1]}, "density = -0.1", "(0, 1]"),
    ("breadcrumbs", {"weight": 0.5, "density": 0.5, "gamma": 1.2}, "gamma = 1.2", "[0, 1)"),
    ("della", {"weight": 0.5, "density": 0.5, "epsilon": 1.5}, "epsilon = 1.5", "[0, 1)"),
    ("della", {"weight": 0.5, "density": 0.1, "epsilon": 0.3}, "epsilon = 0.3 with density = 0.1", "density - epsilon"),
    ("della", {"weight": 0.5, "density": 0.1}, "epsilon = 0.15 with density = 0.1", "density + epsilon < 1"),
    ("task_arithmetic", {"weight": [0.5, float("nan")]}, "weight = nan", "any finite number"),
    ("task_arithmetic", {"weight": 0.5, "lambda": float("inf")}, "lambda = inf", "any finite number"),
    ("ties", {"weight": 0.5, "normalize": "yes"}, "normalize = 'yes'", "true or false"),
    ("task_arithmetic", {"weight": "heavy"}, "weight = 'heavy'", "a number"),
]


@pytest.mark.parametrize(("method", "params", "named", "accepted"), OUT_OF_RANGE)
def test_out_of_range_parameters_are_refused_before_reading(experts, method, params, named, accepted):
    repo = experts[0]
    before = repo.store.reads.chunks, repo.resolve("HEAD"), sorted(repo.branches())
    for call in (repo.merge, repo.merge_plan):
        with pytest.raises(BadInputError) as info:
            call(["math", "code"], method, **params)
        message = str(info.value)
        assert named in message and accepted in message and "\n" not in message, message
    assert (repo.store.reads.chunks, repo.resolve("HEAD"), sorted(repo.branches())) == before


def test_slerp_t_outside_0_1_is_refused(experts):
    from mgit.merge.params import RANGES

    repo = experts[0]
    with pytest.raises(BadInputError, match=r"t = 1\.5 is out of range; accepted: \[0, 1\]"):
        repo.merge(["math"], "slerp", t=1.5)
    assert str(RANGES["t"]) == "[0, 1]" and str(RANGES["density"]) == "(0, 1]"


def test_declared_parameters_are_mergekits():
    """The torch-free declarations (names, defaults) are mergekit's, and each has its check."""
    from mergekit.merge_methods import registry
    from mergekit.merge_methods.base import MISSING

    from mgit.merge.methods import METHODS
    from mgit.merge.methods.registry import METHOD_PARAMS
    from mgit.merge.params import FLAGS, NULLABLE, RANGES, REQUIRED

    assert sorted(METHOD_PARAMS) == sorted(METHODS)
    for name, params in METHOD_PARAMS.items():
        assert METHODS[name].params == params
        theirs = {p.name: p.default for p in registry.get(name).spec.parameters}
        ours = {p.name: p.default for p in params}
        assert theirs.keys() == ours.keys(), name
        for key, default in ours.items():
            assert (default is REQUIRED) == (theirs[key] is MISSING), (name, key)
            assert default is REQUIRED or theirs[key] == default, (name, key)
        for p in params:
            assert (p.name in FLAGS) == (p.kind is bool) and (p.kind is bool or p.name in RANGES), p.name
            assert p.nullable == (p.name in NULLABLE)


def test_unknown_methods_and_parameters_are_refused_without_torch(experts):
    repo = experts[0]
    code = (
        "import sys\nfrom mgit import Repository\nfrom mgit.errors import BadInputError\n"
        f"repo = Repository({str(repo.root)!r})\n"
        "for method, params in (('average', {}), ('ties', {'densty': 0.5})):\n"
        "    try:\n        repo.merge(['math'], method, **params)\n"
        "    except BadInputError as exc:\n        print(exc)\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120).stdout
    lines = out.strip().splitlines()
    assert lines[0].startswith("unknown merge method 'average' (known: arcee_fusion, breadcrumbs,")
    assert lines[1].startswith("ties: unknown parameter(s) densty (accepted: int8_mask,")
    assert lines[2] == "False"


def test_in_range_edges_are_accepted(experts):
    repo = experts[0]
    repo.merge_plan(["math", "code"], "ties", weight=[1.0, -0.5], density=1.0, **{"lambda": -1.0})
    repo.merge_plan(["math"], "slerp", t=0.0)
    repo.merge_plan(["math", "code"], "della", weight=0.5, density=0.5, epsilon=0.0)
    repo.merge_plan(["math", "code"], "breadcrumbs", weight=0.5, density=1.0, gamma=0.0)


def test_cli_density_out_of_range_is_one_line_without_torch(experts):
    repo = experts[0]
    proc = invoke("merge", "--method", "ties", "--weights", "0.5", "--density", "1.5", "math", "code", cwd=repo.root)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "density = 1.5" in lines[0] and "(0, 1]" in lines[0], proc.stderr
    # from Python too: refused before torch is imported (it takes seconds to load)
    code = (
        "import sys\nfrom mgit import Repository\nfrom mgit.errors import BadInputError\n"
        f"repo = Repository({str(repo.root)!r})\n"
        "try:\n    repo.merge(['math', 'code'], 'ties', weight=0.5, density=1.5)\n"
        "except BadInputError as exc:\n    print('refused', exc)\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120).stdout
    assert out.startswith("refused") and out.strip().endswith("False"), out


def _config(tmp_path, doc: dict):
    path = tmp_path / "merge.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize(
    ("models", "params", "named"),
    [
        ([{"model": "math", "parameters": {"weight": 0.5, "density": 1.5}}], {}, "models[1] (math): density = 1.5"),
        ([{"model": "math", "parameters": {"weight": 0.5, "density": [1.0, 0.5, -0.2]}}], {}, "density = -0.2"),
        (
            [{"model": "math", "parameters": {"weight": 0.5, "density": [{"filter": "mlp", "value": 2}]}}],
            {},
            "density = 2",
        ),
        ([{"model": "math", "parameters": {"weight": 0.5}}], {"density": 0.0}, "parameters: density = 0.0"),
    ],
)
def test_config_parameters_out_of_range_are_refused(experts, tmp_path, models, params, named):
    repo = experts[0]
    doc = {"merge_method": "ties", "base_model": "main", "models": [{"model": "main"}, *models], "parameters": params}
    path = _config(tmp_path, doc)
    before = repo.store.reads.chunks
    with pytest.raises(BadInputError, match="out of range") as info:
        repo.merge([], None, config=path)
    assert named in str(info.value) and str(path) in str(info.value)
    assert repo.store.reads.chunks == before


def test_della_pair_from_a_config_gradient_is_checked_per_tensor(experts, tmp_path):
    repo = experts[0]
    models = [{"model": "main"}, {"model": "math", "parameters": {"weight": 0.5, "density": [0.5, 0.1]}}]
    path = _config(tmp_path, {"merge_method": "della", "base_model": "main", "models": models})
    with pytest.raises(BadInputError, match=r"tensor .*epsilon = 0\.15 with density = 0\.1"):
        repo.merge_plan([], None, config=path)


# -- merges without a base --------------------------------------------------------------------


@pytest.fixture
def bf16_experts_on_fp32_head(repo):
    """main: an fp32 model (and a README beside it); a and b: bf16 models with their own config."""
    head = llama_state_dict(seed=5, dtype=torch.float32)
    write_model(repo.root / "model", head)
    (repo.root / "README.md").write_text("the branch's own notes\n")
    repo.add(["model", "README.md"])
    repo.commit("fp32 head")
    tuned = {}
    for i, name in enumerate(("a", "b")):
        repo.checkout("main")
        repo.checkout(create_branch=name)
        sd = frozen_finetune(llama_state_dict(seed=7, dtype=torch.bfloat16), {i}, seed=50 + i)
        (repo.root / "model" / "generation_config.json").unlink(missing_ok=True)
        write_model(repo.root / "model", sd, config={"expert": name})
        if name == "a":
            (repo.root / "model" / "tokenizer.json").write_text('{"from": "a"}')
        touch_later(repo.root / "model" / "model.safetensors")
        repo.add(["model"])
        repo.commit(name)
        tuned[name] = sd
    repo.checkout("main")
    (repo.root / "model" / "head_only.txt").write_text("in HEAD's model directory only\n")
    repo.add(["model/head_only.txt"])
    repo.commit("a file only HEAD's model has")
    return repo, tuned


def _check_no_base_merge(repo, tuned, sha, parent):
    want = merge_state_dicts({"a": tuned["a"], "b": tuned["b"]}, "linear", parameters={"weight": [0.7, 0.3]})
    got = repo.state_dict(sha)
    assert all(got[k].dtype == torch.bfloat16 and torch.equal(got[k], want[k]) for k in want)
    assert repo.graph.commit(sha).parents == (parent, repo.resolve("a"), repo.resolve("b"))
    assert repo.resolve("HEAD") == sha and repo.refs.current_branch() == "main"
    record = repo.merge_record(sha)
    assert record["base"] is None and record["reference"] == repo.resolve("a")
    files = repo.snapshot(sha)
    assert json.loads(repo.graph.blob(files["model/config.json"].oid)) == {"expert": "a"}
    assert "model/tokenizer.json" in files and "model/head_only.txt" not in files
    assert "README.md" in files  # beside the model: the branch's
    assert json.loads((repo.root / "model" / "config.json").read_text()) == {"expert": "a"}
    assert not (repo.root / "model" / "head_only.txt").exists() and (repo.root / "README.md").exists()
    status = repo.status()
    assert not status.staged and not status.unstaged and not status.untracked
    lineage = repo.lineage(sha)
    assert [n["role"] for n in lineage["inputs"]][0] == "parent"


def test_linear_without_a_base_takes_nothing_from_head(bf16_experts_on_fp32_head):
    repo, tuned = bf16_experts_on_fp32_head
    parent = repo.resolve("HEAD")
    sha = repo.merge(["a", "b"], "linear", weight=[0.7, 0.3])
    _check_no_base_merge(repo, tuned, sha, parent)


def test_linear_config_without_base_model_takes_nothing_from_head(bf16_experts_on_fp32_head, tmp_path):
    repo, tuned = bf16_experts_on_fp32_head
    parent = repo.resolve("HEAD")
    doc = {
        "merge_method": "linear",
        "models": [{"model": m, "parameters": {"weight": w}} for m, w in (("a", 0.7), ("b", 0.3))],
    }
    path = _config(tmp_path, doc)
    proc = invoke("merge", "--config", str(path), "--dry-run", cwd=repo.root)
    assert proc.returncode == 0 and "reference" in proc.stdout, proc.stderr
    sha = repo.merge([], None, config=path)
    _check_no_base_merge(repo, tuned, sha, parent)
    shown = invoke("show", sha, cwd=repo.root, check=True).stdout
    assert "base    none" in shown
    graph = invoke("log", "--graph", cwd=repo.root, check=True).stdout
    assert f"merge (linear) of reference {repo.resolve('a')[:12]}" in graph


# -- the analyze step's cap -------------------------------------------------------------------

NAMES = ("math", "code", "chat", "law")
WEIGHTS = [0.4, 0.3, 0.2, 0.1]


@pytest.fixture
def new_base(repo, monkeypatch):
    """Four experts fine-tuned from main's first commit, and a new base (branch base2, a
    fine-tune of its own): no commit's statistics pair the experts' chunks with base2's.
    Chunks of ~4 KB, so every tensor has several."""
    import functools

    from mgit.merge import engine
    from mgit.model import ingest
    from mgit.model.chunking import chunk_size_for

    small = functools.partial(chunk_size_for, target=4000)
    monkeypatch.setattr(ingest, "chunk_size_for", small)
    monkeypatch.setattr(engine, "chunk_size_for", small)
    base = llama_state_dict(seed=3)
    commit_model(repo, base, "base")
    for k, name in enumerate(("base2", *NAMES)):
        repo.checkout("main")
        repo.checkout(create_branch=name)
        commit_model(repo, uneven_finetune(base, seed=70 + k, low=1e-2, high=1e-1), name)
    repo.checkout("base2")
    return repo


def _l2(a: dict, b: dict) -> float:
    return sum(float(((a[k].double() - b[k].double()) ** 2).sum()) for k in a) ** 0.5


def test_planning_against_a_new_base_reads_no_more_than_the_cap(new_base):
    repo = new_base
    before = repo.store.reads.stored_bytes
    plan, _ = repo.merge_plan(list(NAMES), "task_arithmetic", weight=WEIGHTS, budget="30%")
    planning = repo.store.reads.stored_bytes - before
    report = plan.budget.to_json()
    assert planning <= min(report["limit_bytes"], report["expert_bytes_full"])  # no more than the merge reads
    analyze = report["analyze"]
    assert analyze["cap_bytes"] == min(report["limit_bytes"], report["expert_bytes_full"])
    assert planning == analyze["bytes_read"] <= analyze["cap_bytes"] < analyze["priced_bytes"]
    assert analyze["mode"] == "estimated" and analyze["pairs_by_source"]["estimated"] > 0
    assert analyze["pairs_by_source"]["stats"] > 0  # tensors base2 left frozen: recorded
    # the same plan whether or not the cache is warm
    again, _ = repo.merge_plan(list(NAMES), "task_arithmetic", weight=WEIGHTS, budget="30%")
    assert [tp.reads for tp in again.tensors] == [tp.reads for tp in plan.tensors]
    assert again.budget.error_bound == plan.budget.error_bound
    assert again.budget.to_json()["analyze"]["pairs_by_source"] == analyze["pairs_by_source"] | {
        "cache": analyze["pairs_by_source"]["cache"] + analyze["pairs_by_source"]["read"],
        "read": 0,
    }


def test_history_bounds_are_tighter_than_the_norms(new_base, monkeypatch):
    """Expert and new base both changed from the old base's chunk: the recorded distances bound
    their distance far tighter than the chunks' norms do."""
    from mgit.merge.budget import analyze

    repo = new_base
    plan, _ = repo.merge_plan(list(NAMES), "task_arithmetic", weight=WEIGHTS, budget="10%")
    history = plan.budget.to_json()["analyze"]["estimated_from"]
    assert history["history"] > 0 and history["norms"] == 0
    monkeypatch.setattr(analyze, "history_bounds", lambda expert, base, steps: None)
    norms, _ = repo.merge_plan(list(NAMES), "task_arithmetic", weight=WEIGHTS, budget="10%")
    fallback = norms.budget.to_json()["analyze"]["estimated_from"]
    assert fallback["history"] == 0 and fallback["norms"] > 0
    assert plan.budget.error_bound < norms.budget.error_bound / 10


@pytest.mark.parametrize("source", ["history", "norms"])
def test_an_estimated_plan_keeps_its_error_bound_and_says_so(new_base, monkeypatch, source):
    from mgit.merge.budget import analyze

    if source == "norms":
        monkeypatch.setattr(analyze, "history_bounds", lambda expert, base, steps: None)
    repo = new_base
    exact = repo.state_dict(repo.merge(list(NAMES), "task_arithmetic", weight=WEIGHTS, branch="exact"))
    repo.checkout("base2")
    sha = repo.merge(list(NAMES), "task_arithmetic", weight=WEIGHTS, budget="10%", branch="cheap")
    record = repo.merge_record(sha)
    b = record["budget"]
    assert b["analyze"]["mode"] == "estimated" and b["analyze"]["bytes_read"] <= b["limit_bytes"]
    assert b["analyze"]["estimated_from"][source] > 0
    assert record["bytes"]["experts_measured"] <= b["limit_bytes"]
    assert _l2(repo.state_dict(sha), exact) <= b["error_bound"] + b["rounding_allowance"]
    shown = run_mgit("show", sha, cwd=repo.root, check=True).stdout
    assert "estimated from chunk norms" in shown and "analysis capped at" in shown
    explained = run_mgit(
        "merge",
        "--method",
        "task_arithmetic",
        "--weights",
        "0.4,0.3,0.2,0.1",
        "--base",
        "base2",
        *NAMES,
        "--budget",
        "10%",
        "--explain",
        cwd=repo.root,
        check=True,
    ).stdout
    assert "estimated from chunk norms" in explained
    # at a budget covering the full merge, everything is read whatever was estimated: exact
    repo.checkout("base2")
    full = repo.merge(list(NAMES), "task_arithmetic", weight=WEIGHTS, budget="100%", branch="all")
    assert all(torch.equal(v, exact[k]) for k, v in repo.state_dict(full).items())
