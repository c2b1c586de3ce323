"""Choosing, per expert tensor, among skip / a stored sketch's rank prefix / the exact chunks:
the planner over resolutions (a multiple-choice knapsack, :func:`~mgit.merge.budget.knapsack.choose_options`).

Each expert tensor with a stored sketch (mgit.ops.sketch) is one group: its options are every
rank prefix of the sketch (cost: the blocks' stored bytes; value: (a_k‖Δ̂_r‖)², what the prefix
captures of (a_k‖Δ‖)², the factors being orthogonal) and its exact chunks together (cost: their
reads; value: Σ (a_k‖Δ_c‖)²). Every other candidate chunk is a group of its own (take or skip),
as without sketches. A fine-tune's delta is close to low rank, so at a small budget a sketch of
every tensor captures far more than whole chunks of a few (docs/merging.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass

from mgit.merge.budget.importance import Candidate
from mgit.merge.budget.knapsack import Item, choose_options
from mgit.merge.sketch.use import SketchOffer

EXACT = -1  # a group's option standing for the tensor's exact chunks (sketch ranks are ≥ 1)


@dataclass
class Group:
    expert: int
    options: list[Item]
    ranks: list[int]  # per option: the sketch rank, or EXACT
    members: list[int]  # indexes into the candidates this group decides


def groups_of(
    cands: list[Candidate], offers: Mapping[tuple[int, int], SketchOffer], skip: Set[int] = frozenset()
) -> list[Group]:
    """The choice's groups: one per sketched expert tensor, one per other candidate chunk.
    Candidates of unknown importance (always read) and those in ``skip`` are in none."""
    by_tensor: dict[tuple[int, int], list[int]] = {}
    for n, c in enumerate(cands):
        if n not in skip:
            by_tensor.setdefault((c.tensor, c.expert), []).append(n)
    groups = []
    for key, members in by_tensor.items():
        offer = offers.get(key)
        if offer is not None and all(cands[n].norm is not None for n in members):
            weight = cands[members[0]].weight
            exact = Item(sum(cands[n].cost for n in members), sum(cands[n].importance ** 2 for n in members))
            options = [Item(cost, weight * weight * captured) for _, cost, captured in offer.options()]
            ranks = [rank for rank, _, _ in offer.options()]
            groups.append(Group(key[1], [*options, exact], [*ranks, EXACT], members))
            continue
        for n in members:
            if cands[n].norm is not None:
                groups.append(Group(cands[n].expert, [Item(cands[n].cost, cands[n].importance ** 2)], [EXACT], [n]))
    return groups


def choose_resolutions(groups: list[Group], limit: int, fairness: str) -> list[int]:
    """Each group's chosen option (-1: none) within ``limit`` bytes; ``fairness="per-expert"``:
    each expert's share of the budget (its share of the exact bytes) on its own groups first,
    then what is left on raising any group's choice (see importance._per_expert)."""
    options = [g.options for g in groups]
    if fairness != "per-expert":
        return choose_options(options, limit)
    full = [max((o.cost for o in g.options), default=0) for g in groups]
    total = sum(full)
    if total <= limit:
        return [_most_valuable(g.options) for g in groups]
    chosen, spent = [-1] * len(groups), 0
    for k in sorted({g.expert for g in groups}):
        mine = [n for n, g in enumerate(groups) if g.expert == k]
        share = sum(full[n] for n in mine) * limit // total
        for n, pick in zip(mine, choose_options([options[n] for n in mine], share), strict=True):
            chosen[n] = pick
            spent += options[n][pick].cost if pick >= 0 else 0
    raised = []
    for n, pick in enumerate(chosen):
        c0, v0 = (options[n][pick].cost, options[n][pick].value) if pick >= 0 else (0, 0.0)
        raised.append([Item(o.cost - c0, o.value - v0) if o.cost > c0 and o.value > v0 else Item(0, 0.0)
                       for o in options[n]])  # fmt: skip
    for n, pick in enumerate(choose_options(raised, limit - spent)):
        if pick >= 0 and raised[n][pick].value > 0:
            chosen[n] = pick
    return chosen


def _most_valuable(options: list[Item]) -> int:
    """The index of the option worth most (the cheapest among equals)."""
    return max(range(len(options)), key=lambda n: (options[n].value, -options[n].cost))
