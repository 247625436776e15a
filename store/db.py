"""The DuckDB store: one connection, ordered migrations, batched Arrow writes.

Only this module talks to DuckDB. Its errors are wrapped in `StoreError` with a
message a researcher can act on (locked file, read-only path, full disk, a
database written by a newer llmscope).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import os
import re
import secrets
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import zstandard

from llmscope.engine.types import Item, ItemDetail, Result
from llmscope.store.metrics_cache import MetricsCache

SCHEMA_VERSION = 5

MIGRATIONS: list[tuple[int, str]] = [
    (
        1,
        """
        CREATE TABLE suites (
            suite_id VARCHAR PRIMARY KEY,
            name VARCHAR NOT NULL,
            task VARCHAR NOT NULL,
            spec VARCHAR NOT NULL,          -- JSON
            source VARCHAR,
            n_items INTEGER,
            created_at TIMESTAMP
        );
        CREATE TABLE items (
            suite_id VARCHAR NOT NULL,
            item_id VARCHAR NOT NULL,
            idx INTEGER NOT NULL,
            text VARCHAR,
            gold VARCHAR,
            options VARCHAR,               -- JSON list
            fields VARCHAR,                -- JSON object: every field of the item
            PRIMARY KEY (suite_id, item_id)
        );
        CREATE TABLE runs (
            run_id VARCHAR PRIMARY KEY,
            suite_id VARCHAR NOT NULL,
            suite_name VARCHAR,
            task VARCHAR,
            model VARCHAR,
            model_path VARCHAR,
            model_hash VARCHAR,
            backend VARCHAR,
            dtype VARCHAR,
            device VARCHAR,
            batch_size INTEGER,
            template_hash VARCHAR,
            seed BIGINT,
            options VARCHAR,               -- JSON: task + backend options (part of the run identity)
            versions VARCHAR,              -- JSON: llmscope / torch / transformers / ...
            meta VARCHAR,                  -- JSON: anything else (retries, tokens, warnings)
            config_hash VARCHAR,
            n_total INTEGER,
            n_done INTEGER DEFAULT 0,
            n_errors INTEGER DEFAULT 0,
            started_at TIMESTAMP,
            updated_at TIMESTAMP,
            ended_at TIMESTAMP,
            status VARCHAR
        );
        CREATE TABLE results (
            run_id VARCHAR NOT NULL,
            item_id VARCHAR NOT NULL,
            variant VARCHAR NOT NULL,
            seq BIGINT,                    -- order of arrival within the run
            prompt VARCHAR,
            probs VARCHAR,                 -- JSON: answer -> probability
            p_yes DOUBLE,
            p_no DOUBLE,
            other DOUBLE,
            top_tokens VARCHAR,            -- JSON list of {token, id, prob}
            option_scores VARCHAR,         -- JSON: option -> {method: score}
            prediction VARCHAR,
            gold VARCHAR,
            correct DOUBLE,
            confidence DOUBLE,
            n_tokens INTEGER,
            latency_ms DOUBLE,
            error VARCHAR,
            extra VARCHAR,                 -- JSON: task-specific trace
            written_at TIMESTAMP,
            PRIMARY KEY (run_id, item_id, variant)
        );
        """,
    ),
    (
        2,
        """
        -- Derived per-run analyses that are expensive to recompute (e.g. ProbEval cluster
        -- tables); always rebuilt from `results`, never the source of truth.
        CREATE TABLE analyses (
            run_id VARCHAR NOT NULL,
            kind VARCHAR NOT NULL,
            payload VARCHAR NOT NULL,      -- JSON
            computed_at TIMESTAMP,
            PRIMARY KEY (run_id, kind)
        );
        """,
    ),
    (
        3,
        """
        -- The run record (issue 19): how to rebuild the backend, who is writing the run, and
        -- why it failed. A `running` run whose owner is gone reads as `interrupted`.
        ALTER TABLE runs ADD COLUMN backend_config VARCHAR;   -- JSON: engine.config.BackendConfig (no key)
        ALTER TABLE runs ADD COLUMN owner_pid INTEGER;
        ALTER TABLE runs ADD COLUMN owner_host VARCHAR;
        ALTER TABLE runs ADD COLUMN heartbeat_at TIMESTAMP;
        ALTER TABLE runs ADD COLUMN error VARCHAR;
        """,
    ),
    (
        4,
        # Bulk writes (issue 17): `results` loses its primary key (an ART index insert per row
        # cost ~20% of a write); the key is kept unique by the store's batched key check
        # (see `_KeyIndex`). Common per-item values become real columns; the JSON columns keep
        # only open shapes. Old rows are copied; promoted columns are filled by `PROMOTE_SQL`.
        """
        CREATE TABLE results_v4 (
            run_id VARCHAR NOT NULL,
            item_id VARCHAR NOT NULL,
            variant VARCHAR NOT NULL,
            seq BIGINT,                    -- order of arrival within the run
            prompt VARCHAR,
            probs VARCHAR,                 -- JSON: answer -> probability (open: the task's answers)
            p_yes DOUBLE,
            p_no DOUBLE,
            other DOUBLE,                  -- probability mass outside the answers
            top_tokens VARCHAR,            -- JSON list of {token, id, prob}
            option_scores VARCHAR,         -- JSON: option -> {method: score} (open)
            prediction VARCHAR,            -- the chosen answer / option
            gold VARCHAR,
            correct DOUBLE,
            confidence DOUBLE,
            n_tokens INTEGER,
            latency_ms DOUBLE,
            error VARCHAR,
            extra VARCHAR,                 -- JSON: task-specific trace (open)
            written_at TIMESTAMP,
            p_chosen DOUBLE,               -- probs[prediction]: the chosen answer's probability
            choice_method VARCHAR          -- extra.choice_method (how a choice was made)
        );
        INSERT INTO results_v4 SELECT *, NULL, NULL FROM results;
        DROP TABLE results;
        ALTER TABLE results_v4 RENAME TO results;
        """,
    ),
    (
        5,
        # Top tokens leave the row (issue 17): a batch's top tokens are one compressed blob
        # (zstd over one orjson array, entry i = the row with seq seq_lo + i), written in the
        # batch's transaction; a row names its batch's blob in `top_tokens_blob`, so a deleted,
        # skipped or rescored row never picks up another row's entry. Rows written before keep
        # their JSON in `results.top_tokens`; readers read that first (`_fill_top_tokens`).
        """
        ALTER TABLE results ADD COLUMN top_tokens_blob BIGINT;
        CREATE SEQUENCE result_blob_ids START 1;  -- unique across connections, unlike max() + 1
        CREATE TABLE result_blobs (
            blob_id BIGINT PRIMARY KEY,
            run_id VARCHAR NOT NULL,
            seq_lo BIGINT NOT NULL,
            seq_hi BIGINT NOT NULL,
            top_tokens BLOB NOT NULL       -- zstd(orjson list of each row's top tokens or null)
        );
        """,
    ),
]

# Fills the columns promoted in version 4 from the JSON columns of rows written before it
# (the writer fills them itself, with the same values: tests/test_store_v4.py compares).
PROMOTE_SQL = """
    UPDATE results SET
        p_chosen = CASE WHEN prediction IS NOT NULL AND json_valid(probs)
                        THEN TRY_CAST(json_extract(probs, '$.' || to_json(prediction)::VARCHAR) AS DOUBLE) END,
        choice_method = CASE WHEN json_valid(extra) AND json_type(extra, '$.choice_method') = 'VARCHAR'
                             THEN json_extract_string(extra, '$.choice_method') END
    WHERE p_chosen IS NULL AND choice_method IS NULL
"""

# Every results column, `prompt` as the model saw it: a row stores NULL when its prompt is its
# item's text (imports: 87k trial texts are not stored again per run), so readers take the text
# of the run's suite's item. Every reader of result rows selects `RESULT_COLUMNS` (plus any item
# columns `i.*`) `FROM_RESULTS_WITH_ITEMS`.
RESULT_COLUMNS = "r.* REPLACE (coalesce(r.prompt, i.text) AS prompt)"
FROM_RESULTS_WITH_ITEMS = ("FROM results r LEFT JOIN runs u ON u.run_id = r.run_id "
                           "LEFT JOIN items i ON i.suite_id = u.suite_id AND i.item_id = r.item_id")

# A run's rows fingerprint, over `results x` of one run: it changes whenever a row is added,
# replaced or deleted. The metrics pipeline's cache (`analyses` kind 'metrics', written by
# analysis/metrics.py) is keyed by it, so a stale cache is never read.
ROWS_FINGERPRINT_SQL = (
    "concat_ws('|', count(*), coalesce(max(x.seq), -1), coalesce(CAST(max(x.written_at) AS VARCHAR), '-'), "
    "count(x.error), coalesce(CAST(sum(x.correct) AS VARCHAR), '-'))"
)

# The failing rows of a run (the TUI's default list): an error, or scored below 0.5.
FAILING_WHERE = "(r.error IS NOT NULL OR (isfinite(r.correct) AND r.correct < 0.5))"
# A same-host owner that is alive but has not beaten for this long is treated as gone
# (its pid was reused, or it hangs); an owner on another host is judged by its heartbeat only.
STALE_LOCAL_S = 600.0
STALE_REMOTE_S = 120.0


def _pid_alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    except OSError:
        return False
    return True


def process_started_at(pid: int) -> dt.datetime | None:
    """When process `pid` of this host started (naive UTC), or None where that is unknown.

    Read from /proc/<pid>/stat (field 22, clock ticks after boot) and /proc/stat's `btime`
    on Linux; elsewhere from psutil when it is installed.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
        # the command name (field 2) may hold spaces and parentheses: fields follow the last ")"
        ticks = int(stat[stat.rindex(")") + 2 :].split()[19])
        with open("/proc/stat", "rb") as f:
            btime = next(int(line.split()[1]) for line in f if line.startswith(b"btime "))
        return dt.datetime.fromtimestamp(btime + ticks / os.sysconf("SC_CLK_TCK"), dt.UTC).replace(tzinfo=None)
    except (OSError, ValueError, IndexError, StopIteration):
        pass
    try:
        import psutil  # type: ignore[import-untyped]

        return dt.datetime.fromtimestamp(psutil.Process(pid).create_time(), dt.UTC).replace(tzinfo=None)
    except Exception:  # not installed, no such process, no access
        return None


# A process that started this long after the owner's last heartbeat cannot be the owner (it
# wrote that heartbeat while alive): the slack covers /proc/stat's whole-second boot time.
PID_REUSE_SLACK_S = 2.0


def _owner_alive(pid: int, last_beat: Any) -> bool:
    """Whether the run's owner, process `pid` on this host, still runs: the pid is in use and
    the process using it started before the owner's last recorded heartbeat (a recycled pid
    belongs to a process started after the owner died)."""
    if not _pid_alive(pid):
        return False
    if _isnull(last_beat) or not isinstance(last_beat, dt.datetime):
        return True
    started = process_started_at(pid)
    return started is None or (started - last_beat).total_seconds() <= PID_REUSE_SLACK_S


def effective_status(rec: dict[str, Any], now: dt.datetime | None = None) -> str | None:
    """The status to show: a `running` run whose owner process is gone is `interrupted`
    (gone: no process has its pid, or the process with its pid started after its last beat)."""
    import socket

    status = rec.get("status")
    if status != "running":
        return status
    now = now or _now()
    beat = rec.get("heartbeat_at")
    if _isnull(beat):
        beat = rec.get("updated_at")
    age = (now - beat).total_seconds() if isinstance(beat, dt.datetime) else None
    pid, host = rec.get("owner_pid"), rec.get("owner_host")
    if not _isnull(pid) and host == socket.gethostname():
        if not _owner_alive(int(str(pid).split(".")[0]), beat):
            return "interrupted"
        return "interrupted" if age is not None and age > STALE_LOCAL_S else "running"
    return "interrupted" if age is None or age > STALE_REMOTE_S else "running"


def _isnull(v: Any) -> bool:
    return v is None or v is pd.NaT or (isinstance(v, float) and math.isnan(v))


LEGACY_TABLES = ("suites", "items", "runs", "results")  # created by migration 1, adopted from version 0


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


class StoreError(Exception):
    """A database problem explained for the user."""


class SchemaTooNew(StoreError):
    pass


class StoreLocked(StoreError):
    """Another process holds the file; `pid` is the holder when DuckDB names it."""

    def __init__(self, message: str, pid: int | None = None) -> None:
        super().__init__(message)
        self.pid = pid


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def _explain(e: Exception, path: str, action: str) -> StoreError:
    msg = str(e)
    low = msg.lower()
    wal = _explain_wal(e, path)
    if wal is not None:
        return wal
    if "lock" in low and ("conflicting" in low or "could not set lock" in low):
        m = re.search(r"\(PID (\d+)\)", msg)
        who = f"PID {m.group(1)}; " if m else ""
        return StoreLocked(
            f"{path} is in use by another process ({who}DuckDB allows one writer). "
            "Wait for it to finish, use another --db file, or watch it with `llmscope view`.",
            int(m.group(1)) if m else None,
        )
    if "read-only" in low or "readonly" in low or "permission denied" in low:
        return StoreError(f"cannot write {path}: the file or its folder is read-only ({msg.splitlines()[0]})")
    if "no space" in low or "disk is full" in low or "could not write" in low or "not enough space" in low:
        return StoreError(f"cannot write {path}: the disk is full ({msg.splitlines()[0]}); nothing was half-written")
    if "not a valid duckdb" in low or "unable to open" in low or "corrupt" in low:
        return StoreError(f"{path} is not a DuckDB database llmscope can open: {msg.splitlines()[0]}")
    return StoreError(f"database error while {action} ({path}): {msg.splitlines()[0]}")


_ORJSON_OPTS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def _json(v: Any) -> str | None:
    """JSON text for a column; NaN/inf become null. orjson first: it is ~8x faster on result rows."""
    if v is None:
        return None
    try:
        return orjson.dumps(v, default=_json_default, option=_ORJSON_OPTS).decode()
    except (orjson.JSONEncodeError, TypeError):
        # e.g. lone surrogates, which the stdlib escapes instead of refusing
        return json.dumps(v, ensure_ascii=False, default=_json_default).replace("NaN", "null")


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    if hasattr(o, "__dict__"):
        return o.__dict__
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _finite(x: float | None) -> float | None:
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


_WRITE_RESULTS = re.compile(r"^\s*(INSERT|UPDATE|DELETE|DROP|ALTER|CREATE|TRUNCATE|COPY)\b.*\bresults\b",
                            re.IGNORECASE | re.DOTALL)


class _KeyIndex:
    """The (item_id, variant) keys stored per run, so a batch is checked for duplicates in
    Python set lookups instead of a primary-key index maintained per row.

    Why this keeps `results` free of duplicates: DuckDB lets one process write a file, every
    row enters `results` through `Store._insert_results` (which drops or refuses a key already
    here, under `_KEYS_LOCK`), and anything that may change `results` otherwise (a rolled-back
    transaction, a failed insert, a raw INSERT/UPDATE/DELETE through `execute`) forgets the
    file's keys, which are then read again from the table. Shared by every `Store` of a file in
    this process (DuckDB shares one database between connections to the same path).
    """

    def __init__(self) -> None:
        self.runs: dict[str, set[tuple[str, str]]] = {}


_KEYS_LOCK = threading.RLock()
_KEYS: dict[str, _KeyIndex] = {}


def file_schema_version(path: str | Path) -> int:
    """The schema version a database file is at (0 before llmscope's versioning), read without
    migrating it (a read-only `Store` refuses older files)."""
    try:
        con = duckdb.connect(str(path), read_only=True)
    except Exception as e:
        raise _explain(e, str(path), "opening the database") from e
    try:
        has = con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_version'"
                          ).fetchall()[0][0]
        if not has:
            return 0
        v = con.execute("SELECT max(version) FROM schema_version").fetchall()[0][0]
        return int(v) if v is not None else 0
    except duckdb.Error as e:
        raise _explain(e, str(path), "reading the schema version") from e
    finally:
        con.close()


# How often a writer folds its WAL into the file (`Store._maybe_checkpoint`): what a damaged
# or deleted WAL can cost. A checkpoint of a results table rewrites its open row group (tens of
# milliseconds), so this is about time, not rows (bench/store_bench.py, RELIABILITY.md).
CHECKPOINT_EVERY_S = float(os.environ.get("LLMSCOPE_CHECKPOINT_S", "30"))


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
        raise _explain(e, str(path), "creating the database") from e
    finally:
        for suffix in ("", ".wal"):
            try:
                Path(str(tmp) + suffix).unlink(missing_ok=True)
            except OSError:
                pass


def _explain_wal(e: Exception, path: str) -> StoreError | None:
    """A WAL that does not replay (a flipped byte after a crash): what is kept, and how."""
    msg = str(e)
    if "replaying wal" not in msg.lower():
        return None
    wal = path + ".wal"
    m = re.search(r"byte position (\d+)", msg)
    cut = int(m.group(1)) if m else None
    keep = _rows_with_wal_cut(path, cut) if cut is not None else None
    how = (f"keep a copy (`cp {wal} {wal}.damaged`), then cut the log where the damage starts: "
           f"`python -c \"import os; os.truncate('{wal}', {cut})\"`"
           if cut is not None else f"move the log aside (`mv {wal} {wal}.damaged`)")
    kept = ""
    if keep is not None:
        runs = ", ".join(f"{rid}: {n}" for rid, n in keep)
        kept = f"; the file then holds {sum(n for _, n in keep)} result rows ({runs or 'no runs'})"
    return StoreError(
        f"{path} cannot be opened: its write log {wal} is damaged ({msg.splitlines()[0][-160:]}). "
        f"To recover, {how}, and open the file again{kept}. Writes after the damage are lost "
        f"(a running run folds its log into the file every {CHECKPOINT_EVERY_S:g} s); "
        f"`llmscope run --resume` scores them again"
    )


def _rows_with_wal_cut(path: str, cut: int) -> list[tuple[str, int]] | None:
    """The result rows per run that `path` holds with its WAL cut at byte `cut`, read from a
    scratch copy (a hard link of the file and the cut log, in a folder beside it) so that the
    original is not touched; None where that cannot be done."""
    folder = Path(path).parent
    try:
        with tempfile.TemporaryDirectory(dir=folder, prefix=".llmscope-recover-") as d:
            probe = Path(d) / "probe.duckdb"
            os.link(path, probe)
            with open(path + ".wal", "rb") as src, open(str(probe) + ".wal", "wb") as dst:
                left = cut
                while left > 0 and (chunk := src.read(min(left, 1 << 20))):
                    dst.write(chunk)
                    left -= len(chunk)
            con = duckdb.connect(str(probe), read_only=True)
            try:
                rows = con.execute("SELECT run_id, count(*) FROM results GROUP BY 1 ORDER BY 1").fetchall()
            finally:
                con.close()
            return [(str(r[0]), int(r[1])) for r in rows]
    except (OSError, duckdb.Error):
        return None


class Store:
    """One DuckDB file owned by one process; thread-safe through a lock."""

    def __init__(self, path: str | Path = "llmscope.duckdb", *, read_only: bool = False,
                 _building: bool = False) -> None:
        self.path = str(path)
        self.read_only = read_only
        self._metrics_cache: MetricsCache | None = None
        self._lock = threading.RLock()
        self._in_tx = False  # inside `transaction()`: writes join it instead of committing
        p = Path(self.path)
        if read_only and not p.exists():
            raise StoreError(f"{self.path} does not exist")
        if not read_only and not p.parent.exists():
            raise StoreError(f"cannot create {self.path}: folder {p.parent} does not exist")
        # `_building`: this call builds a new file under a name only it uses (`_create_file`);
        # only such a file is ever removed again when building it fails.
        self._created = _building
        if not read_only and not _building and self.path != ":memory:" and not p.exists():
            _create_file(p)
        try:
            self.con = duckdb.connect(self.path, read_only=read_only)
        except Exception as e:  # duckdb raises IOException / others; all need a clear message
            self._remove_if_created()
            raise _explain(e, self.path, "opening the database") from e
        self._migrate()
        self._created = False
        self._db_key = f"memory:{id(self)}" if self.path == ":memory:" else str(Path(self.path).resolve())
        self._forget_keys()  # another process may have written the file since this process last had it
        self._checkpointed_at = time.monotonic()
        if not read_only:
            # A checkpoint rewrites the table's open row group; at DuckDB's default (16 MiB of
            # WAL) a run of small commits rewrites it again and again (half of a write's cost).
            # Commits stay durable in the WAL; a reopened file replays it. The writes of a long
            # run are folded into the file every CHECKPOINT_EVERY_S instead (`_maybe_checkpoint`),
            # so a damaged or lost WAL costs at most that much of a session.
            self.execute("SET checkpoint_threshold = '256MiB'")

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

    # -- schema ---------------------------------------------------------------------------
    def schema_version(self) -> int:
        try:
            # fetchall, not fetchone: DuckDB keeps a half-fetched result open, and the next
            # `register` (the first write of a reopened file) then fails with "unfinished result".
            has = self.con.execute(
                "SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_version'"
            ).fetchall()
            if not has or not has[0][0]:
                return 0
            rows = self.con.execute("SELECT max(version) FROM schema_version").fetchall()
            return int(rows[0][0]) if rows and rows[0][0] is not None else 0
        except duckdb.Error as e:
            raise _explain(e, self.path, "reading the schema version") from e

    def _migrate(self) -> None:
        current = self.schema_version()
        if current > SCHEMA_VERSION:
            self.con.close()
            raise SchemaTooNew(
                f"{self.path} was written by a newer llmscope (schema {current}; this version "
                f"understands up to {SCHEMA_VERSION}). Upgrade llmscope to open it; the file was not changed."
            )
        if current == SCHEMA_VERSION:
            return
        if self.read_only:
            raise StoreError(
                f"{self.path} has schema {current}, older than {SCHEMA_VERSION}; open it once for writing to migrate "
                f"(`llmscope migrate --db {self.path}`; older llmscope versions cannot open it afterwards)"
            )
        try:
            self.con.execute("BEGIN TRANSACTION")
            legacy = self._set_aside_legacy_tables() if current == 0 else []
            self.con.execute(
                "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, applied_at TIMESTAMP)"
            )
            for version, sql in MIGRATIONS:
                if version > current:
                    self.con.execute(sql)
                    self.con.execute("INSERT INTO schema_version VALUES (?, ?)", [version, _now()])
            for table in legacy:
                self._copy_legacy_table(table)
            if current < 4:
                self.con.execute(PROMOTE_SQL)
            self.con.execute("COMMIT")
        except duckdb.Error as e:
            try:
                self.con.execute("ROLLBACK")
            except duckdb.Error:
                pass
            self.con.close()
            self._remove_if_created()
            raise _explain(e, self.path, "creating or migrating the schema") from e

    def _set_aside_legacy_tables(self) -> list[str]:
        """Rename the tables of a version-0 file (written before `schema_version` existed).

        Such files carry llmscope's tables with fewer columns and possibly without their
        primary keys; they are rebuilt in the current layout by `_copy_legacy_table`,
        inside the migration's transaction, so a failure leaves the file as it was.
        """
        rows = self.con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'"
        ).fetchall()
        present = {r[0] for r in rows}
        legacy = [t for t in LEGACY_TABLES if t in present]
        for t in legacy:
            self.con.execute(f"ALTER TABLE {t} RENAME TO _llmscope_v0_{t}")
        return legacy

    def _copy_legacy_table(self, table: str) -> None:
        old = f"_llmscope_v0_{table}"

        def columns(name: str) -> list[str]:
            rows = self.con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position",
                [name],
            ).fetchall()
            return [r[0] for r in rows]

        old_cols = set(columns(old))
        shared = [c for c in columns(table) if c in old_cols]
        if shared:
            cols = ", ".join(shared)
            # Version 0 had no primary keys: keep the first copy of a duplicated key.
            if table == "results":  # keyed by the store's key check, not an index (schema 4)
                self.con.execute(
                    f"INSERT INTO results ({cols}) SELECT {cols} FROM {old} "
                    "QUALIFY row_number() OVER (PARTITION BY run_id, item_id, variant ORDER BY rowid) = 1"
                )
            else:
                self.con.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM {old} ON CONFLICT DO NOTHING")
        self.con.execute(f"DROP TABLE {old}")

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
                raise _explain(e, self.path, "querying") from e

    def query_df(self, sql: str, params: Sequence[Any] | None = None) -> pd.DataFrame:
        with self._lock:
            if _WRITE_RESULTS.match(sql):
                self._forget_keys()
            try:
                return self.con.execute(sql, params or []).df()
            except duckdb.Error as e:
                raise _explain(e, self.path, "querying") from e

    def query_numpy(self, sql: str, params: Sequence[Any] | None = None) -> dict[str, np.ndarray]:
        """A read's columns as numpy arrays (no pandas frame; NULLs as None in object arrays):
        for aggregates that go straight to numpy (analysis.sqlmetrics)."""
        with self._lock:
            try:
                res: dict[str, Any] = self.con.execute(sql, params or []).fetchnumpy()
            except duckdb.Error as e:
                raise _explain(e, self.path, "querying") from e
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
                raise _explain(e, self.path, "starting a transaction") from e
            self._in_tx = True
            try:
                yield
            except BaseException:
                self._forget_keys()  # keys added inside are not stored after all
                try:
                    self.con.execute("ROLLBACK")
                except duckdb.Error:
                    pass
                raise
            else:
                try:
                    self.con.execute("COMMIT")
                except duckdb.Error as e:
                    self._forget_keys()
                    try:
                        self.con.execute("ROLLBACK")
                    except duckdb.Error:
                        pass
                    raise _explain(e, self.path, "committing") from e
            finally:
                self._in_tx = False

    def _insert_arrow(self, table: str, tbl: pa.Table, conflict: str = "DO NOTHING") -> None:
        cols = ", ".join(tbl.column_names)
        select = f"SELECT {cols} FROM _llmscope_batch"
        if self._in_tx:
            with self._lock:
                try:
                    self.con.register("_llmscope_batch", tbl)
                    try:
                        self.con.execute(f"INSERT INTO {table} ({cols}) {select}").fetchall()
                    finally:
                        self.con.unregister("_llmscope_batch")
                except duckdb.Error as e:
                    self._forget_keys()
                    raise _explain(e, self.path, f"writing {table}") from e
            return
        with self._lock:
            try:
                self.con.register("_llmscope_batch", tbl)
                try:
                    # The runner never writes a key twice, so a plain insert is the common case;
                    # ON CONFLICT (about 30% slower) is the safety net when a key exists already.
                    self.con.execute("BEGIN TRANSACTION")
                    self.con.execute(f"INSERT INTO {table} ({cols}) {select}").fetchall()
                    self.con.execute("COMMIT")
                except duckdb.ConstraintException:
                    self.con.execute("ROLLBACK")
                    self.con.execute("BEGIN TRANSACTION")
                    self.con.execute(
                        f"INSERT INTO {table} ({cols}) {select} ON CONFLICT {conflict}"
                    ).fetchall()
                    self.con.execute("COMMIT")
                finally:
                    self.con.unregister("_llmscope_batch")
            except duckdb.Error as e:
                self._forget_keys()
                try:
                    self.con.execute("ROLLBACK")
                except duckdb.Error:
                    pass
                raise _explain(e, self.path, f"writing {table}") from e

    def _insert_with_blob(self, run_id: str, tbl: pa.Table, seq_lo: int, blob: bytes) -> None:
        """Insert rows and their batch's top-tokens blob in one transaction (the caller's, inside
        `transaction()`); caller holds the locks. The blob id comes from a sequence, so two
        open transactions (two `Store`s of one file) never share one."""
        own = not self._in_tx
        try:
            if own:
                self.con.execute("BEGIN TRANSACTION")
            row = self.con.execute("SELECT nextval('result_blob_ids')").fetchall()
            blob_id = int(row[0][0])
            i = tbl.schema.get_field_index("top_tokens_blob")
            tbl = tbl.set_column(i, "top_tokens_blob", pa.array(np.full(tbl.num_rows, blob_id, dtype=np.int64)))
            self.con.execute("INSERT INTO result_blobs VALUES (?, ?, ?, ?, ?)",
                             [blob_id, run_id, seq_lo, int(pc.max(tbl.column("seq")).as_py()), blob])
            self.con.register("_llmscope_batch", tbl)
            try:
                cols = ", ".join(tbl.column_names)
                self.con.execute(f"INSERT INTO results ({cols}) SELECT {cols} FROM _llmscope_batch").fetchall()
            finally:
                self.con.unregister("_llmscope_batch")
            if own:
                self.con.execute("COMMIT")
        except duckdb.Error as e:
            self._forget_keys()
            if own:
                try:
                    self.con.execute("ROLLBACK")
                except duckdb.Error:
                    pass
            raise _explain(e, self.path, "writing results") from e

    def _forget_keys(self) -> None:
        with _KEYS_LOCK:
            _KEYS.pop(self._db_key, None)

    def _stored_keys(self, run_id: str) -> set[tuple[str, str]]:
        """The keys stored for a run (read from the table once per process; caller holds _KEYS_LOCK)."""
        idx = _KEYS.setdefault(self._db_key, _KeyIndex())
        keys = idx.runs.get(run_id)
        if keys is None:
            rows = self.con.execute("SELECT item_id, variant FROM results WHERE run_id = ?", [run_id]).fetchall()
            keys = idx.runs[run_id] = {(r[0], r[1]) for r in rows}
        return keys

    def _insert_results(self, run_id: str, tbl: pa.Table, tops_blob: tuple[int, bytes] | None = None) -> int:
        """Append a batch of one run's rows, skipping keys already stored or repeated in the
        batch (the first copy counts). Inside `transaction()` such a key is an error instead,
        so bulk writers that dedupe themselves learn of a mistake. Returns rows written.

        `tops_blob`: (seq of the batch's first row, `encode_top_tokens` blob of the whole batch),
        stored in `result_blobs` in the rows' transaction; the rows name it in `top_tokens_blob`."""
        with self._lock, _KEYS_LOCK:
            try:
                stored = self._stored_keys(run_id)
            except duckdb.Error as e:
                raise _explain(e, self.path, "reading stored keys") from e
            batch = list(zip(tbl.column("item_id").to_pylist(), tbl.column("variant").to_pylist(), strict=True))
            fresh = set(batch)
            if len(fresh) != len(batch) or not stored.isdisjoint(fresh):
                seen: set[tuple[str, str]] = set()
                keep = []
                for k in batch:
                    keep.append(k not in stored and k not in seen)
                    seen.add(k)
                if self._in_tx:
                    dup = next(k for k, ok in zip(batch, keep, strict=True) if not ok)
                    raise StoreError(f"duplicate result key {dup} for run {run_id} inside one transaction")
                tbl = tbl.filter(pa.array(keep, type=pa.bool_()))
                fresh -= stored
            if tbl.num_rows:
                if tops_blob is not None:
                    self._insert_with_blob(run_id, tbl, *tops_blob)
                else:
                    self._insert_arrow("results", tbl)
            stored |= fresh
            self._maybe_checkpoint()
            return tbl.num_rows

    # -- suites and items -----------------------------------------------------------------
    def has_suite(self, suite_id: str) -> bool:
        row = self.execute("SELECT count(*) FROM suites WHERE suite_id = ?", [suite_id]).fetchone()
        return bool(row and row[0])

    def add_suite(self, suite_id: str, name: str, task: str, spec: dict[str, Any], source: str,
                  items: Sequence[Item]) -> None:
        """Store a suite and its items in one transaction (skipped when already stored).

        The items go in slices of `_ITEM_SLICE`: their JSON and Arrow columns are built per
        slice, so memory holds one slice's copy of the texts, not the whole suite's."""
        if self.has_suite(suite_id):
            return
        schema = pa.schema(
            [("suite_id", pa.string()), ("item_id", pa.string()), ("idx", pa.int32()),
             ("text", pa.string()), ("gold", pa.string()), ("options", pa.string()),
             ("fields", pa.string())]
        )
        with self._lock:
            try:
                self.con.execute("BEGIN TRANSACTION")
                self.con.execute(
                    "INSERT INTO suites VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [suite_id, name, task, _json(spec), source, len(items), _now()],
                )
                for lo in range(0, len(items), _ITEM_SLICE):
                    part = items[lo:lo + _ITEM_SLICE]
                    tbl = pa.table(
                        {
                            "suite_id": [suite_id] * len(part),
                            "item_id": [it.item_id for it in part],
                            "idx": list(range(lo, lo + len(part))),
                            "text": [it.text for it in part],
                            "gold": [it.gold for it in part],
                            "options": [_json(it.options) for it in part],
                            "fields": [_json(it.fields) for it in part],
                        },
                        schema=schema,
                    )
                    self.con.register("_llmscope_items", tbl)
                    try:
                        self.con.execute("INSERT INTO items SELECT * FROM _llmscope_items")
                    finally:
                        self.con.unregister("_llmscope_items")
                    del tbl
                self.con.execute("COMMIT")
            except BaseException as e:  # also a value the JSON encoder refuses: no open transaction left
                try:
                    self.con.execute("ROLLBACK")
                except duckdb.Error:
                    pass
                if isinstance(e, duckdb.Error):
                    raise _explain(e, self.path, "storing the suite") from e
                raise

    def suites(self) -> pd.DataFrame:
        return self.query_df("SELECT suite_id, name, task, n_items, source, created_at FROM suites ORDER BY created_at")

    def suite_spec(self, suite_id: str) -> dict[str, Any]:
        """The stored spec of a suite ({} when unknown)."""
        row = self.execute("SELECT spec FROM suites WHERE suite_id = ?", [suite_id]).fetchone()
        if not row or not row[0]:
            return {}
        try:
            spec = json.loads(row[0])
        except json.JSONDecodeError:
            return {}
        return spec if isinstance(spec, dict) else {}

    def items_frame(self, suite_id: str) -> pd.DataFrame:
        return self.query_df(
            "SELECT item_id, idx, text, gold, options, fields FROM items WHERE suite_id = ? ORDER BY idx", [suite_id]
        )

    # -- runs -----------------------------------------------------------------------------
    def get_run(self, run_id: str) -> dict[str, Any] | None:
        df = self.query_df("SELECT * FROM runs WHERE run_id = ?", [run_id])
        if df.empty:
            return None
        return _row(df)

    def find_run(self, prefix: str) -> dict[str, Any] | None:
        """A run by id or unique id prefix; `last` is the most recently started run."""
        if prefix == "last":
            df = self.query_df("SELECT * FROM runs ORDER BY started_at DESC LIMIT 1")
        else:
            df = self.query_df("SELECT * FROM runs WHERE run_id LIKE ? || '%' ORDER BY started_at", [prefix])
            if len(df) > 1:
                exact = df[df.run_id == prefix]
                if len(exact) == 1:
                    df = exact
                else:
                    raise StoreError(f"run id prefix {prefix!r} is ambiguous: {', '.join(df.run_id)}")
        return None if df.empty else _row(df)

    def create_run(self, run: dict[str, Any]) -> None:
        run = dict(run)
        for k in ("options", "versions", "meta", "backend_config"):
            if k in run and not isinstance(run[k], str):
                run[k] = _json(run[k])
        run.setdefault("started_at", _now())
        run.setdefault("updated_at", _now())
        run.setdefault("status", "running")
        cols = list(run)
        with self._lock:
            try:
                self.con.execute(
                    f"INSERT INTO runs ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})",
                    [run[c] for c in cols],
                )
            except duckdb.Error as e:
                raise _explain(e, self.path, "creating the run") from e

    def update_run(self, run_id: str, **fields: Any) -> None:
        if not fields:
            return
        for k in ("options", "versions", "meta", "backend_config"):
            if k in fields and not isinstance(fields[k], str):
                fields[k] = _json(fields[k])
        fields.setdefault("updated_at", _now())
        sets = ", ".join(f"{k} = ?" for k in fields)
        self.execute(f"UPDATE runs SET {sets} WHERE run_id = ?", [*fields.values(), run_id])

    def runs(self) -> pd.DataFrame:
        """Every run with its stored counts; `status` is the effective status (see effective_status);
        `accuracy` is the value of the run's headline metric, named in `metric`."""
        df = self.query_df(
            f"""
            SELECT r.run_id, r.suite_name, r.task, r.model, r.backend, r.status, r.n_total,
                   (SELECT count(*) FROM results x WHERE x.run_id = r.run_id) AS n_done,
                   (SELECT count(*) FROM results x WHERE x.run_id = r.run_id AND x.error IS NOT NULL) AS n_errors,
                   (SELECT avg(correct) FROM results x WHERE x.run_id = r.run_id AND x.error IS NULL) AS accuracy,
                   r.started_at, r.ended_at, r.updated_at, r.heartbeat_at, r.owner_pid, r.owner_host, r.error,
                   (SELECT {ROWS_FINGERPRINT_SQL} FROM results x WHERE x.run_id = r.run_id) AS _fp
            FROM runs r
            ORDER BY r.started_at
            """
        )
        # The run's headline metric from the metrics pipeline's cache when it matches the rows
        # (WorldSense: worldsense_accuracy); else plain `accuracy` = avg(correct), named so.
        fps = [str(f) for f in df.pop("_fp")]
        side = self.metrics_cache
        known = side.headlines(dict(zip(df["run_id"].astype(str), fps, strict=True))) if side is not None else {}
        head = [known.get(str(rid)) for rid in df["run_id"]]
        df["metric"] = [h.get("name") if isinstance(h, dict) else "accuracy" for h in head]
        df["accuracy"] = [h.get("value") if isinstance(h, dict) else a
                          for h, a in zip(head, df["accuracy"], strict=True)]
        if not df.empty:
            df["status"] = [effective_status({str(k): v for k, v in rec.items()}) for rec in df.to_dict("records")]
        return df

    # -- results --------------------------------------------------------------------------
    def done_keys(self, run_id: str) -> set[tuple[str, str]]:
        rows = self.execute("SELECT item_id, variant FROM results WHERE run_id = ?", [run_id]).fetchall()
        return {(r[0], r[1]) for r in rows}

    def delete_error_results(self, run_id: str) -> int:
        """Remove a run's error rows so a resume scores those items again; returns how many."""
        n = self.execute("SELECT count(*) FROM results WHERE run_id = ? AND error IS NOT NULL", [run_id]).fetchone()
        if n and n[0]:
            self.execute("DELETE FROM results WHERE run_id = ? AND error IS NOT NULL", [run_id])
        return int(n[0]) if n else 0

    def count_results(self, run_id: str) -> tuple[int, int]:
        row = self.execute(
            "SELECT count(*), count(error) FROM results WHERE run_id = ?", [run_id]
        ).fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    def write_results(self, run_id: str, results: Iterable[Result], start_seq: int = 0) -> int:
        """Append results in one Arrow batch and one transaction; duplicates are ignored."""
        rs = list(results)
        if not rs:
            return 0
        now = _now()
        tbl = results_to_arrow(run_id, rs, start_seq, now, tops_inline=False)
        blob = encode_top_tokens([r.top_tokens for r in rs])
        self._insert_results(run_id, tbl, tops_blob=None if blob is None else (start_seq, blob))
        return len(rs)

    def append_results(self, run_id: str, columns: Mapping[str, Any], start_seq: int = 0, *,
                       prompt_from_suite: str | None = None) -> int:
        """Bulk path: append result rows given as columns (lists or Arrow arrays named like the
        `results` table), without building a `Result` per row. Absent columns are null
        (`n_tokens` 0, `latency_ms` 0.0, as a default `Result` stores them); `run_id`, `seq`
        and `written_at` are filled in. One transaction (or the caller's `transaction()`).

        `prompt_from_suite`: without a `prompt` column, each row's prompt is its item's text in
        that stored suite, the run's own: `prompt` is stored NULL and every reader returns the
        item's text in its place (`RESULT_COLUMNS`), so an import does not store each
        trial's text again per run.
        """
        self._check_prompt_from_suite(run_id, "prompt" in columns, prompt_from_suite)
        lengths = {len(v) for v in columns.values()}
        if len(lengths) > 1:
            raise ValueError(f"columns of different lengths: {sorted(lengths)}")
        n = lengths.pop() if lengths else 0
        if not n:
            return 0
        unknown = set(columns) - set(RESULT_SCHEMA.names) - {"run_id", "seq", "written_at", "p_chosen"}
        if unknown:
            raise ValueError(f"not columns of results: {sorted(unknown)}")
        if "top_tokens_blob" in columns:  # names a stored blob: only write_results makes those
            raise ValueError("top_tokens_blob is the store's own column; give top_tokens instead")
        arrays = []
        for f in RESULT_SCHEMA:
            if f.name == "run_id":
                arrays.append(pa.array([run_id] * n, type=f.type))
            elif f.name == "seq":
                arrays.append(pa.array(range(start_seq, start_seq + n), type=f.type))
            elif f.name == "written_at":
                arrays.append(pa.array([_now()] * n, type=f.type))
            elif f.name in columns:
                v = columns[f.name]
                arrays.append(v.cast(f.type) if isinstance(v, pa.Array) else pa.array(v, type=f.type))
            elif f.name == "n_tokens":
                arrays.append(pa.array([0] * n, type=f.type))
            elif f.name == "latency_ms":
                arrays.append(pa.array([0.0] * n, type=f.type))
            elif f.name == "p_chosen" and "probs" in columns and "prediction" in columns:
                arrays.append(_p_chosen(_column_list(columns["probs"]), _column_list(columns["prediction"])))
            elif f.name == "choice_method" and "extra" in columns and "choice_method" not in columns:
                arrays.append(_choice_method(_column_list(columns["extra"])))
            else:
                arrays.append(pa.nulls(n, type=f.type))
        return self._insert_results(run_id, pa.Table.from_arrays(arrays, schema=RESULT_SCHEMA))

    def _check_prompt_from_suite(self, run_id: str, has_prompt: bool, prompt_from_suite: str | None) -> None:
        """`prompt_from_suite` only without a prompt column, and only the run's own suite."""
        if prompt_from_suite is None:
            return
        if has_prompt:
            raise ValueError("give either a prompt column or prompt_from_suite, not both")
        row = self.execute("SELECT suite_id FROM runs WHERE run_id = ?", [run_id]).fetchone()
        if row is None or row[0] != prompt_from_suite:
            # readers take the text from the run's suite: another suite's text would be lost
            raise ValueError(f"prompt_from_suite {prompt_from_suite!r} is not the suite of run {run_id!r}"
                             f" ({row[0] if row else 'no such run'})")

    def _check_result_columns(self, run_id: str, names: Sequence[str], prompt_from_suite: str | None) -> None:
        """`append_results`'s column rules for a SQL batch (`append_results_sql`)."""
        self._check_prompt_from_suite(run_id, "prompt" in names, prompt_from_suite)
        if len(set(names)) != len(names):
            raise ValueError(f"repeated column names: {sorted(n for n in set(names) if names.count(n) > 1)}")
        unknown = set(names) - set(RESULT_SCHEMA.names)
        if unknown:
            raise ValueError(f"not columns of results: {sorted(unknown)}")
        for own in ("run_id", "written_at", "top_tokens_blob"):
            if own in names:
                raise ValueError(f"{own} is the store's own column; the select must not give it")
        missing = {"item_id", "variant", "seq"} - set(names)
        if missing:
            raise ValueError(f"the select must give {sorted(missing)}")
        # the derived columns are computed by Python in `append_results`; SQL would need its own
        # copy of those rules, so the caller gives them
        if "probs" in names and "prediction" in names and "p_chosen" not in names:
            raise ValueError("a select with probs and prediction must give p_chosen too")
        if "extra" in names and "choice_method" not in names:
            raise ValueError("a select with extra must give choice_method too")
        if "top_tokens" in names:
            raise ValueError("top tokens are stored as blobs by write_results; append_results_sql does not take them")

    def append_results_sql(self, run_id: str, select_sql: str, params: Sequence[Any] | None = None, *,
                           prompt_from_suite: str | None = None,
                           tables: Mapping[str, pa.Table] | None = None) -> int:
        """Bulk path inside DuckDB: append the rows of `select_sql` (e.g. over `read_json`) with one
        `INSERT ... SELECT`, so the rows never pass through Python. Returns rows written.

        The select names its columns like `results`'s and must give `item_id`, `variant` and
        `seq`; `run_id` and `written_at` are filled in, absent columns are null (`n_tokens` 0,
        `latency_ms` 0.0), as in `append_results`, whose rules it follows: the same key
        guarantee (inside `transaction()` a key already stored for the run or repeated in the
        select is an error and nothing is written; outside, such rows are skipped, the lowest
        `seq` of a repeated key kept) and `prompt_from_suite`. `p_chosen` and `choice_method`
        are not derived here: a select with `probs` and `prediction` gives `p_chosen`, one with
        `extra` gives `choice_method`. `tables`: small Arrow tables (lookups) the select reads
        by name, registered for the call.
        """
        with self._lock, _KEYS_LOCK:
            try:
                for name, tbl in (tables or {}).items():
                    self.con.register(name, tbl)
                try:
                    return self._append_sql(run_id, select_sql, list(params or []), prompt_from_suite)
                finally:
                    for name in tables or {}:
                        self.con.unregister(name)
            except duckdb.Error as e:
                self._forget_keys()
                raise _explain(e, self.path, "writing results") from e

    def _append_sql(self, run_id: str, select_sql: str, params: list[Any], prompt_from_suite: str | None) -> int:
        batch = "_llmscope_sql_batch"
        # the select runs once: its rows are checked, then inserted from this temporary table
        self.con.execute(f"CREATE OR REPLACE TEMP TABLE {batch} AS SELECT * FROM ({select_sql})", params)
        try:
            names = [str(d[0]) for d in self.con.execute(f"SELECT * FROM {batch} LIMIT 0").description]
            self._check_result_columns(run_id, names, prompt_from_suite)
            stored = self._stored_keys(run_id)
            exists = ("EXISTS (SELECT 1 FROM results r WHERE r.run_id = ? AND r.item_id = b.item_id "
                      "AND r.variant = b.variant)") if stored else "false"
            key_params = [run_id] if stored else []
            # a key repeated in the batch (after its first, lowest-seq copy) or stored already
            ranked = (f"(SELECT *, row_number() OVER (PARTITION BY item_id, variant ORDER BY seq) AS _k "
                      f"FROM {batch}) b")
            repeated = f"(b._k > 1 OR {exists})"
            if self._in_tx:
                dup = self.con.execute(f"SELECT b.item_id, b.variant FROM {ranked} WHERE {repeated} "
                                       "ORDER BY b.seq LIMIT 1", key_params).fetchall()
                if dup:
                    raise StoreError(f"duplicate result key {tuple(dup[0])} for run {run_id} inside one transaction")
                where = ""
            else:
                where = f"WHERE NOT {repeated}"
            cols: list[str] = []
            exprs: list[str] = []
            for f in RESULT_SCHEMA:
                if f.name in ("run_id", "written_at"):
                    expr = "?"
                elif f.name in names:
                    expr = f"b.{f.name}"
                elif f.name == "n_tokens":
                    expr = "0"
                elif f.name == "latency_ms":
                    expr = "0.0"
                else:
                    continue
                cols.append(f.name)
                exprs.append(f"CAST({expr} AS {_DUCK_TYPES[str(f.type)]})")
            head = [run_id if c == "run_id" else _now() for c in cols if c in ("run_id", "written_at")]
            sql = (f"INSERT INTO results ({', '.join(cols)}) SELECT {', '.join(exprs)} FROM {ranked} {where} "
                   "ORDER BY b.seq")
            own = not self._in_tx
            if own:
                self.con.execute("BEGIN TRANSACTION")
            try:
                row = self.con.execute(sql, head + (key_params if where else [])).fetchall()
                if own:
                    self.con.execute("COMMIT")
            except BaseException:
                if own:
                    try:
                        self.con.execute("ROLLBACK")
                    except duckdb.Error:
                        pass
                raise
            # the run's keys are read again from the table when next needed (they include these)
            _KEYS.setdefault(self._db_key, _KeyIndex()).runs.pop(run_id, None)
            return int(row[0][0]) if row else 0
        finally:
            try:
                self.con.execute(f"DROP TABLE IF EXISTS {batch}")
            except duckdb.Error:
                pass  # an aborted transaction: the rollback drops it

    def results_frame(self, run_id: str, *, with_items: bool = True) -> pd.DataFrame:
        """Per-item results of a run (JSON columns left as text), joined with item fields."""
        return self._fill_top_tokens(self._results_rows(run_id, with_items), as_text=True)

    def _results_rows(self, run_id: str, with_items: bool) -> pd.DataFrame:
        items = ", i.text, i.fields, i.idx, i.options" if with_items else ""
        return self.query_df(f"SELECT {RESULT_COLUMNS}{items} {FROM_RESULTS_WITH_ITEMS} "
                             "WHERE r.run_id = ? ORDER BY r.seq", [run_id])

    def _fill_top_tokens(self, df: pd.DataFrame, *, as_text: bool) -> pd.DataFrame:
        """Rows' `top_tokens` from their batch's blob where the row holds none (rows written
        since schema 5), as JSON text (`as_text`) or decoded; drops `top_tokens_blob`. Each
        blob the rows name is read and decompressed once."""
        if "top_tokens_blob" not in df.columns:
            return df
        ids = df.pop("top_tokens_blob")
        need = ids.notna() & df["top_tokens"].isna()
        if not need.any():
            return df
        wanted = sorted({int(b) for b in ids[need]})
        rows = self.execute(
            f"SELECT blob_id, seq_lo, top_tokens FROM result_blobs WHERE blob_id IN ({', '.join('?' * len(wanted))})",
            wanted,
        ).fetchall()
        blobs = {int(b): (int(lo), decode_top_tokens(data)) for b, lo, data in rows}
        tops: list[Any] = df["top_tokens"].tolist()
        seqs = df["seq"].tolist()
        for pos, (bid, wanted_here) in enumerate(zip(ids.tolist(), need.tolist(), strict=True)):
            if not wanted_here:
                continue
            entry = blobs.get(int(bid))
            if entry is None:
                raise StoreError(f"{self.path}: a result names top-tokens blob {int(bid)}, which is missing")
            i = int(seqs[pos]) - entry[0]
            if not 0 <= i < len(entry[1]):
                raise StoreError(f"{self.path}: result seq {int(seqs[pos])} is outside its top-tokens blob")
            v = entry[1][i]
            tops[pos] = v if not as_text or v is None else _json(v)
        df["top_tokens"] = pd.Series(tops, index=df.index, dtype=object)
        return df

    def results_decoded(self, run_id: str, *, with_items: bool = True) -> pd.DataFrame:
        """`results_frame` with its JSON columns decoded (dicts/lists, None for NULL): the form
        every reader outside store/ uses, so none of them parses stored JSON."""
        df = self._fill_top_tokens(self._results_rows(run_id, with_items), as_text=False)
        return decode_frame(df)

    def results(self, run_id: str) -> list[Result]:
        """A run's rows as the `Result`s that were written (JSON decoded, NULL floats as None)."""
        df = self.results_decoded(run_id, with_items=False)
        names = [f for f in Result.__dataclass_fields__ if f in df.columns]
        out = []
        for rec in df[names].to_dict("records"):
            vals: dict[str, Any] = {str(k): (None if _isnull(v) else v) for k, v in rec.items()}
            vals["n_tokens"] = int(vals.get("n_tokens") or 0)
            vals["latency_ms"] = float(vals.get("latency_ms") or 0.0)
            vals["extra"] = vals.get("extra") or {}
            out.append(Result(**vals))
        return out

    def item_detail(self, run_id: str, item_id: str) -> ItemDetail:
        """Every stored variant of one item in one run, with the item's text, fields and options."""
        df = self.query_df(
            f"SELECT {RESULT_COLUMNS}, i.text AS item_text, i.fields AS item_fields, i.options AS item_options "
            f"{FROM_RESULTS_WITH_ITEMS} WHERE r.run_id = ? AND r.item_id = ? ORDER BY r.variant",
            [run_id, item_id],
        )
        df = self._fill_top_tokens(df, as_text=False)
        rows = []
        for rec in df.to_dict("records"):
            row = {str(k): (None if _isnull(v) else v) for k, v in rec.items()}
            for k in (*JSON_RESULT_COLUMNS, "item_fields", "item_options"):
                row[k] = decode_json(row.get(k))
            rows.append(row)
        first = rows[0] if rows else {}
        return ItemDetail(item_id=item_id, text=first.get("item_text") or "", fields=first.get("item_fields") or {},
                          options=first.get("item_options"), variants=rows)

    def suite_items(self, suite_id: str, *, with_fields: bool = True, with_text: bool = True) -> list[Item]:
        """A stored suite's items in order, options and fields decoded (empty when not stored;
        `with_fields=False` leaves `fields` empty, `with_text=False` leaves `text` empty, for
        callers that need only id/gold/options)."""
        rows = self.execute(
            f"SELECT item_id, {'text' if with_text else 'NULL'}, gold, options, "
            f"{'fields' if with_fields else 'NULL'} FROM items WHERE suite_id = ? ORDER BY idx", [suite_id]
        ).fetchall()
        # Option lists repeat across a suite's items (WorldSense: a handful for 87k trials): each
        # distinct text is decoded once, and every item gets its own copy of the list.
        options: dict[str, Any] = {}

        def opts(o: Any) -> Any:
            if not isinstance(o, str):
                return decode_json(o)
            if o not in options:
                options[o] = decode_json(o)
            v = options[o]
            return list(v) if isinstance(v, list) else decode_json(o)

        return [Item(item_id=i, text=t or "", gold=g, options=opts(o), fields=decode_json(f) or {})
                for i, t, g, o, f in rows]

    def item_answers(self, suite_id: str) -> dict[str, tuple[str | None, Any]]:
        """item_id -> (gold, options) of a stored suite, options decoded once per distinct text
        (lists as tuples, shared between items: read-only). For bulk imports that score
        responses against 10^5 items without building an `Item` for each."""
        rows = self.execute("SELECT item_id, gold, options FROM items WHERE suite_id = ?", [suite_id]).fetchall()
        decoded: dict[Any, Any] = {}
        for o in {r[2] for r in rows}:
            v = decode_json(o)
            decoded[o] = tuple(v) if isinstance(v, list) else v
        return {i: (g, decoded[o]) for i, g, o in rows}

    # -- failing items, paged in SQL (the TUI's virtual list) ----------------------------------
    FAILING_SORTS = ("arrival", "confidence", "distance", "group", "item")

    @staticmethod
    def _failing_item_cols(group_field: str | None, alias: str = "i", distance: str | None = None,
                           results: str = "r") -> tuple[str, str, list[Any]]:
        """SQL for the list's item-derived columns: group = the item field `group_field` as
        text ('None' when absent); distance = the caller's SQL template `distance` with
        {p_yes}, {p_no} and {human} (the item's human_q1) filled, NULL without one (the
        definition is analysis's: llmscope.analysis.yesno.HUMAN_DISTANCE_SQL)."""
        if group_field:
            grp = f"coalesce(json_extract_string({alias}.fields, ?), 'None')"
            params: list[Any] = ["$." + json.dumps(group_field)]
        else:
            grp, params = "''", []
        human = f"TRY_CAST(json_extract_string({alias}.fields, '$.human_q1') AS DOUBLE)"
        dist = ("CAST(NULL AS DOUBLE)" if distance is None else
                distance.format(p_yes=f"{results}.p_yes", p_no=f"{results}.p_no", human=human))
        return grp, dist, params

    def _failing_sql(self, run_id: str, group_field: str | None, group: str | None,
                     min_conf: float | None, sort: str = "arrival", where: str | None = FAILING_WHERE,
                     distance: str | None = None) -> tuple[str, list[Any]]:
        """The rows of a run that `where` chooses (default: the failing ones, an error or scored
        below 0.5; None: all): result columns, plus the item-derived `group`/`distance` only when
        the sort or a filter needs them (they read the items' JSON fields, the expensive part on
        a big suite)."""
        need_items = group is not None or sort in ("group", "distance")
        cols = "r.item_id, r.variant, r.gold, r.prediction, r.confidence, r.error, r.seq, r.p_yes, r.p_no"
        params: list[Any] = []
        join = ""
        if need_items:
            grp, dist, params = self._failing_item_cols(group_field, distance=distance)
            cols += f', {grp} AS "group", {dist} AS distance'
            join = ("JOIN runs u ON u.run_id = r.run_id "
                    "LEFT JOIN items i ON i.suite_id = u.suite_id AND i.item_id = r.item_id")
        conds = ["r.run_id = ?", *([where] if where else [])]
        params.append(run_id)
        sql = f"SELECT {cols} FROM results r {join} WHERE {' AND '.join(conds)}"
        outer: list[str] = []
        oparams: list[Any] = []
        if group is not None:
            outer.append('"group" = ?')
            oparams.append(group)
        if min_conf is not None:
            outer.append("coalesce(confidence, -1) >= ?")
            oparams.append(float(min_conf))
        owhere = (" WHERE " + " AND ".join(outer)) if outer else ""
        return f"SELECT * FROM ({sql}) f{owhere}", params + oparams

    @staticmethod
    def _failing_order(sort: str, p: str = "") -> str:
        # Ties keep arrival order, as the in-memory list's stable sorts do; no value sorts last.
        return {
            "arrival": f"{p}seq",
            "confidence": f"coalesce({p}confidence, -1) DESC, {p}seq",
            "distance": f"coalesce({p}distance, -1) DESC, {p}seq",
            "group": f'{p}"group", {p}seq',
            # whole-number ids by value (10, 141, 1003), then the rest as text (tui.widgets.item_sort_key)
            "item": f"TRY_CAST({p}item_id AS BIGINT) NULLS LAST, {p}item_id, {p}seq",
        }[sort]

    def failing_count(self, run_id: str, *, group_field: str | None = None, group: str | None = None,
                      min_conf: float | None = None, where: str | None = FAILING_WHERE,
                      distance: str | None = None) -> int:
        """How many failing rows (or the rows `where` chooses) match the filters."""
        sql, params = self._failing_sql(run_id, group_field, group, min_conf, where=where, distance=distance)
        row = self.execute(f"SELECT count(*) FROM ({sql})", params).fetchone()
        return int(row[0]) if row else 0

    def failing_page(self, run_id: str, offset: int, limit: int, *, sort: str = "arrival",
                     group_field: str | None = None, group: str | None = None,
                     min_conf: float | None = None, where: str | None = FAILING_WHERE,
                     distance: str | None = None) -> dict[str, list[Any]]:
        """Rows [offset, offset+limit) of the failing list in `sort` order, as column lists
        (item_id, variant, group, gold, prediction, confidence, distance, error, text, seq).
        `where` (an SQL condition on the results alias `r`; None: every row) chooses other rows.
        `distance`: the SQL template of the distance column (see `_failing_item_cols`).

        The page is chosen on the result columns first; item text and fields are joined for
        its rows only.
        """
        if sort not in self.FAILING_SORTS:
            raise ValueError(f"sort must be one of {', '.join(self.FAILING_SORTS)}, not {sort!r}")
        sql, params = self._failing_sql(run_id, group_field, group, min_conf, sort, where, distance)
        grp, dist, gparams = self._failing_item_cols(group_field, distance=distance, results="p")
        # Only the page's items are read (not joined against the suite's whole items table).
        page = f"""
            WITH p AS MATERIALIZED ({sql} ORDER BY {self._failing_order(sort)} LIMIT ? OFFSET ?),
            i AS (SELECT item_id, text, fields FROM items
                  WHERE suite_id = (SELECT suite_id FROM runs WHERE run_id = ?)
                    AND item_id IN (SELECT item_id FROM p))
            SELECT p.item_id, p.variant, {grp} AS "group", p.gold, p.prediction, p.confidence,
                   {dist} AS distance, p.error, coalesce(i.text, '') AS text, p.seq
            FROM p LEFT JOIN i ON i.item_id = p.item_id
            ORDER BY {self._failing_order(sort, "p.")}
        """
        with self._lock:
            try:
                cur = self.con.execute(page, [*params, int(limit), int(offset), run_id, *gparams])
                names = [d[0] for d in cur.description or []]
                rows = cur.fetchall()
            except duckdb.Error as e:
                raise _explain(e, self.path, "querying") from e
        return {name: [r[j] for r in rows] for j, name in enumerate(names)}

    def failing_position(self, run_id: str, item_id: str, variant: str, *, sort: str = "arrival",
                         group_field: str | None = None, group: str | None = None,
                         min_conf: float | None = None, where: str | None = FAILING_WHERE,
                         distance: str | None = None) -> int | None:
        """Where (item_id, variant) is in the sorted, filtered failing list (or `where`'s rows), or None."""
        sql, params = self._failing_sql(run_id, group_field, group, min_conf, sort, where, distance)
        row = self.execute(
            f"SELECT pos FROM (SELECT item_id, variant, row_number() OVER (ORDER BY "
            f"{self._failing_order(sort)}) - 1 AS pos FROM ({sql})) WHERE item_id = ? AND variant = ?",
            [*params, item_id, variant],
        ).fetchone()
        return int(row[0]) if row else None

    def save_analysis(self, run_id: str, kind: str, payload: Any) -> None:
        """Store (replace) a derived analysis of a run."""
        self.execute("DELETE FROM analyses WHERE run_id = ? AND kind = ?", [run_id, kind])
        self.execute("INSERT INTO analyses VALUES (?, ?, ?, ?)", [run_id, kind, _json(payload), _now()])

    def load_analysis(self, run_id: str, kind: str) -> Any:
        """A stored analysis, or None."""
        row = self.execute("SELECT payload FROM analyses WHERE run_id = ? AND kind = ?", [run_id, kind]).fetchone()
        return json.loads(row[0]) if row else None

    def max_seq(self, run_id: str) -> int:
        row = self.execute("SELECT coalesce(max(seq), -1) FROM results WHERE run_id = ?", [run_id]).fetchone()
        return int(row[0]) if row else -1


