"""bench_merge's report: its section as Markdown (the results, what each tool read, the targets and
how it was measured).

Why: the script is the scenario (which cases run, in what order); everything that turns their
outcomes into text lives here, so the report's sentences can be read (and changed) in one place and
tested with made-up outcomes.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness import merges
from harness.context import RunContext
from harness.merge_cases import METHODS, Case, Outcome
from harness.models import GB, MB, SHARDS, ModelPlan, split_shards
from harness.report import fmt_rss, fmt_times, table
from harness.sameness import same_cell
from harness.targets import Target, at_least, at_most, target, targets_table
from harness.variants import EXPERT_SEED, SCALE_DECADES, frozen_byte_share

SECTION_TITLE = "## Merge (bench_merge.py)"


def results_table(outcomes: list[Outcome]) -> str:
    header = [
        "method",
        "K",
        "mergekit time (s)",
        "mgit time (s)",
        "speedup (×)",
        "mergekit peak RSS (MB)",
        "mgit peak RSS (MB)",
        "RSS mgit / mergekit",
        "mergekit reads (GB)",
        "mgit reads (GB)",
        "outputs equal",
        "other load (mergekit / mgit)",
    ]
    rows = []
    for o in outcomes:
        ratio = o.anon_ratio
        rows.append(
            [
                o.case.method,
                str(o.case.k),
                fmt_times(o.mergekit.times),
                fmt_times(o.mgit.times),
                f"{o.speedup:.2f}",
                fmt_rss(o.mergekit.proc),
                fmt_rss(o.mgit.proc),
                f"{o.rss_ratio:.2f}" + (f" ({ratio:.2f})" if ratio else ""),
                f"{o.mergekit.read / GB:.3f}",
                f"{o.mgit.read / GB:.3f}",
                same_cell(o.same, max_abs=True),
                f"{o.mergekit.proc.load_share:.0%} / {o.mgit.proc.load_share:.0%}",
            ]
        )
    return table(header, "lrrrrrrrrrll", rows)


def reads_table(outcomes: list[Outcome]) -> str:
    header = [
        "method",
        "K",
        "mgit: base chunks (GB)",
        "mgit: expert chunks (GB)",
        "expert chunks read",
        "of which deltas",
        "their own stored bytes (GB)",
        "expert bytes planned (GB)",
        "mergekit: its inputs (GB)",
    ]
    rows = []
    for o in outcomes:
        b = o.mgit.record["bytes"]
        rows.append(
            [
                o.case.method,
                str(o.case.k),
                f"{b['base_measured'] / GB:.3f}",
                f"{b['experts_measured'] / GB:.3f}",
                str(b["expert_chunks_measured"]),
                str(o.expert_delta_chunks),
                f"{o.expert_own_bytes / GB:.3f}",
                f"{b['experts_estimated'] / GB:.3f}",
                f"{o.mergekit.read / GB:.3f}",
            ]
        )
    return table(header, "lrrrrrrrr", rows)


def methods_table(outcomes: list[Outcome]) -> str:
    """How each method of the run was merged: its expert counts, base and parameters."""
    rows = []
    for method in dict.fromkeys(o.case.method for o in outcomes):
        m = METHODS[method]
        ks = ", ".join(str(o.case.k) for o in outcomes if o.case.method == method)
        dtypes = sorted({d.removeprefix("torch.") for o in outcomes if o.case.method == method for d in o.same.dtypes})
        count = ks + ("" if m.k is None else " (the only count it takes)")
        rows.append([method, count, "yes" if m.base else "no", m.words(), ", ".join(dtypes)])
    return table(["method", "K", "base", "parameters", "mgit's output dtypes"], "lllll", rows)


def targets(outcomes: list[Outcome]) -> list[Target]:
    """The targets at each method's largest K, plus the anonymous-memory ratio for information."""
    found = []
    kmax = {o.case.method: o.case.k for o in sorted(outcomes, key=lambda o: o.case.k)}
    for o in (o for o in outcomes if o.case.k == kmax[o.case.method]):
        at = (o.case.method, str(o.case.k))
        found += [
            target("mgit speedup over mergekit (×)", o.speedup, "≥ 2", at_least(2), context=at),
            target("mgit peak RSS / mergekit's", o.rss_ratio, "≤ 0.5", at_most(0.5), context=at),
        ]
        if (anon := o.anon_ratio) is not None:
            metric = "(for information) the same, anonymous memory only"
            found.append(target(metric, anon, "(≤ 0.5)", at_most(0.5), context=at))
        same = o.same.bit_identical
        found.append(Target("outputs bit-identical", "yes" if same else "no", "yes", same, at))
    return found


@dataclass
class MergeInputs:
    """What the section says of the run besides its outcomes and the RunContext's lines."""

    plan: ModelPlan
    raw: int
    experts: int
    example: Case
    example_cmds: list[str]


