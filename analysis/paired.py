"""Paired comparison of two runs on their common rows: the accuracy difference with a paired
cluster bootstrap interval and p-value (`llmscope compare`, the TUI compare screen), and
lm-eval's independent-rows standard error (`export --format lm-eval`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .definitions import BOOTSTRAP, BootstrapConfig
from .intervals import resample_index
from .metrics import cluster_key


# -- comparisons -----------------------------------------------------------------------------
@dataclass
class PairedComparison:
    """Run B against run A on their common (item, variant) rows: ``diff = acc_b - acc_a``."""

    n: int
    n_clusters: int
    acc_a: float
    acc_b: float
    diff: float
    lo: float
    hi: float
    p_value: float
    interval_method: str
    paired: pd.DataFrame = field(repr=False)
    disagreements: pd.DataFrame = field(repr=False)


def paired_comparison(
    a: pd.DataFrame,
    b: pd.DataFrame,
    cluster_field: str | None = None,
    cfg: BootstrapConfig = BOOTSTRAP,
) -> PairedComparison:
    """Paired cluster bootstrap of the accuracy difference on per-item differences.

    Rows are matched on (item_id, variant); whole clusters (``cluster_key``) are resampled
    for both runs jointly. The p-value is two-sided from the bootstrap distribution of the
    centred difference: ``(1 + #|d* - d| >= |d|) / (1 + B)``.
    """
    from .compare import paired_frame

    a = a[a["error"].isna()] if "error" in a else a
    b = b[b["error"].isna()] if "error" in b else b
    extra_a = [c for c in a.columns if c.startswith("f.")]
    p = paired_frame(a, b, extra=("prediction", "gold", *extra_a))
    p = p.rename(columns={f"{c}_a": c for c in extra_a})
    n = len(p)
    if n == 0:
        e = p.iloc[0:0]
        return PairedComparison(
            0, 0, math.nan, math.nan, math.nan, math.nan, math.nan, math.nan, "empty", p, e
        )
    cl = cluster_key(p, cluster_field)
    d = p["d"].to_numpy(float)
    codes, _ = pd.factorize(pd.Series(cl, dtype="object"), sort=False)
    ds = np.bincount(codes, weights=d)
    m = np.bincount(codes).astype(float)
    G = len(m)
    diff = float(d.mean())
    reps = np.empty(cfg.resamples)
    start = 0
    for idx in resample_index(G, cfg.resamples, cfg.seed):
        k = idx.shape[0]
        reps[start : start + k] = ds[idx].sum(axis=1) / m[idx].sum(axis=1)
        start += k
    al = (1 - cfg.level) / 2
    lo, hi = (float(x) for x in np.quantile(reps, [al, 1 - al]))
    pval = float((1 + np.sum(np.abs(reps - diff) >= abs(diff) - 1e-12)) / (1 + cfg.resamples))
    ca, cb = p["correct_a"].to_numpy(float), p["correct_b"].to_numpy(float)
    dis = p[(ca >= 0.5) != (cb >= 0.5)].reset_index(drop=True)
    return PairedComparison(
        n,
        G,
        float(ca.mean()),
        float(cb.mean()),
        diff,
        lo,
        hi,
        min(1.0, pval),
        "paired cluster bootstrap",
        p,
        dis,
    )


def iid_stderr(values: Sequence[float]) -> float | None:
    """lm-eval's standard error of a mean: sample sd (ddof=1) / sqrt(n), rows independent
    (`acc_stderr` in `llmscope export --format lm-eval`); None below two values."""
    n = len(values)
    if n < 2:
        return None
    return float(np.std(np.asarray(values, dtype=float), ddof=1) / math.sqrt(n))
