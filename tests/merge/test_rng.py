"""``--rng mergekit``: random methods' draws as ``mergekit-yaml --random-seed N`` makes them, compared
tensor by tensor with mergekit-yaml's output on the same tiny models (bit for bit in bf16, 1e-6
relative in float32: tests/helpers/mergekit_ref.py); the default (mgit's per-tensor streams)
unchanged; the replay that puts each tensor's generator where mergekit's is."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from helpers.cli import invoke
from helpers.mergekit_ref import assert_matches, bits
from helpers.models import LlamaSpec, llama_state_dict, uneven_finetune, write_model
from safetensors.torch import load_file

from mgit import Repository
from mgit.errors import BadInputError
from mgit.merge import rng
from mgit.merge.methods import merge_tensor, seeded_generator

SEED = 11
SPEC = LlamaSpec(layers=3, hidden=32, intermediate=64, vocab=64)
DTYPES = {"bf16": torch.bfloat16, "f32": torch.float32}
# density 1 on the norms: those tensors draw nothing in either tool (the replay must skip them too)
DENSITY = [{"filter": "norm", "value": 1.0}, {"value": 0.6}]
METHODS: dict[str, dict[str, Any]] = {
    "dare_ties": {"weight": [0.5, 0.3], "density": [DENSITY, 0.4]},
    "della": {"weight": [0.6, 0.4], "density": [0.5, 0.35], "epsilon": [0.1, 0.2]},
}
CASES = [(m, d) for m in METHODS for d in DTYPES]
LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": SPEC.hidden,
    "intermediate_size": SPEC.intermediate,
    "num_hidden_layers": SPEC.layers,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "vocab_size": SPEC.vocab,
    "tie_word_embeddings": False,
}
# mergekit-yaml's own entry point (its console script), called once per run in one process:
# one interpreter start-up for every run instead of one each
RUN_YAML = """
import json, sys
from mergekit.scripts.run_yaml import main
for args in json.loads(sys.argv[1]):
    main(args, standalone_mode=False)
