"""The metrics pipeline's SQL: what a run's stored rows hold, and a lean frame of them.

All SQL the pipeline sends to the store lives here (the store object is duck-typed: it needs
``execute`` and ``query_df``, as :class:`llmscope.store.db.Store` has). Reading only the
columns and item fields the active producers use, with item fields extracted by DuckDB
(``json_extract``) and each distinct JSON value decoded once, is what keeps
``llmscope report`` over an 87k-trial WorldSense run under a second.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from llmscope.store.db import ROWS_FINGERPRINT_SQL, decode_json

__all__ = [
    "ResultProfile",
    "result_profile",
    "rows_signature",
    "metric_frame",
    "RESULT_COLUMNS",
    "decode_json_column",
    "item_fields_frame",
    "field_names",
]

# Result columns the pipeline may read; `prompt`, `top_tokens` and `written_at` never feed a
# metric and are the bulk of a row, so they are not fetched.
RESULT_COLUMNS = (
    "run_id",
    "item_id",
    "variant",
    "seq",
    "probs",
    "p_yes",
    "p_no",
    "other",
    "option_scores",
    "prediction",
    "gold",
    "correct",
    "confidence",
    "n_tokens",
    "latency_ms",
    "error",
    "extra",
)
_PROFILED = ("probs", "p_yes", "p_no", "option_scores", "extra", "confidence", "correct", "error")
# Top-level keys of `extra` that decide whether a producer has anything to read.
EXTRA_KEYS = ("methods", "design", "samples", "method", "abstained", "expected", "f1", "imported")


@dataclass(frozen=True)
class ResultProfile:
    """What a run's rows hold, from one SQL pass: non-null counts and `extra` keys present."""

    n: int
    nonnull: dict[str, int] = field(default_factory=dict)
    extra_keys: frozenset[str] = frozenset()
    derived_variants: bool = False  # a variant like "q1@p2" (option permutations, designs)
    # Rows without an error scored exactly 0 or 1, and rows scored otherwise (not NULL or NaN):
    # what the SQL form of the metrics checks (analysis.sqlmetrics). None: not counted.
    n_binary: int | None = None
    n_fractional: int | None = None

    def has(self, column: str) -> bool:
        return self.nonnull.get(column, 0) > 0


def result_profile(store: Any, run_id: str) -> ResultProfile:
    """Non-null counts of the metric columns and which known keys occur in `extra`."""
    cols = ", ".join(f"count({c})" for c in _PROFILED)
    keys = ", ".join(f"bool_or(contains(extra, '\"{k}\"'))" for k in EXTRA_KEYS)
    row = store.execute(
        f"SELECT count(*), {cols}, {keys}, bool_or(contains(variant, '@')), "
        "count(*) FILTER (WHERE error IS NULL AND correct IN (0, 1)), "
        "count(*) FILTER (WHERE NOT isnan(correct) AND correct NOT IN (0, 1)) FROM results WHERE run_id = ?",
        [run_id],
    ).fetchone()
    n = int(row[0] or 0)
    nonnull = {c: int(v or 0) for c, v in zip(_PROFILED, row[1 : 1 + len(_PROFILED)], strict=True)}
    flags = row[1 + len(_PROFILED) : -2]
    present = frozenset(k for k, f in zip(EXTRA_KEYS, flags[:-1], strict=True) if f)
    return ResultProfile(n, nonnull, present, bool(flags[-1]), int(row[-2] or 0), int(row[-1] or 0))


def rows_signature(store: Any, run_id: str) -> tuple[Any, ...]:
    """Changes whenever a run's rows change (added, replaced, deleted): the cache key (the
    store's one fingerprint expression, which the runs list compares in SQL too)."""
    row = store.execute(
        f"SELECT {ROWS_FINGERPRINT_SQL} FROM results x WHERE x.run_id = ?", [run_id]
    ).fetchone()
    return tuple(row or ())


def _decode(u: Any) -> Any:
    if not isinstance(u, str):
        return u
    if len(u) >= 2 and u[0] == '"' and u[-1] == '"' and "\\" not in u:
        return u[1:-1]  # a plain JSON string: no escapes to undo
    return decode_json(u)


