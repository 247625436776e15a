"""The metrics cache beside a database: `<db>.metrics.sqlite`.

Computed metrics (analysis/metrics.py `run_metrics`) are kept here, not in the DuckDB file,
so that reading a run never writes the database: `llmscope report`, `compare`, the runs list
and the TUI open the DuckDB file read-only, and a read-only opener never blocks (or is
blocked by) another reader. DuckDB admits one read-write process *or* many read-only ones per
file; writing a cache entry into the file would lock out every other window for as long as
the write took, and would change the file a researcher only read.

SQLite (standard library) in WAL mode lets any number of processes read while one writes,
each write a short transaction; a writer that finds the file busy for more than a moment
skips the entry (a cache costs speed, never a number). Entries are keyed by run, the
configuration that decides the numbers (grouping, bootstrap, metrics code, the run's record)
and the run's rows fingerprint (count, last seq, last write time, errors, sum of `correct`),
so an entry is read only for the very rows it was computed from, even if the database was
replaced by another file of the same name. An unreadable or foreign sidecar is replaced.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

SUFFIX = ".metrics.sqlite"
_SCHEMA = 1
_BUSY_S = 0.5  # longest wait for another process's write; then the entry is skipped


def sidecar_path(db: str | Path) -> Path:
    p = Path(db)
    return p.with_name(p.name + SUFFIX)


def _plain(o: Any) -> Any:
    """numpy scalars as Python numbers (NaN stays NaN: JSON text written and read here only)."""
    return o.item() if hasattr(o, "item") else str(o)


class MetricsCache:
    """Cache entries of one database file; every call opens and closes its own connection."""

    def __init__(self, db: str | Path) -> None:
        self.path = sidecar_path(db)
        self.last_error: str | None = None  # why the last write was skipped (tests, debugging)

    @contextlib.contextmanager
    def _connect(self, create: bool) -> Iterator[sqlite3.Connection | None]:
        if not create and not self.path.exists():
            yield None
            return
        con = sqlite3.connect(self.path, timeout=_BUSY_S, isolation_level=None)
        try:
            con.execute("PRAGMA journal_mode=WAL")
            if create:
                self._ensure_schema(con)
            yield con
        finally:
            con.close()

    def _ensure_schema(self, con: sqlite3.Connection) -> None:
        v = con.execute("PRAGMA user_version").fetchone()[0]
        if v == _SCHEMA:
            return
        con.execute("BEGIN IMMEDIATE")
        try:
            con.execute("DROP TABLE IF EXISTS entries")
            con.execute("DROP TABLE IF EXISTS frames")
            con.execute(
                "CREATE TABLE entries (run_id TEXT, config TEXT, fingerprint TEXT, headline TEXT, "
                "payload TEXT, written_at REAL, PRIMARY KEY (run_id, config))"
            )
            con.execute(
                "CREATE TABLE frames (run_id TEXT, config TEXT, name TEXT, data BLOB, "
                "PRIMARY KEY (run_id, config, name))"
            )
            con.execute(f"PRAGMA user_version = {_SCHEMA}")
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise

    # -- reads -----------------------------------------------------------------------------
    def get(
        self, run_id: str, config: str, fingerprint: str
    ) -> tuple[dict[str, Any], dict[str, bytes]] | None:
        """(payload, frames as Arrow IPC bytes) of the entry for exactly these rows, or None."""
        try:
            with self._connect(create=False) as con:
                if con is None:
                    return None
                row = con.execute(
                    "SELECT payload FROM entries WHERE run_id = ? AND config = ? AND fingerprint = ?",
                    [run_id, config, fingerprint],
                ).fetchone()
                if row is None:
                    return None
                frames = dict(
                    con.execute(
                        "SELECT name, data FROM frames WHERE run_id = ? AND config = ?",
                        [run_id, config],
                    ).fetchall()
                )
        except sqlite3.Error:
            return None  # busy past the wait, damaged, another layout: recomputed
        payload = json.loads(row[0])
        if not all(n in frames for n in payload.get("frames") or []):
            return None
        return payload, frames

    def headlines(self, fingerprints: Mapping[str, str]) -> dict[str, dict[str, Any]]:
        """run_id -> the headline of its newest entry for its current rows fingerprint."""
        if not fingerprints:
            return {}
        try:
            with self._connect(create=False) as con:
                if con is None:
                    return {}
                rows = con.execute(
                    "SELECT run_id, fingerprint, headline FROM entries ORDER BY written_at"
                ).fetchall()
        except sqlite3.Error:
            return {}
        out: dict[str, dict[str, Any]] = {}
        for rid, fp, head in rows:
            if fingerprints.get(rid) == fp and head:
                h = json.loads(head)
                if isinstance(h, dict):
                    out[rid] = h
        return out

    # -- writes ----------------------------------------------------------------------------
    def put(
        self,
        run_id: str,
        config: str,
        fingerprint: str,
        payload: dict[str, Any],
        frames: Mapping[str, bytes],
    ) -> bool:
        """Store an entry (replacing this run's entries for other rows); False when skipped."""
        text = json.dumps(payload, default=_plain)
        head = json.dumps(payload.get("headline"), default=_plain)
        for attempt in (0, 1):
            try:
                with self._connect(create=True) as con:
                    assert con is not None
                    con.execute("BEGIN IMMEDIATE")
                    try:
                        # entries of this run for other rows can never be read again
                        con.execute(
                            "DELETE FROM frames WHERE run_id = ? AND config IN "
                            "(SELECT config FROM entries WHERE run_id = ? AND fingerprint <> ?)",
                            [run_id, run_id, fingerprint],
                        )
                        con.execute(
                            "DELETE FROM entries WHERE run_id = ? AND fingerprint <> ?",
                            [run_id, fingerprint],
                        )
                        con.execute(
                            "DELETE FROM frames WHERE run_id = ? AND config = ?", [run_id, config]
                        )
                        con.execute(
                            "INSERT OR REPLACE INTO entries VALUES (?, ?, ?, ?, ?, ?)",
                            [run_id, config, fingerprint, head, text, time.time()],
                        )
                        con.executemany(
                            "INSERT INTO frames VALUES (?, ?, ?, ?)",
                            [(run_id, config, n, sqlite3.Binary(b)) for n, b in frames.items()],
                        )
                        con.execute("COMMIT")
                    except BaseException:
                        con.execute("ROLLBACK")
                        raise
                self.last_error = None
                return True
            except sqlite3.OperationalError as e:
                self.last_error = str(e)
                if "locked" in str(e) or "busy" in str(e) or attempt:
                    return False  # another process is writing: this entry is recomputed next time
                if not self._discard():
                    return False
            except sqlite3.DatabaseError as e:  # not a database / damaged: start it again
                self.last_error = str(e)
                if attempt or not self._discard():
                    return False
            except OSError as e:  # a read-only folder, a full disk
                self.last_error = str(e)
                return False
        return False

    def _discard(self) -> bool:
        """Remove a sidecar that cannot be used (it holds only copies of computable numbers)."""
        try:
            for suffix in ("", "-wal", "-shm"):
                Path(str(self.path) + suffix).unlink(missing_ok=True)
        except OSError:
            return False
        return True
