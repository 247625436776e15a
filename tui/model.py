"""The TUI's data layer: where results come from and the numbers drawn from them.

Nothing here imports Textual, so it is tested and reused without a terminal. The
screens call these functions from thread workers and post the results back.

Sources of a run's rows:

- the database (`StoreHandle`): a finished run, or a run executing inside this
  process (its writer thread and our reads share one `Store`, whose RLock makes
  that safe); new rows are fetched with `seq > last_seq`;
- the live channel (`LiveFeed`): a run executing in another process. DuckDB lets
  only one process hold a file that is being written, so the viewer reads
  `<db>.live/<run_id>/progress.json` and tails `results.jsonl` instead, and
  opens the database (read-only) only once the run has ended.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from llmscope.live import BadRecord, LiveRuns, ResultTail, live_dir, read_live, read_snapshot
from llmscope.store.db import JSON_RESULT_COLUMNS, RESULT_SCHEMA, Store, StoreError, decode_json

# The light result columns the dashboard holds per row: the store's one column definition
# (`RESULT_SCHEMA`) without the heavy text and JSON columns (prompt, top tokens, option scores,
# extra; the drill-down reads those per item) and the bookkeeping ones.
_HEAVY_COLS = ("run_id", "prompt", "written_at")
LIGHT_COLS = [c for c in RESULT_SCHEMA.names
              if c not in _HEAVY_COLS and (c not in JSON_RESULT_COLUMNS or c == "probs")]
MAX_GROUPS = 40


def is_lock_error(e: Exception) -> bool:
    """True when a StoreError says another process holds the file."""
    return "in use by another process" in str(e)


class StoreHandle:
    """The app's access to the database; it holds no lock while idle.

    Reads use a short-lived read-only connection, opened around each batch of reads and
    closed after it, so other terminals (`llmscope run`, `runs`, `report`) can take the
    file between them. While a run started in this window is writing, the write
    connection (`open_writer`, released by `release_writer` when the run ends) is the
    only one, and reads share it (its RLock serialises them with the writer thread).
    `read_only=True` (watch mode) never opens a write connection. `persistent` is kept
    for callers; connections are never kept open while idle.
    """

    WAIT_S = 10.0  # how long opening the writer or closing waits for reads in flight

    def __init__(self, path: str | Path, *, read_only: bool, persistent: bool = False) -> None:
        self.path = str(path)
        self.read_only = read_only
        self.persistent = persistent
        self._store: Store | None = None  # a short-lived read-only connection
        self._writer: Store | None = None
        self._writers = 0
        self._lock = threading.RLock()
        self._idle = threading.Condition(self._lock)  # notified when a batch of reads ends
        self._depth = 0  # batches of reads using the read-only connection now
        self._wdepth = 0  # batches of reads sharing the write connection now

    @property
    def store(self) -> Store | None:
        """The connection open right now (the writer while a run writes), else None."""
        return self._writer or self._store

    @property
    def writing(self) -> bool:
        """True while a run started in this window holds the write connection."""
        return self._writer is not None

    def open(self) -> Store:
        """The write connection (kept until `release_writer`); kept for older callers."""
        return self.open_writer()

    def open_writer(self) -> Store:
        """Open (or share) the write connection for a run started in this window."""
        with self._lock:
            if self.read_only:
                raise StoreError(f"{self.path} is open read-only in this window (watching)")
            if self._writer is None:
                # one process may not mix read-only and read-write: let readers finish first
                self._idle.wait_for(lambda: self._depth == 0, timeout=self.WAIT_S)
                if self._store is not None:
                    self._store.close()
                    self._store = None
                self._writer = Store(self.path)
            self._writers += 1
            return self._writer

    def open_writer_waiting(self, wait_s: float | None = None) -> Store:
        """`open_writer`, waiting (as `llmscope run` does, $LLMSCOPE_LOCK_WAIT s) while another
        process holds the file; then StoreLocked says who."""
        import os

        from llmscope.store.db import StoreLocked

        if wait_s is None:  # the CLI's wait (llmscope/cli/common.py LOCK_WAIT_S)
            wait_s = float(os.environ.get("LLMSCOPE_LOCK_WAIT", "5"))
        deadline = time.monotonic() + wait_s
        delay = 0.1
        while True:
            try:
                return self.open_writer()
            except StoreLocked:
                if time.monotonic() + delay > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def release_writer(self) -> None:
        """The run that opened the writer is done: close it once no run needs it."""
        with self._lock:
            self._writers = max(0, self._writers - 1)
            if self._writers == 0 and self._writer is not None:
                # reads sharing the writer finish first (their statements use its connection)
                self._idle.wait_for(lambda: self._wdepth == 0, timeout=self.WAIT_S)
                self._writer.close()
                self._writer = None

    def _open_reader(self) -> Store:
        if not Path(self.path).exists():
            if self.read_only:
                raise StoreError(f"no database at {self.path} (run `llmscope run` first, or pass --db)")
            Store(self.path).close()  # create it (a new file), then read it like any other
        try:
            return Store(self.path, read_only=True)
        except StoreError as e:
            if self.read_only or "open it once for writing" not in str(e):
                raise
            Store(self.path).close()  # an older schema: migrate once, then read
            return Store(self.path, read_only=True)

    @contextmanager
    def use(self) -> Iterator[Store]:
        """A Store for one batch of reads: the writer if a run writes, else a read-only one
        closed after the last concurrent batch.

        The handle's lock is held only to open or close the connection, not for the batch:
        a long read (a big run's metrics in a worker) does not block a short one (a page of
        the item list); the Store's own lock serialises their statements."""
        with self._lock:
            if self._writer is not None:
                store = self._writer
                reader = False
                self._wdepth += 1
            else:
                if self._store is None:
                    self._store = self._open_reader()
                store = self._store
                self._depth += 1
                reader = True
        try:
            yield store
        finally:
            with self._lock:
                if reader:
                    self._depth -= 1
                    if self._depth == 0 and self._store is not None:
                        self._store.close()
                        self._store = None
                else:
                    self._wdepth -= 1
                self._idle.notify_all()

    def close(self) -> None:
        with self._lock:
            self._idle.wait_for(lambda: self._depth == 0, timeout=self.WAIT_S)
            for st in (self._store, self._writer):
                if st is not None:
                    st.close()
            self._store = self._writer = None
            self._writers = 0


