"""Uniform "metric rows" for ``llmscope report --json``.

Each row is a plain dict::

    {"run": str, "model": str, "group": {key: value, ...}, "metric": str,
     "value": float | None, "ci95": [lo, hi] | None, "n": int | None}

``ci95`` is always the pair of interval bounds ``[lo, hi]`` (never a half-width), or
``None`` when the metric has no interval. NaN values become ``None`` so rows are valid JSON.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["metric_row", "frame_to_rows", "format_p"]


def format_p(p: float | None) -> str:
    """A p-value as every surface prints it (report, compare, TUI): three significant digits,
    never in scientific notation; below 0.0001 as "<0.0001" (a bootstrap p-value has no more
    resolution than that); "-" when there is none."""
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "-"
    p = float(p)
    return "<0.0001" if p < 1e-4 else f"{p:.3g}"


def _py(v: Any) -> Any:
    """NumPy scalars to Python, NaN to None."""
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


def metric_row(
    run: str,
    model: str,
    metric: str,
    value: float | None,
    ci95: Sequence[float] | None = None,
    n: int | None = None,
    group: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One metric row; ``ci95`` is ``[lo, hi]`` or None."""
    ci = None
    if ci95 is not None:
        lo, hi = (_py(float(x)) for x in ci95)
        ci = None if lo is None and hi is None else [lo, hi]
    return {
        "run": run,
        "model": model,
        "group": {str(k): _py(v) for k, v in (group or {}).items()},
        "metric": metric,
        "value": _py(None if value is None else float(value)),
        "ci95": ci,
        "n": None if n is None or pd.isna(n) else int(n),
    }


def run_metric_row(
    run: Mapping[str, Any],
    group: Mapping[str, Any],
    metric: str,
    value: float | None,
    ci: Sequence[float] | None,
    n: int | None,
) -> dict[str, Any]:
    """A metric row of a stored run (its `runs` record), with the run's suite named."""
    r = metric_row(run["run_id"], str(run.get("model")), metric, value, ci, n, group)
    r["suite"] = run.get("suite_name")
    return r


def frame_to_rows(
    df: pd.DataFrame,
    *,
    run: str,
    model: str | None = None,
    group_cols: Iterable[str] = (),
    metrics: Mapping[str, tuple[str, str | None, str | None, str | None]],
    model_col: str | None = None,
    n_col: str | None = None,
) -> list[dict[str, Any]]:
    """Turn a result table into metric rows.

    ``metrics`` maps a metric name to ``(value_col, lo_col, hi_col, n_col)``; lo/hi/n may be
    None. The model comes from ``model_col`` per row when given, else ``model``.
    """
    out: list[dict[str, Any]] = []
    gcols = list(group_cols)
    for rec in df.to_dict("records"):
        mdl = str(rec[model_col]) if model_col else (model or "")
        group = {k: rec[k] for k in gcols}
        for name, (vcol, locol, hicol, ncol) in metrics.items():
            ci = [rec[locol], rec[hicol]] if locol and hicol else None
            nn = rec.get(ncol or n_col or "") if (ncol or n_col) else None
            out.append(metric_row(run, mdl, name, rec[vcol], ci, nn, group))
    return out
