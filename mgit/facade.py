"""How the facade (mgit.repo.Repository) forwards to an operation of mgit.ops: each method is
made on first access, when its operation's module is imported (mgit.lazy), and shows the
operation's signature (``self`` first) and docstring."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, cast

if TYPE_CHECKING:
    from mgit.context import Context
    from mgit.repo import Repository

P = ParamSpec("P")
R = TypeVar("R")
Operation = Callable[Concatenate["Context", P], R]


def forward(get_op: Callable[[], Operation[P, R]]) -> Callable[Concatenate[Repository, P], R]:
    """A facade method: the operation ``get_op()`` returns, called on the repository's context."""
    return cast("Callable[Concatenate[Repository, P], R]", _Forward(get_op, reading=False))


def forward_reading(get_op: Callable[[], Operation[P, R]]) -> Callable[Concatenate[Repository, P], R]:
    """As :func:`forward`, within ``Context.reading()``: in a partial clone the command's reads may
    fetch chunks, so it holds the lock and publishes what it fetched when done."""
    return cast("Callable[Concatenate[Repository, P], R]", _Forward(get_op, reading=True))


class _Forward:
    """A placeholder on the class that makes the method when first looked up, then replaces
    itself with it."""

    def __init__(self, get_op: Callable[[], Callable[..., Any]], reading: bool):
        self._get_op, self._reading, self._name = get_op, reading, ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    def __get__(self, instance: object, owner: type) -> Any:
        method = _method(self._get_op(), self._reading)  # two threads may both make it: the same method
        setattr(owner, self._name, method)
        return method.__get__(instance, owner)


def _method(op: Callable[..., R], reading: bool) -> Callable[..., R]:
    @functools.wraps(op)
    def method(self: Repository, /, *args: Any, **kwargs: Any) -> R:
        if not reading:
            return op(self.ctx, *args, **kwargs)
        with self.ctx.reading():
            return op(self.ctx, *args, **kwargs)

    sig = inspect.signature(op)  # help() and inspect.signature show the operation's parameters, self first
    first, *rest = sig.parameters.values()
    method.__signature__ = sig.replace(parameters=[first.replace(name="self", annotation=first.empty), *rest])  # type: ignore[attr-defined]
    return method
