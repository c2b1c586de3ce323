"""The parameters of a ``slices:`` merge's output tensors, with mergekit's precedence (its
parameter_resolver): the slice's source for that model, then the slice, the module
(``modules:``), the config's ``parameters``; the first whose setting applies to the tensor wins
(a filter matching nothing falls through to the next). Expert parameters' filters see the
source tensor's name, global ones the output tensor's, as mergekit's do."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from mgit.errors import BadInputError, UnknownParameterError
from mgit.merge.config import Setting, evaluate
from mgit.merge.params import Param, Scope
from mgit.merge.slices import OutputSlice, OutputTensor

if TYPE_CHECKING:
    from mgit.merge.methods.base import MergeMethod


def inputs_of(ot: OutputTensor, takes_base: bool) -> list[int]:
    """Indexes of the tensor's sources merged as experts: all but the base, when the method takes one."""
    return [k for k in range(len(ot.sources)) if not (takes_base and k == ot.base)]


def first_set(scopes: Sequence[Mapping[str, Setting]], name: str, tensor: str, t: float) -> Any:
    """The value of the first scope whose setting of ``name`` applies to ``tensor`` (None: none)."""
    for scope in scopes:
        if name in scope:
            value = evaluate(scope[name], tensor, t)
            if value is not None:
                return value
    return None


def tensor_parameters(
    method: MergeMethod,
    slices: Sequence[OutputSlice],
    module: Mapping[str, Setting],
    config: Mapping[str, Setting],
    takes_base: bool,
) -> Callable[[OutputTensor], dict[str, Any]]:
    """output tensor → its parameters as mgit.merge.config.tensor_parameters gives them (global
    ones as values, expert ones as one value per expert: :func:`inputs_of`), resolved with
    mergekit's precedence."""
    known = {p.name for p in method.params}
    given = set(config) | set(module)
    given |= {k for s in slices for k in s.parameters} | {k for s in slices for x in s.sources for k in x.parameters}
    unknown = sorted(given - known)
    if unknown:
        raise UnknownParameterError(
            f"{method.name}: unknown parameter(s) {', '.join(unknown)} (accepted: {', '.join(sorted(known))})"
        )

    def params_for(ot: OutputTensor) -> dict[str, Any]:
        piece = slices[ot.slice]
        shared = (piece.parameters, module, config)
        out: dict[str, Any] = {}
        for p in method.params:
            if p.scope is Scope.GLOBAL:
                value = first_set(shared, p.name, ot.name, ot.t)
            else:
                value = _per_expert(p, ot, piece, shared, takes_base)
            if value is not None:
                out[p.name] = value
        return out

    return params_for


def _per_expert(
    p: Param, ot: OutputTensor, piece: OutputSlice, shared: tuple[Mapping[str, Setting], ...], takes_base: bool
) -> list[Any] | None:
    """One expert parameter's value per expert of ``ot`` (None: set for none of them); the
    filters see each source's own tensor name."""
    inputs = inputs_of(ot, takes_base)
    values = []
    for k in inputs:
        src = ot.sources[k]
        own = tuple(x.parameters for x in piece.sources if x.model == src.model)
        values.append(first_set(own + shared, p.name, src.tensor, ot.t))
    if all(v is None for v in values):
        return None
    if any(v is None for v in values):
        if p.required:
            missing = [ot.sources[k].model for k, v in zip(inputs, values, strict=True) if v is None]
            raise BadInputError(f"{p.name} is not set for {', '.join(missing)} (tensor {ot.name!r})")
        values = [p.default if v is None else v for v in values]
    return values