RESULT_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()), ("item_id", pa.string()), ("variant", pa.string()), ("seq", pa.int64()),
        ("prompt", pa.string()), ("probs", pa.string()), ("p_yes", pa.float64()), ("p_no", pa.float64()),
        ("other", pa.float64()), ("top_tokens", pa.string()), ("option_scores", pa.string()),
        ("prediction", pa.string()), ("gold", pa.string()), ("correct", pa.float64()),
        ("confidence", pa.float64()), ("n_tokens", pa.int32()), ("latency_ms", pa.float64()),
        ("error", pa.string()), ("extra", pa.string()), ("written_at", pa.timestamp("us")),
        ("p_chosen", pa.float64()), ("choice_method", pa.string()), ("top_tokens_blob", pa.int64()),
    ]
)
# The `results` columns that hold JSON text (open shapes); every reader gets them decoded
# from the store (`decode_json`, `Store.results_frame(decoded=True)`, `Store.item_detail`).
# items per insert in `Store.add_suite` (WorldSense: 87,048 items in 6 slices)
_ITEM_SLICE = 16_384
# RESULT_SCHEMA's Arrow types as DuckDB's (`append_results_sql` casts the select's columns to them)
_DUCK_TYPES = {"string": "VARCHAR", "double": "DOUBLE", "int64": "BIGINT", "int32": "INTEGER",
               "timestamp[us]": "TIMESTAMP"}
