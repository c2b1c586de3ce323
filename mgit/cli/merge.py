"""`mgit merge`: its options turned into method parameters, then a plan (--dry-run, --explain)
or a merge commit; `mgit merge REV` without a method merges a branch as git does
(mgit.cli.branch_merge)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import click

from mgit.cli import branch_merge
from mgit.cli.complete import complete_rev
from mgit.cli.state import CliState, pass_state
from mgit.lazy import lazy_module

if TYPE_CHECKING:
    from mgit.cli.views import merge as views
else:  # rendering (rich) is imported when the command prints
    views = lazy_module("mgit.cli.views.merge")


RNG_HELP = "random methods' draws: mgit's (per tensor, order-free) or mergekit's (as mergekit-yaml --random-seed SEED)"


def _numbers(text: str | None) -> float | list[float] | None:
    """'0.5' → 0.5; '0.5,0.3,0.2' → one value per expert."""
    if text is None:
        return None
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a number or a comma-separated list of numbers") from None
    return values[0] if len(values) == 1 else values


def _param_pairs(pairs: tuple[str, ...]) -> dict[str, object]:
    found: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise click.BadParameter(f"--param {pair!r}: expected NAME=VALUE")
        lowered = value.lower()
        found[key] = lowered == "true" if lowered in ("true", "false") else _numbers(value)
    return found


class MergeCommand(click.Command):
    """`mgit merge`, whose --help ends with every method by name: read from the method registry
    (the only list of names) when help is asked for, so other commands never import it."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from mgit.merge.methods.registry import METHODS

        with formatter.section("Methods (--method; docs/merging.md)"):
            formatter.write_dl([(name, METHODS[name].summary) for name in sorted(METHODS)])
        super().format_epilog(ctx, formatter)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """A ``mergekit-yaml`` option is named with its line from mgit.merge.config_keys: its mgit
        equivalent, or why mgit has none."""
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as exc:
            from mgit.merge.config_keys import OPTIONS

            flag = exc.option_name.removeprefix("--no-").removeprefix("--")
            key = OPTIONS.get(exc.option_name) or OPTIONS.get(f"--{flag}")
            if key is None:
                raise
            raise click.UsageError(f"no such option {exc.option_name} (mergekit-yaml's): {key.reason}", ctx) from None