def decode_json_column(values: pd.Series) -> pd.Series:
    """JSON text per row -> Python values, decoding each distinct text once (NULL -> None)."""
    codes, uniques = pd.factorize(values.astype(object), use_na_sentinel=True)
    decoded = [_decode(u) for u in uniques]
    table = np.empty(len(decoded) + 1, dtype=object)
    for i, d in enumerate(decoded):
        table[i] = d
    table[-1] = None
    return pd.Series(table[codes], index=values.index, dtype=object)


def field_names(store: Any, suite_id: str) -> list[str]:
    """Every key of the suite's item fields (as stored)."""
    rows = store.execute(
        "SELECT DISTINCT unnest(json_keys(fields)) FROM items WHERE suite_id = ? AND fields IS NOT NULL",
        [suite_id],
    ).fetchall()
    return sorted(str(r[0]) for r in rows)


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _field_expr(f: str, alias: str = "i") -> str:
    """SQL for one item field's JSON text (NULL where the item lacks it)."""
    path = ("$." + json.dumps(f)).replace("'", "''")
    return f"json_extract({alias}.fields, '{path}')"


# Always read: what identifies a row and what every run has.
BASE_COLUMNS = ("item_id", "variant", "seq", "prediction", "gold", "correct", "error")


def metric_frame(
    store: Any,
    run: dict[str, Any],
    fields: Iterable[str],
    *,
    columns: Iterable[str] | None = None,
    raw_fields: bool = False,
    item_text: bool = False,
) -> pd.DataFrame:
    """A run's rows (in arrival order) with the named item fields as ``f.<name>`` columns.

    ``columns`` limits the result columns read (default: all of :data:`RESULT_COLUMNS`);
    :data:`BASE_COLUMNS` are always read. Field values are the decoded JSON values (as
    :func:`analysis.metrics.expand_fields` gives them); names the suite's items lack are left
    out. ``raw_fields`` adds the items' `fields` JSON text (for producers that read the whole
    item) with the item's `idx` and `options`, ``item_text`` the item text.
    """
    want = list(dict.fromkeys(fields))
    cols = (
        RESULT_COLUMNS
        if columns is None
        else [c for c in RESULT_COLUMNS if c in set(columns) | set(BASE_COLUMNS)]
    )
    sel = [c for c in cols if c != "run_id"]
    df = _read_frame(
        store,
        f"SELECT {', '.join(sel)} FROM results WHERE run_id = ?",
        [run["run_id"]],
        order_by="seq",
    )
    if "run_id" in cols:
        df.insert(0, "run_id", run["run_id"])
    sid = run.get("suite_id")
    if not sid:
        return df
    if want:
        it = item_fields_frame(store, sid, want)
        _attach(df, it, {f: f"f.{f}" for f in want if it[f].notna().any()})
    if raw_fields or item_text:
        cols_i = [
            "item_id",
            *(["idx", "options", "fields"] if raw_fields else []),
            *(["text"] if item_text else []),
        ]
        it = store.query_df(f"SELECT {', '.join(cols_i)} FROM items WHERE suite_id = ?", [sid])
        _attach(df, it, {c: c for c in cols_i[1:]})
    return df