"""


def _models(root: Path, dtype: torch.dtype) -> tuple[Path, list[Path]]:
    """A llama-shaped base and two uneven fine-tunes of it (a third of their tensors frozen)."""
    base = llama_state_dict(SPEC, seed=3, dtype=dtype)
    dirs = [root / "base", root / "e0", root / "e1"]
    for path, sd in zip(dirs, [base, uneven_finetune(base, seed=20), uneven_finetune(base, seed=21)], strict=True):
        write_model(path, sd, config=LLAMA_CONFIG)
    return dirs[0], dirs[1:]


def _config(path: Path, method: str, base: Path, experts: list[Path]) -> Path:
    params = METHODS[method]
    models = [{"model": str(e), "parameters": {k: v[i] for k, v in params.items()}} for i, e in enumerate(experts)]
    path.write_text(yaml.safe_dump({"merge_method": method, "base_model": str(base), "models": models}))
    return path


@pytest.fixture(scope="module")
def mergekit_outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], tuple[Path, Path]]:
    """(method, dtype) → (its config, mergekit-yaml's output model file), every run made once."""
    root = tmp_path_factory.mktemp("rng")
    runs, found = [], {}
    for dname, dtype in DTYPES.items():
        base, experts = _models(root / dname, dtype)
        for method in METHODS:
            config = _config(root / f"{method}-{dname}.yml", method, base, experts)
            out = root / f"out-{method}-{dname}"
            runs.append([str(config), str(out), "--random-seed", str(SEED), "--no-copy-tokenizer", "--quiet"])
            found[(method, dname)] = (config, out / "model.safetensors")
    proc = subprocess.run([sys.executable, "-c", RUN_YAML, json.dumps(runs)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return found


def _merged(repo: Repository, config: Path, branch: str, **options: Any) -> dict[str, torch.Tensor]:
    repo.merge([], None, config=config, branch=branch, checkout=False, **options)
    return repo.state_dict(branch)


@pytest.mark.slow
@pytest.mark.parametrize(("method", "dtype"), CASES)
def test_equals_mergekit_yaml_random_seed(
    repo: Repository, small_chunks: None, mergekit_outputs: dict, method: str, dtype: str
) -> None:
    """Every tensor as mergekit-yaml --random-seed made it (merged chunk by chunk, in mgit's
    order, the frozen tensors carried unread: the draws still line up)."""
    config, out = mergekit_outputs[(method, dtype)]
    ours, ref = _merged(repo, config, "m", seed=SEED, rng="mergekit"), load_file(out)
    assert sorted(ours) == sorted(ref)
    for name in ref:
        assert_matches(ours[name], ref[name])
    assert repo.merge_record("m")["rng"] == "mergekit"


@pytest.mark.slow
def test_the_default_rng_is_mgits_per_tensor_streams(repo: Repository, mergekit_outputs: dict) -> None:
    """Without --rng each tensor draws from seeded_generator(seed, name), as before; which is not
    mergekit's draws (the gap --rng mergekit closes)."""
    config, out = mergekit_outputs[("dare_ties", "bf16")]
    ours, ref = _merged(repo, config, "m", seed=SEED), load_file(out)
    doc = yaml.safe_load(config.read_text())
    base = load_file(Path(doc["base_model"]) / "model.safetensors")
    experts = [load_file(Path(m["model"]) / "model.safetensors") for m in doc["models"]]
    differ, drawn = set(), set()
    for name, merged in ours.items():
        params = {"weight": [0.5, 0.3], "density": [1.0 if "norm" in name else 0.6, 0.4]}
        mine = merge_tensor("dare_ties", base[name], [e[name] for e in experts], params, generator=_own(name))
        assert torch.equal(bits(merged), bits(mine)), name
        if not torch.equal(bits(merged), bits(ref[name])):
            differ.add(name)
        drawing = [1] if "norm" in name else [0, 1]  # expert 0 keeps the norms whole: it draws nothing there
        if any(not torch.equal(experts[k][name], base[name]) for k in drawing):
            drawn.add(name)
    assert differ == drawn and len(drawn) > len(ours) // 2  # every tensor a drawing expert changed
    assert repo.merge_record("m")["rng"] == "mgit"


def _own(name: str) -> torch.Generator:
    return seeded_generator(SEED, name)


@pytest.mark.slow
def test_a_budgeted_merge_draws_mergekits_draws(repo: Repository, small_chunks: None, mergekit_outputs: dict) -> None:
    """Under a budget the draws stay mergekit's: a tensor the budget reads whole is mergekit's, bit
    for bit, whatever the budget left out elsewhere."""
    config, out = mergekit_outputs[("dare_ties", "bf16")]
    ours, ref = _merged(repo, config, "m", seed=SEED, rng="mergekit", budget="60%"), load_file(out)
    record = repo.merge_record("m")
    shares = {t["name"]: t["budget"] for t in record["tensors"] if t.get("budget")}
    whole = [name for name, share in shares.items() if share["chosen"] == share["candidates"] > 0]
    partial = [name for name, share in shares.items() if share["chosen"] < share["candidates"]]
    assert whole and partial and record["rng"] == "mergekit"
    for name in whole:
        assert torch.equal(bits(ours[name]), bits(ref[name])), name


def test_replaying_takes_the_numbers_bernoulli_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bernoulli draw on the CPU takes one 32-bit number per element whatever its probabilities'
    dtype (bf16, float32): the replay, in blocks, leaves the generator where those draws do."""
    monkeypatch.setattr(rng, "REPLAY_BLOCK", 7)
    order = [rng.TensorDraws("a", 10, 2), rng.TensorDraws("b", 33, 0), rng.TensorDraws("c", 5, 1)]
    states = rng.replay(5, order)
    g = torch.Generator().manual_seed(5)
    for draws, dtype in zip(order, (torch.bfloat16, torch.float32, torch.float32), strict=True):
        assert torch.equal(states[draws.name], g.get_state()), draws.name
        for _ in range(draws.experts):
            torch.bernoulli(torch.full((draws.numbers,), 0.3, dtype=dtype), generator=g)


def test_mergekits_order_and_draws(repo: Repository) -> None:
    """By name; an expert at density 1 draws nothing, as in mergekit."""
    sd = llama_state_dict(LlamaSpec(layers=1, hidden=8, intermediate=16, vocab=16), seed=1)
    sd["model.layers.0.count"] = torch.arange(4)  # not floating: copied, no draws
    write_model(repo.root / "model", sd)
    repo.add(["model"])
    repo.commit("base")
    edited = {k: v + 1 if v.is_floating_point() else v for k, v in sd.items()}
    write_model(repo.root.parent / "e", edited)
    e = str(repo.root.parent / "e")
    plan, setup = repo.merge_plan([e, e], "dare_linear", weight=1, density=[1.0, 0.5])
    order = rng.mergekit_order(plan, setup)
    assert [d.name for d in order] == sorted(n for n in sd if n != "model.layers.0.count")
    assert all(d.experts == 1 and d.numbers == sd[d.name].numel() for d in order)
    plan, setup = repo.merge_plan([e, e], "della", weight=1, density=[0.5, 1.0])
    assert {d.experts for d in rng.mergekit_order(plan, setup)} == {1}
    plan, setup = repo.merge_plan([e, e], "ties", weight=1, density=0.5)  # deterministic: never draws
    assert {d.experts for d in rng.mergekit_order(plan, setup)} == {0}


def test_an_unknown_rng_is_refused_in_one_line(repo: Repository, tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="unknown rng 'numpy' \\(known: mgit, mergekit\\)"):
        repo.merge(["HEAD"], "dare_ties", rng="numpy", weight=1)
    result = invoke("merge", "--method", "dare_ties", "--rng", "numpy", "HEAD", cwd=repo.root)
    assert result.exit_code == 2 and "'numpy' is not one of 'mgit', 'mergekit'" in result.stderr


def test_a_branch_merge_takes_no_rng(repo: Repository) -> None:
    write_model(repo.root / "model", llama_state_dict(LlamaSpec(layers=1, hidden=8, intermediate=16, vocab=16)))
    repo.add(["model"])
    repo.commit("base")
    repo.checkout(create_branch="other")
    repo.checkout("main")
    result = invoke("merge", "other", "--rng", "mergekit", cwd=repo.root)
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "error: --rng: an option of model merges (--method with EXPERTS, docs/merging.md), not of merging a "
        "branch (see `mgit merge --help`)"
    ]


def test_every_random_method_declares_its_draws() -> None:
    """The replay counts what :meth:`MergeMethod.draws` declares: a random method must say."""
    from mgit.merge.methods import METHODS, MergeMethod

    random = [m for m in METHODS.values() if m.random]
    assert {m.name for m in random} >= {"dare_linear", "dare_ties", "della", "della_linear"}
    assert [m.name for m in random if not m.replays_mergekit_draws] == ["arcee_fusion"]
    for m in random:
        assert m.replays_mergekit_draws == (type(m).draws is not MergeMethod.draws)


def test_a_method_whose_draws_cannot_be_replayed_is_refused(repo: Repository) -> None:
    """arcee_fusion samples indices (over 1,000,000 elements), not mergekit's per-element draws."""
    line = (
        "--rng mergekit: arcee_fusion's draws are not mergekit-yaml's to replay "
        "(only DARE's and DELLA's are); use --rng mgit"
    )
    with pytest.raises(BadInputError, match="arcee_fusion's draws are not"):
        repo.merge(["HEAD"], "arcee_fusion", rng="mergekit")
    result = invoke("merge", "--method", "arcee_fusion", "--rng", "mergekit", "HEAD", cwd=repo.root)
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [f"error: {line}"]


def test_the_cli_records_and_shows_the_rng(repo: Repository) -> None:
    spec = LlamaSpec(layers=1, hidden=8, intermediate=16, vocab=16)
    sd = llama_state_dict(spec, seed=1)
    write_model(repo.root / "model", sd)
    repo.add(["model"])
    repo.commit("base")
    write_model(repo.root.parent / "e", uneven_finetune(sd, seed=2))
    merge = ["merge", "--method", "dare_ties", "--weights", "1", "--density", "0.5", "--seed", "3"]
    expert = str(repo.root.parent / "e")
    planned = invoke(*merge, "--rng", "mergekit", expert, "--dry-run", "--json", cwd=repo.root, check=True)
    assert json.loads(planned.stdout)["rng"] == "mergekit"
    invoke(*merge, "--rng", "mergekit", expert, "-b", "m", "--no-checkout", cwd=repo.root, check=True)
    assert "seed 3 (rng mergekit)," in invoke("show", "m", cwd=repo.root, check=True).stdout
    invoke(*merge, expert, "-b", "own", "--no-checkout", cwd=repo.root, check=True)
    assert repo.merge_record("own")["rng"] == "mgit"
    assert "seed 3, mgit" in invoke("show", "own", cwd=repo.root, check=True).stdout
