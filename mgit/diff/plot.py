"""Heatmap of relative change: layers × module groups (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path

from mgit.diff.summary import Group
from mgit.errors import MgitError


def heatmap(groups: list[Group], path: Path, title: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import numpy as np
    except ImportError:
        raise MgitError("plotting needs matplotlib: pip install 'mgit[plot]'") from None
    layers = sorted({g.layer for g in groups if g.layer is not None})
    modules = sorted({g.module for g in groups})
    rows = ["—", *[str(n) for n in layers]] if any(g.layer is None for g in groups) else [str(n) for n in layers]
    grid = np.full((len(rows), len(modules)), np.nan)
    for g in groups:
        r = rows.index("—" if g.layer is None else str(g.layer))
        grid[r, modules.index(g.module)] = g.relative_change if g.relative_change is not None else np.nan
    fig, ax = plt.subplots(figsize=(1.2 + 1.1 * len(modules), 1.2 + 0.28 * len(rows)))
    image = ax.imshow(grid, aspect="auto", cmap="viridis", interpolation="nearest")
    ax.set_xticks(range(len(modules)), modules, rotation=30, ha="right")
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xlabel("module")
    ax.set_ylabel("layer")
    ax.set_title(title, fontsize=9)
    fig.colorbar(image, ax=ax, label="‖Δ‖ / ‖A‖")
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)
