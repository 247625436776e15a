"""What the TUI reads from the database: the store handle, the run list, items, stored snapshots.

A finished run, or a run executing inside this process (its writer thread and our reads share
one `Store`, whose RLock makes that safe), is read here; new rows are fetched with
`seq > last_seq` (`RunModel.poll_db`). Nothing here imports Textual.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from llmscope.store.db import Store, StoreError, StoreLocked
from llmscope.tui.data.fields import is_nan, parse_json, texts
from llmscope.tui.data.snapshot import (
    DASHBOARD_PRODUCERS,
    STORED_RUN_PRODUCERS,
    Snapshot,
    fill_from_metrics,
    fill_human_hist,
    fill_human_stats,
    fill_other,
    fill_reliability,
)


def is_lock_error(e: Exception) -> bool:
    """True when a StoreError says another process holds the file."""
    return "in use by another process" in str(e)


def _file_key(path: str) -> tuple[Any, ...]:
    """What changes when a writer commits or checkpoints: the file's and its log's size and
    modification time."""
    out: list[Any] = []
    for f in (path, path + ".wal"):
        try:
            st = os.stat(f)
            out += [st.st_size, st.st_mtime_ns]
        except OSError:
            out += [None, None]
    return tuple(out)


def _alive(pid: int | None) -> bool:
    if not pid:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


class StoreHandle:
    """The app's access to the database; it holds no lock while idle.

    Reads use a short-lived read-only connection, opened around each batch of reads and
    closed after it, so other terminals (`llmscope run`, `runs`, `report`) can take the
    file between them. While another llmscope process writes the file (a run, a study, an
    import), a read gets a private copy as of that writer's last commit (store/snapshot.py,
    as every CLI read does); the copy is kept between batches until the file changes and
    SNAPSHOT_EVERY_S has passed, so a window polling every second copies the file at most
    that often. `written_by` names the writer while reads come from such a copy.
    While a run started in this window is writing, the write connection (`open_writer`,
    released by `release_writer` when the run ends) is the only one, and reads share it (its
    RLock serialises them with the writer thread). `read_only=True` (`llmscope view`) never
    opens a write connection. `persistent` is kept for callers.
    """

    WAIT_S = 10.0  # how long opening the writer or closing waits for reads in flight
    SNAPSHOT_EVERY_S = 1.0  # the least time between two copies of a file another process writes

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
        self._snap_key: tuple[Any, ...] | None = None  # the file as it was when copied
        self._snap_at = 0.0
        # Who writes the file, when the last read came from a copy of it (else None).
        self.written_by: StoreLocked | None = None

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
                raise StoreError(f"{self.path} is open read-only in this window (`llmscope view`)")
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
                raise StoreError(
                    f"no database at {self.path} (run `llmscope run` first, or pass --db)"
                )
            Store(self.path).close()  # create it (a new file), then read it like any other
        key = _file_key(self.path)
        try:
            store = Store(self.path, read_only=True, snapshot=True)
        except StoreError as e:
            if self.read_only or "open it once for writing" not in str(e):
                raise
            Store(self.path).close()  # an older schema: migrate once, then read
            store = Store(self.path, read_only=True, snapshot=True)
        if store.snapshot_of is not None:
            self._snap_key, self._snap_at = key, time.monotonic()
        self.written_by = store.snapshot_of
        return store

    def _snapshot_stale(self) -> bool:
        """Whether the kept copy should be taken again (the file changed since, and the last
        copy is SNAPSHOT_EVERY_S old)."""
        if self._store is None or self._store.snapshot_of is None:
            return False
        if _file_key(self.path) == self._snap_key:
            return False
        return time.monotonic() - self._snap_at >= self.SNAPSHOT_EVERY_S or not _alive(
            self._store.snapshot_of.pid
        )  # the writer is gone: the file itself can be read now

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
                if self._store is not None and self._depth == 0 and self._snapshot_stale():
                    self._store.close()  # a newer copy of the file another process writes
                    self._store = None
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
                    # a copy is private (it keeps no other process out): kept for the next batch
                    if (
                        self._depth == 0
                        and self._store is not None
                        and self._store.snapshot_of is None
                    ):
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


def db_runs(store: Store) -> list[dict[str, Any]]:
    df = store.runs()
    rows = []
    for rec in df.to_dict("records"):
        rec = {k: (None if is_nan(v) else v) for k, v in rec.items()}
        rec["live"] = False
        rows.append(rec)
    return rows


def load_items(store: Store, suite_id: str) -> dict[str, dict[str, Any]]:
    """item_id -> {text, gold, options, fields} for a stored suite."""
    df = store.items_frame(suite_id)
    out: dict[str, dict[str, Any]] = {}
    # `texts`: an item without gold or options holds NaN beside items with them (pandas' string dtype)
    for iid, text, gold, opts, fields in zip(
        df["item_id"],
        texts(df["text"]),
        texts(df["gold"]),
        texts(df["options"]),
        texts(df["fields"]),
        strict=True,
    ):
        out[str(iid)] = {
            "text": text or "",
            "gold": gold,
            "options": parse_json(opts),
            "fields": parse_json(fields) or {},
        }
    return out


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
    return run, Snapshot(
        version=-2,
        n=int(n),
        n_errors=int(n_err),
        n_scored=int(n_scored),
        pending=True,
        group_field=group_by[0] if group_by else None,
    )


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
    fill_from_metrics(snap, rm, group_by)
    ok = "run_id = ? AND error IS NULL"
    cc = store.query_df(
        f"SELECT confidence, correct FROM results WHERE {ok} AND isfinite(correct)", [rid]
    )
    fill_reliability(
        snap,
        pd.to_numeric(cc["confidence"], errors="coerce").to_numpy(float),
        pd.to_numeric(cc["correct"], errors="coerce").to_numpy(float),
    )
    if rm.get("mean_p_other") is not None:
        oth = store.query_df(f"SELECT other FROM results WHERE {ok}", [rid])
        fill_other(snap, rm, pd.to_numeric(oth["other"], errors="coerce").to_numpy(float))
    suite = [run.get("suite_id")]
    # Whether the suite carries human agreement (as RunModel.has_human: its first 50 items).
    has_human = (
        store.execute(
            "SELECT count(*) FROM (SELECT fields FROM items WHERE suite_id = ? ORDER BY idx LIMIT 50) "
            "WHERE json_extract(fields, '$.human_q1') IS NOT NULL",
            suite,
        ).fetchone()
        or (0,)
    )[0] > 0
    join = (
        "FROM results r JOIN items i ON i.suite_id = ? AND i.item_id = r.item_id WHERE r.run_id = ?"
    )
    if has_human:
        hum = store.query_df(
            f"SELECT r.variant, r.p_yes, TRY_CAST(json_extract_string(i.fields, '$.human_q1') AS DOUBLE) AS human "
            f"{join} AND r.error IS NULL",
            [*suite, rid],
        )
        fill_human_hist(hum, np.zeros(len(hum), dtype=bool), snap)
        fill_human_stats(snap, rm)
    if snap.group_field:
        # the group filter's values: those of the run's items (NULL: none), as text, sorted
        vals = store.execute(
            f"SELECT DISTINCT json_extract_string(i.fields, ?) AS g {join} AND g IS NOT NULL ORDER BY g LIMIT 200",
            ["$." + json.dumps(snap.group_field), *suite, rid],
        ).fetchall()
        snap.group_values = [str(v) for (v,) in vals]
    per = store.execute(
        f"SELECT coalesce(CAST(variant AS VARCHAR), 'None') AS v, bool_or(isfinite(correct)) FROM results "
        f"WHERE {ok} GROUP BY v ORDER BY v",
        [rid],
    ).fetchall()
    no_gold = [str(v) for v, has in per if not has] if any(has for _, has in per) else []
    return snap, no_gold


def item_detail(store: Store, run_id: str, item_id: str) -> dict[str, Any]:
    """Every stored variant of one item in one run, with the item's fields (`Store.item_detail`)."""
    d = store.item_detail(run_id, item_id)
    return {
        "item_id": d.item_id,
        "text": d.text,
        "fields": d.fields,
        "options": d.options,
        "variants": d.variants,
    }
