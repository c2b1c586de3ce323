"""A merge as asked (:class:`MergeRequest`) and as resolved (:class:`MergeSetup`): one record
each, from the Python API or the CLI to the plan, the budget, the engine and the plan record.

The request is checked on its own first (:meth:`MergeRequest.check`: the config and its
parameter ranges, the method and its parameters, the budget's form), torch-free and before
anything is read. The repository then resolves it (revisions to commits, the base or the
reference model, per-tensor parameters of a config, the seed and dtypes) into a setup, which
is all the engine and the record need to know.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mgit.budget import parse_budget
from mgit.errors import BadInputError
from mgit.graph.snapshot import Snapshot
from mgit.merge.rng import check_rng

if TYPE_CHECKING:
    from mgit.merge.config import MergeConfig
    from mgit.merge.lora import LoraInput
    from mgit.merge.methods.base import MergeMethod
    from mgit.merge.rng import MergekitStream


@dataclass(frozen=True, kw_only=True)
class MergeRequest:
    """What was asked, as given: built once (by ``mgit merge``, or from ``Repository.merge`` /
    ``merge_plan``'s arguments by :func:`mgit.ops.merge.request_of`) and passed whole to the
    planning, the budget, the engine and the commit. A new merge option is one field here."""

    experts: tuple[str, ...] = ()
    method: str | None = None  # None with a config (its method is the config's)
    base: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)  # mergekit's (weight, density, ...)
    model: str | None = None  # the model directory, when a commit holds several
    allow_missing: bool = False  # an expert lacking a tensor contributes the base's
    allow_crimes: bool = False  # inputs whose config.json architectures differ (mergekit's --allow-crimes)
    config: str | os.PathLike[str] | None = None  # a mergekit YAML file
    budget: str | int | None = None  # "2GB", "10%", bytes
    budget_select: str = "importance"
    budget_fairness: str = "per-expert"  # how the budget is shared among the experts (budget.importance.FAIRNESS)
    budget_sketches: bool = True  # under a budget, the experts' stored sketches may stand for their chunks
    sketch_missing: str | float | None = None  # a share: first sketch the experts lacking one (mgit.ops.sketch)
    explain: bool = False  # plan the budget (its per-layer report) even without a limit
    seed: int | None = None  # None: 0 for deterministic methods, else drawn (Repository.merge)
    rng: str = "mgit"  # random methods' draws: mgit's per-tensor streams, or mergekit's (mgit.merge.rng)
    dtype: str | None = None
    out_dtype: str | None = None
    branch: str | None = None  # the commit: on a new branch (required off HEAD or without checkout)
    message: str | None = None
    checkout: bool = True  # False: create the branch only, working tree, index and HEAD untouched

    def check(self) -> MergeConfig | None:
        """What can be refused from the request alone (torch-free, nothing read): the config and
        its parameter ranges, the given parameters' ranges, the budget's form. Returns the config."""
        from mgit.merge.config import load_config
        from mgit.merge.methods.registry import check_method

        cfg = load_config(self.config) if self.config is not None else None
        if cfg is None:
            method = check_method(self.method, self.params)
            method.check_params(self.params, str(self.method))
        else:
            given = set().union(*(params for _, params in cfg.parameter_scopes()))
            method = check_method(cfg.method, given, str(self.config))
        check_rng(self.rng, method)
        if self.budget is not None:
            parse_budget(self.budget)
        if self.wants_budget:  # without a budget they choose nothing (and their module stays unloaded)
            from mgit.merge.budget.restrict import check_selection

            check_selection(self.budget_select, self.budget_fairness)
        if self.sketch_missing is not None:
            from mgit.merge.sketch.record import parse_share

            if self.budget is None:
                raise BadInputError("sketching the experts first serves a budgeted merge only: give --budget too")
            parse_share(self.sketch_missing)
        return cfg

    @property
    def wants_budget(self) -> bool:
        return self.budget is not None or self.explain


@dataclass(frozen=True)
class MergeSetup:
    """A request resolved: what the plan, the engine and the record work from."""

    method: MergeMethod
    params: dict[str, Any]  # resolved: defaults filled, expert parameters one per expert
    base_commit: str
    expert_commits: list[str]
    expert_names: list[str]
    base_snap: Snapshot
    base_ref: str | None = None  # as given (None: HEAD)
    params_for: Callable[[str], dict[str, Any]] | None = None  # per-tensor parameters (configs)
    config: dict[str, Any] | None = None  # the mergekit config as read
    dtype: str | None = None  # safetensors dtype names, as mergekit's dtype / out_dtype (given, else the config's)
    out_dtype: str | None = None
    # A method without a base (linear, passthrough) given none: the first expert's commit, whose
    # model is the reference for dtypes, chunking and non-tensor files (base_commit is then only
    # the first parent, HEAD, and nothing of it is used). None: the base is the reference.
    reference: str | None = None
    seed: int = 0  # of random methods (and of a uniform budget selection)
    # as asked: options that need no resolving are read from it where they take effect
    request: MergeRequest = field(default_factory=MergeRequest)
    stream: MergekitStream | None = None  # --rng mergekit, once executing: mergekit's draws (mgit.merge.rng)
    loras: tuple[LoraInput, ...] = ()  # the MODEL+LORA inputs: which adapter made which input commit
    # a config's tokenizer keys, applied: the record's ``tokenizer`` (mgit.ops.merge_vocab)
    tokenizer: dict[str, Any] | None = None
    # a `slices:` config: how many experts each output tensor has (they differ by slice)
    experts_of: Callable[[str], int] | None = None

    @property
    def merges_base(self) -> bool:
        """Whether the method is given the base tensor: always for a method that needs one; for
        one that may take one (nuslerp), when a base was named (no reference stands in for it)."""
        return self.method.needs_base or (self.method.base_optional and self.reference is None)

    def tensor_params(self, name: str) -> dict[str, Any]:
        """One tensor's parameters as given (a config's filters and gradients evaluated)."""
        return self.params_for(name) if self.params_for else self.params

    def resolved_params(self, name: str) -> dict[str, Any]:
        """One tensor's parameters resolved (defaults filled, one value per expert)."""
        if self.params_for is None:
            return self.params
        count = self.experts_of(name) if self.experts_of else len(self.expert_commits)
        return self.method.resolve(self.params_for(name), count)

    def result_dtype(self, base_dtype: str) -> str:
        """The merged tensor's dtype: out_dtype, else the working dtype (inputs share one dtype)."""
        return self.out_dtype or self.dtype or base_dtype
