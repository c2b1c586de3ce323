"""Storage benchmark: what each new version of a model costs to keep, in mgit and in the peers.

Why: a model is rarely stored once. Fine-tunes, adapters, vocabulary extensions and training
checkpoints each add a version that shares most of its bytes (or most of its bits) with
another one. mgit's claim is that such a version costs about the compressed size of what
changed: unchanged chunks are deduplicated, changed chunks are stored as deltas against
their parent. git-lfs and DVC deduplicate whole files only, and ZipNN compresses every file
on its own without any cross-version sharing. This script measures all four side by side,
on one machine, with the same generated inputs, in one run:

1. generate a llama-like bf16 base model (the harness's generator, fixed seed) and from it
   full model directories for five variants and a chain of five checkpoints (below); cached
   between runs;
2. store the base, then every variant as a commit on its own branch made from the base (the
   chain as consecutive commits on one branch), in mgit, in git + git-lfs and in DVC, and
   measure how much each tool's store grows; compress every variant with ZipNN;
3. time ingesting the base (mgit add + commit against ``cp -r``) and restoring versions into
   an empty working tree (mgit checkout of the base, the dense fine-tune and of the chain's
   deepest delta and last checkpoint against ``cp -r``), and switching from a checkout of the
   base to the LoRA variant (mgit checkout, which patches the changed chunks in place, against
   git + git-lfs's ``git checkout``);
4. check that mgit gives back every version byte for byte (sha256) and that ``mgit fsck``
   passes; print Markdown tables and, with ``--write-docs``, replace this benchmark's section
   of benchmarks/results/bench_storage.md (other sections are kept).

Targets (base ≤ 0.70× raw, dense fine-tune ≤ 0.50× raw, partial variants ≈ the compressed
size of what changed) are reported, never asserted. GB = 10^9 bytes, MB = 10^6 bytes.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness import cli
from harness.context import RunContext, skipped_baselines
from harness.models import GB, SEED, SHARDS, ModelPlan, ensure_model
from harness.report import fmt_mb, plural, publish, steps_table
from harness.runner import Result, Runner, time_cp
from harness.stores import DvcStore, GitLfsStore, MgitStore, encodings_cell, run_baseline, store_all
from harness.targets import Target, at_most, target, targets_table
from harness.tools import BASELINES_VENV, Tools, ensure_zipnn, find_tools, tool_env, version_of
from harness.variants import CHAIN, Version, ensure_versions
from harness.version_costs import VersionCosts, partial_table, references, stored_table, times_table
from harness.zipnn import zipnn_all

SECTION_TITLE = "## Storage: versions, deltas, baselines (bench_storage.py)"
PARTIAL_TOLERANCE = 1.25  # "≈ the compressed size of what changed": within 25% (or below)
# Restored into an empty working tree: the base, a one-link delta (dense), the chain's deepest
# possible delta (its 4th consecutive delta) and the chain's last checkpoint.
RESTORES = ("base", "dense", f"chain-{CHAIN - 1}", f"chain-{CHAIN}")
SWITCH_TO = "lora"  # a branch switch between fine-tunes of one model, from a clean checkout of the base
SWITCH_STEP = f"switch main → {SWITCH_TO} (the working tree holding the base)"


@dataclass
class Outcome(VersionCosts):
    """The run: what every version cost every tool, and mgit's timed steps and checks."""

    throughput: list[Result] = field(default_factory=list)
    identical: dict[str, bool] = field(default_factory=dict)  # version → mgit restored it byte for byte
    fsck: str = ""
    zipnn_ok: bool | None = None
    switched_how: str = ""  # how mgit's switch wrote the files (its --json)


# -- reporting ----------------------------------------------------------------------------


def targets(o: Outcome) -> list[Target]:
    by = {v.name: v for v in o.versions}
    m = o.costs["mgit"]
    base, dense = m["base"].grown / by["base"].raw, m["dense"].grown / by["dense"].raw
    out = [
        target("base: mgit store / raw", base, "≤ 0.70", at_most(0.70), "{:.3f}"),
        target("dense fine-tune: mgit new bytes / raw", dense, "≤ 0.50", at_most(0.50), "{:.3f}"),
    ]
    for r in references(o):
        if r.version.name in ("frozen-half", "lora", "vocab", "layer") and r.ref_a:
            metric, within = f"{r.version.name}: mgit / (changed × base ratio)", f"≈ 1 (≤ {PARTIAL_TOLERANCE})"
            out.append(target(metric, r.cost.grown / r.ref_a, within, at_most(PARTIAL_TOLERANCE), "{:.3f}"))
    return out


