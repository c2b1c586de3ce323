"""Where a random method's draws come from (``mgit merge --rng``).

``mgit`` (the default): each tensor draws from its own generator, seeded from (seed, tensor name),
so a merge is the same whatever order or parallelism its tensors run in.

``mergekit``: the draws ``mergekit-yaml --random-seed SEED`` makes on the CPU. mergekit seeds
torch's global generator once (transformers' ``set_seed``) and its executor merges the tensors
one after another, in the order of their names (its scheduler sorts tasks by their group label,
the tensor's name), each expert in the config's order drawing one 32-bit number per element
(``torch.bernoulli`` on the CPU) when its sparsifier draws at all. mgit merges tensors in another
order, skips those it carries, and runs several at once, so each tensor gets the state mergekit's
generator is in when it reaches that tensor: the draws of every tensor before it are replayed
once, in mergekit's order (cheaper than the draws themselves: no probabilities, no mask), and
the state at each tensor kept (5 kB each). docs/merging.md, "Random methods and seeds".
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from mgit.errors import BadInputError
from mgit.model.dtypes import lookup

if TYPE_CHECKING:
    import torch

    from mgit.merge.methods.base import MergeMethod
    from mgit.merge.plan import MergePlan
    from mgit.merge.request import MergeSetup

RNGS = ("mgit", "mergekit")
REPLAY_BLOCK = 1 << 20  # numbers drawn at a time while replaying (bounded scratch)


def check_rng(rng: object, method: MergeMethod | None = None) -> None:
    """The rng is one mgit knows, and with ``mergekit`` the method's draws are ones the replay
    reproduces (one line otherwise)."""
    if rng not in RNGS:
        raise BadInputError(f"unknown rng {rng!r} (known: {', '.join(RNGS)})")
    if rng == "mergekit" and method is not None and method.random and not method.replays_mergekit_draws:
        raise BadInputError(
            f"--rng mergekit: {method.name}'s draws are not mergekit-yaml's to replay "
            "(only DARE's and DELLA's are); use --rng mgit"
        )


@dataclass(frozen=True)
class TensorDraws:
    """What mergekit draws for one tensor: ``numbers`` 32-bit numbers from the generator per
    expert that draws, ``experts`` of them."""

    name: str
    numbers: int
    experts: int


def mergekit_order(plan: MergePlan, setup: MergeSetup) -> list[TensorDraws]:
    """The tensors mergekit's executor merges, in its order (by name), with their draws: one
    number per element for each expert present whose decision draws (:meth:`MergeMethod.draws`
    with the tensor's resolved parameters). Tensors that are not floating are copied by both
    tools and draw nothing; an expert lacking the tensor (``--allow-missing``) is not one of
    mergekit's inputs for it."""
    method, order = setup.method, []
    for tp in sorted(plan.tensors, key=lambda t: t.name):
        dtype = lookup(tp.base.dtype)
        if dtype is None or not dtype.mergeable:
            continue
        params = setup.resolved_params(tp.name)
        drawing = sum(1 for k in range(len(tp.experts)) if k not in tp.missing and method.draws(params, k))
        order.append(TensorDraws(tp.name, math.prod(tp.base.shape), drawing))
    return order


class MergekitStream:
    """The state of mergekit's global generator at each tensor, replayed on first use (once,
    whichever thread asks first)."""

    def __init__(self, seed: int, order: Sequence[TensorDraws]):
        self.seed, self.order = seed, list(order)
        self._lock = threading.Lock()
        self._states: dict[str, torch.Tensor] | None = None

    def generator(self, name: str) -> torch.Generator:
        """A generator in the state mergekit's is in when it starts drawing for tensor ``name``."""
        import torch

        with self._lock:
            if self._states is None:
                self._states = replay(self.seed, self.order)
        return torch.Generator().set_state(self._states[name])


def replay(seed: int, order: Sequence[TensorDraws]) -> dict[str, torch.Tensor]:
    """Each tensor's generator state, from ``torch.manual_seed(seed)`` on, the draws of the
    tensors before it made. One bernoulli draw on the CPU takes one 32-bit number of torch's
    mt19937, as does ``random_`` on int32 (tests/merge/test_rng.py checks both)."""
    import torch

    from mgit.merge.sparsify import seeded_generator

    generator = seeded_generator(seed)  # as torch.manual_seed(seed) leaves torch's own
    scratch = torch.empty(0, dtype=torch.int32)
    states = {}
    for draws in order:
        states[draws.name] = generator.get_state()
        left = draws.numbers * draws.experts
        while left:
            count = min(left, REPLAY_BLOCK)
            if scratch.numel() != count:
                scratch = torch.empty(count, dtype=torch.int32)
            scratch.random_(generator=generator)
            left -= count
    return states


def with_draws(plan: MergePlan, setup: MergeSetup) -> MergeSetup:
    """The setup to execute ``plan`` with: for a random method under ``--rng mergekit``, one that
    holds mergekit's stream (:func:`tensor_generator` reads it)."""
    if not setup.method.random or setup.request.rng != "mergekit":
        return setup
    return replace(setup, stream=MergekitStream(setup.seed, mergekit_order(plan, setup)))


def tensor_generator(setup: MergeSetup, name: str) -> torch.Generator | None:
    """The generator tensor ``name`` draws from (None for a method that draws nothing)."""
    from mgit.merge.sparsify import seeded_generator

    if not setup.method.random:
        return None
    if setup.request.rng == "mergekit":
        assert setup.stream is not None, "a merge under --rng mergekit executes with_draws()"
        return setup.stream.generator(name)
    return seeded_generator(setup.seed, name)
