"""`llmscope report`: metric rows computed from stored per-item results.

Every number is recomputed from the `results` table, so it can be traced to
per-item rows (`llmscope export`). Rows follow one shape for text and JSON:
{run, model, group, metric, value, ci95: [lo, hi] | None, n}.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd

from llmscope.store.db import Store


def results_with_fields(store: Store, run_id: str) -> pd.DataFrame:
    """A run's results with each item's fields expanded into `f.<name>` columns."""
    df = store.results_frame(run_id)
    if df.empty:
        return df
    fields = df["fields"].map(lambda s: json.loads(s) if isinstance(s, str) else {})
    flat = pd.DataFrame(list(fields), index=df.index).add_prefix("f.")
    return pd.concat([df, flat], axis=1)


def _ci(correct: np.ndarray, clusters: np.ndarray | None) -> tuple[float, list[float] | None, int]:
    from llmscope.analysis.intervals import accuracy_ci

    res = accuracy_ci(correct, clusters)
    lo, hi = float(res.lo), float(res.hi)
    ci = None if math.isnan(lo) or math.isnan(hi) else [lo, hi]
    return float(res.mean), ci, int(res.n)


def _cluster_key(df: pd.DataFrame, cluster_field: str | None) -> np.ndarray:
    # Prompt variants of one item are always dependent; a suite's cluster field can widen that.
    if cluster_field and f"f.{cluster_field}" in df:
        return df[f"f.{cluster_field}"].astype(str).to_numpy()
    return df["item_id"].astype(str).to_numpy()


def accuracy_rows(
    df: pd.DataFrame, run: dict[str, Any], by: list[str], cluster_field: str | None
) -> list[dict[str, Any]]:
    """Accuracy (95% CI, clustered) overall, per variant, and per value of each `by` field."""
    rows: list[dict[str, Any]] = []
    ok = df[df["error"].isna() & df["correct"].notna()]
    if ok.empty:
        return rows

    def add(sub: pd.DataFrame, group: dict[str, Any]) -> None:
        if sub.empty:
            return
        mean, ci, n = _ci(sub["correct"].to_numpy(float), _cluster_key(sub, cluster_field))
        rows.append(_row(run, group, "accuracy", mean, ci, n))

    add(ok, {})
    if ok["variant"].nunique() > 1:
        for v, sub in ok.groupby("variant", sort=True):
            add(sub, {"variant": v})
    for field in by:
        col = field if field in ok else f"f.{field}"
        if col not in ok:
            continue
        for key, sub in ok.groupby(ok[col].astype(str), sort=True):
            add(sub, {field: key})
    return rows


def yesno_rows(df: pd.DataFrame, run: dict[str, Any], by: list[str]) -> list[dict[str, Any]]:
    """Mean P(yes), P(no), P(other) (with normal-approximation CIs) and the gold yes-rate."""
    ok = df[df["error"].isna() & df["p_yes"].notna()]
    rows: list[dict[str, Any]] = []

    def add(sub: pd.DataFrame, group: dict[str, Any]) -> None:
        for metric, col in (("mean_p_yes", "p_yes"), ("mean_p_no", "p_no"), ("mean_p_other", "other")):
            x = sub[col].to_numpy(float)
            m = float(x.mean())
            half = 1.96 * float(x.std(ddof=1)) / math.sqrt(len(x)) if len(x) > 1 else float("nan")
            rows.append(_row(run, group, metric, m, None if math.isnan(half) else [m - half, m + half], len(x)))
        gold = sub["gold"].dropna().str.lower()
        if len(gold):
            rows.append(_row(run, group, "gold_yes_rate", float((gold == "yes").mean()), None, len(gold)))

    if ok.empty:
        return rows
    add(ok, {})
    if ok["variant"].nunique() > 1:
        for v, sub in ok.groupby("variant", sort=True):
            add(sub, {"variant": v})
    return rows


def _row(run: dict[str, Any], group: dict[str, Any], metric: str, value: float,
         ci: list[float] | None, n: int) -> dict[str, Any]:
    return {"run": run["run_id"], "model": run.get("model"), "suite": run.get("suite_name"),
            "group": group, "metric": metric, "value": value, "ci95": ci, "n": n}


def build_report(store: Store, run: dict[str, Any], by: list[str] | None = None) -> list[dict[str, Any]]:
    """All metric rows for one run."""
    df = results_with_fields(store, run["run_id"])
    if df.empty:
        return []
    spec = _suite_spec(store, run["suite_id"])
    by = list(by) if by else list(spec.get("group_by") or [])
    cluster = spec.get("cluster_field")
    rows = accuracy_rows(df, run, by, cluster)
    if run.get("task") == "yesno":
        rows += yesno_rows(df, run, by)
    errors = int(df["error"].notna().sum())
    rows.append(_row(run, {}, "errors", float(errors), None, len(df)))
    return rows


def _suite_spec(store: Store, suite_id: str) -> dict[str, Any]:
    row = store.execute("SELECT spec FROM suites WHERE suite_id = ?", [suite_id]).fetchone()
    return json.loads(row[0]) if row and row[0] else {}


def format_rows(rows: list[dict[str, Any]]) -> str:
    """Plain-text table of metric rows."""
    if not rows:
        return "(no results)"
    lines = []
    cur = None
    for r in rows:
        head = f"{r['run']}  {r.get('suite')}  {r.get('model')}"
        if head != cur:
            lines.append(head)
            cur = head
        group = ", ".join(f"{k}={v}" for k, v in r["group"].items()) or "overall"
        ci = f"[{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}]" if r["ci95"] else ""
        val = f"{r['value']:.0f}" if r["metric"] == "errors" else f"{r['value']:.3f}"
        lines.append(f"  {group[:48]:<48} {r['metric']:<14} {val:>8} {ci:<18} n={r['n']}")
    return "\n".join(lines)
