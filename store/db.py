"""The `Store`: one DuckDB file's connection, lock, lifecycle and checkpoints, composed from store/.

The schema, writes and reads are mixins from the modules beside this one. Only store/ talks to
DuckDB. Its errors are wrapped in `StoreError` with a message a researcher can act on (locked
file, read-only path, full disk, a database written by a newer llmscope).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import numpy as np
import pyarrow as pa

from llmscope.store.codec import (
    JSON_RESULT_COLUMNS,
    decode_json,
    decode_json_many,
    results_to_arrow,
)
from llmscope.store.errors import CHECKPOINT_EVERY_S, StoreError, StoreLocked, explain
from llmscope.store.failing_list import FAILING_WHERE, FailingList
from llmscope.store.metrics_cache import MetricsCache
from llmscope.store.result_queries import ResultQueries
from llmscope.store.run_queries import ROWS_FINGERPRINT_SQL, RunQueries
from llmscope.store.run_status import _owner_alive, effective_status
from llmscope.store.schema import (
    RESULT_SCHEMA,
    SCHEMA_VERSION,
    SchemaMigrations,
    file_schema_version,
)
from llmscope.store.snapshot import NotOurWriter, WriterLock, take_snapshot
from llmscope.store.writes import StoreWrites

if TYPE_CHECKING:
    import pandas as pd

# `Store` and the names other packages import from here, where they have always been.
__all__ = [
    "FAILING_WHERE",
    "JSON_RESULT_COLUMNS",
    "RESULT_SCHEMA",
    "ROWS_FINGERPRINT_SQL",
    "SCHEMA_VERSION",
    "Store",
    "StoreError",
    "StoreLocked",
    "_owner_alive",
    "decode_json",
    "decode_json_many",
    "effective_status",
    "file_schema_version",
    "results_to_arrow",
]


class Rows:
    """Fetched rows of a statement (fetchone / fetchall like a cursor)."""

    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self._rows = rows
        self._i = 0

    def fetchone(self) -> tuple[Any, ...] | None:
        if self._i >= len(self._rows):
            return None
        self._i += 1
        return self._rows[self._i - 1]

    def fetchall(self) -> list[tuple[Any, ...]]:
        out, self._i = self._rows[self._i :], len(self._rows)
        return out


_WRITE_RESULTS = re.compile(
    r"^\s*(INSERT|UPDATE|DELETE|DROP|ALTER|CREATE|TRUNCATE|COPY)\b.*\bresults\b",
    re.IGNORECASE | re.DOTALL,
)


def _create_file(path: Path) -> None:
    """Create a database file with the current schema where none is, safely when other
    processes do the same at the same moment.

    The file is built under a name only this call uses, in the same folder, checkpointed and
    closed, then given its name with `os.link`, which refuses a name that exists: exactly one
    process's file becomes `path`, whole, and nobody removes a file another process made (the
    others find it there and open it like any existing file, waiting for the writer's lock).
    """
    tmp = path.with_name(f".{path.name}.creating-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        built = Store(tmp, _building=True)
        try:
            built.checkpoint()
        finally:
            built.close()
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process created it first: open theirs
        except OSError:
            # A file system without hard links: an exclusive create of the name, then the bytes.
            # Another process opening it during the copy is refused ("not a valid DuckDB
            # database") rather than given a file to write; a copy that fails is removed (this
            # call created it and it never held a database).
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            except FileExistsError:
                return
            try:
                with os.fdopen(fd, "wb") as out, open(tmp, "rb") as src:
                    while chunk := src.read(1 << 20):
                        out.write(chunk)
                    out.flush()
                    os.fsync(out.fileno())
            except OSError:
                path.unlink(missing_ok=True)
                raise
    except StoreError as e:  # said of the scratch name: say it of the file the user named
        raise type(e)(str(e).replace(str(tmp), str(path))) from e
    except OSError as e:
        raise explain(e, str(path), "creating the database") from e
    finally:
        for suffix in ("", ".wal"):
            try:
                Path(str(tmp) + suffix).unlink(missing_ok=True)
            except OSError:
                pass


class Store(SchemaMigrations, StoreWrites, RunQueries, ResultQueries, FailingList):
    """One DuckDB file owned by one process; thread-safe through a lock."""

    def __init__(
        self,
        path: str | Path = "llmscope.duckdb",
        *,
        read_only: bool = False,
        snapshot: bool = False,
        _building: bool = False,
    ) -> None:
        """`snapshot` (read-only only): when another process writes the file, read a private
        copy of it as of the writer's last commit instead of raising StoreLocked
        (store/snapshot.py); `snapshot_of` then says who writes it and `snapshot_stats` what
        the copy cost."""
        self.path = str(path)
        self.read_only = read_only
        self._metrics_cache: MetricsCache | None = None
        self.snapshot_of: StoreLocked | None = None
        self.snapshot_stats: dict[str, Any] = {}
        self._snapshot_dir: Path | None = None
        p = Path(self.path)
        self._lock = WriterLock(None)
        self._in_tx = False  # inside `transaction()`: writes join it instead of committing
        if read_only and not p.exists():
            raise StoreError(f"{self.path} does not exist")
        if not read_only and not p.parent.exists():
            raise StoreError(f"cannot create {self.path}: folder {p.parent} does not exist")
        # `_building`: this call builds a new file under a name only it uses (`_create_file`);
        # only such a file is ever removed again when building it fails.
        self._created = _building
        if not read_only and not _building and self.path != ":memory:" and not p.exists():
            _create_file(p)
        if not read_only and not _building and self.path != ":memory:" and p.exists():
            # A writer's statements hold the file's snapshot lock exclusively, so that a reader's
            # copy is taken between two of them (store/snapshot.py); a file being built has no readers.
            self._lock = WriterLock(self.path)
        with self._lock:
            try:
                self.con = duckdb.connect(self.path, read_only=read_only)
            except Exception as e:  # duckdb raises IOException / others; all need a clear message
                self._remove_if_created()
                err = explain(e, self.path, "opening the database")
                if not (snapshot and read_only and isinstance(err, StoreLocked)):
                    self._lock.close()
                    raise err from e
                try:
                    self._open_snapshot(err)
                except BaseException:
                    self._lock.close()
                    raise
            else:
                try:
                    self._lock.claim()
                except OSError:
                    pass  # a lock file that cannot be written: readers keep out, as from any other writer
            try:
                self._migrate()
            except BaseException:
                self._lock.close()
                self._remove_snapshot()
                raise
        self._created = False
        self._db_key = (
            f"memory:{id(self)}" if self.path == ":memory:" else str(Path(self.path).resolve())
        )
        self._forget_keys()  # another process may have written the file since this process last had it
        self._checkpointed_at = time.monotonic()
        if not read_only:
            # A checkpoint rewrites the table's open row group; at DuckDB's default (16 MiB of
            # WAL) a run of small commits rewrites it again and again (half of a write's cost).
            # Commits stay durable in the WAL; a reopened file replays it. The writes of a long
            # run are folded into the file every CHECKPOINT_EVERY_S instead (`_maybe_checkpoint`),
            # so a damaged or lost WAL costs at most that much of a session.
            self.execute("SET checkpoint_threshold = '256MiB'")

    def _open_snapshot(self, locked: StoreLocked) -> None:
        """Connect to a private copy of the file, taken between two of its writer's commits
        (StoreLocked as before when the writer is not an llmscope store that allows it)."""
        try:
            copy, self.snapshot_stats = take_snapshot(self.path, locked.pid)
        except NotOurWriter:
            raise locked from None
        self._snapshot_dir = copy.parent
        try:
            self.con = duckdb.connect(str(copy), read_only=True)
        except Exception as e:
            self._remove_snapshot()
            raise explain(e, self.path, "opening a copy of the database") from e
        self.snapshot_of = locked

    def _remove_snapshot(self) -> None:
        if self._snapshot_dir is not None:
            shutil.rmtree(self._snapshot_dir, ignore_errors=True)
            self._snapshot_dir = None

    def writing_note(self) -> str | None:
        """One line for a read of a copy (`snapshot`): that the file is still being written,
        and how many rows its running runs hold as of the copy; None for a plain read."""
        if self.snapshot_of is None:
            return None
        who = f"PID {self.snapshot_of.pid}" if self.snapshot_of.pid else "another process"
        try:
            running = self.execute(
                "SELECT r.run_id, r.suite_name, r.model, r.n_total, "
                "(SELECT count(*) FROM results x WHERE x.run_id = r.run_id) "
                "FROM runs r WHERE r.status = 'running' ORDER BY r.started_at"
            ).fetchall()
        except StoreError:
            running = []
        runs = "; ".join(
            f"run {rid} ({suite} x {model}) holds {n}/{total} rows"
            for rid, suite, model, total, n in running
        )
        return f"{self.path} is still being written ({who}); read as of its last flush" + (
            f": {runs}" if runs else ""
        )

    @property
    def metrics_cache(self) -> MetricsCache | None:
        """The metrics pipeline's cache beside this file (store/metrics_cache.py); None in memory."""
        if self.path == ":memory:":
            return None
        if self._metrics_cache is None:
            self._metrics_cache = MetricsCache(self.path)
        return self._metrics_cache

    def _remove_if_created(self) -> None:
        if self._created:
            for suffix in ("", ".wal"):
                try:
                    Path(self.path + suffix).unlink(missing_ok=True)
                except OSError:
                    pass

    def checkpoint(self) -> None:
        """Fold the write-ahead log into the file and check that it worked, so that the file
        alone holds every committed write (what a copy of the file, without its `.wal`, needs).

        Raises StoreError naming where the data is when it did not (a full disk during the
        checkpoint): the commits are then in `<db>.wal`, which the next open replays."""
        if self.read_only or self.path == ":memory:":
            return
        wal = Path(self.path + ".wal")
        with self._lock:
            try:
                self.con.execute("CHECKPOINT").fetchall()
                self._checkpointed_at = time.monotonic()
                err: str | None = None
            except duckdb.Error as e:
                err = str(e).splitlines()[0]
            try:
                left = wal.stat().st_size
            except OSError:
                left = 0
        if err is None and left == 0:
            return
        raise StoreError(
            f"could not fold the write log into {self.path} ({err or f'{left} bytes left in {wal.name}'}). "
            f"Every committed row is in {wal} (keep it beside {Path(self.path).name}; copying or "
            f"moving the .duckdb file alone loses them): free disk space, then open the file once "
            f"(`llmscope runs --db {self.path}`) to fold them in"
        )

    def _maybe_checkpoint(self) -> None:
        """After a write: fold the WAL into the file when the last checkpoint is
        CHECKPOINT_EVERY_S old (never inside a transaction; a failure is left to the final,
        checked checkpoint, since the commits stay safe in the WAL)."""
        if self._in_tx or self.read_only or self.path == ":memory:":
            return
        if time.monotonic() - self._checkpointed_at < CHECKPOINT_EVERY_S:
            return
        with self._lock:
            self._checkpointed_at = time.monotonic()
            try:
                self.con.execute("CHECKPOINT").fetchall()
            except duckdb.Error:
                pass

    def close(self) -> None:
        """Close the connection, best effort (DuckDB checkpoints on close); a writer that must
        know the file holds everything calls `checkpoint()` first."""
        with self._lock:
            if hasattr(self, "_db_key"):
                self._forget_keys()
            try:
                self.con.close()
            except duckdb.Error:
                pass
        self._remove_snapshot()
        self._lock.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- helpers --------------------------------------------------------------------------
    def execute(self, sql: str, params: Sequence[Any] | None = None) -> Rows:
        """Run a statement and fetch its rows while holding the lock.

        The connection is shared by the writer thread and readers; a result left unfetched
        would block the other thread's next statement.
        """
        with self._lock:
            if _WRITE_RESULTS.match(sql):
                self._forget_keys()
            try:
                cur = self.con.execute(sql, params or [])
                return Rows(cur.fetchall() if cur.description else [])
            except duckdb.Error as e:
                raise explain(e, self.path, "querying") from e

    def query_df(self, sql: str, params: Sequence[Any] | None = None) -> pd.DataFrame:
        with self._lock:
            if _WRITE_RESULTS.match(sql):
                self._forget_keys()
            try:
                return self.con.execute(sql, params or []).df()
            except duckdb.Error as e:
                raise explain(e, self.path, "querying") from e

    def query_arrow(self, sql: str, params: Sequence[Any] | None = None) -> pa.Table:
        """A read as an Arrow table (strings stay in Arrow buffers: a 1M-row frame of the
        metrics pipeline converts ~1 s faster than through `query_df`; analysis.queries)."""
        with self._lock:
            try:
                return self.con.sql(sql, params=list(params or [])).to_arrow_table()
            except duckdb.Error as e:
                raise explain(e, self.path, "querying") from e

    def query_numpy(self, sql: str, params: Sequence[Any] | None = None) -> dict[str, np.ndarray]:
        """A read's columns as numpy arrays (no pandas frame; NULLs as None in object arrays):
        for aggregates that go straight to numpy (analysis.sqlmetrics)."""
        with self._lock:
            try:
                res: dict[str, Any] = self.con.execute(sql, params or []).fetchnumpy()
            except duckdb.Error as e:
                raise explain(e, self.path, "querying") from e
        out: dict[str, np.ndarray] = {}
        for k, v in res.items():
            if np.ma.is_masked(v):  # np.ma.filled would write "?" into a string column
                arr = np.ma.getdata(v).astype(object)
                arr[np.ma.getmaskarray(v)] = None
                out[k] = arr
            else:
                out[k] = np.ma.getdata(v)
        return out

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """Hold the lock and group the writes inside into one transaction (all or nothing).

        Used by bulk writers (imports) so a killed import leaves no partial run behind and
        the rows are appended in a single commit. Nested use joins the outer transaction.
        Inside it, a duplicate key is an error (no ON CONFLICT fallback), so callers dedupe.
        """
        with self._lock:
            if self._in_tx:
                yield
                return
            try:
                self.con.execute("BEGIN TRANSACTION")
            except duckdb.Error as e:
                raise explain(e, self.path, "starting a transaction") from e
            self._in_tx = True
            self._lock.pause()  # uncommitted rows touch neither file: readers may copy meanwhile
            try:
                yield
            except BaseException:
                self._lock.resume()
                self._roll_back()  # keys added inside are not stored after all
                raise
            else:
                self._lock.resume()
                try:
                    self.con.execute("COMMIT")
                except duckdb.Error as e:
                    self._roll_back()
                    raise explain(e, self.path, "committing") from e
            finally:
                self._in_tx = False