@click.command("merge", cls=MergeCommand)
@click.argument("experts", nargs=-1, metavar="REV | EXPERTS...", shell_complete=complete_rev)
@click.option("--method", help="the merge method (every one is listed below)")
@branch_merge.side_option("--ours", "HEAD's")
@branch_merge.side_option("--theirs", "REV's")
@click.option("--no-ff", is_flag=True, help="merging a branch: a merge commit even when a fast-forward would do")
@click.option("--ff-only", is_flag=True, help="merging a branch: refuse anything but a fast-forward")
@click.option("--config", "config", type=click.Path(dir_okay=False), help="a mergekit YAML config instead")
@click.option("--weights", "weight", metavar="W[,W...]", help="weight per expert (or one for all)")
@click.option("--density", metavar="D[,D...]", help="fraction of each delta kept (ties/dare/breadcrumbs/della)")
@click.option("--lambda", "lambda_", type=float, help="scale of the merged delta")
@click.option("--epsilon", metavar="E[,E...]", help="della: spread of keep probabilities; ram*: change threshold")
@click.option("--gamma", metavar="G[,G...]", help="breadcrumbs: fraction of largest magnitudes removed")
@click.option("--t", "t", type=float, help="slerp: interpolation factor; nearswap: distance threshold")
@click.option("--normalize/--no-normalize", default=None, help="divide by the sum of weights")
@click.option("--rescale/--no-rescale", default=None, help="restore the L1 norm of sparsified deltas")
@click.option("--param", "extra", multiple=True, metavar="NAME=VALUE", help="any other mergekit parameter")
@click.option("--base", metavar="REV", shell_complete=complete_rev, help="base revision (default HEAD)")
@click.option("-b", "branch", metavar="NAME", help="put the merge on a new branch NAME")
@click.option(
    "--no-checkout",
    is_flag=True,
    help="with -b NAME: create the branch only; the working tree, index and HEAD stay as they are",
)
@click.option("-m", "--message", help="commit message")
@click.option("--seed", type=int, help="seed of random methods (recorded; default random)")
@click.option("--rng", type=click.Choice(["mgit", "mergekit"]), default="mgit", show_default=True, help=RNG_HELP)
@click.option("--dtype", help="working dtype, e.g. F32 (default: promotion of the inputs)")
@click.option("--out-dtype", help="dtype of the merged tensors, e.g. BF16")
@click.option("--model", metavar="DIR", help="the model directory, when a commit holds several")
@click.option("--allow-missing", is_flag=True, help="an expert lacking a tensor contributes the base's")
@click.option(
    "--allow-crimes", is_flag=True, help="merge inputs whose config.json architectures differ (as mergekit's)"
)
@click.option(
    "--budget",
    metavar="SIZE|N%",
    help="cap on expert chunk bytes read (or fetched): 2GB (10^9), 500MiB (2^20), or N% of a full merge's",
)
@click.option(
    "--budget-select",
    type=click.Choice(["importance", "uniform"]),
    default="importance",
    show_default=True,
    help="how chunks are chosen under --budget (uniform: at random, seeded; for comparisons)",
)
@click.option(
    "--budget-fairness",
    type=click.Choice(["global", "per-expert"]),
    default="per-expert",
    show_default=True,
    help="how --budget is shared: per-expert spends each expert's share on its own chunks first; global ranks all",
)
@click.option(
    "--sketches/--no-sketches",
    "budget_sketches",
    default=True,
    show_default=True,
    help="under --budget, read an expert's stored sketch (mgit sketch) instead of its chunks where that keeps more",
)
@click.option(
    "--sketch-missing",
    metavar="SHARE",
    help="with --budget: first sketch (mgit sketch) each expert that has none, e.g. 10%; reads it whole once",
)
@click.option("--explain", is_flag=True, help="print the budgeted plan per layer (bytes, captured share, bound)")
@click.option("--dry-run", is_flag=True, help="print the plan (what would be read); read no tensor data")
@click.option(
    "--verify",
    metavar="REV",
    shell_complete=complete_rev,
    help="recompute merge commit REV from its plan record and compare every chunk (writes nothing; exit 6: differs)",
)
@click.option(
    "--check",
    "check_only",
    is_flag=True,
    help="only check the merge against its inputs' headers and configs; print what would be merged",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="the merge result as JSON (mgit.merge/1; a branch's: mgit.branch-merge/2, conflicts mgit.merge-conflicts/2); "
    "with --dry-run/--explain the plan (mgit.plan/1); with --check mgit.merge-check/1",
)
@pass_state
def cmd_merge(
    state: CliState,
    experts: tuple[str, ...],
    method: str | None,
    ours: tuple[str, ...],
    theirs: tuple[str, ...],
    no_ff: bool,
    ff_only: bool,
    config: str | None,
    model: str | None,
    no_checkout: bool,
    dry_run: bool,
    verify: str | None,
    check_only: bool,
    as_json: bool,
    **options: Any,
) -> None:
    """Merge branch REV into HEAD as git does (a fast-forward, or a three-way merge: each tensor
    from the side that changed it); or, with --method or --config, merge EXPERTS (revisions) into
    the base as a commit with parents [base, experts...]. An expert or the base written MODEL+LORA
    is MODEL with a PEFT LoRA adapter (a revision, REV:DIR, or a directory) applied first."""
    # ``options``: the method's parameters (_method_params), the rest MergeRequest's fields by name
    if verify is not None:
        _verify(state, verify, as_json)
        return
    if method is not None and config is not None:
        raise click.UsageError("give --method with EXPERTS, or --config FILE, not both")
    if no_checkout and not options["branch"]:
        raise click.UsageError("--no-checkout puts the merge on a new branch: give -b NAME")
    config = os.path.abspath(config) if config else None
    repo = state.repo
    params = _method_params(options)
    if branch_merge.is_branch_merge(state, experts, method, config):
        branch_merge.run_merge(
            state,
            experts,
            method,
            params,
            message=options["message"],
            seed=options["seed"],
            ours=ours,
            theirs=theirs,
            no_ff=no_ff,
            ff_only=ff_only,
            as_json=as_json,
        )
        return
    from mgit.merge.record import PlanRecord
    from mgit.merge.request import MergeRequest

    request = MergeRequest(
        experts=experts,
        method=method,
        params=params,
        config=config,
        checkout=not no_checkout,
        model=os.path.abspath(model) if model else None,
        **options,
    )
    if check_only:
        if dry_run or request.explain:
            raise click.UsageError("--check checks only: not with --dry-run or --explain")
        checked = repo._check_with(request)
        from mgit.cli.views import merge_check

        if as_json:
            state.echo_json(merge_check.check_json(checked))
        else:
            state.emit(merge_check.check_text(checked))
        return
    if dry_run or request.explain:
        planned = repo._plan_with(request)
        record = planned.record()
        if as_json:
            state.echo_json(record.to_json())
        elif request.explain:
            state.emit(views.plan_text(record).extend(views.explain_table(planned.plan)))
        else:
            state.emit(views.plan_text(record).extend(views.reads_table(planned.plan, record)))
        return
    sha = repo._merge_with(request)
    stored = repo.merge_record(sha)
    assert stored is not None  # a merge commit always has its plan record
    merged = PlanRecord.from_json(stored)
    on = request.branch if no_checkout else repo.refs.current_branch()
    if as_json:
        state.echo_json(views.merge_json(sha, on, merged, checked_out=not no_checkout))
        return
    state.emit(views.merge_text(sha, on, merged, checked_out=not no_checkout))