# -- run list --------------------------------------------------------------------------------
def owner_gone(run: dict[str, Any], published_at: Any = None) -> bool:
    """True when a live-channel run's writer (same host) no longer exists (kill -9: no `ended`):
    no process has its pid, or the one that has it started after the writer last published
    (`published_at`, the progress file's `time`: a recycled pid)."""
    import datetime as dt
    import socket

    from llmscope.store.db import _owner_alive

    pid, host = run.get("owner_pid"), run.get("owner_host")
    if not isinstance(pid, int) or host != socket.gethostname():
        return False
    beat = (dt.datetime.fromtimestamp(published_at, dt.UTC).replace(tzinfo=None)
            if isinstance(published_at, int | float) else None)
    return not _owner_alive(pid, beat)


def live_runs(db: str | Path) -> LiveRuns:
    """Runs published on the live channel, as run-list rows (newest first); `skipped` lists
    the progress files that could not be read (shown with the list)."""
    snaps = read_live(db)
    out = LiveRuns(skipped=snaps.skipped)
    for snap in snaps:
        if not snap["ended"] and owner_gone(snap.get("run") or {}, snap.get("time")):
            snap["ended"] = True  # killed: show it stopped, read it from the database
            snap.setdefault("progress", {})["status"] = "interrupted"
        run = snap.get("run") or {}
        prog = snap.get("progress") or {}
        out.append(
            {
                "run_id": prog.get("run_id") or run.get("run_id"),
                "suite_name": run.get("suite_name"),
                "task": run.get("task"),
                "model": run.get("model"),
                "status": prog.get("status", "running") if snap["ended"] else "running (live)",
                "n_total": prog.get("total"),
                "n_done": prog.get("done"),
                "n_errors": prog.get("errors"),
                "accuracy": prog.get("accuracy"),
                "started_at": run.get("started_at"),
                "live": not snap["ended"],
                "ended": snap["ended"],
                "progress": prog,
                "run": run,
                "dir": snap["dir"],
            }
        )
    return out


def run_signature(db: str | Path, run_id: str) -> tuple[Any, ...]:
    """What changes when any process resumes, extends or re-scores one run: its live channel
    (progress file time, `ended` marker) and the database file and its WAL (size, time).
    A few stat calls, so a dashboard of a stopped run polls it every tick."""
    import os

    out: list[Any] = []
    d = live_dir(db) / run_id
    for p in (d / "progress.json", d / "ended", Path(str(db)), Path(str(db) + ".wal")):
        try:
            st = os.stat(p)
            out.append((st.st_mtime_ns, st.st_size))
        except OSError:
            out.append(None)
    return tuple(out)


def active_live_runs(db: str | Path) -> list[dict[str, Any]]:
    return [r for r in live_runs(db) if r["live"]]


def db_runs(store: Store) -> list[dict[str, Any]]:
    df = store.runs()
    rows = []
    for rec in df.to_dict("records"):
        rec = {k: (None if _isnan(v) else v) for k, v in rec.items()}
        rec["live"] = False
        rows.append(rec)
    return rows


def _isnan(v: Any) -> bool:
    return v is pd.NaT or (isinstance(v, float) and math.isnan(v))


def _texts(col: pd.Series) -> list[Any]:
    """A text column's values with missing ones as None (NaN in pandas' string dtype)."""
    return [None if _isnan(v) else v for v in col.tolist()]


# -- one run's rows --------------------------------------------------------------------------
def _parse_json(s: Any) -> Any:
    if isinstance(s, str):
        try:
            return decode_json(s)
        except json.JSONDecodeError:
            return None
    return s




def load_items(store: Store, suite_id: str) -> dict[str, dict[str, Any]]:
    """item_id -> {text, gold, options, fields} for a stored suite."""
    df = store.items_frame(suite_id)
    out: dict[str, dict[str, Any]] = {}
    # `_texts`: an item without gold or options holds NaN beside items with them (pandas' string dtype)
    for iid, text, gold, opts, fields in zip(
        df["item_id"], _texts(df["text"]), _texts(df["gold"]), _texts(df["options"]), _texts(df["fields"]),
        strict=True,
    ):
        out[str(iid)] = {
            "text": text or "",
            "gold": gold,
            "options": _parse_json(opts),
            "fields": _parse_json(fields) or {},
        }
    return out