JSON_RESULT_COLUMNS = ("probs", "top_tokens", "option_scores", "extra")

def _json_many(values: Iterable[Any]) -> list[str | None]:
    """`_json` of each value; orjson in one comprehension, the careful path only for a value it refuses."""
    dumps, opts, default = orjson.dumps, _ORJSON_OPTS, _json_default
    try:
        return [None if v is None else dumps(v, default=default, option=opts).decode() for v in values]
    except (orjson.JSONEncodeError, TypeError):
        return [_json(v) for v in values]


def _json_array(values: Sequence[Any]) -> pa.Array:
    """`_json_many` as an Arrow string array, built from orjson's bytes without a Python str
    per value (Arrow checks the UTF-8 in one pass). Values orjson takes only with the careful
    options (non-string keys, objects needing `default`) go through `_json_many`: same text."""
    dumps, opt = orjson.dumps, orjson.OPT_SERIALIZE_NUMPY
    try:
        encoded = [None if v is None else dumps(v, option=opt) for v in values]
        return pa.array(encoded, type=pa.binary()).cast(pa.string())
    except (orjson.JSONEncodeError, TypeError, pa.ArrowInvalid):
        return pa.array(_json_many(values), type=pa.string())


def _finite_array(values: Sequence[Any]) -> pa.Array:
    """float64 with NaN/inf (and None) as null, converted in Arrow rather than per value."""
    try:
        arr = pa.array(values, type=pa.float64())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return pa.array([_finite(v) for v in values], type=pa.float64())
    if arr.null_count == len(arr):
        return arr
    return pc.if_else(pc.is_finite(arr), arr, pa.scalar(None, pa.float64()))