def notes(o: Outcome) -> list[str]:
    """A few plain readings of the tables, computed from them."""
    out = []
    m = o.totals["mgit"]
    for tool in ("git + git-lfs", "dvc"):
        if tool in o.totals:
            out.append(f"- All {len(o.versions)} versions: {tool} stores {o.totals[tool] / m:.1f}× what mgit stores.")
    if o.zipped:
        z_changed = sum(z.changed_files for z in o.zipped.values())
        out.append(f"- zipnn with file-level dedup would store {z_changed / m:.1f}× what mgit stores.")
    by = {v.name: v for v in o.versions}
    chain = [v for v in o.versions if v.name.startswith("chain-")]
    costs = o.costs["mgit"]
    keyframes = [v.name for v in chain if not {"delta", "diff"} & set(costs[v.name].encodings)]
    deltas = [costs[v.name].grown / v.raw for v in chain if v.name not in keyframes]
    if keyframes and deltas:
        k = keyframes[0]
        out.append(
            f"- Chain: checkpoints stored as deltas cost {min(deltas):.3f}–{max(deltas):.3f} of raw each; `{k}` "
            f"was stored without deltas (a keyframe: the delta chain is bounded) and cost "
            f"{costs[k].grown / by[k].raw:.3f} of raw."
        )
    switches = {r.tool: r.best.seconds for r in o.throughput if r.step == SWITCH_STEP}
    if len(switches) == 2 and switches["mgit"] > 0:
        out.append(
            f"- Switching from the base to `{SWITCH_TO}` ({fmt_mb(by[SWITCH_TO].changed)} MB of tensors changed): mgit "
            f"{switches['mgit']:.2f} s, {switches['git + git-lfs'] / switches['mgit']:.1f}× faster than git + git-lfs "
            f"(mgit: {o.switched_how}, writing only the changed chunks; git writes every changed file whole)."
        )
    vocab = next((r for r in references(o) if r.version.name == "vocab"), None)
    if vocab and vocab.ref_a and vocab.cost.grown > PARTIAL_TOLERANCE * vocab.ref_a:
        out.append(
            f"- vocab: {fmt_mb(vocab.cost.grown)} MB for {fmt_mb(vocab.version.changed)} MB of new rows. New chunks: "
            f"{encodings_cell(vocab.cost.encodings)}: each grown tensor's last chunk (its old tail rows plus the new "
            "rows) is stored again, "
            + (
                "as a delta against the old last chunk: the old rows cost nothing, the new ones what they compress to."
                if {"delta", "diff"} & set(vocab.cost.encodings)
                else "whole, without a delta."
            )
        )
    return out


