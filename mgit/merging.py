"""Merges as commits (mixed into Repository): plan, budget, fetch in a partial clone,
execute, commit, and the records and lineage they leave. The layers below do the work:
mgit.merge (plan, importance, engine, record), the model and store layers."""

from __future__ import annotations

import os
import posixpath
import re
import secrets
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mgit.budget import parse_budget
from mgit.errors import BadInputError, MgitError, RefUpdateError, RevisionError
from mgit.graph import records
from mgit.graph.refs import check_ref_name
from mgit.graph.snapshot import Snapshot, validate_path, write_snapshot
from mgit.model.ingest import Ingestor
from mgit.model.materialize import StagedFile
from mgit.progress import byte_progress
from mgit.remote.promisor import on_demand
from mgit.remote.transfer import Transfer
from mgit.version import __version__
from mgit.worktree import journal
from mgit.worktree.journal import Journal, Write
from mgit.worktree.scan import walk
from mgit.worktree.sparse import load_patterns

if TYPE_CHECKING:  # mgit.merge is imported where used: commands that do not merge skip it
    from mgit.merge.config import MergeConfig
    from mgit.merge.engine import Execution, MergeSpec
    from mgit.merge.importance import BudgetReport
    from mgit.merge.plan import MergePlan, TensorPlan
    from mgit.merge.record import MergeSetup
    from mgit.repo import Repository


def _check_request(
    method: str | None, config: str | os.PathLike[str] | None, budget: str | int | None, params: dict[str, Any]
) -> MergeConfig | None:
    """What can be refused from the request alone (torch-free, nothing read): the config and
    its parameter ranges, the given parameters' ranges, the budget's form."""
    from mgit.merge.config import load_config
    from mgit.merge.params import check_method, check_params

    cfg = load_config(config) if config is not None else None
    if cfg is None:
        check_method(method, params)
        check_params(params, str(method), method)
    else:
        check_method(cfg.method, set(cfg.parameters).union(*(m.parameters for m in cfg.models)), str(config))
    if budget is not None:
        parse_budget(budget)
    return cfg


def _with_model(head: Snapshot, reference: Snapshot, model_dir: str) -> Snapshot:
    """HEAD's files with its model directory replaced by the reference's: what a merge without
    a base starts from (its model, config and tokenizer are the first expert's; the files
    beside the model stay the branch's)."""

    def in_model(path: str) -> bool:
        return not model_dir or path.startswith(model_dir + "/")

    return {p: e for p, e in head.items() if not in_model(p)} | {p: e for p, e in reference.items() if in_model(p)}


