"""Choosing, per expert tensor, among skip / a stored sketch's prefix / its exact chunks: the planner
over resolutions (a multiple-choice knapsack, ``knapsack.choose_options``).

The plan with sketches and the plan without are both made and the one capturing more is kept,
so offering sketches never lowers what a plan captures. The groups, their options and the bound:
docs/merging.md, "Notes from the code".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Set
from dataclasses import dataclass

from mgit.merge.budget.importance import Candidate, choose, left_after_forced
from mgit.merge.budget.knapsack import Item, choose_options, options_bound
from mgit.merge.sketch.use import SketchOffer, SketchUse

EXACT = -1  # a group's option reading exact chunks (sketch levels are ≥ 1)
Uses = dict[tuple[int, int], SketchUse]  # (tensor index, expert) → the sketch prefix read instead of chunks


@dataclass
class Group:
    expert: int
    options: list[Item]
    levels: list[int]  # per option: the sketch prefix's level, or EXACT
    reads: list[tuple[int, ...]]  # per option: the candidates (indexes) it reads exactly
    members: list[int]  # indexes into the candidates this group decides (a sketch stands for them all)


@dataclass
class Choice:
    taken: list[bool]  # per candidate: read
    uses: Uses
    value: float  # what it captures, Σ (a_k‖Δ‖)² units, summed exactly (math.fsum)


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
            groups.append(_sketched(cands, members, offer))
            continue
        for n in members:
            if cands[n].norm is not None:
                groups.append(Group(cands[n].expert, [_item(cands[n])], [EXACT], [(n,)], [n]))
    return groups


def _item(c: Candidate) -> Item:
    return Item(c.cost, c.importance**2)


def _sketched(cands: list[Candidate], members: list[int], offer: SketchOffer) -> Group:
    """A sketched expert tensor's options: each sketch prefix, and the best j exact chunks for each j."""
    weight = cands[members[0]].weight
    group = Group(cands[members[0]].expert, [], [], [], members)
    for level, cost, captured in offer.options():
        group.options.append(Item(cost, weight * weight * captured))
        group.levels.append(level)
        group.reads.append(())
    densest = sorted(members, key=lambda n: -(_item(cands[n]).value / cands[n].cost if cands[n].cost else math.inf))
    for j in range(1, len(densest) + 1):
        chosen = tuple(densest[:j])
        group.options.append(Item(sum(cands[n].cost for n in chosen), math.fsum(_item(cands[n]).value for n in chosen)))
        group.levels.append(EXACT)
        group.reads.append(chosen)
    return group


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
        raised.append(
            [Item(o.cost - c0, o.value - v0) if o.cost > c0 and o.value > v0 else Item(0, 0.0) for o in options[n]]
        )
    for n, pick in enumerate(choose_options(raised, limit - spent)):
        if pick >= 0 and raised[n][pick].value > 0:
            chosen[n] = pick
    return chosen


def _most_valuable(options: list[Item]) -> int:
    """The index of the option worth most (the cheapest among equals)."""
    return max(range(len(options)), key=lambda n: (options[n].value, -options[n].cost))


def choose_with_sketches(
    cands: list[Candidate],
    offers: Mapping[tuple[int, int], SketchOffer],
    first: Set[int],
    limit: int,
    fairness: str,
) -> Choice:
    """Which candidate chunks to read and which sketch prefixes instead, within ``limit``: the
    plan without sketches (:func:`~mgit.merge.budget.importance.choose`), unless the planner over
    resolutions captures more — those of unknown importance and ``first`` read first, then the
    groups' choice. Every exact chunk affordable: the exact merge, bit for bit."""
    exact = choose(cands, limit, "importance", 0, fairness)  # the seed serves "uniform" only
    plain = Choice(exact, {}, captured(cands, exact, {}))
    if all(exact):
        return plain
    left = left_after_forced(cands, limit) - sum(cands[n].cost for n in first)
    taken, uses = [c.norm is None or n in first for n, c in enumerate(cands)], {}
    groups = groups_of(cands, offers, skip=first)
    for g, pick in zip(groups, choose_resolutions(groups, left, fairness), strict=True):
        if pick < 0:
            continue
        for n in g.reads[pick]:
            taken[n] = True
        if g.levels[pick] != EXACT:
            head = cands[g.members[0]]
            key = (head.tensor, head.expert)
            uses[key] = offers[key].use(g.levels[pick], tuple(cands[n].chunk for n in g.members))
    mixed = Choice(taken, uses, captured(cands, taken, uses))
    return mixed if mixed.value > plain.value else plain


def captured(cands: list[Candidate], taken: list[bool], uses: Uses) -> float:
    """What reading the ``taken`` candidates and the sketch prefixes of ``uses`` captures."""
    weight = {(c.tensor, c.expert): c.weight for c in cands}
    chunks = [c.importance**2 for c, take in zip(cands, taken, strict=True) if take and c.norm is not None]
    return math.fsum(chunks + [weight[key] ** 2 * use.captured for key, use in uses.items()])


def best_share_with_sketches(
    cands: list[Candidate], offers: Mapping[tuple[int, int], SketchOffer], limit: int
) -> float:
    """The largest captured share any choice among chunks and sketch prefixes can reach within
    ``limit``: the LP relaxation over the groups' hulls (candidates of unknown importance read
    first). A group's exact prefixes bound every subset of its chunks, so this bounds the plan
    without sketches too."""
    energy = math.fsum(c.importance**2 for c in cands if c.norm is not None)
    if energy == 0 or sum(c.cost for c in cands) <= limit:
        return 1.0
    left = max(0, limit - sum(c.cost for c in cands if c.norm is None))
    return min(1.0, options_bound([g.options for g in groups_of(cands, offers)], left) / energy)