def items_from_suite(run: dict[str, Any]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Spec and items of a live run's suite, read from its files (never from the DB)."""
    meta = run.get("meta")
    meta = _parse_json(meta) if isinstance(meta, str) else (meta or {})
    sm = (meta or {}).get("suite") or {}
    name = sm.get("spec_path") or sm.get("name")
    if not name:
        return {}, {}
    try:
        from llmscope.data.registry import external_suite
        from llmscope.data.suites import load_suite

        if external_suite(str(sm.get("name"))) is not None:  # a corpus read from its data path
            suite = load_suite(sm["name"], sm.get("items_path"))
        else:
            suite = load_suite(name)
        items = {
            it.item_id: {
                "text": it.text,
                "gold": it.gold,
                "options": it.options,
                "fields": it.fields,
            }
            for it in suite.items()
        }
        spec = dict(suite.spec)
        spec.setdefault("group_by", suite.group_by)
        return spec, items
    except Exception:  # a moved or edited suite file only costs the item text
        return {}, {}


def _live_to_frame(rows: list[dict[str, Any]], start_seq: int, fields: dict[str, str] | None = None) -> pd.DataFrame:
    """Live-channel rows as light rows (`LIGHT_COLS`, then the task's declared `fields`), as
    the results table would hold them."""
    recs = []
    for i, r in enumerate(rows):
        probs = _parse_json(r.get("probs")) or None  # JSON text, as the results table holds it
        pd_ = probs if isinstance(probs, dict) else {}
        rec = {c: r.get(c) for c in LIGHT_COLS}
        rec.update(item_id=str(r.get("item_id")), seq=start_seq + i, probs=probs,
                   p_yes=r["p_yes"] if "p_yes" in r else pd_.get("yes"),
                   p_no=r["p_no"] if "p_no" in r else pd_.get("no"))
        for k in fields or {}:
            rec[k] = field_value(r, k)
        recs.append(rec)
    return pd.DataFrame(recs, columns=[*LIGHT_COLS, *(fields or {})])


class RunModel:
    """Accumulated per-item results of one run plus what the dashboard shows about them.

    Rows arrive in chunks (`add_frame`); `compute()` turns everything so far into a
    `Snapshot`. Both are called from worker threads; a lock keeps them serial.
    """

    def __init__(
        self, run: dict[str, Any], spec: dict[str, Any], items: dict[str, dict[str, Any]]
    ) -> None:
        self.run = run
        self.spec = spec
        self.items = items
        self.task = run.get("task") or spec.get("task")
        self.group_by: list[str] = [g for g in (spec.get("group_by") or []) if isinstance(g, str)]
        self.cluster_field: str | None = spec.get("cluster_field")
        # the task's declared list columns, and its flag when it has one (read with each row)
        self.fields = list_fields(self.task)
        # (a declared results column, e.g. `other`, is a light column already)
        self.field_kinds = {f.key: f.kind for f in self.fields if f.key not in LIGHT_COLS}
        if has_flags(self.task):
            self.field_kinds.setdefault(FLAG_KEY, "bool")
        self.lock = threading.RLock()
        self.df = pd.DataFrame(columns=LIGHT_COLS)
        self._chunks: list[pd.DataFrame] = []
        self.last_seq = -1
        self.version = 0
        self._live_keys: set[tuple[str, str]] = set()  # (item, variant) seen on the live channel
        self._snap: Snapshot | None = None
        self._computed_at = 0.0
        # A finished stored run's metrics from the store (run_metrics: lean SQL frame, cached),
        # with the row version they belong to.
        self._db_metrics: tuple[int, Any] | None = None
        self._item_index: pd.Index | None = None  # item ids in `items` order (item_values)
        self._item_cols: dict[tuple[str, str], np.ndarray] = {}
        self.has_human = any(
            "human_q1" in (it.get("fields") or {}) for it in list(items.values())[:50]
        )

    @property
    def run_id(self) -> str:
        return str(self.run.get("run_id"))

    # -- per-item lookups (vectorised: one array per field, indexed by item position) -------
    def item_values(self, ids: pd.Series, name: str, *, key: str = "fields") -> np.ndarray:
        """Each row's item field ``name`` (``key="item"``: the item's own ``name``, e.g. its
        text or its whole fields dict), None where absent.

        One pass over the items per field, then a positional take per batch of rows, instead
        of a dict lookup per row (87k-row runs).
        """
        with self.lock:
            if self._item_index is None or len(self._item_index) != len(self.items):
                self._item_index = pd.Index(list(self.items))
                self._item_cols = {}
            col = self._item_cols.get((key, name))
            if col is None:
                vals = [((it.get("fields") or {}).get(name) if key == "fields" else it.get(name))
                        for it in self.items.values()]
                col = np.empty(len(vals) + 1, dtype=object)
                col[:-1] = vals
                col[-1] = None
                self._item_cols[(key, name)] = col
            pos = self._item_index.get_indexer(pd.Index(ids.astype(str)))
        return col[np.where(pos < 0, len(col) - 1, pos)]

    # -- ingestion --------------------------------------------------------------------------
    def add_frame(self, df: pd.DataFrame) -> int:
        """Append new result rows (light columns); returns how many."""
        if df.empty:
            return 0
        from llmscope.analysis.queries import decode_json_column

        df = df.copy()
        df["item_id"] = df["item_id"].astype(str).astype(object)
        df["probs"] = decode_json_column(df["probs"]) if df["probs"].map(lambda v: isinstance(v, str)).any() else df["probs"]
        ids = df["item_id"]
        for g in self.group_by:
            df[f"g.{g}"] = pd.Series(self.item_values(ids, g), index=df.index, dtype=object)
        if self.has_human:
            df["human"] = pd.to_numeric(pd.Series(self.item_values(ids, "human_q1"), index=df.index), errors="coerce")
        if self.cluster_field:
            df["cluster"] = pd.Series(self.item_values(ids, self.cluster_field), index=df.index).astype(str)
        with self.lock:
            self._chunks.append(df)
            self.last_seq = max(self.last_seq, int(pd.to_numeric(df["seq"]).max()))
            self.version += 1
        return len(df)

    def frame(self) -> pd.DataFrame:
        with self.lock:
            if self._chunks:
                parts = [self.df, *self._chunks] if len(self.df) else self._chunks
                self.df = pd.concat(parts, ignore_index=True)
                self._chunks = []
            return self.df

    def poll_db(self, store: Store) -> int:
        """Fetch rows stored since the last poll."""
        cols = ", ".join([*(f"r.{c}" for c in LIGHT_COLS),
                          *(f'{field_sql(k, kind)} AS "{k}"' for k, kind in self.field_kinds.items())])
        df = store.query_df(
            f"SELECT {cols} FROM results r WHERE r.run_id = ? AND r.seq > ? ORDER BY r.seq",
            [self.run_id, self.last_seq],
        )
        n = self.add_frame(df)
        if not str(self.run.get("status") or "").startswith("running"):
            # A finished run: the same pipeline as `llmscope report`, reading the store (and
            # its cache) rather than rebuilding a frame from the light rows.
            from llmscope.analysis.metrics import run_metrics

            with self.lock:
                version = self.version
            if self._db_metrics is None or self._db_metrics[0] != version:
                self._db_metrics = (version, run_metrics(store, self.run,
                                                         producers=DASHBOARD_PRODUCERS + STORED_RUN_PRODUCERS))
        return n

    def add_live(self, rows: list[dict[str, Any]]) -> int:
        """Add live-channel rows; a key seen before is replaced (latest wins), never counted twice."""
        keys = [(str(r.get("item_id")), str(r.get("variant"))) for r in rows]
        with self.lock:
            again = {k for k in keys if k in self._live_keys}
            if again:
                df = self.frame()
                old = [(str(i), str(v)) in again for i, v in zip(df["item_id"], df["variant"], strict=True)]
                self.df = df[[not o for o in old]].reset_index(drop=True)
                self.version += 1
            self._live_keys.update(keys)
        return self.add_frame(_live_to_frame(rows, self.last_seq + 1, self.field_kinds))

    # -- metrics ----------------------------------------------------------------------------
    def compute(self, throttle_s: float = 0.0) -> Snapshot:
        """Metrics over every row so far (cached until new rows arrive).

        With ``throttle_s`` (a live run) the pipeline runs at most once per that many
        seconds; the last snapshot is returned in between.
        """
        with self.lock:
            df = self.frame()
            if self._snap is not None and self._snap.version == self.version:
                return self._snap
            now = time.monotonic()
            if self._snap is not None and throttle_s > 0 and now - self._computed_at < throttle_s:
                return self._snap
            snap = compute_snapshot(self, df)
            snap.version = self.version
            self._snap = snap
            self._computed_at = now
            return snap


# -- snapshot --------------------------------------------------------------------------------
@dataclass
class Acc:
    label: str
    mean: float
    lo: float
    hi: float
    n: int


@dataclass
class Snapshot:
    """Everything the dashboard draws, computed off the UI thread."""

    version: int = 0
    n: int = 0
    n_errors: int = 0
    n_scored: int = 0
    overall: Acc | None = None
    variants: list[Acc] = field(default_factory=list)
    groups: dict[str, list[Acc]] = field(default_factory=dict)
    rel_bins: pd.DataFrame | None = None
    ece: float = float("nan")
    ece_raw: float = float("nan")
    mce: float = float("nan")
    brier: float = float("nan")
    yesno: pd.DataFrame | None = None  # yesno_summary per variant
    other_mean: float = float("nan")
    other_hist: pd.DataFrame | None = None
    off_format: float = float("nan")
    human_hist: dict[str, list[int]] | None = (
        None  # "agree"/"disagree" -> counts of model P(yes) bins
    )
    human_stats: dict[str, Any] | None = None
    worldsense: pd.DataFrame | None = None  # problemname, acc, acc_ci, bias, bias_ci
    brier_yes: float = float("nan")
    accuracy_name: str = "accuracy"
    metrics: Any = None  # the pipeline's RunMetrics these numbers come from
    failing: dict[str, list[Any]] = field(default_factory=dict)
    group_values: list[str] = field(default_factory=list)
    pending: bool = False  # the first frame: counts only, the numbers are being computed
    sg: list[Acc] = field(default_factory=list)  # SyntaxGym: sg_score per suite
    sg_overall: Acc | None = None  # sg_score overall (mean over suites)
    group_field: str | None = None  # the suite's first group_by field (the list's group column)


def quick_snapshot(store: Store, run_id: str) -> tuple[dict[str, Any] | None, Snapshot]:
    """The dashboard's first frame: the run and its row counts, from one SQL query.

    Shown at once (well under a second for any run size) while the metrics pipeline fills in
    the numbers off the UI thread; ``pending`` marks it.
    """
    run = store.get_run(run_id) or store.find_run(run_id)
    if run is None:
        return None, Snapshot(version=-2, pending=True)
    n, n_err, n_scored = store.execute(
        "SELECT count(*), count(error), count(correct) FILTER (WHERE error IS NULL AND isfinite(correct)) "
        "FROM results WHERE run_id = ?",
        [run["run_id"]],
    ).fetchone() or (0, 0, 0)
    spec = store.suite_spec(run["suite_id"]) if run.get("suite_id") else {}
    group_by = [g for g in (spec.get("group_by") or []) if isinstance(g, str)]
    return run, Snapshot(version=-2, n=int(n), n_errors=int(n_err), n_scored=int(n_scored), pending=True,
                         group_field=group_by[0] if group_by else None)


# The dashboard runs these producers of the metrics pipeline (the others need columns the
# light rows do not carry, and the dashboard does not show them).
DASHBOARD_PRODUCERS = ("accuracy", "yesno", "calibration", "commonsense", "human_correlation", "worldsense",
                       "syntaxgym")
# A stored run also gets these (they read whole stored rows; the dashboard lists their overall
# numbers under "more metrics", the same values `llmscope report` prints).
STORED_RUN_PRODUCERS = ("contamination", "genmetrics", "probeval")
# Fields the pipeline reads from an item (besides the suite's group_by and cluster field).
_PIPELINE_FIELDS = ("human_q1", "category", "tuple_ID", "expectedresp", "problemname", "problemsize",
                    "options")


def reads_whole_items(task: str | None) -> bool:
    """Whether a producer the dashboard runs for ``task`` (the task class's declared
    ``metric_producers``, engine/tasks) reads the items' whole fields, not single columns."""
    from llmscope.analysis.metrics import PRODUCERS
    from llmscope.engine.tasks.registry import TASKS

    cls = TASKS.get(task) if isinstance(task, str) else None
    declared = set(getattr(cls, "metric_producers", ())) & set(DASHBOARD_PRODUCERS)
    return any(p.whole_items and p.name in declared for p in PRODUCERS)


def pipeline_frame(model: RunModel, df: pd.DataFrame) -> pd.DataFrame:
    """The light rows with the item fields the pipeline needs as ``f.<name>`` columns."""
    out = df.copy()
    names = [*model.group_by, *([model.cluster_field] if model.cluster_field else []), *_PIPELINE_FIELDS]
    for f in dict.fromkeys(names):
        vals = pd.Series(model.item_values(out["item_id"], f), index=out.index, dtype=object)
        if vals.notna().any():
            out[f"f.{f}"] = vals
    if reads_whole_items(model.task):  # e.g. the SG producer reads whole items (their suite)
        out["fields"] = pd.Series(model.item_values(out["item_id"], "fields", key="item"), index=out.index,
                                  dtype=object)
    out["run_id"] = model.run_id
    return out


def _acc_of(m: Any, label: str) -> Acc | None:
    if m is None or m.value is None:
        return None
    lo = float("nan") if m.lo is None else float(m.lo)
    hi = float("nan") if m.hi is None else float(m.hi)
    return Acc(label, float(m.value), lo, hi, int(m.n or 0))


def compute_snapshot(model: RunModel, df: pd.DataFrame) -> Snapshot:
    """What the dashboard draws: every number from the metrics pipeline (`analysis.metrics`)."""
    from llmscope.analysis.metrics import compute_metrics

    snap = Snapshot(n=len(df))
    if df.empty:
        return snap
    err = df["error"].notna().to_numpy()
    snap.n_errors = int(err.sum())
    correct = pd.to_numeric(df["correct"], errors="coerce").to_numpy(float)
    ok = ~err & np.isfinite(correct)
    snap.n_scored = int(ok.sum())
    dbm = model._db_metrics
    if dbm is not None and dbm[0] == model.version:
        rm = dbm[1]
    else:
        rm = compute_metrics(pipeline_frame(model, df), model.run, model.spec, producers=DASHBOARD_PRODUCERS)
    _from_metrics(snap, rm, model.group_by)
    conf = pd.to_numeric(df["confidence"], errors="coerce").to_numpy(float)[ok]
    _reliability(snap, conf, correct[ok])
    other = pd.to_numeric(df["other"], errors="coerce").to_numpy(float)[~err]
    _other(snap, rm, other)
    if model.has_human:
        _human(df, err, snap)
        _human_stats(snap, rm)
    _failing(model, df, err, correct, snap)
    return snap


def _val(rm: Any, name: str) -> float:
    m = rm.get(name)
    return float("nan") if m is None or m.value is None else float(m.value)


def _from_metrics(snap: Snapshot, rm: Any, group_by: list[str]) -> None:
    """The numbers the pipeline's `RunMetrics` gives the dashboard (accuracy, calibration,
    yes/no, WorldSense and SG tables): the same for a streaming and a stored run."""
    snap.metrics = rm
    acc_name = "item_accuracy" if rm.get("item_accuracy") is not None else "accuracy"
    snap.accuracy_name = acc_name
    snap.overall = _acc_of(rm.get(acc_name), "overall")
    snap.variants = [a for m in rm.by_group(acc_name, "variant") if (a := _acc_of(m, str(m.group["variant"])))]
    for g in group_by:
        accs = [a for m in rm.by_group(acc_name, g)[:MAX_GROUPS] if (a := _acc_of(m, str(m.group[g])))]
        if accs:
            snap.groups[g] = accs
    snap.ece, snap.mce, snap.brier, snap.brier_yes = (_val(rm, n) for n in ("ece", "mce", "brier", "brier_yes"))
    snap.ece_raw = _val(rm, "ece_raw")
    _yesno_table(rm, snap)
    snap.worldsense = _worldsense_table(rm)  # None unless the WorldSense producer reported
    sg = rm.get("sg_score")
    if sg is not None:  # SyntaxGym: the pipeline's SG scores (per suite Wilson, overall stratified bootstrap)
        snap.sg_overall = _acc_of(sg, "overall")
        snap.sg = [a for m in rm.metrics if m.name == "sg_score" and len(m.group) == 1
                   if (a := _acc_of(m, str(next(iter(m.group.values())))))]


def _reliability(snap: Snapshot, conf: np.ndarray, correct: np.ndarray) -> None:
    """The diagram's bins over the scored rows (ECE/MCE are the pipeline's numbers for them)."""
    from llmscope.analysis.calibration import reliability

    if np.isfinite(conf).any():
        snap.rel_bins = reliability(conf, correct, n_bins=10).bins


def _other(snap: Snapshot, rm: Any, other: np.ndarray) -> None:
    """P(other) histogram of the answered rows, when the pipeline reports P(other) (yes/no)."""
    from llmscope.analysis.yesno import other_histogram

    other = other[np.isfinite(other)]
    if len(other) and rm.get("mean_p_other") is not None:
        snap.other_mean = _val(rm, "mean_p_other")
        snap.off_format = _val(rm, "off_format_rate")
        snap.other_hist = other_histogram(other, bins=10)


def _human_stats(snap: Snapshot, rm: Any) -> None:
    hs: dict[str, Any] = {}
    for k in ("consensus", "awareness", "commonsensicality"):
        m = rm.get(k)
        if m is not None:
            hs[k], hs[f"{k}_lo"], hs[f"{k}_hi"] = m.value, m.lo, m.hi
    hs["pearson"], hs["spearman"] = _val(rm, "human_pearson"), _val(rm, "human_spearman")
    snap.human_stats = hs


def stored_snapshot(store: Store, run: dict[str, Any]) -> tuple[Snapshot, list[str]]:
    """A finished stored run's dashboard numbers, and its variants without gold, without
    holding its rows: the metrics pipeline (`run_metrics`, SQL and cached) plus a few SQL
    aggregates and numeric columns for the plots. The failing list pages from DuckDB
    (`tui.pages.FailingSource`), so no item or result row is loaded into Python here.
    """
    from llmscope.analysis.metrics import run_metrics

    rid = str(run["run_id"])
    spec = store.suite_spec(run["suite_id"]) if run.get("suite_id") else {}
    group_by = [g for g in (spec.get("group_by") or []) if isinstance(g, str)]
    _, snap = quick_snapshot(store, rid)
    snap.pending = False
    snap.group_field = group_by[0] if group_by else None
    rm = run_metrics(store, run, producers=DASHBOARD_PRODUCERS + STORED_RUN_PRODUCERS)
    _from_metrics(snap, rm, group_by)
    ok = "run_id = ? AND error IS NULL"
    cc = store.query_df(f"SELECT confidence, correct FROM results WHERE {ok} AND isfinite(correct)", [rid])
    _reliability(snap, pd.to_numeric(cc["confidence"], errors="coerce").to_numpy(float),
                 pd.to_numeric(cc["correct"], errors="coerce").to_numpy(float))
    if rm.get("mean_p_other") is not None:
        oth = store.query_df(f"SELECT other FROM results WHERE {ok}", [rid])
        _other(snap, rm, pd.to_numeric(oth["other"], errors="coerce").to_numpy(float))
    suite = [run.get("suite_id")]
    # Whether the suite carries human agreement (as RunModel.has_human: its first 50 items).
    has_human = (store.execute(
        "SELECT count(*) FROM (SELECT fields FROM items WHERE suite_id = ? ORDER BY idx LIMIT 50) "
        "WHERE json_extract(fields, '$.human_q1') IS NOT NULL", suite).fetchone() or (0,))[0] > 0
    join = "FROM results r JOIN items i ON i.suite_id = ? AND i.item_id = r.item_id WHERE r.run_id = ?"
    if has_human:
        hum = store.query_df(
            f"SELECT r.variant, r.p_yes, TRY_CAST(json_extract_string(i.fields, '$.human_q1') AS DOUBLE) AS human "
            f"{join} AND r.error IS NULL", [*suite, rid])
        _human(hum, np.zeros(len(hum), dtype=bool), snap)
        _human_stats(snap, rm)
    if snap.group_field:
        # the group filter's values: those of the run's items (NULL: none), as text, sorted
        vals = store.execute(
            f"SELECT DISTINCT json_extract_string(i.fields, ?) AS g {join} AND g IS NOT NULL ORDER BY g LIMIT 200",
            ["$." + json.dumps(snap.group_field), *suite, rid]).fetchall()
        snap.group_values = [str(v) for (v,) in vals]
    per = store.execute(
        f"SELECT coalesce(CAST(variant AS VARCHAR), 'None') AS v, bool_or(isfinite(correct)) FROM results "
        f"WHERE {ok} GROUP BY v ORDER BY v", [rid]).fetchall()
    no_gold = [str(v) for v, has in per if not has] if any(has for _, has in per) else []
    return snap, no_gold


def _yesno_table(rm: Any, snap: Snapshot) -> None:
    names = ("mean_p_yes", "pred_yes_rate", "gold_yes_rate", "yes_bias")
    groups: list[dict[str, Any]] = [{}] + [m.group for m in rm.by_group("mean_p_yes", "variant")]
    recs = []
    for g in groups:
        if rm.get("mean_p_yes", g) is None:
            continue
        rec: dict[str, Any] = {"variant": g.get("variant", "all")}
        for n in names:
            m = rm.get(n, g)
            rec[n] = None if m is None else m.value
            rec[n + "_ci"] = None if m is None else m.ci95
        recs.append(rec)
    snap.yesno = pd.DataFrame(recs) if recs else None


def _human(df: pd.DataFrame, err: np.ndarray, snap: Snapshot) -> None:
    """The P(yes) histograms split by the human majority (drawn, not a metric)."""
    sub = df[~err].copy()
    if "human" not in sub or pd.to_numeric(sub["human"], errors="coerce").isna().all():
        return
    sub["variant"] = sub["variant"].astype(str)
    q1 = sub[sub["variant"] == "q1"] if "q1" in set(sub["variant"]) else sub
    py = pd.to_numeric(q1["p_yes"], errors="coerce").to_numpy(float)
    hum = pd.to_numeric(q1["human"], errors="coerce").to_numpy(float)
    fin = np.isfinite(py) & np.isfinite(hum)
    from llmscope.analysis.calibration import uniform_bin

    def hist(x: np.ndarray) -> list[int]:
        return np.bincount(uniform_bin(x, 10), minlength=10).tolist()

    snap.human_hist = {"humans agree": hist(py[fin & (hum >= 0.5)]),
                       "humans disagree": hist(py[fin & (hum < 0.5)])}


def _worldsense_table(rm: Any) -> pd.DataFrame | None:
    recs = []
    for m in rm.by_group("worldsense_accuracy", "problemname"):
        b = rm.get("worldsense_bias", m.group)
        recs.append({
            "problemname": m.group["problemname"],
            "acc": m.value,
            "acc_ci": None if m.hi is None else m.hi - m.value,
            "bias": None if b is None else b.value,
            "bias_ci": None if b is None or b.hi is None else b.hi - b.value,
        })
    return pd.DataFrame(recs) if recs else None


FAIL_COLS = [
    "item_id",
    "variant",
    "group",
    "gold",
    "prediction",
    "confidence",
    "distance",
    "error",
    "text",
    "seq",
]


def _failing(
    model: RunModel, df: pd.DataFrame, err: np.ndarray, correct: np.ndarray, snap: Snapshot
) -> None:
    # Every row, with its scope marks: the list shows the failing ones unless asked otherwise.
    wrong = err | (np.isfinite(correct) & (correct < 0.5))
    sub = df
    g0 = f"g.{model.group_by[0]}" if model.group_by else None
    # an item without the field: "None", as the paged list's SQL labels it (astype(str) alone
    # keeps it missing, NaN, in pandas' string dtype: shown "-" and sorted apart)
    group = (sub[g0].astype(object).where(sub[g0].notna(), "None").astype(str) if g0 and g0 in sub
             else pd.Series([""] * len(sub), index=sub.index))
    if "human" in sub:
        from llmscope.analysis.yesno import human_distance

        dist = pd.Series(human_distance(sub["p_yes"], sub["p_no"] if "p_no" in sub else np.nan, sub["human"]),
                         index=sub.index)
    else:
        dist = pd.Series([np.nan] * len(sub), index=sub.index)
    text = pd.Series(model.item_values(sub["item_id"], "text", key="item"), index=sub.index).fillna("")
    snap.failing = {
        "item_id": sub["item_id"].astype(str).tolist(),
        "variant": sub["variant"].astype(str).tolist(),
        "group": group.tolist(),
        # None, not NaN, where a row has no text (pandas' string dtype holds NaN): the list
        # styles a row with a truthy error red and would print "nan"
        "gold": _texts(sub["gold"]),
        "prediction": _texts(sub["prediction"]),
        "confidence": pd.to_numeric(sub["confidence"], errors="coerce").fillna(np.nan).tolist(),
        "distance": dist.astype(float).tolist(),
        "error": _texts(sub["error"]),
        "text": text.tolist(),
        "seq": pd.to_numeric(sub["seq"], errors="coerce").fillna(-1).astype(int).tolist(),
        "failing": wrong.tolist(),
    }
    if FLAG_KEY in sub:
        snap.failing["flagged"] = [v is True or v == 1 or v == "true" for v in sub[FLAG_KEY]]
    for f in model.fields:
        vals = sub[f.key] if f.key in sub else pd.Series([None] * len(sub), index=sub.index)
        snap.failing[f.key] = [show_field(None if _isnan(v) else v, f.kind) for v in vals]
    if g0 and g0 in df:
        snap.group_values = sorted({str(v) for v in df[g0].dropna()})[:200]


# -- live channel ----------------------------------------------------------------------------
class LiveFeed:
    """Progress and new results of one run executing in another process."""

    def __init__(self, db: str | Path, run_id: str) -> None:
        self.dir = live_dir(db) / run_id
        self.tail = ResultTail(self.dir / "results.jsonl")

    def progress(self) -> dict[str, Any] | None:
        try:
            snap = read_snapshot(self.dir / "progress.json")
        except (OSError, BadRecord):
            return None
        snap["ended"] = (self.dir / "ended").exists() or owner_gone(snap.get("run") or {}, snap.get("time"))
        return snap

    @property
    def ended(self) -> bool:
        return (self.dir / "ended").exists()

    def read_new(self) -> list[dict[str, Any]]:
        return self.tail.read_new()

    def detail(self, item_id: str) -> list[dict[str, Any]]:
        """Full live rows of one item's variants (prompt, top tokens, option scores, trace)."""
        return self.tail.detail(item_id)


# -- item detail -----------------------------------------------------------------------------
def item_detail(store: Store, run_id: str, item_id: str) -> dict[str, Any]:
    """Every stored variant of one item in one run, with the item's fields (`Store.item_detail`)."""
    d = store.item_detail(run_id, item_id)
    return {"item_id": d.item_id, "text": d.text, "fields": d.fields, "options": d.options, "variants": d.variants}


def item_detail_live(model: RunModel, item_id: str, feed: LiveFeed | None = None) -> dict[str, Any]:
    """What the live channel knows about one item: with `feed`, the full rows (as item_detail)."""
    rows = []
    if feed is not None:
        for rec in feed.detail(item_id):
            for k in ("probs", "top_tokens", "option_scores", "extra"):
                rec[k] = _parse_json(rec.get(k))
            rows.append(rec)
    if not rows:
        df = model.frame()
        sub = df[df["item_id"] == item_id]
        for light in sub.to_dict("records"):
            rows.append({
                str(k): (None if not isinstance(v, (dict, list)) and _isnan(v) else v)
                for k, v in light.items()
            })
    it = model.items.get(item_id) or {}
    return {
        "item_id": item_id,
        "text": it.get("text", ""),
        "fields": it.get("fields") or {},
        "options": it.get("options"),
        "variants": rows,
        "live": True,
    }


# -- what tasks declare (engine/tasks: Task.item_fields) --------------------------------------
# The list has its own columns for these (item, variant, group, gold, prediction, confidence).
_LISTED_KEYS = frozenset({"prediction", "gold", "correct", "confidence", "error"})
# The task field that marks an item as flagged (the list's "flagged" scope), when declared.
FLAG_KEY = "extra.flagged"


def task_item_fields(task: str | None) -> tuple[Any, ...]:
    """The `ItemField`s the run's task declares (`Task.item_fields`), the common ones for an
    unknown task."""
    from llmscope.engine.tasks.base import COMMON_ITEM_FIELDS
    from llmscope.engine.tasks.registry import TASKS

    cls = TASKS.get(task) if isinstance(task, str) else None
    return tuple(getattr(cls, "item_fields", COMMON_ITEM_FIELDS))


def list_fields(task: str | None) -> list[Any]:
    """The task's declared list columns beyond the list's own (e.g. Min-K% prob, flags)."""
    return [f for f in task_item_fields(task) if f.column and f.key not in _LISTED_KEYS]


def has_flags(task: str | None) -> bool:
    """Whether the task's rows carry a flag per item (the list offers a "flagged" scope)."""
    return any(f.key == FLAG_KEY for f in task_item_fields(task))


def field_sql(key: str, kind: str, alias: str = "r") -> str:
    """SQL reading a declared field (`column` or `column.key` inside a JSON column) from a
    results row, cast by its kind; ValueError for a column the results table lacks."""
    col, _, sub = key.partition(".")
    if col not in RESULT_SCHEMA.names:
        raise ValueError(f"item field {key!r}: no results column {col!r}")
    if not sub:
        return f'{alias}."{col}"'
    path = "$." + json.dumps(sub).replace("'", "''")
    if kind in ("number", "prob"):
        return f"TRY_CAST(json_extract_string({alias}.{col}, '{path}') AS DOUBLE)"
    if kind == "bool":
        return f"TRY_CAST(json_extract_string({alias}.{col}, '{path}') AS BOOLEAN)"
    if kind in ("json", "flags"):
        return f"json_extract({alias}.{col}, '{path}')::VARCHAR"
    return f"json_extract_string({alias}.{col}, '{path}')"


def field_value(row: dict[str, Any], key: str) -> Any:
    """A declared field's value in a decoded result row (``extra.min_k_prob``, ``other``)."""
    col, _, sub = key.partition(".")
    v = row.get(col)
    if sub:
        v = _parse_json(v)
        v = v.get(sub) if isinstance(v, dict) else None
    return v


def show_field(v: Any, kind: str) -> str:
    """A declared field's value as the list and the drill-down print it."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if kind == "flags":  # reasons such as "ngram_overlap 0.8 >= 0.5": their metric names
        v = _parse_json(v)
        names = [str(r).split()[0] for r in v] if isinstance(v, list) else []
        return ", ".join(names) if names else "-"
    if kind == "bool":
        v = _parse_json(v) if isinstance(v, str) else v
        return "yes" if v is True or v == 1 else "no"
    if kind in ("number", "prob"):
        try:
            return f"{float(v):.3f}"
        except (TypeError, ValueError):
            return str(v)
    if kind == "json" and not isinstance(v, str):
        return json.dumps(v, ensure_ascii=False, default=str)
    return str(v)