class Merging:
    """Merge operations (mixed into Repository)."""

    def merge(
        self: Repository,
        experts: Sequence[str],
        method: str,
        base: str | None = None,
        *,
        branch: str | None = None,
        message: str | None = None,
        seed: int | None = None,
        dtype: str | None = None,
        out_dtype: str | None = None,
        model: str | None = None,
        allow_missing: bool = False,
        config: str | os.PathLike[str] | None = None,
        budget: str | int | None = None,
        budget_select: str = "importance",
        **params: Any,
    ) -> str:
        """Merge expert revisions into ``base`` (default HEAD) as a commit with parents
        [base, *experts] holding the merged model and its plan; returns the commit id.

        On HEAD the current branch advances; on another base ``branch`` is required and
        created. Either way the working tree then holds the merged model. Parameters are
        mergekit's (weight, density, lambda, normalize, rescale, epsilon, gamma, t, ...).
        With ``config`` (a mergekit YAML file) method, base, experts and parameters come
        from it instead, with per-tensor filters and per-layer gradients. With ``budget``
        (``"2GB"``, ``"10%"``, an int of bytes) expert chunk reads stay within it, the most important
        chunks chosen first (``budget_select="uniform"``: at random, for comparisons).
        """
        cfg = _check_request(method, config, budget, params)  # bad input refused before torch loads
        from mgit.merge.methods import get_method  # torch: the methods are torch functions

        if seed is None:  # deterministic methods need none: keep their commits reproducible
            named = cfg.method if cfg is not None else method
            seed = secrets.randbits(31) if get_method(named).random else 0
        plan, setup = self.merge_plan(
            experts, method, base, model=model, allow_missing=allow_missing, config=config,
            budget=budget, budget_select=budget_select, seed=seed, dtype=dtype, out_dtype=out_dtype, **params,
        )  # fmt: skip
        from mgit.merge.engine import MergeSpec, execute  # torch: only once the inputs are valid

        spec = MergeSpec(
            setup.method, setup.params, seed, dtype or setup.dtype, out_dtype or setup.out_dtype, setup.params_for
        )
        base = setup.base_ref
        on_head = setup.base_commit == self.refs.head() and base in (None, "HEAD", self.refs.current_branch())
        if not on_head and not branch:
            raise BadInputError("merging into a base other than HEAD needs -b NAME for the new branch")
        if branch is not None:
            check_ref_name(branch, "branch")
            if branch in self.refs.branches():
                raise BadInputError(f"branch {branch!r} already exists")
            self.refs.refuse_clash(f"refs/heads/{branch}")  # before any work: one line
        with self._writing():
            self._refuse_stale_base(setup.base_commit, on_head, branch)
            self._refuse_dirty("merge")
            base_snap = setup.base_snap
            bar_total = sum(tp.base.nbytes for tp in plan.tensors)
            staging = self._clear_staging()

            def stage(file: str, header: bytes, size: int) -> StagedFile:
                return StagedFile(self.root / file, staging, header, size)

            fetched = {"base": Transfer(), "experts": Transfer()}
            if self.is_partial:
                self._fetch_planned(plan, fetched)
            with byte_progress("merge", bar_total) as bar:
                ingestor = Ingestor(self.graph, self.store, self.pool, bar, self._parent_lookup(base_snap))
                run = execute(plan, spec, ingestor, self.store, self.pool, base_snap, bar, stage)
            if self.is_partial:
                run.base_bytes_fetched, run.expert_bytes_fetched = fetched["base"].bytes, fetched["experts"].bytes
            try:
                return self._commit_merge(plan, spec, setup, run, base, branch, on_head, message)
            finally:
                for staged in run.staged.values():
                    staged.discard()  # those not installed

    def _refuse_stale_base(self: Repository, base_commit: str, on_head: bool, branch: str | None) -> None:
        """Under the lock, before any write: the plan was made from HEAD (and the new branch
        was free) when no lock was held; another command may have moved them since."""
        head = self.refs.head()
        if on_head and head != base_commit:
            raise RefUpdateError(
                f"HEAD moved to {str(head)[:12]} while this merge was being planned (from {base_commit[:12]}); "
                "nothing was changed, run it again"
            )
        if branch is not None and branch in self.refs.branches():
            raise BadInputError(f"branch {branch!r} already exists")

    def _commit_merge(
        self: Repository,
        plan: MergePlan,
        spec: MergeSpec,
        setup: MergeSetup,
        run: Execution,
        base: str | None,
        branch: str | None,
        on_head: bool,
        message: str | None,
    ) -> str:
        """Record an executed merge: seal chunks, write tree and commit, then update the
        working tree (from the staged files) and the refs."""
        from mgit.merge.record import plan_record

        base_snap = setup.base_snap
        merged = dict(base_snap) | run.files
        record = plan_record(plan, spec, setup, run, __version__)
        extra = records.stats_entries(self.graph, run.stats) + records.plan_entries(self.graph, record)
        self.store.seal()
        tree = write_snapshot(self.graph, merged, extra)
        text = message or f"merge {', '.join(setup.expert_names)} into {base or 'HEAD'} ({setup.method.name})"
        who = self.identity()
        parents = [setup.base_commit, *setup.expert_commits]
        commit = self.graph.put_commit(tree, parents, text, who, who)
        if on_head and branch is None:
            head_snap = base_snap if setup.reference is None else self.snapshot(setup.base_commit)
            self._install_merge(commit, head_snap, merged, setup.base_commit, text, run.staged)
        else:
            assert branch is not None
            # journaled: a killed run's branch is checked out by the next command
            plan = Journal("merge", branch, commit, head="create", branch=branch, switch_after=True)
            journal.save(self.git_dir, plan)
            self.refs.create_branch(branch, commit)
            try:
                self._switch(branch, None, force=False, staged=run.staged)
            except MgitError:
                left = journal.load(self.git_dir)
                if left is not None and left.op == "merge":  # refused before writing anything
                    journal.clear(self.git_dir)
                raise
        return commit

    def _install_merge(
        self: Repository,
        commit: str,
        head_snap: Snapshot,
        merged: Snapshot,
        base_commit: str,
        text: str,
        staged: dict[str, StagedFile],
    ) -> None:
        """Move the current branch to the merge, then bring the working tree and index to it,
        journaled: the branch moves first (a lost compare-and-swap leaves tree and index as
        they were), and a killed run's working tree is finished by the next command. Files
        of HEAD the merge's tree lacks (a no-base merge's tree is the first expert's) go, as
        a checkout of the merge would remove them."""
        from mgit.repo import CheckoutResult  # the porcelain's record (repo imports this module)

        index = self._index()
        patterns = load_patterns(self.git_dir)
        changes = {p: e for p, e in merged.items() if head_snap.get(p) != e}
        forms = {p: self._form(e, p, patterns) for p, e in changes.items()}
        message = f"merge: {text.splitlines()[0]}"
        plan = Journal(
            "merge", "HEAD", commit, writes={p: Write(e, forms[p].entry, forms[p].written) for p, e in changes.items()},
            removes=sorted(set(head_snap) - set(merged)), head="advance", old_head=base_commit, message=message,
        )  # fmt: skip
        journal.save(self.git_dir, plan)
        try:
            self.refs.advance_head(base_commit, commit, message)
        except RefUpdateError:
            journal.clear(self.git_dir)
            raise
        result = CheckoutResult(commit)
        self._write_files(index, changes, result, staged, forms)
        self._complete(plan, index, result)

    def _clear_staging(self: Repository) -> Path:
        """The staging directory of merged files, emptied of what a killed merge left (we hold the lock)."""
        staging = self.git_dir / "staging"
        shutil.rmtree(staging, ignore_errors=True)
        return staging

    @on_demand
    def merge_plan(
        self: Repository,
        experts: Sequence[str],
        method: str,
        base: str | None = None,
        *,
        model: str | None = None,
        allow_missing: bool = False,
        config: str | os.PathLike[str] | None = None,
        budget: str | int | None = None,
        budget_select: str = "importance",
        explain: bool = False,
        seed: int = 0,
        dtype: str | None = None,
        out_dtype: str | None = None,
        **params: Any,
    ) -> tuple[MergePlan, MergeSetup]:
        """What a merge would read, from manifests alone (``mgit merge --dry-run``); with a
        ``budget`` (or ``explain``) also which expert chunks are worth reading (``plan.budget``),
        which may analyze chunk pairs no commit recorded (counted apart)."""
        from mgit.merge.config import num_layers, tensor_parameters
        from mgit.merge.params import check_params
        from mgit.merge.plan import model_tensors, plan_merge
        from mgit.merge.record import MergeSetup

        cfg = _check_request(method, config, budget, params)  # bad input refused before torch loads
        from mgit.merge.methods import get_method  # torch: the methods are torch functions

        if cfg is not None:
            if experts or params:
                raise BadInputError("with a merge config, name experts and parameters in the config only")
            method, base = cfg.method, cfg.base
        chosen = get_method(method)
        base_commit = self._merge_input(base or "HEAD", None)  # the first parent
        reference = None
        if not chosen.needs_base and base is None:  # nothing of HEAD is used: the first expert is the reference
            first = cfg.models[0].ref if cfg is not None else next(iter(experts), None)
            if first is None:
                raise BadInputError("name at least one expert revision to merge")
            reference = self._merge_input(first, None)
        base_snap = self.snapshot(reference or base_commit)
        model_dir, _ = self._pick_model(base_snap, model)
        if reference is not None:
            base_snap = _with_model(self.snapshot(base_commit), base_snap, model_dir)
        params_for = None
        if cfg is not None:
            entries = [m for m in cfg.models if not (chosen.needs_base and m.ref == cfg.base)]
            experts = [m.ref for m in entries]
            if not experts:
                raise BadInputError(f"{config}: no model to merge besides the base")
            names = list(model_tensors(self.graph, base_snap, model_dir)[1])
            params_for = tensor_parameters(chosen, cfg, entries, num_layers(names))
            params = params_for("")
        if not experts:
            raise BadInputError("name at least one expert revision to merge")
        resolved = chosen.resolve(params, len(experts)) if params_for is None else params
        check_params(resolved, chosen.name, chosen.name)  # with the defaults filled in (DELLA's epsilon)
        expert_commits = [
            reference if k == 0 and reference else self._merge_input(e, model_dir) for k, e in enumerate(experts)
        ]
        snaps = [self.snapshot(c) for c in expert_commits]
        passes = 2 if chosen.decides_per_expert else 1
        plan = plan_merge(self.graph, self.store, model_dir, base_snap, snaps, list(experts), allow_missing, passes)
        if self.promisor is not None:  # price the chunks not here at what fetching them costs
            sizes = self._fetch_sizes(plan)
            plan = plan_merge(
                self.graph, self.store, model_dir, base_snap, snaps, list(experts), allow_missing, passes,
                self.promisor.pricing(sizes),
            )  # fmt: skip
            plan.fetch_sizes = sizes
        if params_for is not None:  # every tensor's parameters must resolve before anything is written
            for tp in plan.tensors:
                check_params(chosen.resolve(params_for(tp.name), len(experts)), f"{config}: tensor {tp.name}", method)
        setup = MergeSetup(
            chosen, resolved, base_commit, expert_commits, list(experts), base_snap,
            base_ref=base, params_for=params_for, config=cfg.source if cfg else None,
            dtype=cfg.dtype if cfg else None, out_dtype=cfg.out_dtype if cfg else None, reference=reference,
        )  # fmt: skip
        if budget is not None or explain:
            plan.budget = self._plan_budget(
                plan, setup, budget, budget_select, seed, dtype or setup.dtype, out_dtype or setup.out_dtype
            )
        return plan, setup

    def _fetch_sizes(self: Repository, plan: MergePlan) -> dict[str, int]:
        """Record sizes on the remote of the base and candidate expert chunks not here (one batch)."""
        wanted = [c.id for tp in plan.tensors for c in tp.base.chunks]
        wanted += [tp.experts[k].chunks[i].id for tp in plan.tensors for k, r in enumerate(tp.reads) for i in r]
        assert self.promisor is not None
        return self.promisor.sizes(wanted)

    def _fetch_planned(self: Repository, plan: MergePlan, run_report: dict[str, Transfer]) -> None:
        """A partial clone fetches what the merge reads before it runs: the base's chunks, then
        the chosen expert chunks, the latter capped at the budget."""
        assert self.promisor is not None
        base_ids = [c.id for tp in plan.tensors for c in tp.base.chunks]
        expert_ids = [
            tp.experts[k].chunks[i].id for tp in plan.tensors for k, reads in enumerate(tp.reads) for i in reads
        ]
        limit = plan.budget.limit if plan.budget is not None else None
        self.promisor.fetch_for_merge(
            base_ids, expert_ids, limit, plan.fetch_sizes, run_report["base"], run_report["experts"]
        )

    def _plan_budget(
        self: Repository,
        plan: MergePlan,
        setup: MergeSetup,
        budget: str | int | None,
        select: str,
        seed: int,
        dtype: str | None,
        out_dtype: str | None,
    ) -> BudgetReport:
        """Restrict ``plan`` to the expert chunks a budget affords (see mgit.merge.importance)."""
        from mgit.merge import importance
        from mgit.merge.analyze import pair_norms
        from mgit.store.paircache import PairCache

        if select not in importance.SELECTIONS:
            raise BadInputError(f"unknown budget selection {select!r} (known: {', '.join(importance.SELECTIONS)})")
        given = parse_budget(budget) if budget is not None else None
        count = len(setup.expert_commits)

        def weights_for(tp: TensorPlan) -> importance.Weights:
            params = setup.method.resolve(setup.params_for(tp.name), count) if setup.params_for else setup.params
            return importance.effective_weights(setup.method.name, params, count)

        def roundoff_for(tp: TensorPlan) -> float:
            return importance.unit_roundoff(tp.base.dtype, dtype, out_dtype)

        full = plan.expert_bytes
        limit = given.resolve(full) if given is not None else None
        # analysis never reads more than the merge it plans: at most the budget, at most a full merge
        price = self.promisor.pricing(plan.fetch_sizes) if self.promisor is not None else self.store.read_cost
        analysis = pair_norms(
            self.graph, self.store, self.pool, PairCache(self.git_dir / "cache" / "pair-norms.sqlite"),
            plan, setup.reference or setup.base_commit, setup.expert_commits, self.commit_stats,
            full if limit is None else min(limit, full), price,
        )  # fmt: skip
        report = importance.BudgetReport(str(budget) if budget is not None else None, limit, select, full)
        report.analyze_pairs, report.analyze_bytes = analysis.pairs_analyzed, analysis.bytes_read
        report.analyze = analysis.to_json()
        cands = importance.candidates(plan, weights_for, analysis.norms, analysis.upper)
        taken = importance.choose(cands, limit, select, seed)
        report.best_share = importance.best_share(cands, limit)
        importance.apply(plan, cands, taken, weights_for, setup.method.name in importance.AFFINE_METHODS,
                         roundoff_for, report)  # fmt: skip
        return report

    def _merge_input(self: Repository, ref: str, model_dir: str | None) -> str:
        """A merge input: a revision, or a model directory on disk imported as a root commit
        under refs/imports/ (so the merge's parents and lineage stay in the graph)."""
        path = Path(ref).expanduser()
        if ref.startswith(("/", "./", "../", "~")) and path.is_dir():
            return self._import_directory(path.resolve(), model_dir or "model")
        try:
            return self.refs.resolve(ref)
        except RevisionError:
            if not path.is_dir():
                raise
        return self._import_directory(path.resolve(), model_dir or "model")

    def _import_directory(self: Repository, path: Path, model_dir: str) -> str:
        with self._writing():
            files = walk(path)
            snap: Snapshot = {}
            with byte_progress("import", sum(st.st_size for st in files.values())) as bar:
                ingestor = Ingestor(self.graph, self.store, self.pool, bar)
                for rel in sorted(files):
                    target = validate_path(posixpath.join(model_dir, rel) if model_dir else rel)
                    snap[target] = ingestor.file(path / rel, target)
            self.store.seal()
            tree = write_snapshot(self.graph, snap)
            who = self.identity()
            commit = self.graph.put_commit(tree, [], f"import {path}", who, who)
            name = re.sub(r"[^A-Za-z0-9._-]+", "-", path.name).strip("-.") or "model"
            self.graph.repo.refs[f"refs/imports/{name}-{tree[:8]}".encode()] = commit.encode()
            return commit

    def lineage(self: Repository, rev: str = "HEAD", depth: int = 50) -> dict:
        """The derivation tree of a revision: each commit with its inputs, down to the roots.

        A merge commit's inputs are its base and its experts (with method and weights from
        its plan); another commit's input is its first parent. A commit met a second time is
        marked ``"seen": true`` instead of being expanded again; ``depth`` bounds the walk.
        """
        seen: set[str] = set()

        def node(sha: str, role: str, left: int) -> dict:
            info = self.graph.commit(sha)
            out: dict[str, Any] = {"commit": sha, "role": role, "summary": info.summary, "inputs": []}
            if sha in seen:
                return out | {"seen": True}
            seen.add(sha)
            plan = self.merge_record(sha)
            if left <= 0:
                return out | {"truncated": bool(info.parents)}
            if plan is not None:
                weights = plan["parameters"].get("weight")
                out |= {"method": plan["method"], "parameters": plan["parameters"], "seed": plan["seed"]}
                if plan["base"] is not None:
                    out["inputs"].append(node(plan["base"], "base", left - 1))
                else:  # a method without a base: the commit it was made on is history, not an input
                    out["inputs"].append(node(info.parents[0], "parent", left - 1))
                for k, expert in enumerate(plan["experts"]):
                    role = f"expert {expert['name']}"
                    if weights is not None:
                        role += f" (weight {weights[k]})"
                    out["inputs"].append(node(expert["commit"], role, left - 1))
            elif info.parents:
                out["inputs"].append(node(info.parents[0], "parent", left - 1))
            return out

        return node(self.refs.resolve(rev), "revision", depth)

    def merge_record(self: Repository, rev: str = "HEAD") -> dict | None:
        """The plan recorded in a merge commit (None for other commits)."""
        return records.read_plan(self.graph, self.graph.commit(self.refs.resolve(rev)).tree)