def _column_list(v: Any) -> list[Any]:
    return v.to_pylist() if isinstance(v, (pa.Array, pa.ChunkedArray)) else list(v)


def _decoded_probs(p: Any) -> Any:
    if isinstance(p, str):
        try:
            return orjson.loads(p)
        except orjson.JSONDecodeError:
            return None
    return p


def _p_chosen(probs: Sequence[Any], preds: Sequence[Any]) -> pa.Array:
    """probs[prediction] per row (probs as dicts or JSON text)."""
    vals = []
    for p, x in zip(probs, preds, strict=True):
        d = _decoded_probs(p) if p is not None and x is not None else None
        vals.append(d.get(x) if isinstance(d, dict) else None)
    return _finite_array(vals)


def _choice_method(extras: Sequence[Any]) -> pa.Array:
    """extra.choice_method per row (extras as dicts or JSON text; bulk imports repeat a few texts)."""
    out = []
    memo: dict[str, str | None] = {}
    for e in extras:
        if isinstance(e, str) and e in memo:
            out.append(memo[e])
            continue
        d = _decoded_probs(e) if e else None
        m = d.get("choice_method") if isinstance(d, dict) else None
        m = m if isinstance(m, str) else None
        if isinstance(e, str):
            memo[e] = m
        out.append(m)
    return pa.array(out, type=pa.string())


