"""Accuracy producers: overall, per prompt variant, per group and per scoring method."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..metric_stats import mean_metric, rate
from ..metric_values import Metric
from ..metrics import MetricContext, register_producer, row_extras
from .yesno import variant_codes

__all__ = ["accuracy_metrics", "variant_spread", "method_metrics", "register"]


def _group_col(df: pd.DataFrame, fieldname: str) -> str | None:
    if fieldname in df:
        return fieldname
    return f"f.{fieldname}" if f"f.{fieldname}" in df else None


def accuracy_metrics(ctx: MetricContext) -> list[Metric]:
    """Accuracy overall, per prompt variant, per ``by`` field."""
    if "correct" not in ctx.df:
        return []
    ok = ctx.ok()
    # only the columns read below: the per-group frames then copy two columns, not every one
    ok = ok[
        [
            c
            for c in dict.fromkeys(["correct", "variant", *(_group_col(ok, f) for f in ctx.by)])
            if c
        ]
    ]
    scored = pd.to_numeric(ok["correct"], errors="coerce").notna()
    ok = ok if scored.all() else ok[scored]
    if ok.empty:
        return []
    out: list[Metric] = []

    def add(sub: pd.DataFrame, group: dict[str, Any]) -> None:
        m = rate("accuracy", sub["correct"], ctx.clusters(sub), group, "accuracy")
        if m is not None:
            out.append(m)

    add(ok, {})
    # the variant column's codes, shared with the yes/no producer (a group-by hashed it again);
    # each group's rows in run order, as the group-by gave them
    codes, uniques, distinct = variant_codes(ok)
    if distinct > 1:
        if ctx.df.index.is_unique:
            # a group's clusters are the run's at its rows (MetricContext.clusters): masks of
            # whole-run arrays, no frame (and no Arrow text) copied per group
            corr, cl = ok["correct"].to_numpy(), ctx.clusters(ok)
            for k, v in enumerate(uniques):
                rows = codes == k
                m = rate("accuracy", corr[rows], cl[rows], {"variant": v}, "accuracy")
                if m is not None:
                    out.append(m)
        else:
            for k, v in enumerate(uniques):
                add(ok[codes == k], {"variant": v})
    for f in ctx.by:
        col = _group_col(ok, f)
        if col is None:
            continue
        for key, sub in ok.groupby(ok[col].astype(str), sort=True):
            add(sub, {f: key})
    return out + variant_spread(out)


def variant_spread(accuracy: list[Metric]) -> list[Metric]:
    """Range and SD of the per-variant accuracies (prompt sensitivity), from the row or SQL form."""
    accs = [m.value for m in accuracy if set(m.group) == {"variant"} and m.value is not None]
    if len(accs) < 2:
        return []
    a = np.asarray(accs, dtype=float)
    return [
        Metric("variant_acc_range", float(a.max() - a.min()), n=len(a), producer="accuracy"),
        Metric("variant_acc_sd", float(a.std(ddof=1)), n=len(a), producer="accuracy"),
    ]


def method_metrics(ctx: MetricContext) -> list[Metric]:
    """Choice tasks: accuracy and expected accuracy for each scoring method."""
    ok = ctx.ok()
    if ok.empty or "extra" not in ok:
        return []
    methods = [
        e.get("methods") if isinstance(e.get("methods"), dict) else None for e in row_extras(ok)
    ]
    if not any(methods):
        return []
    names: list[str] = []
    for m in methods:
        for k in m or {}:
            if k not in names:
                names.append(k)
    cl = ctx.clusters(ok)
    out: list[Metric] = []
    for name in names:
        for key, metric in (("correct", "accuracy"), ("expected_acc", "expected_accuracy")):
            vals = [
                float(m[name][key]) if m and name in m and m[name].get(key) is not None else np.nan
                for m in methods
            ]
            r = (rate if metric == "accuracy" else mean_metric)(
                metric, vals, cl, {"method": name}, "methods"
            )
            if r is not None:
                out.append(r)
    return out


def register() -> None:
    """Add this family's producers to the pipeline, in report order (analysis/metrics.py calls it)."""
    register_producer("accuracy", every_task=True, reads=(), fields=())(accuracy_metrics)
    register_producer("methods", needs=lambda c: c.extra_has("methods"), reads=("extra",))(
        method_metrics
    )
