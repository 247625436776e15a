"""Suite-level summary of contamination probes (`task: contamination`).

Rows: `flagged_rate` (share of items flagged, Wilson 95% interval), `min_k_prob`
(mean Min-K% log-probability in nats, Shi et al. 2023; t interval over items) and
`ngram_overlap` (mean completion-probe n-gram recall; t interval), overall and per
value of the suite's first `group_by` field.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from llmscope.analysis.intervals import wilson_interval
from llmscope.analysis.rows import metric_row
from llmscope.engine.tasks.registry import task_producers
from llmscope.store.db import decode_json


def _mean_t(
    v: np.ndarray, lo: float = -math.inf, hi: float = math.inf
) -> tuple[float, list[float] | None]:
    """Mean and t interval over items, clipped to the value's range [lo, hi]."""
    v = v[np.isfinite(v)]
    if len(v) == 0:
        return math.nan, None
    if len(v) < 2:
        return float(v.mean()), None
    half = float(stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v)))
    return float(v.mean()), [max(lo, float(v.mean()) - half), min(hi, float(v.mean()) + half)]


def contamination_rows(
    df: pd.DataFrame, run: dict[str, Any], spec: dict[str, Any]
) -> list[dict[str, Any]]:
    """Metric rows for a contamination run (empty for other tasks)."""
    if "contamination" not in task_producers(run.get("task")) or df.empty:  # the task lists it
        return []
    ok = df[df["error"].isna() & df["extra"].notna()]
    if ok.empty:
        return []
    extras = ok["extra"].map(decode_json)
    fields = ok["fields"].map(lambda s: decode_json(s) or {}) if "fields" in ok else None
    by = (spec.get("group_by") or [None])[0]
    groups: list[tuple[dict[str, Any], pd.Series]] = [({}, pd.Series(True, index=ok.index))]
    if by and fields is not None:
        keys = fields.map(lambda f: str(f.get(by)))
        groups += [({by: k}, keys == k) for k in sorted(keys.unique())]
    out = []
    for group, mask in groups:
        ex = extras[mask]
        n = len(ex)
        flagged = float(sum(bool(e.get("flagged")) for e in ex))
        rows: list[tuple[str, float, list[float] | None]] = [
            ("flagged_rate", flagged / n, list(wilson_interval(flagged, n)))
        ]
        # a mean log-probability is at most 0; an n-gram recall lies in [0, 1]
        for key, lo, hi in (("min_k_prob", -math.inf, 0.0), ("ngram_overlap", 0.0, 1.0)):
            m, ci = _mean_t(np.array([float(e.get(key, math.nan)) for e in ex]), lo, hi)
            rows.append((key, m, ci))
        for metric, value, ci in rows:
            r = metric_row(run["run_id"], str(run.get("model")), metric, value, ci, n, group)
            r["suite"] = run.get("suite_name")
            out.append(r)
    return out