def results_to_arrow(run_id: str, rs: Sequence[Result], start_seq: int, now: dt.datetime, *,
                     tops_inline: bool = True) -> pa.Table:
    """Column-wise conversion of results to the `results` table's Arrow schema (floats are
    checked for NaN/inf in Arrow; JSON columns encoded by orjson per value). `tops_inline=False`
    leaves `top_tokens` null (the store writes them as the batch's blob, `encode_top_tokens`)."""
    n = len(rs)
    if not n:
        return RESULT_SCHEMA.empty_table()
    probs = [r.probs for r in rs]
    preds = [r.prediction for r in rs]
    extras = [r.extra for r in rs]
    ntok = [r.n_tokens for r in rs]
    try:
        n_tokens = pa.array([v or 0 for v in ntok], type=pa.int32())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        n_tokens = pa.array([int(v or 0) for v in ntok], type=pa.int32())
    methods = [e.get("choice_method") if e else None for e in extras]
    arrays = [
        pa.array([run_id] * n, type=pa.string()),
        pa.array([r.item_id for r in rs], type=pa.string()),
        pa.array([r.variant for r in rs], type=pa.string()),
        pa.array(range(start_seq, start_seq + n), type=pa.int64()),
        pa.array([r.prompt for r in rs], type=pa.string()),
        _json_array(probs),
        _finite_array([p.get("yes") if p else None for p in probs]),
        _finite_array([p.get("no") if p else None for p in probs]),
        _finite_array([r.other for r in rs]),
        _json_array([r.top_tokens for r in rs]) if tops_inline else pa.nulls(n, type=pa.string()),
        _json_array([r.option_scores for r in rs]),
        pa.array(preds, type=pa.string()),
        pa.array([r.gold for r in rs], type=pa.string()),
        _finite_array([r.correct for r in rs]),
        _finite_array([r.confidence for r in rs]),
        n_tokens,
        _finite_array([r.latency_ms for r in rs]),
        pa.array([r.error for r in rs], type=pa.string()),
        _json_array([e or None for e in extras]),
        pa.array([now] * n, type=pa.timestamp("us")),
        _finite_array([p.get(x) if p and x is not None else None for p, x in zip(probs, preds, strict=True)]),
        pa.array([m if isinstance(m, str) else None for m in methods], type=pa.string()),
        pa.nulls(n, type=pa.int64()),
    ]
    return pa.Table.from_arrays(arrays, schema=RESULT_SCHEMA)


