"""The format marker of a repository (docs/format.md §1.1): ``formatversion`` in section
``[mgit]`` of ``.mgit/config``. Every writer of a repository's packs raises it to this mgit's
format first (an older reader must refuse records and manifests it cannot read rather than
misread them): the repository's own commands, and a push into another working repository."""

from __future__ import annotations

from pathlib import Path

from mgit.errors import NotARepositoryError
from mgit.graph.objects import Graph

FORMAT_VERSION = 4
# formats 1 (loose chunks), 2 (no difference deltas) and 3 (fixed-size chunks of large non-tensor
# files, no patch deltas) are read, and upgraded on the first write
READABLE_FORMATS = (1, 2, 3, 4)


def read_format(graph: Graph, where: str | Path) -> int:
    """The repository's format (no marker: format 1); refused when this mgit cannot read it."""
    try:
        version = graph.repo.get_config().get(b"mgit", b"formatversion").decode()
    except KeyError:
        version = "1"
    if version not in {str(v) for v in READABLE_FORMATS}:
        raise NotARepositoryError(
            f"{where} uses mgit format {version}; this mgit reads formats "
            f"{', '.join(map(str, READABLE_FORMATS))}: upgrade mgit"
        )
    return int(version)


def mark_format(graph: Graph, version: int = FORMAT_VERSION) -> None:
    config = graph.repo.get_config()
    config.set(b"mgit", b"formatversion", str(version).encode())
    config.write_to_path()