def _verify(state: CliState, rev: str, as_json: bool) -> None:
    """`mgit merge --verify REV`: the comparison printed, then, where it differs, one error line
    naming the first difference (exit 6)."""
    from mgit.cli.views import verify as verify_views
    from mgit.errors import MergeVerifyError

    others = branch_merge.given(click.get_current_context(), _NOT_WITH_VERIFY)
    if others:
        raise click.UsageError(f"--verify REV takes no other option but --json (given: {', '.join(others)})")
    result = state.repo.verify_merge(rev)
    if as_json:
        state.echo_json(verify_views.verify_json(result))
    else:
        state.emit(verify_views.verify_text(result))
    if not result.identical:
        raise MergeVerifyError(verify_views.mismatch_line(result))


def _method_params(options: dict[str, Any]) -> dict[str, object]:
    """The method's parameters taken out of ``options``: those given, then --param NAME=VALUE."""
    given = {
        "weight": _numbers(options.pop("weight")),
        "density": _numbers(options.pop("density")),
        "lambda": options.pop("lambda_"),
        "epsilon": _numbers(options.pop("epsilon")),
        "gamma": _numbers(options.pop("gamma")),
        "t": options.pop("t"),
        "normalize": options.pop("normalize"),
        "rescale": options.pop("rescale"),
    }
    return {k: v for k, v in given.items() if v is not None} | _param_pairs(options.pop("extra"))


@click.command("sketch")
@click.argument("rev", default="HEAD", shell_complete=complete_rev)
@click.option(
    "--against",
    metavar="REV",
    shell_complete=complete_rev,
    help="the parent the delta is taken to (default: REV's first parent)",
)
@click.option("--share", default="10%", show_default=True, help="of each tensor's stored bytes its sketch may take")
@click.option(
    "--kind",
    type=click.Choice(["lowrank", "dare"]),
    default="lowrank",
    show_default=True,
    help="how the delta is approximated: low-rank factors, or the values at seeded random positions",
)
@click.option("--seed", type=int, default=0, show_default=True, help="of the random SVD or positions (recorded)")
@click.option("--model", metavar="DIR", help="the model directory, when a commit holds several")
@click.option("--force", is_flag=True, help="replace a sketch REV already has")
@click.option("--json", "as_json", is_flag=True, help="the result as JSON (mgit.sketch-result/1)")
@pass_state
def cmd_sketch(
    state: CliState,
    rev: str,
    against: str | None,
    share: str,
    kind: str,
    seed: int,
    model: str | None,
    force: bool,
    as_json: bool,
) -> None:
    """Store a sketch (low-rank or DARE) of REV's change to its parent, which budgeted merges read instead of chunks."""
    model_dir = os.path.abspath(model) if model else None
    result = state.repo.sketch(rev, against, share, kind, seed, model_dir, force).to_json()
    if as_json:
        state.echo_json(result)
    else:
        state.emit(views.sketch_text(result))


# every option of `mgit merge` but --verify and --json (a verification takes none of them)
_NOT_WITH_VERIFY = [p.name for p in cmd_merge.params if p.name not in ("verify", "as_json") and p.name is not None]

COMMANDS = [cmd_merge, cmd_sketch, *branch_merge.COMMANDS]