def _read_frame(
    store: Any, sql: str, params: list[Any], order_by: str | None = None
) -> pd.DataFrame:
    """``store.query_df(sql, params)``, the same frame (dtypes and missing values included),
    read through Arrow where the store offers it: DuckDB's frame conversion makes a Python
    string per value, which was ~1 s of a 1M-row report. Arrow's conversion differs from
    DuckDB's in three cases, handled here: a text column with no value (DuckDB: object, None),
    an empty result (DuckDB: object text columns) and an integer column with a null (DuckDB: a
    nullable integer dtype; such a frame is read through `query_df`).

    ``order_by`` names a selected column to append ``ORDER BY`` for. The rows are first read
    in the table's order (DuckDB keeps insertion order) and kept when that column is strictly
    increasing there: then it is the one order ``ORDER BY`` gives. Otherwise (ties, rows out
    of order) the query is sent again with ``ORDER BY``. The sort held every column of a 1M-row
    run in memory once more (~0.15 s, ~170 MB)."""
    ordered = f"{sql} ORDER BY {order_by}" if order_by else sql
    query_arrow = getattr(store, "query_arrow", None)
    if query_arrow is None:
        return pd.DataFrame(store.query_df(ordered, params))
    tbl = query_arrow(sql, params)
    if order_by and not _strictly_increasing(tbl.column(order_by)):
        tbl = query_arrow(ordered, params)
    if len(set(tbl.column_names)) < tbl.num_columns:  # a name twice: DuckDB's renaming then
        return pd.DataFrame(store.query_df(ordered, params))
    n = tbl.num_rows
    out: dict[str, Any] = {}
    for name, col in zip(tbl.column_names, tbl.columns, strict=True):
        t = col.type
        if pa.types.is_string(t):
            out[name] = (
                np.full(n, None, dtype=object) if n == 0 or col.null_count == n else col.to_pandas()
            )
        elif pa.types.is_floating(t) or (pa.types.is_integer(t) and col.null_count == 0):
            v = col.to_numpy()
            out[name] = v if v.flags.writeable else v.copy()  # Arrow's own buffer is read-only
        else:  # other types (none in the metric columns): DuckDB's own conversion
            return pd.DataFrame(store.query_df(ordered, params))
    # copy=False: the columns as they are, not copied into one 2-D block (~0.1 s, 50 MB per 1M rows)
    return pd.DataFrame(out, columns=tbl.column_names, copy=False)


def _strictly_increasing(col: pa.ChunkedArray) -> bool:
    if col.null_count or not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
        return False
    v = col.to_numpy()
    return bool(np.all(v[1:] > v[:-1]))


def _attach(df: pd.DataFrame, items: pd.DataFrame, columns: dict[str, str]) -> None:
    """Add item columns to result rows by item id (None where the item is missing)."""
    pos = pd.Index(items["item_id"].astype(str)).get_indexer(pd.Index(df["item_id"].astype(str)))
    miss = pos < 0
    for src, dst in columns.items():
        vals = np.empty(len(items) + 1, dtype=object)
        vals[:-1] = items[src].to_numpy(dtype=object)
        vals[-1] = None
        df[dst] = pd.Series(vals[np.where(miss, len(vals) - 1, pos)], index=df.index, dtype=object)


_ITEM_FIELDS: dict[tuple[str, str, tuple[str, ...]], pd.DataFrame] = {}


def item_fields_frame(store: Any, suite_id: str, fields: Iterable[str]) -> pd.DataFrame:
    """A suite's items: ``item_id``, ``gold`` and the named fields (decoded JSON values; None
    where an item lacks one). One JSON parse per item; cached, since a suite id is a hash of
    the suite's content (the four WorldSense runs share one extraction)."""
    want = list(dict.fromkeys(fields))
    key = (str(getattr(store, "path", id(store))), suite_id, tuple(want))
    if key not in _ITEM_FIELDS:
        if len(_ITEM_FIELDS) >= 8:
            _ITEM_FIELDS.pop(next(iter(_ITEM_FIELDS)))
        _ITEM_FIELDS[key] = _item_fields(store, suite_id, want)
    return _ITEM_FIELDS[key]


def _item_fields(store: Any, suite_id: str, want: list[str]) -> pd.DataFrame:
    if not want:
        return store.query_df(
            "SELECT item_id, gold FROM items WHERE suite_id = ? ORDER BY idx", [suite_id]
        )
    paths = ", ".join("'" + ("$." + json.dumps(f)).replace("'", "''") + "'" for f in want)
    sel = ["item_id", "gold", *(f"v[{k + 1}] AS {_quote(f)}" for k, f in enumerate(want))]
    df = store.query_df(
        f"SELECT {', '.join(sel)} FROM (SELECT item_id, gold, idx, json_extract(fields, [{paths}]) AS v "
        "FROM items WHERE suite_id = ?) ORDER BY idx",
        [suite_id],
    )
    for f in want:
        df[f] = decode_json_column(df[f])
    return df
