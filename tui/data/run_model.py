"""One run's rows as the dashboard holds them (`RunModel`): from the store or the live channel.

Rows arrive in chunks from either source; `compute()` turns them into a `Snapshot`
(`tui.data.snapshot`). Nothing here imports Textual.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pandas as pd

from llmscope.store.db import Store
from llmscope.tui.data.fields import FLAG_KEY, LIGHT_COLS, field_sql, has_flags, list_fields
from llmscope.tui.data.live import live_to_frame
from llmscope.tui.data.snapshot import (
    DASHBOARD_PRODUCERS,
    STORED_RUN_PRODUCERS,
    Snapshot,
    compute_snapshot,
)


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
        self.db_metrics: tuple[int, Any] | None = None
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
                vals = [
                    ((it.get("fields") or {}).get(name) if key == "fields" else it.get(name))
                    for it in self.items.values()
                ]
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
        df["probs"] = (
            decode_json_column(df["probs"])
            if df["probs"].map(lambda v: isinstance(v, str)).any()
            else df["probs"]
        )
        ids = df["item_id"]
        for g in self.group_by:
            df[f"g.{g}"] = pd.Series(self.item_values(ids, g), index=df.index, dtype=object)
        if self.has_human:
            df["human"] = pd.to_numeric(
                pd.Series(self.item_values(ids, "human_q1"), index=df.index), errors="coerce"
            )
        if self.cluster_field:
            df["cluster"] = pd.Series(
                self.item_values(ids, self.cluster_field), index=df.index
            ).astype(str)
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
        cols = ", ".join(
            [
                *(f"r.{c}" for c in LIGHT_COLS),
                *(f'{field_sql(k, kind)} AS "{k}"' for k, kind in self.field_kinds.items()),
            ]
        )
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
            if self.db_metrics is None or self.db_metrics[0] != version:
                self.db_metrics = (
                    version,
                    run_metrics(
                        store, self.run, producers=DASHBOARD_PRODUCERS + STORED_RUN_PRODUCERS
                    ),
                )
        return n

    def add_live(self, rows: list[dict[str, Any]]) -> int:
        """Add live-channel rows; a key seen before is replaced (latest wins), never counted twice."""
        keys = [(str(r.get("item_id")), str(r.get("variant"))) for r in rows]
        with self.lock:
            again = {k for k in keys if k in self._live_keys}
            if again:
                df = self.frame()
                old = [
                    (str(i), str(v)) in again
                    for i, v in zip(df["item_id"], df["variant"], strict=True)
                ]
                self.df = df[[not o for o in old]].reset_index(drop=True)
                self.version += 1
            self._live_keys.update(keys)
        return self.add_frame(live_to_frame(rows, self.last_seq + 1, self.field_kinds))

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
