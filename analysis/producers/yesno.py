"""Yes/no producer: mean P(yes) / P(no) / P(other), yes rate and bias, off-format rate."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from ..frame_codes import factorize
from ..metric_stats import mean_metric, rate
from ..metric_values import Metric
from ..metrics import MetricContext, register_producer

__all__ = ["gold_yes_column", "variant_codes", "yesno_metrics", "register"]


def _gold_yes(g: Any) -> float:
    if g is None or (isinstance(g, float) and math.isnan(g)):
        return math.nan
    if isinstance(g, str):
        return {"yes": 1.0, "no": 0.0, "true": 1.0, "false": 0.0}.get(g.strip().lower(), math.nan)
    return float(bool(g))


def gold_yes_column(gold: pd.Series) -> np.ndarray:
    """`_gold_yes` of each row, called once per distinct gold (a column holds a few values;
    per row it was 0.3 s of a 100k-row report)."""
    codes, uniques = factorize(gold)  # the column's codes, shared by the producers
    missing = codes < 0
    na = _gold_yes(gold[missing].iloc[0]) if missing.any() else math.nan
    table = np.array([*(_gold_yes(u) for u in uniques), na], dtype=float)
    return table[codes]  # code -1 (missing) takes the last entry


def variant_codes(ok: pd.DataFrame) -> tuple[np.ndarray, list[str], int]:
    """Each row's prompt variant as ``pd.factorize(ok["variant"].astype(str), sort=True)``
    (missing: -1), and ``ok["variant"].nunique()``; a stored text column's codes are shared
    by the producers."""
    col = ok["variant"]
    if isinstance(col.array, pd.arrays.ArrowStringArray):  # astype(str) keeps it as it is
        codes, uniques = factorize(col, sort=True)
        return codes, [str(u) for u in uniques], len(uniques)
    codes, uniques = factorize(col.astype(str), sort=True)
    return codes, [str(u) for u in uniques], int(col.nunique())


def _yesno_columns(ok: pd.DataFrame) -> dict[str, np.ndarray]:
    """Per row: P(yes), P(no), P(other) (stored, else 1 - P(yes) - P(no)), predicted yes, gold
    yes, off format (P(other) above P(yes) + P(no)), and whether P(yes) and P(no) are finite."""
    y = pd.to_numeric(ok["p_yes"], errors="coerce").to_numpy(float)
    n = pd.to_numeric(ok["p_no"], errors="coerce").to_numpy(float)
    o = (
        pd.to_numeric(ok["other"], errors="coerce").to_numpy(float)
        if "other" in ok
        else np.full(len(ok), np.nan)
    )
    o = np.where(np.isnan(o), 1.0 - y - n, o)  # what Series.where(notna) keeps and fills
    return {
        "p_yes": y,
        "p_no": n,
        "p_other": o,
        "pred_yes": (y > n).astype(float),
        "gold_yes": gold_yes_column(ok["gold"]),
        "off_format": (o > y + n).astype(float),
        "keep": np.isfinite(y) & np.isfinite(n),
    }


def yesno_metrics(ctx: MetricContext) -> list[Metric]:
    """Mean P(yes)/P(no)/P(other), yes rate vs gold, yes bias and off-format rate."""
    ok = ctx.ok()
    if ok.empty or "p_yes" not in ok:
        return []
    # Every column once over the whole run, then each group's rows by a mask (rows in run order,
    # as a group-by gives them): the same values as per-group frames, without copying frames.
    cols = _yesno_columns(ok)
    cl_all = ctx.clusters(ok)
    out: list[Metric] = []
    groups: list[tuple[dict[str, Any], np.ndarray]] = [({}, cols["keep"])]
    codes, uniques, distinct = variant_codes(ok)  # missing: -1, in no group
    if distinct > 1:
        groups += [({"variant": v}, cols["keep"] & (codes == k)) for k, v in enumerate(uniques)]
    for group, rows in groups:
        if not rows.any():
            continue
        every = bool(rows.all())  # the whole run: the columns as they are, not copied by a mask
        at = None if every else np.flatnonzero(rows)  # one pass over the mask, not one per column
        f = {k: v if at is None else v[at] for k, v in cols.items() if k != "keep"}
        cl = cl_all if at is None else cl_all[at]
        for m in ("p_yes", "p_no", "p_other"):
            r = mean_metric(f"mean_{m}", f[m], cl, group, "yesno")
            if r is not None:
                out.append(r)
        for name, col in (("pred_yes_rate", "pred_yes"),):
            r = rate(name, f[col], cl, group, "yesno")
            if r is not None:
                out.append(r)
        gk = np.isfinite(f["gold_yes"])
        if gk.any():
            out.append(
                Metric(
                    "gold_yes_rate",
                    float(pd.Series(f["gold_yes"][gk]).mean()),
                    n=int(gk.sum()),
                    group=dict(group),
                    producer="yesno",
                )
            )
            r = mean_metric("yes_bias", (f["pred_yes"] - f["gold_yes"])[gk], cl[gk], group, "yesno")
            if r is not None:
                out.append(r)
        r = rate("off_format_rate", f["off_format"], cl, group, "yesno")
        if r is not None:
            out.append(r)
    return out


def register() -> None:
    """Add this family's producer to the pipeline (analysis/metrics.py calls it)."""
    register_producer(
        "yesno", needs=lambda c: c.has("p_yes"), reads=("p_yes", "p_no", "other"), fields=()
    )(yesno_metrics)
