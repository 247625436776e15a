"""Item fields as columns: a stored row's `fields` JSON decoded into ``f.<name>`` columns,
each distinct text decoded once (and a suite's fields once across its runs)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from llmscope.store.db import decode_json

__all__ = ["decode_cell", "expand_fields"]


def decode_cell(v: Any) -> Any:
    """A JSON column's value decoded (None when it is not valid JSON); other values as they are."""
    if isinstance(v, str):
        try:
            return decode_json(v)
        except ValueError:
            return None
    return v


def expand_fields(df: pd.DataFrame) -> pd.DataFrame:
    """Add ``f.<name>`` columns from the ``fields`` JSON column (when present)."""
    if df.empty or "fields" not in df:
        return df
    col = df["fields"].astype(object).where(df["fields"].notna(), None).to_numpy()
    try:
        uniq, flat_u = _fields_table(tuple(pd.unique(col)))
        flat = flat_u.iloc[pd.Index(uniq).get_indexer(col)].set_axis(df.index)
    except TypeError:  # already decoded (dicts are unhashable): row by row
        flat = _fields_table_of(list(col), list(col))[1].set_axis(df.index)
    flat = flat[[c for c in flat.columns if c not in df.columns]]
    return pd.concat([df, flat], axis=1)


# The decoded fields of the last few suites' items: every run of a suite carries the same
# fields text, so a report over many runs decodes them once, not once a run. Read-only: the
# frame is indexed into (a copy), never handed out.
_FIELDS_TABLES: dict[tuple[Any, ...], tuple[list[Any], pd.DataFrame]] = {}


def _fields_table(uniq: tuple[Any, ...]) -> tuple[list[Any], pd.DataFrame]:
    """The distinct `fields` texts and, row for row, their decoded ``f.<name>`` columns."""
    hit = _FIELDS_TABLES.get(uniq)
    if hit is not None:
        return hit
    out = _fields_table_of(list(uniq), list(uniq))
    if len(_FIELDS_TABLES) >= 4:
        _FIELDS_TABLES.pop(next(iter(_FIELDS_TABLES)))
    _FIELDS_TABLES[uniq] = out
    return out


def _fields_table_of(keys: list[Any], values: list[Any]) -> tuple[list[Any], pd.DataFrame]:
    decoded = []
    for v in values:
        d = decode_cell(v) if v is not None else {}
        decoded.append(d if isinstance(d, dict) else {})
    return keys, pd.DataFrame(decoded, index=range(len(values))).add_prefix("f.")
