"""Writing suites, runs and result rows, under a per-run key check against duplicate keys."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from llmscope.engine.types import Item, Result
from llmscope.store.codec import (
    choice_method_array,
    column_list,
    encode_json,
    finish_top_tokens,
    p_chosen_array,
    pack_top_tokens,
    results_to_arrow,
)
from llmscope.store.errors import StoreError, explain
from llmscope.store.schema import RESULT_SCHEMA, utc_now

if TYPE_CHECKING:
    from llmscope.store.db import Rows
    from llmscope.store.snapshot import WriterLock

# items per insert in `Store.add_suite` (WorldSense: 87,048 items in 6 slices)
_ITEM_SLICE = 16_384
# RESULT_SCHEMA's Arrow types as DuckDB's (`append_results_sql` casts the select's columns to them)
_DUCK_TYPES = {
    "string": "VARCHAR",
    "double": "DOUBLE",
    "int64": "BIGINT",
    "int32": "INTEGER",
    "timestamp[us]": "TIMESTAMP",
}


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

_ENCODER: ThreadPoolExecutor | None = None
_ENCODER_LOCK = threading.Lock()


def _tops_encoder() -> ThreadPoolExecutor:
    """One worker thread per process for `write_results`' top-tokens blobs (started on first use)."""
    global _ENCODER
    with _ENCODER_LOCK:
        if _ENCODER is None:
            _ENCODER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llmscope-tops")
        return _ENCODER