def encode_top_tokens(tops: Sequence[Any]) -> bytes | None:
    """One batch's top tokens (a list per row, or None) as the blob stored in `result_blobs`:
    zstd level 1 over one orjson array (None when no row has any). One orjson call and one
    compression per batch instead of a JSON text per row: the per-row cost of top tokens was
    more than half of a write (docs/PERFORMANCE.md, round 4 sto2)."""
    if all(t is None for t in tops):
        return None
    try:
        raw = orjson.dumps(tops, option=orjson.OPT_SERIALIZE_NUMPY)
    except (orjson.JSONEncodeError, TypeError):
        # what orjson refuses with the fast options (non-string keys, odd objects): the
        # careful encoder per row, the same text `_json` stores in a column
        raw = ("[" + ",".join("null" if t is None else (_json(t) or "null") for t in tops) + "]").encode()
    # zstd level 1 (measured on 100k bench rows, 20 top tokens each: 0.28 CPU s, 22 MB; stdlib
    # zlib level 1: 0.74 s, 29 MB; lz4: 0.19 s but 45 MB for DuckDB to write)
    return zstandard.ZstdCompressor(level=1).compress(raw)


def decode_top_tokens(blob: bytes) -> list[Any]:
    """The per-row list of an `encode_top_tokens` blob."""
    v = decode_json(zstandard.ZstdDecompressor().decompress(blob))
    if not isinstance(v, list):
        raise StoreError("a stored top-tokens blob does not hold a list")
    return v


