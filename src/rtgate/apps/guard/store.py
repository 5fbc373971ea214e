"""The work-order store (SQLite): one row per stop, with its explanation.

Default file: ``$RTGATE_GUARD_DB``, else ``$XDG_DATA_HOME/rtgate/guard.sqlite`` (that is
``~/.local/share/rtgate/guard.sqlite``). Safe to use from several threads.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rtgate.apps.guard.paths import user_data_path

__all__ = ["WorkOrder", "WorkOrderStore", "default_db_path"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS work_orders (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    station TEXT NOT NULL,
    score REAL NOT NULL,
    stop_ts REAL NOT NULL,
    created_ts REAL NOT NULL,
    explanation TEXT NOT NULL,
    explainer TEXT NOT NULL,
    rule TEXT NOT NULL,
    facts TEXT NOT NULL
)
"""


def default_db_path() -> Path:
    """``$RTGATE_GUARD_DB``, else ``$XDG_DATA_HOME/rtgate/guard.sqlite``."""
    return user_data_path("RTGATE_GUARD_DB", "guard.sqlite")


@dataclass(frozen=True, slots=True)
class WorkOrder:
    """A maintenance ticket for one stop."""

    id: int
    station: str
    score: float
    stop_ts: float
    created_ts: float
    explanation: str
    explainer: str = ""
    rule: str = ""
    facts: str = ""

    def public(self) -> dict[str, Any]:
        """The fields ``guard orders --json`` prints."""
        keys = ("id", "station", "score", "stop_ts", "created_ts", "explanation")
        return {k: v for k, v in asdict(self).items() if k in keys}


class WorkOrderStore:
    """Work orders in a SQLite file (``":memory:"`` for a private in-memory store)."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = str(path) if path is not None else str(default_db_path())
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(_SCHEMA)

    def add(
        self,
        *,
        station: str,
        score: float,
        stop_ts: float,
        explanation: str,
        explainer: str = "",
        rule: str = "",
        facts: str = "",
        created_ts: float | None = None,
    ) -> WorkOrder:
        """Insert a work order (committed before returning) and return it."""
        created = time.time() if created_ts is None else created_ts
        row = (station, score, stop_ts, created, explanation, explainer, rule, facts)
        with self._lock:
            cur = self._db.execute(
                "INSERT INTO work_orders (station, score, stop_ts, created_ts, explanation,"
                " explainer, rule, facts) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                row,
            )
            oid = int(cur.lastrowid or 0)
        return WorkOrder(oid, *row)

    def list(self, station: str | None = None, limit: int = 1000) -> list[WorkOrder]:
        """The newest ``limit`` work orders, oldest first."""
        q = "SELECT * FROM work_orders"
        args: tuple[Any, ...] = ()
        if station is not None:
            q, args = q + " WHERE station = ?", (station,)
        q += " ORDER BY id DESC LIMIT ?"
        with self._lock:
            rows = self._db.execute(q, (*args, limit)).fetchall()
        return [WorkOrder(*r) for r in reversed(rows)]

    def close(self) -> None:
        with self._lock:
            self._db.close()