def report(o: Outcome, tools: Tools, plan: ModelPlan, run: RunContext) -> str:
    """This benchmark's docs section (also printed to stdout)."""
    base = o.versions[0]
    s = plan.shape
    all_ok = all(o.identical.values())
    lines = [
        *run.header(SECTION_TITLE),
        f"Input: a generated llama-like bf16 base model of {base.raw / GB:.3f} GB ({plural(plan.layers, 'layer')}, "
        "hidden "
        f"{s.hidden}, intermediate {s.intermediate}, vocab {s.vocab}, weights N(0, 0.02) from seed {SEED}, norms "
        f"ones; {SHARDS} safetensors shards, `model.safetensors.index.json`, `config.json`), and from it full model "
        "directories (same shard files, tensors in the same order; new tensors go to the last shard):",
        "",
        *(f"- `{v.name}` (from `{v.parent}`): {v.what}" for v in o.versions[1:]),
        "",
        "Each tool stores the base as its first commit, then each variant as a commit on its own branch made from "
        "the base (mgit: `mgit checkout -b NAME main`, replace the model files, `mgit add model`, `mgit commit`; "
        "git: the same with `git checkout -b`, `git add -A`, `git commit`, `*.safetensors` tracked by git-lfs), and "
        "the chain as consecutive commits on one branch `chain` made from the base. DVC, which has no branches "
        "without git, `dvc add`s every version in the same order into the same cache. ZipNN compresses every "
        "safetensors file of every version on its own (its file API: `ZipNN(is_streaming=True, "
        "bytearray_dtype='bfloat16').compress(file bytes)`, round trip checked).",
        "",
        "**Bytes stored per version** (MB; ratios to the version's raw size):",
        "",
        stored_table(o),
        "",
        "*raw*: all files of the version's model directory. *changed*: raw bytes of what differs from its parent "
        "version (modified tensors whole, plus appended rows and new tensors). *mgit*, *git + git-lfs*, *dvc*: how "
        "much `.mgit/`, `.git/lfs/objects` and `.dvc/cache` grew (disk usage, like `du -s`) while the version was "
        "stored; mgit's includes its git objects (manifests, trees, commit, index). *mgit new chunks*: `mgit du "
        "--json` `new_stored_bytes` (stored bytes of chunks the parent commit lacks). *zipnn*: the version's "
        "safetensors files compressed, other files as they are, no sharing between versions; *changed files*: "
        "only the files whose bytes differ from the parent version's (what ZipNN plus file-level dedup, e.g. "
        "`.znn` files in git-lfs, would add). The last row is each store's size after all versions.",
        "",
        "**mgit against the compressed size of what changed:**",
        "",
        partial_table(o),
        "",
        "*A*: changed raw bytes × mgit's base compression (base stored / raw), the size of what changed "
        "compressed on its own. *B*: modified tensors at the dense fine-tune's delta cost (mgit's dense bytes "
        "/ dense changed bytes), new rows and tensors at the base's compression. *elements changed*: share of the "
        "elements of same-shape tensors whose bf16 value changed. New chunks are counted by how mgit stored them "
        "(`diff`: the elements' difference to the parent chunk, zigzagged; `delta`: XOR against the parent chunk; "
        "`zstd`: byte-grouped zstd alone, e.g. a keyframe; `raw`).",
        "",
        targets_table(targets(o)),
        "",
        *notes(o),
        "",
        "**Throughput** (the base's raw size over wall time; every row leaves a model directory of that size: "
        "restored into an empty one, copied, or switched to from a checkout of the base):",
        "",
        steps_table(o.throughput, base.raw),
        "",
        "**Time to store each version** (one run each; mgit and git: add + commit; DVC: add):",
        "",
        times_table(o),
        "",
        f"mgit restored every version byte for byte (sha256, each checked out into an empty model directory): "
        f"**{'yes' if all_ok else 'NO: ' + ', '.join(n for n, ok in o.identical.items() if not ok)}**. "
        f"`mgit fsck`: {o.fsck}."
        + ("" if o.zipnn_ok is None else f" zipnn round trips byte-identical: {'yes' if o.zipnn_ok else '**NO**'}."),
        "",
        "How it was measured: every timed step is a separate process timed by wall clock, after an untimed `sync`, "
        "a wait until no other benchmark script runs and a wait until the CPUs are idle (the harness's runner). The "
        "page cache cannot be dropped, so every tool reads files written moments before (warm). Ingest: "
        f"{plural(run.reps, 'run')}, each in a fresh repository holding a plain copy of the base; the last one goes on "
        "to store the variants. Restore: the model directory is deleted and `mgit checkout --force REV` run (HEAD "
        f"already at REV), {plural(run.reps, 'time')}, sha256 checked after each; `cp -r` copies the base's model "
        f"directory. Switch: from a clean checkout of `main` (made untimed before each run), `mgit checkout "
        f"{SWITCH_TO}` / `git checkout {SWITCH_TO}` (git-lfs's smudge filter writes the files), "
        f"{plural(run.reps, 'time')}, sha256 checked after each. Peak RSS "
        "includes mgit's memory-mapped pack files (page cache). Targets are reported, not asserted.",
        *skipped_baselines((("git-lfs", tools.git_lfs), ("dvc", tools.dvc), ("zipnn", o.zipped))),
    ]
    return "\n".join(lines) + "\n"