_LONG_DIGITS = re.compile(r"-?[0-9]{19,}")


def decode_json(v: Any, default: Any = None) -> Any:
    """A stored JSON column's value decoded: text is parsed (`default` when it does not parse),
    anything else (None, an already decoded value) is returned as it is. The one JSON decoder
    for stored columns; code outside store/ calls this or gets decoded values from `Store`."""
    if isinstance(v, (bytes, str)):
        try:
            text = v if isinstance(v, str) else v.decode("utf-8", "replace")
            if any(not (-(2**63) <= int(m) <= 2**64 - 1) for m in _LONG_DIGITS.findall(text)):
                raise orjson.JSONDecodeError("orjson reads integers beyond 64 bits as floats", "", 0)
            return orjson.loads(v)
        except orjson.JSONDecodeError:
            try:  # what orjson refuses and the stdlib reads (NaN, integers beyond 64 bits)
                return json.loads(v)
            except (json.JSONDecodeError, UnicodeDecodeError):
                return default
    return v


def _has_wide_int(text: str) -> bool:
    """Whether ``text`` holds an integer orjson cannot read exactly: `decode_json`'s
    ``_LONG_DIGITS`` test, with the digit runs found by numpy. Written by hand because the
    regex tries every position of every run of digits (probabilities have 17-digit runs):
    1.8 s over a 1M-row `probs` column, against ~0.1 s."""
    raw = text.encode("utf-8", "surrogatepass")
    b = np.frombuffer(raw, dtype=np.uint8)
    digit = ((b >= 48) & (b <= 57)).astype(np.int8)
    edges = np.diff(np.concatenate(([0], digit, [0])).astype(np.int8))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    wide = (ends - starts) >= 19
    for s, e in zip(starts[wide].tolist(), ends[wide].tolist(), strict=True):
        v = int(raw[s:e])
        if s > 0 and raw[s - 1] == 45:  # "-": the regex's optional sign
            v = -v
        if not (-(2**63) <= v <= 2**64 - 1):
            return True
    return False


