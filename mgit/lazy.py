"""Modules imported on first use, so that a light command (``--help``, ``status``, ``log``,
``branch``) does not pay for numpy, the codecs, the merge engine or rich's tables at start-up.
Python 3.11 has no lazy import statement; importlib's LazyLoader is the standard library's
way. Callers keep a real import under ``TYPE_CHECKING`` so the type checker sees the module."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType


def lazy_module(name: str) -> ModuleType:
    """Module ``name``, its code run when one of its attributes is first read."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ImportError(f"no module named {name!r}", name=name)
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    parent, _, child = name.rpartition(".")
    if parent:  # as an import does: the package names its submodule (``mgit.ops.checkout``)
        setattr(sys.modules[parent], child, module)
    return module