def report(outcomes: list[Outcome], run: RunContext, c: MergeInputs) -> str:
    """This benchmark's docs section (also printed to stdout)."""
    shares = [frozen_byte_share(c.plan, k) for k in range(1, c.experts + 1)]
    lines = [
        *run.header(SECTION_TITLE),
        f"Input: {merges.base_words(c.plan, c.raw)}{len(split_shards(c.plan.tensors, SHARDS))} safetensors shards, "
        "index and a `LlamaForCausalLM` config.json) and "
        f"{c.experts} experts made from it like fine-tunes: each leaves a random third of the tensors byte for byte "
        f"as the base's ({min(shares):.0%}–{max(shares):.0%} of the bytes, as the tensors drawn differ in size) and "
        "adds Gaussian noise to every other tensor, at a scale drawn log-uniformly per tensor from "
        f"1e{SCALE_DECADES[0]:.0f} to 1e{SCALE_DECADES[1]:.0f} of the tensor's std (of its RMS for the norms, "
        "whose std is 0), then rounds to bf16 (seeds "
        f"{EXPERT_SEED + 1}…{EXPERT_SEED + c.experts}). mergekit reads the model directories; mgit has the base on "
        "`main` and expert N on branch `expert-N` of one repository. Merges use the first K experts and the "
        "base (where the table says so; a merge without one is of the experts alone: mergekit's config has no "
        "`base_model`, `mgit merge` no `--base`), the parameters below, everything else the methods' defaults, "
        "`dtype: bfloat16` (`--dtype=BF16`); a seeded method is run as `mergekit-yaml --random-seed 0` and "
        "`mgit merge --seed=0`. Output dtypes: of mgit's merged tensors (mergekit's are the same where the "
        "outputs are equal: a tensor of another dtype is not).",
        "",
        methods_table(outcomes),
        "",
        *(f"{caveat}\n" for caveat in dict.fromkeys(METHODS[o.case.method].caveat for o in outcomes) if caveat),
        results_table(outcomes),
        "",
        targets_table(targets(outcomes), ["method", "K"], "lr"),
        "",
        "What each read: mergekit memory-maps and reads the base and every expert in full (the safetensors "
        "files' size); mgit's numbers are its merge record's measured stored (compressed) bytes "
        "(`mgit show --json`, `plan.bytes`): the base's chunks once, and per expert only the chunks whose id "
        "differs from the base's — twice for ties, which decides on each expert's whole delta before merging "
        "chunk by chunk (`plan.bytes.expert_passes` = 2; the experts' own stored bytes are counted once). "
        "`mgit commit` stores most chunks of a fine-tune as deltas against the "
        "base's chunk at the same place, which decoding needs: the experts' own stored bytes (from the chunk "
        "store's index) are the least their reads can cost; measured bytes above them mean delta bases were "
        "read again. Planned: the plan's estimate (`experts_estimated`). A merge without a base reads its inputs "
        "alone: mgit's base column is then the first expert's chunks (the merge's reference, read in full), the "
        "expert column the other experts' chunks that differ from them; mergekit reads the K experts.",
        "",
        reads_table(outcomes),
        "",
        f"Commands, e.g. for {c.example.method} at K = {c.example.k} (mergekit's YAML names the model "
        "directories and gives each expert, or the merge, the parameters of the table above; paths relative "
        "to the repository root):",
        "",
        "```",
        *c.example_cmds,
        "```",
        "",
        merges.waits_words("merge") + ". mergekit writes its output directory "
        "(deleted before each run); `mgit merge` writes the merged tensors into its store, commits (parents base + "
        "K experts, plan recorded) on a new branch and checks it out, i.e. also writes the merged model into the "
        "working tree (it starts from a checkout of `main`). "
        + (
            f"Each merge ran {run.reps} times; the time columns show every run, the other columns the fastest. "
            if run.reps > 1
            else "Each merge ran once. "
        )
        + "The page cache cannot be dropped, so both tools read files written minutes before (warm, as far as "
        "RAM holds them). Peak RSS is the largest resident set of the process as the kernel reports "
        f"it; it includes about {run.rss_floor / MB:.0f} MB inherited at fork (what `true` reports) and the "
        "touched pages of memory-mapped files (mergekit maps the input safetensors files, mgit its pack files). "
        "In parentheses: the peak of the anonymous part alone (RssAnon, sampled from /proc every 0.1 s), i.e. "
        "memory the process allocated, without mapped files; the ratio in parentheses compares those. "
        "Outputs equal: mgit's merged tensors, loaded with `Repository.state_dict(branch)`, against the tensors "
        "of mergekit's output directory, per tensor, compared bit for bit (as int16) and by the largest absolute "
        "difference in float32. Other load is the share of all CPUs that other processes used during the run. "
        "Targets are reported, not asserted.",
    ]
    return "\n".join(lines) + "\n"
