"""A schema-3 database file and its result writer, for the tests of the migration from schema 3.

The writer is store/db.py's at git fecc4dd~1. Not used by llmscope; the benchmark's schema-3
figures run that commit's own code (`bench.store_bench --before schema3`).

Schema 3: `results` keyed by a PRIMARY KEY (run_id, item_id, variant), a plain insert per
batch with an ON CONFLICT retry, DuckDB's default checkpoint threshold, per-column list
comprehensions for the Arrow batch.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from typing import Any

import duckdb
import pyarrow as pa

from llmscope.engine.types import Result
from llmscope.store.codec import encode_json
from llmscope.store.schema import MIGRATIONS, RESULT_SCHEMA

# Migrations only append columns, so schema 3's result columns are today's up to `written_at`.
SCHEMA3_COLUMNS = pa.schema(list(RESULT_SCHEMA)[: RESULT_SCHEMA.get_field_index("written_at") + 1])


def _finite(x: float | None) -> float | None:
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def results_to_arrow_schema3(
    run_id: str, rs: Sequence[Result], start_seq: int, now: dt.datetime
) -> pa.Table:
    probs = [r.probs for r in rs]
    cols: dict[str, list[Any]] = {
        "run_id": [run_id] * len(rs),
        "item_id": [r.item_id for r in rs],
        "variant": [r.variant for r in rs],
        "seq": list(range(start_seq, start_seq + len(rs))),
        "prompt": [r.prompt for r in rs],
        "probs": [encode_json(p) for p in probs],
        "p_yes": [_finite(p.get("yes")) if p else None for p in probs],
        "p_no": [_finite(p.get("no")) if p else None for p in probs],
        "other": [_finite(r.other) for r in rs],
        "top_tokens": [encode_json(r.top_tokens) for r in rs],
        "option_scores": [encode_json(r.option_scores) for r in rs],
        "prediction": [r.prediction for r in rs],
        "gold": [r.gold for r in rs],
        "correct": [_finite(r.correct) for r in rs],
        "confidence": [_finite(r.confidence) for r in rs],
        "n_tokens": [int(r.n_tokens or 0) for r in rs],
        "latency_ms": [_finite(r.latency_ms) for r in rs],
        "error": [r.error for r in rs],
        "extra": [encode_json(r.extra) if r.extra else None for r in rs],
        "written_at": [now] * len(rs),
    }
    return pa.table(cols, schema=SCHEMA3_COLUMNS)


class Schema3Store:
    """A schema-3 file and its result writer (only what the migration tests need)."""

    def __init__(self, path: str) -> None:
        self.con = duckdb.connect(path)
        self.con.execute(
            "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, applied_at TIMESTAMP)"
        )
        for version, sql in MIGRATIONS:
            if version <= 3:
                self.con.execute(sql)
                self.con.execute("INSERT INTO schema_version VALUES (?, now())", [version])

    def write_results(self, run_id: str, results: Sequence[Result], start_seq: int = 0) -> int:
        rs = list(results)
        if not rs:
            return 0
        tbl = results_to_arrow_schema3(
            run_id, rs, start_seq, dt.datetime.now(dt.UTC).replace(tzinfo=None)
        )
        cols = ", ".join(tbl.column_names)
        self.con.register("_llmscope_batch", tbl)
        try:
            self.con.execute("BEGIN TRANSACTION")
            self.con.execute(
                f"INSERT INTO results ({cols}) SELECT {cols} FROM _llmscope_batch"
            ).fetchall()
            self.con.execute("COMMIT")
        except duckdb.ConstraintException:
            self.con.execute("ROLLBACK")
            self.con.execute("BEGIN TRANSACTION")
            self.con.execute(
                f"INSERT INTO results ({cols}) SELECT {cols} FROM _llmscope_batch ON CONFLICT DO NOTHING"
            ).fetchall()
            self.con.execute("COMMIT")
        finally:
            self.con.unregister("_llmscope_batch")
        return len(rs)

    def close(self) -> None:
        self.con.close()
