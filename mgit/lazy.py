"""Modules imported on first use, so that a light command (``--help``, ``status``, ``log``,
``branch``) does not pay for numpy, the codecs, the merge engine or rich's tables at start-up.

A :class:`LazyModule` stands where the module would be bound and imports it, by the ordinary
``importlib.import_module`` (thread-safe: the import system's per-module locks), when one of
its attributes is first read; nothing is put in ``sys.modules`` before that. (importlib's own
LazyLoader registers a half-made module there, which on Python 3.11 other threads can read
before it has run.) Callers keep a real import under ``TYPE_CHECKING`` for the type checker."""

from __future__ import annotations

import importlib
from typing import Any


class LazyModule:
    """Module ``name``'s attributes, importing it on the first one read; for a package, a name
    it does not define is its submodule of that name (``lazy_module("mgit.ops").stage``)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        module = importlib.import_module(self._name)
        try:
            return getattr(module, attr)
        except AttributeError:
            if not hasattr(module, "__path__"):  # not a package: no submodule to look for
                raise
            return importlib.import_module(f"{self._name}.{attr}")

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"


def lazy_module(name: str) -> Any:
    """Module ``name``, imported when one of its attributes is first read."""
    return LazyModule(name)
