"""Abstention metrics: how often a task had no evidence, and accuracy with and without those items.

An abstaining item (see `llmscope.engine.abstain`) is stored with `correct` = 0 when it has gold,
so the headline `accuracy` is over all items and cannot rise by abstaining. Beside it:

- `abstain_rate`: abstentions / scored rows (rows without an error), cluster-aware interval;
- `accuracy_answered`: accuracy over rows with gold that did not abstain (shown only when some
  row abstained; otherwise it equals `accuracy`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from llmscope.analysis.intervals import accuracy_ci
from llmscope.analysis.rows import metric_row
from llmscope.engine.tasks.registry import task_producers
from llmscope.store.db import decode_json


def abstained_mask(extra: pd.Series) -> np.ndarray:
    """True where a stored `extra` JSON marks an abstention."""

    def one(s: Any) -> bool:
        if not isinstance(s, str) or "abstained" not in s:  # cheap pre-check: most rows answer
            return False
        d = decode_json(s)  # None when it does not parse
        return bool(isinstance(d, dict) and d.get("abstained"))

    out = np.zeros(len(extra), dtype=bool)
    present = np.flatnonzero(extra.notna().to_numpy())  # a missing value never abstains
    vals = extra.to_numpy(dtype=object)
    out[present] = np.fromiter((one(s) for s in vals[present]), dtype=bool, count=len(present))
    return out


def _clusters(df: pd.DataFrame, spec: dict[str, Any]) -> np.ndarray:
    # the pipeline's units as codes (metrics imports this module)
    from llmscope.analysis.metrics import cluster_codes_of

    cf = spec.get("cluster_field")
    return cluster_codes_of(df, cf if isinstance(cf, str) else None)


def abstention_rows(
    df: pd.DataFrame, run: dict[str, Any], spec: dict[str, Any]
) -> list[dict[str, Any]]:
    """`abstain_rate` (and `accuracy_answered` when any row abstained) for one run."""
    if "abstention" not in task_producers(run.get("task")) or df.empty:  # the task lists it
        return []
    err = df["error"].notna()
    ok = df[~err] if err.any() else df  # no error row: no copy of the frame
    if ok.empty:
        return []
    mask = abstained_mask(ok["extra"]) if "extra" in ok else np.zeros(len(ok), dtype=bool)
    model = str(run.get("model"))
    iv = accuracy_ci(mask.astype(float), _clusters(ok, spec))
    ci = None if math.isnan(iv.lo) else [iv.lo, iv.hi]
    rows = [metric_row(run["run_id"], model, "abstain_rate", iv.mean, ci, iv.n)]
    if mask.any():
        answered = ok[~mask & ok["correct"].notna()]
        if not answered.empty:
            a = accuracy_ci(answered["correct"].to_numpy(float), _clusters(answered, spec))
            aci = None if math.isnan(a.lo) else [a.lo, a.hi]
            rows.append(metric_row(run["run_id"], model, "accuracy_answered", a.mean, aci, a.n))
        else:
            rows.append(metric_row(run["run_id"], model, "accuracy_answered", None, None, 0))
    for r in rows:
        r["suite"] = run.get("suite_name")
    return rows
