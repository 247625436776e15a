"""Paired comparison of two runs on the same items.

Items are matched on key columns (default ``item_id, variant``). We report both accuracies,
their difference with a paired bootstrap 95% interval (items, or clusters of items,
resampled jointly for both runs; percentile interval; Efron & Tibshirani 1993), and
McNemar's test on the discordant pairs (McNemar 1947): with ``b`` = items only run A gets
right and ``c`` = items only run B gets right,

* exact two-sided binomial test ``p = min(1, 2·BinomCDF(min(b, c); b + c, 1/2))`` when
  ``b + c < 25`` (the usual threshold where the chi-square approximation becomes poor),
* otherwise the chi-square statistic with continuity correction (Edwards 1948)
  ``(|b - c| - 1)^2 / (b + c)`` on 1 degree of freedom.

Fractional correctness is binarised at 0.5 for McNemar only. Intervals are ``[lo, hi]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats

from .intervals import resample_index
from .rows import metric_row

__all__ = ["McNemar", "Comparison", "mcnemar", "paired_frame", "compare_runs", "EXACT_BELOW"]

EXACT_BELOW = 25


@dataclass
class McNemar:
    """McNemar's test result."""

    b: int  # A right, B wrong
    c: int  # A wrong, B right
    statistic: float  # chi-square statistic, or min(b, c) for the exact test
    pvalue: float
    method: str  # "exact" or "chi2-cc"


@dataclass
class Comparison:
    """Paired comparison of run A against run B (``diff = acc_b - acc_a``)."""

    n: int
    acc_a: float
    acc_b: float
    diff: float
    diff_lo: float
    diff_hi: float
    mcnemar: McNemar
    n_clusters: int
    paired: pd.DataFrame = field(repr=False)  # keys, correct_a, correct_b, d (= b - a), ...
    disagreements: pd.DataFrame = field(repr=False)  # rows where the binarised scores differ

    def rows(self, run: str, model: str, other: str) -> list[dict]:
        """Metric rows ``accuracy_diff`` and ``mcnemar_p`` (group: {"vs": other})."""
        g = {"vs": other}
        return [
            metric_row(
                run, model, "accuracy_diff", self.diff, [self.diff_lo, self.diff_hi], self.n, g
            ),
            metric_row(run, model, "mcnemar_p", self.mcnemar.pvalue, None, self.n, g),
        ]


def mcnemar(b: int, c: int, *, exact: bool | None = None) -> McNemar:
    """McNemar's test from the discordant counts ``b`` and ``c``.

    ``exact=None`` picks the exact binomial test when ``b + c < EXACT_BELOW``.
    """
    n = b + c
    if n == 0:
        return McNemar(b, c, 0.0, 1.0, "exact")
    if exact is None:
        exact = n < EXACT_BELOW
    if exact:
        p = min(1.0, 2.0 * float(stats.binom.cdf(min(b, c), n, 0.5)))
        return McNemar(b, c, float(min(b, c)), p, "exact")
    chi2 = (abs(b - c) - 1.0) ** 2 / n
    return McNemar(b, c, chi2, float(stats.chi2.sf(chi2, 1)), "chi2-cc")


def paired_frame(
    a: pd.DataFrame,
    b: pd.DataFrame,
    *,
    keys: Sequence[str] = ("item_id", "variant"),
    correct_col: str = "correct",
    extra: Sequence[str] = ("prediction", "gold"),
) -> pd.DataFrame:
    """Inner-join two runs on ``keys``: columns ``keys, correct_a, correct_b, d`` and the
    ``extra`` columns suffixed ``_a``/``_b``; rows where either score is missing are dropped."""
    keys = [k for k in keys if k in a and k in b]
    cols_a = keys + [correct_col] + [c for c in extra if c in a]
    cols_b = keys + [correct_col] + [c for c in extra if c in b]
    m = a[cols_a].merge(b[cols_b], on=keys, how="inner", suffixes=("_a", "_b"))
    m = m.rename(columns={f"{correct_col}_a": "correct_a", f"{correct_col}_b": "correct_b"})
    for c in ("correct_a", "correct_b"):
        m[c] = pd.to_numeric(m[c], errors="coerce").astype(float)
    # Sorted by key so the pairing (and the disagreement list) does not depend on arrival order.
    m = (
        m.dropna(subset=["correct_a", "correct_b"])
        .sort_values(keys, kind="stable")
        .reset_index(drop=True)
    )
    m["d"] = m["correct_b"] - m["correct_a"]
    return m


def compare_runs(
    a: pd.DataFrame,
    b: pd.DataFrame,
    *,
    keys: Sequence[str] = ("item_id", "variant"),
    correct_col: str = "correct",
    cluster_col: str | None = None,
    n_boot: int = 2000,
    seed: int = 0,
    exact: bool | None = None,
) -> Comparison:
    """Compare run B against run A on their common items (see module docstring).

    ``cluster_col`` (a key column, e.g. ``item_id`` when variants are paired too) makes the
    bootstrap resample whole clusters.
    """
    p = paired_frame(a, b, keys=keys, correct_col=correct_col)
    n = len(p)
    ca = p["correct_a"].to_numpy()
    cb = p["correct_b"].to_numpy()
    ba, bb = ca >= 0.5, cb >= 0.5
    test = mcnemar(int(np.sum(ba & ~bb)), int(np.sum(~ba & bb)), exact=exact)
    if n == 0:
        empty = p.iloc[0:0]
        return Comparison(0, np.nan, np.nan, np.nan, np.nan, np.nan, test, 0, p, empty)
    if cluster_col:
        codes, _ = pd.factorize(p[cluster_col])
    else:
        codes = np.arange(n)
    d_sum = np.bincount(codes, weights=p["d"].to_numpy())
    m = np.bincount(codes).astype(float)
    G = len(m)
    reps = np.empty(n_boot)
    done = 0
    for idx in resample_index(G, n_boot, seed):
        k = idx.shape[0]
        reps[done : done + k] = d_sum[idx].sum(axis=1) / m[idx].sum(axis=1)
        done += k
    lo, hi = np.quantile(reps, [0.025, 0.975])
    dis = p[ba != bb].reset_index(drop=True)
    return Comparison(
        n=n,
        acc_a=float(ca.mean()),
        acc_b=float(cb.mean()),
        diff=float(cb.mean() - ca.mean()),
        diff_lo=float(lo),
        diff_hi=float(hi),
        mcnemar=test,
        n_clusters=G,
        paired=p,
        disagreements=dis,
    )