class StoreWrites:
    """The `Store`'s writes: suites and their items, run records, result rows (from `Result`s,
    columns or a select), derived analyses."""

    if TYPE_CHECKING:  # provided by `Store` (store/db.py) and its other parts
        path: str
        con: duckdb.DuckDBPyConnection
        _lock: WriterLock
        _in_tx: bool
        _db_key: str

        def execute(self, sql: str, params: Sequence[Any] | None = None) -> Rows: ...
        def has_suite(self, suite_id: str) -> bool: ...
        def _maybe_checkpoint(self) -> None: ...

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
                    raise explain(e, self.path, f"writing {table}") from e
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
                self._roll_back()
                raise explain(e, self.path, f"writing {table}") from e

    def _insert_with_blob(
        self, run_id: str, tbl: pa.Table, seq_lo: int, blob: bytes | Future[bytes | None]
    ) -> None:
        """Insert rows and their batch's top-tokens blob in one transaction (the caller's, inside
        `transaction()`); caller holds the locks. The blob id comes from a sequence, so two
        open transactions (two `Store`s of one file) never share one. `blob` may still be
        encoding (`write_results`): the rows go in first, then its bytes, before the commit."""
        own = not self._in_tx
        try:
            if own:
                self.con.execute("BEGIN TRANSACTION")
            row = self.con.execute("SELECT nextval('result_blob_ids')").fetchall()
            blob_id = int(row[0][0])
            i = tbl.schema.get_field_index("top_tokens_blob")
            tbl = tbl.set_column(
                i, "top_tokens_blob", pa.array(np.full(tbl.num_rows, blob_id, dtype=np.int64))
            )
            self.con.register("_llmscope_batch", tbl)
            try:
                cols = ", ".join(tbl.column_names)
                self.con.execute(
                    f"INSERT INTO results ({cols}) SELECT {cols} FROM _llmscope_batch"
                ).fetchall()
            finally:
                self.con.unregister("_llmscope_batch")
            data = blob.result() if isinstance(blob, Future) else blob
            self.con.execute(
                "INSERT INTO result_blobs VALUES (?, ?, ?, ?, ?)",
                [blob_id, run_id, seq_lo, int(pc.max(tbl.column("seq")).as_py()), data],
            )
            if own:
                self.con.execute("COMMIT")
        except BaseException as e:  # also the blob's encoder refusing a value: nothing committed
            self._roll_back(own)
            if isinstance(e, duckdb.Error):
                raise explain(e, self.path, "writing results") from e
            raise

    def _forget_keys(self) -> None:
        with _KEYS_LOCK:
            _KEYS.pop(self._db_key, None)

    def _roll_back(self, own: bool = True) -> None:
        """Undo a failed write: the cached keys are forgotten (some may not be stored after
        all) and, in a transaction this write opened (`own`), it is rolled back."""
        self._forget_keys()
        if own:
            try:
                self.con.execute("ROLLBACK")
            except duckdb.Error:
                pass

    def _stored_keys(self, run_id: str) -> set[tuple[str, str]]:
        """The keys stored for a run (read from the table once per process; caller holds _KEYS_LOCK)."""
        idx = _KEYS.setdefault(self._db_key, _KeyIndex())
        keys = idx.runs.get(run_id)
        if keys is None:
            rows = self.con.execute(
                "SELECT item_id, variant FROM results WHERE run_id = ?", [run_id]
            ).fetchall()
            keys = idx.runs[run_id] = {(r[0], r[1]) for r in rows}
        return keys

    def _insert_results(
        self,
        run_id: str,
        tbl: pa.Table,
        tops_blob: tuple[int, bytes | Future[bytes | None]] | None = None,
        keys: list[tuple[str, str]] | None = None,
    ) -> int:
        """Append a batch of one run's rows, skipping keys already stored or repeated in the
        batch (the first copy counts). Inside `transaction()` such a key is an error instead,
        so bulk writers that dedupe themselves learn of a mistake. Returns rows written.

        `tops_blob`: (seq of the batch's first row, `encode_top_tokens` blob of the whole batch),
        stored in `result_blobs` in the rows' transaction; the rows name it in `top_tokens_blob`.
        `keys`: the rows' (item_id, variant) in table order, where the caller has them (read
        from the table otherwise)."""
        with self._lock, _KEYS_LOCK:
            try:
                stored = self._stored_keys(run_id)
            except duckdb.Error as e:
                raise explain(e, self.path, "reading stored keys") from e
            batch = (
                keys
                if keys is not None
                else list(
                    zip(
                        tbl.column("item_id").to_pylist(),
                        tbl.column("variant").to_pylist(),
                        strict=True,
                    )
                )
            )
            fresh = set(batch)
            if len(fresh) != len(batch) or not stored.isdisjoint(fresh):
                seen: set[tuple[str, str]] = set()
                keep = []
                for k in batch:
                    keep.append(k not in stored and k not in seen)
                    seen.add(k)
                if self._in_tx:
                    dup = next(k for k, ok in zip(batch, keep, strict=True) if not ok)
                    raise StoreError(
                        f"duplicate result key {dup} for run {run_id} inside one transaction"
                    )
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

    def add_suite(
        self,
        suite_id: str,
        name: str,
        task: str,
        spec: dict[str, Any],
        source: str,
        items: Sequence[Item],
    ) -> None:
        """Store a suite and its items in one transaction (skipped when already stored).

        The items go in slices of `_ITEM_SLICE`: their JSON and Arrow columns are built per
        slice, so memory holds one slice's copy of the texts, not the whole suite's."""
        if self.has_suite(suite_id):
            return
        schema = pa.schema(
            [
                ("suite_id", pa.string()),
                ("item_id", pa.string()),
                ("idx", pa.int32()),
                ("text", pa.string()),
                ("gold", pa.string()),
                ("options", pa.string()),
                ("fields", pa.string()),
            ]
        )
        with self._lock:
            try:
                self.con.execute("BEGIN TRANSACTION")
                self.con.execute(
                    "INSERT INTO suites VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [suite_id, name, task, encode_json(spec), source, len(items), utc_now()],
                )
                for lo in range(0, len(items), _ITEM_SLICE):
                    part = items[lo : lo + _ITEM_SLICE]
                    tbl = pa.table(
                        {
                            "suite_id": [suite_id] * len(part),
                            "item_id": [it.item_id for it in part],
                            "idx": list(range(lo, lo + len(part))),
                            "text": [it.text for it in part],
                            "gold": [it.gold for it in part],
                            "options": [encode_json(it.options) for it in part],
                            "fields": [encode_json(it.fields) for it in part],
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
            except (
                BaseException
            ) as e:  # also a value the JSON encoder refuses: no open transaction left
                try:
                    self.con.execute("ROLLBACK")
                except duckdb.Error:
                    pass
                if isinstance(e, duckdb.Error):
                    raise explain(e, self.path, "storing the suite") from e
                raise

    def create_run(self, run: dict[str, Any]) -> None:
        run = dict(run)
        for k in ("options", "versions", "meta", "backend_config"):
            if k in run and not isinstance(run[k], str):
                run[k] = encode_json(run[k])
        run.setdefault("started_at", utc_now())
        run.setdefault("updated_at", utc_now())
        run.setdefault("status", "running")
        cols = list(run)
        with self._lock:
            try:
                self.con.execute(
                    f"INSERT INTO runs ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})",
                    [run[c] for c in cols],
                )
            except duckdb.Error as e:
                raise explain(e, self.path, "creating the run") from e

    def update_run(self, run_id: str, **fields: Any) -> None:
        if not fields:
            return
        for k in ("options", "versions", "meta", "backend_config"):
            if k in fields and not isinstance(fields[k], str):
                fields[k] = encode_json(fields[k])
        fields.setdefault("updated_at", utc_now())
        sets = ", ".join(f"{k} = ?" for k in fields)
        self.execute(f"UPDATE runs SET {sets} WHERE run_id = ?", [*fields.values(), run_id])

    def delete_error_results(self, run_id: str) -> int:
        """Remove a run's error rows so a resume scores those items again; returns how many."""
        n = self.execute(
            "SELECT count(*) FROM results WHERE run_id = ? AND error IS NOT NULL", [run_id]
        ).fetchone()
        if n and n[0]:
            self.execute("DELETE FROM results WHERE run_id = ? AND error IS NOT NULL", [run_id])
        return int(n[0]) if n else 0

    def write_results(self, run_id: str, results: Iterable[Result], start_seq: int = 0) -> int:
        """Append results in one Arrow batch and one transaction; duplicates are ignored."""
        rs = list(results)
        if not rs:
            return 0
        now = utc_now()
        tops = [r.top_tokens for r in rs]
        # The top tokens' blob: its MessagePack here (ormsgpack holds the GIL, ~4 ms a batch; on
        # the worker it stalled this thread's conversion and every return from DuckDB behind it),
        # its check for non-finite floats and zstd compression on a worker thread while this one
        # converts and inserts the rows (numpy, zstd and DuckDB's insert release the GIL). The
        # bytes are `encode_top_tokens`', inserted in the rows' transaction.
        raw = pack_top_tokens(tops)
        blob = None if raw is None else _tops_encoder().submit(finish_top_tokens, tops, raw)
        try:
            # the keys from the results (the Arrow columns hold the same strings: their
            # conversion refuses anything else), not read back from the table (~1 ms a write)
            keys: list[tuple[str, str]] = []
            tbl = results_to_arrow(run_id, rs, start_seq, now, tops_inline=False, keys=keys)
            self._insert_results(
                run_id, tbl, tops_blob=None if blob is None else (start_seq, blob), keys=keys
            )
        except BaseException:
            if blob is not None:
                blob.cancel()
            raise
        if blob is not None:
            blob.result()  # an encoding error surfaces even when every row was a duplicate
        return len(rs)

    def append_results(
        self,
        run_id: str,
        columns: Mapping[str, Any],
        start_seq: int = 0,
        *,
        prompt_from_suite: str | None = None,
    ) -> int:
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
        unknown = (
            set(columns) - set(RESULT_SCHEMA.names) - {"run_id", "seq", "written_at", "p_chosen"}
        )
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
                arrays.append(pa.array([utc_now()] * n, type=f.type))
            elif f.name in columns:
                v = columns[f.name]
                arrays.append(
                    v.cast(f.type) if isinstance(v, pa.Array) else pa.array(v, type=f.type)
                )
            elif f.name == "n_tokens":
                arrays.append(pa.array([0] * n, type=f.type))
            elif f.name == "latency_ms":
                arrays.append(pa.array([0.0] * n, type=f.type))
            elif f.name == "p_chosen" and "probs" in columns and "prediction" in columns:
                arrays.append(
                    p_chosen_array(
                        column_list(columns["probs"]), column_list(columns["prediction"])
                    )
                )
            elif (
                f.name == "choice_method" and "extra" in columns and "choice_method" not in columns
            ):
                arrays.append(choice_method_array(column_list(columns["extra"])))
            else:
                arrays.append(pa.nulls(n, type=f.type))
        return self._insert_results(run_id, pa.Table.from_arrays(arrays, schema=RESULT_SCHEMA))

    def _check_prompt_from_suite(
        self, run_id: str, has_prompt: bool, prompt_from_suite: str | None
    ) -> None:
        """`prompt_from_suite` only without a prompt column, and only the run's own suite."""
        if prompt_from_suite is None:
            return
        if has_prompt:
            raise ValueError("give either a prompt column or prompt_from_suite, not both")
        row = self.execute("SELECT suite_id FROM runs WHERE run_id = ?", [run_id]).fetchone()
        if row is None or row[0] != prompt_from_suite:
            # readers take the text from the run's suite: another suite's text would be lost
            raise ValueError(
                f"prompt_from_suite {prompt_from_suite!r} is not the suite of run {run_id!r}"
                f" ({row[0] if row else 'no such run'})"
            )

    def _check_result_columns(
        self, run_id: str, names: Sequence[str], prompt_from_suite: str | None
    ) -> None:
        """`append_results`'s column rules for a SQL batch (`append_results_sql`)."""
        self._check_prompt_from_suite(run_id, "prompt" in names, prompt_from_suite)
        if len(set(names)) != len(names):
            raise ValueError(
                f"repeated column names: {sorted(n for n in set(names) if names.count(n) > 1)}"
            )
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
            raise ValueError(
                "top tokens are stored as blobs by write_results; append_results_sql does not take them"
            )

    def append_results_sql(
        self,
        run_id: str,
        select_sql: str,
        params: Sequence[Any] | None = None,
        *,
        prompt_from_suite: str | None = None,
        tables: Mapping[str, pa.Table] | None = None,
    ) -> int:
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
                    return self._append_sql(
                        run_id, select_sql, list(params or []), prompt_from_suite
                    )
                finally:
                    for name in tables or {}:
                        self.con.unregister(name)
            except duckdb.Error as e:
                self._forget_keys()
                raise explain(e, self.path, "writing results") from e

    def _append_sql(
        self, run_id: str, select_sql: str, params: list[Any], prompt_from_suite: str | None
    ) -> int:
        batch = "_llmscope_sql_batch"
        # the select runs once: its rows are checked, then inserted from this temporary table
        self.con.execute(
            f"CREATE OR REPLACE TEMP TABLE {batch} AS SELECT * FROM ({select_sql})", params
        )
        try:
            names = [
                str(d[0]) for d in self.con.execute(f"SELECT * FROM {batch} LIMIT 0").description
            ]
            self._check_result_columns(run_id, names, prompt_from_suite)
            stored = self._stored_keys(run_id)
            exists = (
                (
                    "EXISTS (SELECT 1 FROM results r WHERE r.run_id = ? AND r.item_id = b.item_id "
                    "AND r.variant = b.variant)"
                )
                if stored
                else "false"
            )
            key_params = [run_id] if stored else []
            # a key repeated in the batch (after its first, lowest-seq copy) or stored already
            ranked = (
                f"(SELECT *, row_number() OVER (PARTITION BY item_id, variant ORDER BY seq) AS _k "
                f"FROM {batch}) b"
            )
            repeated = f"(b._k > 1 OR {exists})"
            if self._in_tx:
                dup = self.con.execute(
                    f"SELECT b.item_id, b.variant FROM {ranked} WHERE {repeated} "
                    "ORDER BY b.seq LIMIT 1",
                    key_params,
                ).fetchall()
                if dup:
                    raise StoreError(
                        f"duplicate result key {tuple(dup[0])} for run {run_id} inside one transaction"
                    )
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
            head = [
                run_id if c == "run_id" else utc_now()
                for c in cols
                if c in ("run_id", "written_at")
            ]
            sql = (
                f"INSERT INTO results ({', '.join(cols)}) SELECT {', '.join(exprs)} FROM {ranked} {where} "
                "ORDER BY b.seq"
            )
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

    def save_analysis(self, run_id: str, kind: str, payload: Any) -> None:
        """Store (replace) a derived analysis of a run."""
        self.execute("DELETE FROM analyses WHERE run_id = ? AND kind = ?", [run_id, kind])
        self.execute(
            "INSERT INTO analyses VALUES (?, ?, ?, ?)",
            [run_id, kind, encode_json(payload), utc_now()],
        )
