"""What the CLI prints, as functions of result objects: every ``--json`` document (schema
name first) and every table and multi-line text. Nothing here reads a repository or writes
to a stream: a text view returns a ``Printout`` that the command prints (``CliState.emit``),
so the same view renders identically wherever it is called, and a test can look at it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Stream = Literal["out", "err"]


@dataclass
class Printout:
    """Rendered output: ``console.print`` calls in order, each for stdout or stderr."""

    items: list[tuple[Stream, tuple[Any, ...], dict[str, Any]]] = field(default_factory=list)

    def out(self, *objects: Any, **kwargs: Any) -> None:
        self.items.append(("out", objects, kwargs))

    def err(self, *objects: Any, **kwargs: Any) -> None:
        self.items.append(("err", objects, kwargs))

    def extend(self, other: Printout) -> Printout:
        self.items.extend(other.items)
        return self


def document(schema: str, payload: dict) -> dict:
    """A ``--json`` document: its schema name first, then the payload."""
    return {"schema": schema, **payload}
