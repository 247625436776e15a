"""Reading what a file holds: suites, items, runs (effective status, headline metric), analyses."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from llmscope.engine.types import Item
from llmscope.store.codec import decode_json, is_null
from llmscope.store.errors import StoreError
from llmscope.store.run_status import effective_status

if TYPE_CHECKING:
    import pandas as pd

    from llmscope.store.db import Rows
    from llmscope.store.metrics_cache import MetricsCache

# A run's rows fingerprint, over `results x` of one run: it changes whenever a row is added,
# replaced or deleted. The metrics pipeline's cache (`analyses` kind 'metrics', written by
# analysis/metrics.py) is keyed by it, so a stale cache is never read.
ROWS_FINGERPRINT_SQL = (
    "concat_ws('|', count(*), coalesce(max(x.seq), -1), coalesce(CAST(max(x.written_at) AS VARCHAR), '-'), "
    "count(x.error), coalesce(CAST(sum(x.correct) AS VARCHAR), '-'))"
)

# The columns of `run_records` / `runs`, in order.
RUN_LIST_COLUMNS = (
    "run_id",
    "suite_name",
    "task",
    "model",
    "backend",
    "status",
    "n_total",
    "n_done",
    "n_errors",
    "accuracy",
    "started_at",
    "ended_at",
    "updated_at",
    "heartbeat_at",
    "owner_pid",
    "owner_host",
    "error",
    "item_limit",
    "n_suite_items",
    "metric",
)


class RunQueries:
    """The `Store`'s reads of suites, items, runs and analyses."""

    if TYPE_CHECKING:  # provided by `Store` (store/db.py)

        @property
        def metrics_cache(self) -> MetricsCache | None: ...
        def execute(self, sql: str, params: Sequence[Any] | None = None) -> Rows: ...
        def query_df(self, sql: str, params: Sequence[Any] | None = None) -> pd.DataFrame: ...

    # -- suites and items -----------------------------------------------------------------
    def has_suite(self, suite_id: str) -> bool:
        row = self.execute("SELECT count(*) FROM suites WHERE suite_id = ?", [suite_id]).fetchone()
        return bool(row and row[0])

    def suites(self) -> pd.DataFrame:
        return self.query_df(
            "SELECT suite_id, name, task, n_items, source, created_at FROM suites ORDER BY created_at"
        )

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
            "SELECT item_id, idx, text, gold, options, fields FROM items WHERE suite_id = ? ORDER BY idx",
            [suite_id],
        )

    def suite_items(
        self, suite_id: str, *, with_fields: bool = True, with_text: bool = True
    ) -> list[Item]:
        """A stored suite's items in order, options and fields decoded (empty when not stored;
        `with_fields=False` leaves `fields` empty, `with_text=False` leaves `text` empty, for
        callers that need only id/gold/options)."""
        rows = self.execute(
            f"SELECT item_id, {'text' if with_text else 'NULL'}, gold, options, "
            f"{'fields' if with_fields else 'NULL'} FROM items WHERE suite_id = ? ORDER BY idx",
            [suite_id],
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

        return [
            Item(item_id=i, text=t or "", gold=g, options=opts(o), fields=decode_json(f) or {})
            for i, t, g, o, f in rows
        ]

    def item_answers(self, suite_id: str) -> dict[str, tuple[str | None, Any]]:
        """item_id -> (gold, options) of a stored suite, options decoded once per distinct text
        (lists as tuples, shared between items: read-only). For bulk imports that score
        responses against 10^5 items without building an `Item` for each."""
        rows = self.execute(
            "SELECT item_id, gold, options FROM items WHERE suite_id = ?", [suite_id]
        ).fetchall()
        decoded: dict[Any, Any] = {}
        for o in {r[2] for r in rows}:
            v = decode_json(o)
            decoded[o] = tuple(v) if isinstance(v, list) else v
        return {i: (g, decoded[o]) for i, g, o in rows}

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
            df = self.query_df(
                "SELECT * FROM runs WHERE run_id LIKE ? || '%' ORDER BY started_at", [prefix]
            )
            if len(df) > 1:
                exact = df[df.run_id == prefix]
                if len(exact) == 1:
                    df = exact
                else:
                    raise StoreError(
                        f"run id prefix {prefix!r} is ambiguous: {', '.join(df.run_id)}"
                    )
        return None if df.empty else _row(df)

    def runs(self) -> pd.DataFrame:
        """`run_records` as a frame (columns in that order, also when there are no runs)."""
        import pandas as pd

        return pd.DataFrame(self.run_records(), columns=list(RUN_LIST_COLUMNS))

    def run_records(self) -> list[dict[str, Any]]:
        """Every run with its stored counts, oldest first; `status` is the effective status (see
        effective_status); `accuracy` is the value of the run's headline metric, named in
        `metric`; `item_limit` the run's `--limit` (None: every item) and `n_suite_items` its suite's
        items. Plain rows: listing runs needs no pandas (`llmscope runs` starts fast)."""
        cols = RUN_LIST_COLUMNS[:-1]  # `metric` is added below
        rows = self.execute(
            f"""
            SELECT r.run_id, r.suite_name, r.task, r.model, r.backend, r.status, r.n_total,
                   (SELECT count(*) FROM results x WHERE x.run_id = r.run_id) AS n_done,
                   (SELECT count(*) FROM results x WHERE x.run_id = r.run_id AND x.error IS NOT NULL) AS n_errors,
                   (SELECT avg(correct) FROM results x WHERE x.run_id = r.run_id AND x.error IS NULL) AS accuracy,
                   r.started_at, r.ended_at, r.updated_at, r.heartbeat_at, r.owner_pid, r.owner_host, r.error,
                   TRY_CAST(json_extract_string(r.options, '$.limit') AS BIGINT) AS item_limit,
                   (SELECT count(*) FROM items i WHERE i.suite_id = r.suite_id) AS n_suite_items,
                   (SELECT {ROWS_FINGERPRINT_SQL} FROM results x WHERE x.run_id = r.run_id) AS _fp
            FROM runs r
            ORDER BY r.started_at
            """
        ).fetchall()
        recs = [dict(zip((*cols, "_fp"), row, strict=True)) for row in rows]
        # The run's headline metric from the metrics pipeline's cache when it matches the rows
        # (WorldSense: worldsense_accuracy); else plain `accuracy` = avg(correct), named so.
        side = self.metrics_cache
        known = (
            side.headlines({str(r["run_id"]): str(r["_fp"]) for r in recs})
            if side is not None and recs
            else {}
        )
        for r in recs:
            r.pop("_fp")
            h = known.get(str(r["run_id"]))
            r["metric"] = h.get("name") if isinstance(h, dict) else "accuracy"
            if isinstance(h, dict):
                r["accuracy"] = h.get("value")
            r["status"] = effective_status(r)
        return recs

    def load_analysis(self, run_id: str, kind: str) -> Any:
        """A stored analysis, or None."""
        row = self.execute(
            "SELECT payload FROM analyses WHERE run_id = ? AND kind = ?", [run_id, kind]
        ).fetchone()
        return json.loads(row[0]) if row else None


def _row(df: pd.DataFrame) -> dict[str, Any]:
    rec = df.iloc[0].to_dict()
    for k in ("options", "versions", "meta", "backend_config"):
        if isinstance(rec.get(k), str):
            try:
                rec[k] = json.loads(rec[k])
            except json.JSONDecodeError:
                pass
    out = {str(k): (None if is_null(v) else v) for k, v in rec.items()}
    pid = out.get("owner_pid")
    if isinstance(pid, float):
        out["owner_pid"] = int(pid)
    out["stored_status"] = out.get("status")
    out["status"] = effective_status(out)
    return out