# -- main ---------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> cli.argparse.Namespace:
    p = cli.parser(__doc__)
    cli.add_common(
        p,
        workdir="bench-work/storage",
        size_gb=0.6,
        quick="a ~0.07 GB model (overrides --size-gb)",
        reps=(3, "runs of each ingest, restore and cp step; the best is reported"),
        other_wait=1800,
        keep="keep the per-tool repositories afterwards",
    )
    p.add_argument("--baselines-venv", type=Path, default=BASELINES_VENV, help="virtual environment for dvc and zipnn")
    p.add_argument("--no-dvc", action="store_true", help="skip the DVC baseline")
    p.add_argument("--no-zipnn", action="store_true", help="skip the zipnn baseline")
    return p.parse_args(argv)


def mgit_part(
    mgit: MgitStore, cp_dir: Path, model: Path, sums: dict[str, str], versions: list[Version], reps: int
) -> Outcome:
    """mgit stores the base (timed against `cp -r`) and every version, restores some into an empty
    working tree, switches branches; then every version is checked out and verified, and fsck runs."""
    print("mgit ...", flush=True)
    ingest, base_cost = mgit.ingest(versions[0], reps)
    costs = {"mgit": store_all(mgit, versions, base_cost)}
    totals = {"mgit": mgit.size()}
    print("cp -r ...", flush=True)
    throughput = [ingest, time_cp(model, cp_dir, mgit.runner, sums, reps)]
    by = {v.name: v for v in versions}
    for name in RESTORES:
        print(f"  mgit checkout {name}", flush=True)
        label = f"{name}; its new chunks: {encodings_cell(costs['mgit'][name].encodings)}"
        throughput.append(mgit.restore("main" if name == "base" else name, label, by[name].sums, reps))
    print(f"  mgit {SWITCH_STEP}", flush=True)
    switch = mgit.timed_switch(SWITCH_TO, SWITCH_STEP, by[SWITCH_TO].sums, reps)
    throughput.append(switch)
    print("verifying every version and running fsck", flush=True)
    identical, fsck = mgit.verify(versions), mgit.fsck()
    how = mgit.switched_how(switch)
    return Outcome(versions, costs, totals, throughput=throughput, identical=identical, fsck=fsck, switched_how=how)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = args.workdir.resolve()
    size_gb = 0.07 if args.quick else args.size_gb
    cli.check_free_disk(workdir, int(size_gb * GB * 25))  # base, 10 versions, the largest store, copies
    workdir.mkdir(parents=True, exist_ok=True)
    tools = find_tools(workdir, args.mgit_rev, not args.no_dvc, args.baselines_venv.resolve())
    zipnn = None if args.no_zipnn else ensure_zipnn(args.baselines_venv.resolve())
    if zipnn:
        code = "import importlib.metadata as m; print(m.version('zipnn'))"
        tools.versions["zipnn"] = str(version_of([zipnn, "-c", code]))
    model, plan, sums = ensure_model(workdir, size_gb)
    versions = ensure_versions(workdir, model, sums)
    runner = Runner(tool_env(workdir), args.idle_wait, args.other_wait)
    runs = workdir / "runs"
    mgit = MgitStore(runs / "mgit", runner, tools.mgit)
    o = mgit_part(mgit, runs / "cp", model, sums, versions, args.reps)
    if not args.keep:  # free the disk before the baselines fill it
        shutil.rmtree(mgit.root, ignore_errors=True)
        shutil.rmtree(runs / "cp", ignore_errors=True)
    if tools.git_lfs:
        lfs = GitLfsStore(runs / "git-lfs", runner)
        sums_to = next(v.sums for v in versions if v.name == SWITCH_TO)
        switched = lambda: o.throughput.append(lfs.timed_switch(SWITCH_TO, SWITCH_STEP, sums_to, args.reps))  # noqa: E731
        o.costs["git + git-lfs"], o.totals["git + git-lfs"] = run_baseline(lfs, versions, args.keep, switched)
    if tools.dvc:
        o.costs["dvc"], o.totals["dvc"] = run_baseline(DvcStore(runs / "dvc", runner, tools.dvc), versions, args.keep)
    if zipnn:
        print("zipnn ...", flush=True)
        o.zipped, o.zipnn_ok = zipnn_all(zipnn, versions, runner, workdir)
    if not args.keep:
        shutil.rmtree(runs, ignore_errors=True)
    run = RunContext(cli.command_line(argv, __file__), workdir, tools.versions, args.reps)
    publish(report(o, tools, plan, run), SECTION_TITLE, args.write_docs)
    ok = all(o.identical.values()) and all(r.identical is not False for r in o.throughput)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
