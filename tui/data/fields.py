"""The columns of a result row the TUI reads, and the fields a run's task declares for its list.

Nothing here imports Textual; the store, live-channel and snapshot modules all read rows through it.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd

from llmscope.store.db import JSON_RESULT_COLUMNS, RESULT_SCHEMA, decode_json

# The light result columns the dashboard holds per row: the store's one column definition
# (`RESULT_SCHEMA`) without the heavy text and JSON columns (prompt, top tokens, option scores,
# extra; the drill-down reads those per item) and the bookkeeping ones.
_HEAVY_COLS = ("run_id", "prompt", "written_at")
LIGHT_COLS = [
    c
    for c in RESULT_SCHEMA.names
    if c not in _HEAVY_COLS and (c not in JSON_RESULT_COLUMNS or c == "probs")
]


def is_nan(v: Any) -> bool:
    """True for a missing value as pandas holds it (NaT, a float NaN)."""
    return v is pd.NaT or (isinstance(v, float) and math.isnan(v))


def texts(col: pd.Series) -> list[Any]:
    """A text column's values with missing ones as None (NaN in pandas' string dtype)."""
    return [None if is_nan(v) else v for v in col.tolist()]


def parse_json(s: Any) -> Any:
    """A stored JSON text decoded (None when it is not valid JSON); any other value as it is."""
    if isinstance(s, str):
        try:
            return decode_json(s)
        except json.JSONDecodeError:
            return None
    return s


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
        v = parse_json(v)
        v = v.get(sub) if isinstance(v, dict) else None
    return v


def _number(v: Any) -> Any:
    try:
        return float(v)
    except (TypeError, ValueError):
        return str(v)


def show_field(v: Any, kind: str) -> str:
    """A declared field's value as the list and the drill-down print it."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if kind == "flags":  # reasons such as "ngram_overlap 0.8 >= 0.5": their metric names
        v = parse_json(v)
        names = [str(r).split()[0] for r in v] if isinstance(v, list) else []
        return ", ".join(names) if names else "-"
    if kind == "bool":
        v = parse_json(v) if isinstance(v, str) else v
        return "yes" if v is True or v == 1 else "no"
    if kind in ("number", "prob"):
        from llmscope.analysis.numbers import fmt_num

        return fmt_num(v if isinstance(v, (int, float)) else _number(v))
    if kind == "json" and not isinstance(v, str):
        return json.dumps(v, ensure_ascii=False, default=str)
    return str(v)
