"""A local cache of ‖a − b‖₂ for pairs of chunks that no commit's statistics pair up.

A budgeted merge ranks expert chunks by how far they are from the base's chunk at the
same place. Commits record that distance against their parent's chunks; for any other
pair (an expert several commits past the base, a base that is not the expert's parent)
the "analyze" step reads both chunks once and stores the value here. Values are exact
functions of the two chunks' bytes, so a plan does not depend on whether the cache was warm.

SQLite (standard library) keeps it safe for concurrent readers and a killed writer.
Keyed by the unordered pair: the distance is symmetric.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from pathlib import Path

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS pair_norms (a TEXT NOT NULL, b TEXT NOT NULL, l2 REAL NOT NULL, PRIMARY KEY (a, b))"
)


def _key(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a <= b else (b, a)


class PairCache:
    def __init__(self, path: Path):
        self.path = path

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, timeout=30)
        db.execute(SCHEMA)
        return db

    def get_many(self, pairs: Iterable[tuple[str, str]]) -> dict[tuple[str, str], float]:
        """The cached distances among ``pairs`` (keys as given)."""
        wanted = {_key(a, b): (a, b) for a, b in pairs}
        if not wanted or not self.path.exists():
            return {}
        out = {}
        try:
            db = self._connect()
        except sqlite3.DatabaseError:
            return {}  # a damaged cache is only a cache: recompute
        try:
            for key, given in wanted.items():
                row = db.execute("SELECT l2 FROM pair_norms WHERE a = ? AND b = ?", key).fetchone()
                if row is not None:
                    out[given] = row[0]
        except sqlite3.DatabaseError:
            return {}
        finally:
            db.close()
        return out

    def put_many(self, values: dict[tuple[str, str], float]) -> None:
        if not values:
            return
        try:
            db = self._connect()
        except sqlite3.DatabaseError:
            self.path.unlink(missing_ok=True)  # damaged: start over
            db = self._connect()
        with db:
            db.executemany(
                "INSERT OR REPLACE INTO pair_norms VALUES (?, ?, ?)",
                [(*_key(a, b), l2) for (a, b), l2 in values.items()],
            )
        db.close()
