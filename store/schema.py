"""The database layout: its tables, the migrations that build them, a results row as Arrow."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa

from llmscope.store.errors import SchemaTooNew, StoreError, explain

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
        -- The run record: how to rebuild the backend, who is writing the run, and
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
        # Bulk writes: `results` loses its primary key (an ART index insert per row
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
        # Top tokens leave the row: a batch's top tokens are one compressed blob
        # (zstd over one orjson array, entry i = the row with seq seq_lo + i), written in the
        # batch's transaction; a row names its batch's blob in `top_tokens_blob`, so a deleted,
        # skipped or rescored row never picks up another row's entry. Rows written before keep
        # their JSON in `results.top_tokens`; readers read that first (`_fill_top_tokens`).
        # Blobs written since are MessagePack where it holds the same values, JSON otherwise
        # (`codec.pack_top_tokens`); both are read.
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

LEGACY_TABLES = (
    "suites",
    "items",
    "runs",
    "results",
)  # created by migration 1, adopted from version 0


# A results row as Arrow, the columns of `results` in table order: every writer builds its batches
# in it (`codec.results_to_arrow`, `Store.append_results`).
RESULT_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("item_id", pa.string()),
        ("variant", pa.string()),
        ("seq", pa.int64()),
        ("prompt", pa.string()),
        ("probs", pa.string()),
        ("p_yes", pa.float64()),
        ("p_no", pa.float64()),
        ("other", pa.float64()),
        ("top_tokens", pa.string()),
        ("option_scores", pa.string()),
        ("prediction", pa.string()),
        ("gold", pa.string()),
        ("correct", pa.float64()),
        ("confidence", pa.float64()),
        ("n_tokens", pa.int32()),
        ("latency_ms", pa.float64()),
        ("error", pa.string()),
        ("extra", pa.string()),
        ("written_at", pa.timestamp("us")),
        ("p_chosen", pa.float64()),
        ("choice_method", pa.string()),
        ("top_tokens_blob", pa.int64()),
    ]
)


def utc_now() -> dt.datetime:
    """Now as the store's TIMESTAMP columns hold it: naive UTC."""
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def file_schema_version(path: str | Path) -> int:
    """The schema version a database file is at (0 before llmscope's versioning), read without
    migrating it (a read-only `Store` refuses older files)."""
    try:
        con = duckdb.connect(str(path), read_only=True)
    except Exception as e:
        raise explain(e, str(path), "opening the database") from e
    try:
        has = con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_version'"
        ).fetchall()[0][0]
        if not has:
            return 0
        v = con.execute("SELECT max(version) FROM schema_version").fetchall()[0][0]
        return int(v) if v is not None else 0
    except duckdb.Error as e:
        raise explain(e, str(path), "reading the schema version") from e
    finally:
        con.close()


class SchemaMigrations:
    """The `Store`'s schema: the version a file is at, and the migrations that bring it to
    SCHEMA_VERSION when it is opened for writing."""

    if TYPE_CHECKING:  # provided by `Store` (store/db.py)
        path: str
        read_only: bool
        con: duckdb.DuckDBPyConnection

        def _remove_if_created(self) -> None: ...

    def schema_version(self) -> int:
        """The schema version of the open file (0 before llmscope's versioning)."""
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
            raise explain(e, self.path, "reading the schema version") from e

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
                    self.con.execute(
                        "INSERT INTO schema_version VALUES (?, ?)", [version, utc_now()]
                    )
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
            raise explain(e, self.path, "creating or migrating the schema") from e

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
                self.con.execute(
                    f"INSERT INTO {table} ({cols}) SELECT {cols} FROM {old} ON CONFLICT DO NOTHING"
                )
        self.con.execute(f"DROP TABLE {old}")
