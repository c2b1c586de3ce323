"""The benchmark tests' marker: ``bench_smoke`` runs a benchmark script end to end at a tiny size
(tens of seconds, no peer installed from the network); select with ``-m bench_smoke``, leave out with
``-m 'not bench_smoke'``."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "bench_smoke: a benchmark script run end to end at a tiny size")