def decode_json_many(values: Iterable[Any], default: Any = None) -> list[Any]:
    """`decode_json` of each value (a stored column's), with one scan of all the texts for
    integers beyond orjson's range instead of one per text: a 1M-row yes/no report decoded
    its `probs` column per row through the scan (~1.5 s)."""
    vals = list(values)
    texts = [v for v in vals if isinstance(v, str)]
    if len(texts) < len(vals) and any(isinstance(v, bytes) for v in vals):
        return [decode_json(v, default) for v in vals]
    # decode_json's test, over the texts in chunks (digit runs never cross the newlines)
    if any(_has_wide_int("\n".join(texts[i:i + 65536])) for i in range(0, len(texts), 65536)):
        return [decode_json(v, default) for v in vals]  # some text needs the stdlib: each as decode_json does
    loads = orjson.loads
    out: list[Any] = []
    for v in vals:
        if isinstance(v, str):
            try:
                out.append(loads(v))
            except orjson.JSONDecodeError:
                out.append(decode_json(v, default))  # NaN and the like: what the stdlib reads
        else:
            out.append(v)
    return out


STORED_JSON_COLUMNS = (*JSON_RESULT_COLUMNS, "fields", "options", "item_fields", "item_options")


def decode_frame(df: pd.DataFrame, columns: Iterable[str] = STORED_JSON_COLUMNS) -> pd.DataFrame:
    """A copy of a frame of stored rows with its JSON columns (those present) decoded."""
    out = df.copy()
    for c in columns:
        if c in out.columns:
            out[c] = pd.Series([None if _isnull(v) else decode_json(v) for v in out[c]], index=out.index, dtype=object)
    return out


def _row(df: pd.DataFrame) -> dict[str, Any]:
    rec = df.iloc[0].to_dict()
    for k in ("options", "versions", "meta", "backend_config"):
        if isinstance(rec.get(k), str):
            try:
                rec[k] = json.loads(rec[k])
            except json.JSONDecodeError:
                pass
    out = {str(k): (None if (isinstance(v, float) and math.isnan(v)) or v is pd.NaT else v) for k, v in rec.items()}
    pid = out.get("owner_pid")
    if isinstance(pid, float):
        out["owner_pid"] = int(pid)
    out["stored_status"] = out.get("status")
    out["status"] = effective_status(out)
    return out
