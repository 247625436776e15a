"""Accuracy with 95% confidence intervals that respect dependence between trials.

Independent trials use the Wilson score interval (Wilson 1927; Agresti & Coull 1998).
Dependent trials (prompt variants of one statement, WorldSense tuples, ...) are reduced to
per-cluster sums ``y_g`` (correct count) and ``m_g`` (trial count). The accuracy is then a
ratio estimator ``p = sum(y_g) / sum(m_g)`` with the cluster-robust (sandwich, CR1) variance

    V(p) = G / (G - 1) * sum_g (y_g - p * m_g)^2 / (sum_g m_g)^2

and a Student-t critical value with ``G - 1`` degrees of freedom (Cameron & Miller 2015,
"A Practitioner's Guide to Cluster-Robust Inference"). This is the automatic choice for
clustered rates at every number of clusters: in the coverage simulation of
tests/analysis/test_intervals_coverage.py (12 clusters of 3 correlated trials) it covers close to the
nominal 95%, where the percentile cluster bootstrap under-covers (~0.93) and the
"wider of bootstrap and per-cluster Wilson" rule over-covers (~0.99). For statistics
that are not a ratio of cluster sums (F1, Brier, ECE, differences of runs) a cluster
bootstrap (resample whole clusters with replacement, percentile interval; Field & Welsh
2007) is used.

All intervals are returned as ``[lo, hi]`` bounds (not half-widths), clipped to [0, 1]
for accuracies.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

# scipy.special, not scipy.stats: the same quantile functions (stats.t.ppf and stats.norm.ppf
# call these) without importing scipy.stats (most of `llmscope report`'s start-up time); it is
# imported where a quantile is computed, so the TUI's first screen loads no scipy at all.

__all__ = [
    "Interval",
    "BootstrapResult",
    "wilson_interval",
    "cluster_robust_interval",
    "accuracy_ci",
    "accuracy_ci_sums",
    "cluster_bootstrap",
    "accuracy_table",
    "resample_index",
    "resample_weights",
    "cluster_codes",
    "bootstrap_ratio",
    "MIN_CLUSTERS_CLOSED_FORM",
]

# Kept for callers that read it; "auto" now uses the cluster-t interval at any G >= 2
# (see the module docstring for the coverage evidence).
MIN_CLUSTERS_CLOSED_FORM = 30


@dataclass
class Interval:
    """A point estimate with a confidence interval ``[lo, hi]``."""

    mean: float
    lo: float
    hi: float
    n: int  # trials used (with a gold value)
    n_clusters: int  # independent units (== n without clustering)
    method: str  # "wilson", "cluster-t", "cluster-bootstrap", "empty"
    n_missing: int = 0  # trials excluded because correct was NaN/None

    @property
    def ci95(self) -> list[float]:
        """The interval as ``[lo, hi]`` (the metric-rows convention)."""
        return [self.lo, self.hi]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class BootstrapResult:
    """A statistic with its cluster-bootstrap percentile interval."""

    estimate: float
    lo: float
    hi: float
    n_clusters: int
    n_boot: int
    samples: np.ndarray  # the bootstrap replicates (NaN replicates dropped)


def _z(level: float) -> float:
    from scipy import special  # at first use: importing the intervals (every screen) stays light

    return float(special.ndtri(0.5 + level / 2))


def wilson_interval(k: float, n: float, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for ``k`` successes out of ``n`` trials."""
    if n <= 0:
        return (math.nan, math.nan)
    z = _z(level)
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # At k = 0 (k = n) the bound is exactly 0 (1); the floating-point difference leaves 2.8e-17
    # (0.9999999999999999), which a reader of the report would take for a computed value.
    lo = 0.0 if k <= 0 else max(0.0, centre - half)
    hi = 1.0 if k >= n else min(1.0, centre + half)
    return (lo, hi)


def _clean(correct: Any, clusters: Any | None) -> tuple[np.ndarray, np.ndarray | None, int]:
    """Numeric correctness with NaN/None removed, aligned cluster labels, missing count."""
    if isinstance(correct, (np.ndarray, pd.Series)) and np.asarray(correct).dtype.kind in "fiub":
        c = np.asarray(correct, dtype=float)  # already numeric: no per-value conversion
    else:
        arr = np.asarray(
            correct if isinstance(correct, (np.ndarray, pd.Series)) else list(correct), dtype=object
        )
        c = pd.to_numeric(pd.Series(arr, dtype="object"), errors="coerce").to_numpy(dtype=float)
    keep = ~np.isnan(c)
    g = None
    if clusters is not None:
        g_all = np.asarray(clusters)
        if g_all.dtype.kind not in "iu":  # integer cluster codes stay integers (fast to factorize)
            g_all = g_all.astype(object)
        if len(g_all) != len(c):
            raise ValueError(f"clusters has length {len(g_all)}, correct has {len(c)}")
        g = g_all if keep.all() else g_all[keep]
    if not len(c) or keep.all():  # nothing missing: the arrays as they are, not copied
        return c, g, 0
    return c[keep], g, int((~keep).sum())


def cluster_codes(g: np.ndarray) -> np.ndarray:
    """``pd.factorize(g, sort=False)[0]``: clusters numbered in order of first appearance.

    Integer labels that are already so numbered (the pipeline's cluster codes of a whole run,
    or of a group whose items come in the run's order) are returned as they are: checking is
    one pass (~4 ms per 1M rows), hashing them again ~20 ms, paid by every interval."""
    if g.dtype.kind in "iu":
        if len(g) and g[0] == 0 and bool(np.all(g[1:] <= np.maximum.accumulate(g)[:-1] + 1)):
            return np.asarray(g, dtype=np.intp)  # each new label is the largest so far + 1
        return np.asarray(pd.factorize(g, sort=False)[0])
    return np.asarray(pd.factorize(pd.Series(g, dtype="object"), sort=False)[0])


def _cluster_sums(c: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    codes = cluster_codes(g)
    y = np.bincount(codes, weights=c)
    m = np.bincount(codes).astype(float)
    return y, m


def cluster_robust_interval(
    y: np.ndarray, m: np.ndarray, level: float = 0.95
) -> tuple[float, float, float]:
    """Ratio estimate and t-based CR1 interval from per-cluster sums ``y`` and sizes ``m``.

    Returns ``(p, lo, hi)``; needs at least two clusters.
    """
    y = np.asarray(y, dtype=float)
    m = np.asarray(m, dtype=float)
    G = len(y)
    M = m.sum()
    p = float(y.sum() / M)
    if G < 2:
        return (p, math.nan, math.nan)
    var = G / (G - 1) * float(np.sum((y - p * m) ** 2)) / (M * M)
    from scipy import special

    t = float(special.stdtrit(G - 1, 0.5 + level / 2))
    half = t * math.sqrt(var)
    return (p, max(0.0, p - half), min(1.0, p + half))


# Cells of one chunk of draws: bounds the (resamples x clusters) matrices (the 40k WorldSense
# tuples x 2000 resamples would be 643 MB at once).
_CHUNK_CELLS = 2_000_000


def resample_index(G: int, resamples: int, seed: int) -> Iterator[np.ndarray]:
    """The cluster bootstrap's draws: chunks of a (resamples x G) matrix of cluster indices.

    Row ``b`` is resample ``b``: ``G`` clusters drawn with replacement. The chunks together
    are exactly the draws of a loop calling ``rng.integers(0, G, size=G)`` once per resample
    with ``rng = np.random.default_rng(seed)`` (the generator yields them in order), so the
    vectorised statistics give the loop's intervals for the same seed.
    """
    rng = np.random.default_rng(seed)
    chunk = max(1, min(resamples, _CHUNK_CELLS // max(G, 1)))
    done = 0
    while done < resamples:
        k = min(chunk, resamples - done)
        yield rng.integers(0, G, size=(k, G))
        done += k


def resample_weights(G: int, resamples: int, seed: int) -> Iterator[np.ndarray]:
    """:func:`resample_index` as multiplicities: a (k x G) float matrix per chunk whose entry
    ``[b, g]`` is how often resample ``b`` drew cluster ``g``. A statistic of per-cluster sums
    is then one matrix product per chunk (``W @ sums``), not a Python loop per resample."""
    for idx in resample_index(G, resamples, seed):
        k = idx.shape[0]
        yield (
            np.bincount((idx + G * np.arange(k)[:, None]).ravel(), minlength=k * G)
            .reshape(k, G)
            .astype(float)
        )


def bootstrap_ratio(num: np.ndarray, den: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """Bootstrap replicates of ``sum(num) / sum(den)`` over clusters, from per-cluster sums
    (a mean: ``num`` = per-cluster sums of the values, ``den`` = cluster sizes)."""
    G = len(num)
    reps = np.empty(resamples)
    done = 0
    for W in resample_weights(G, resamples, seed):
        k = W.shape[0]
        with np.errstate(invalid="ignore", divide="ignore"):
            reps[done : done + k] = (W @ num) / (W @ den)
        done += k
    return reps


def _boot_ratio(
    y: np.ndarray, m: np.ndarray, n_boot: int, seed: int, level: float
) -> tuple[float, float]:
    """Percentile interval of sum(y)/sum(m) under resampling clusters (vectorised)."""
    reps = bootstrap_ratio(y, m, n_boot, seed)
    a = (1 - level) / 2
    lo, hi = np.quantile(reps, [a, 1 - a])
    return float(lo), float(hi)


def accuracy_ci(
    correct: Sequence[Any] | np.ndarray | pd.Series,
    clusters: Sequence[Any] | np.ndarray | pd.Series | None = None,
    *,
    method: str = "auto",
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> Interval:
    """Mean accuracy with a confidence interval.

    ``correct`` holds 0/1 (or fractional) scores; NaN/None (no gold) are excluded and counted
    in ``n_missing``. ``method``: ``"wilson"`` (ignores clusters), ``"cluster"`` (ratio
    estimator, CR1 variance, t with G-1 df), ``"bootstrap"`` (cluster bootstrap, percentile),
    or ``"auto"``: Wilson without clusters (or when every cluster is a single trial);
    otherwise the cluster-t interval. When the accuracy is exactly 0 or 1, when there is a
    single cluster, or when every cluster has the same mean, the sandwich variance
    collapses, so "auto" then uses Wilson with n = number of clusters (each cluster
    counted once, the conservative limit of perfectly correlated variants).
    """
    c, g, n_missing = _clean(correct, clusters)
    n = len(c)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0, 0, "empty", n_missing)
    if g is None:
        y, m = c, np.ones(n)
    else:
        y, m = _cluster_sums(c, g)
    return accuracy_ci_sums(
        y,
        m,
        float(c.sum()),
        n,
        clustered=g is not None,
        n_missing=n_missing,
        method=method,
        n_boot=n_boot,
        seed=seed,
        level=level,
    )


def accuracy_ci_sums(
    y: np.ndarray,
    m: np.ndarray,
    k: float,
    n: int,
    *,
    clustered: bool = True,
    n_missing: int = 0,
    method: str = "auto",
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> Interval:
    """:func:`accuracy_ci` from per-cluster sums ``y`` and sizes ``m`` (clusters in order of
    first appearance), the sum of scores ``k`` and the row count ``n``: what a SQL group-by
    gives (analysis.sqlmetrics), with the same arithmetic as from the rows."""
    G = len(y)
    p = float(y.sum() / m.sum())

    if method == "auto":
        if not clustered or G == n:
            method = "wilson"
        elif p in (0.0, 1.0):
            lo, hi = wilson_interval(p * G, G, level)
            return Interval(p, lo, hi, n, G, "wilson-clusters", n_missing)
        elif G < 2:
            lo, hi = wilson_interval(p * G, G, level)
            return Interval(p, lo, hi, n, G, "wilson-clusters", n_missing)
        else:
            method = "cluster"

    if method == "wilson":
        lo, hi = wilson_interval(k, n, level)
        return Interval(p, lo, hi, n, G if clustered else n, "wilson", n_missing)
    if method == "cluster":
        _, lo, hi = cluster_robust_interval(y, m, level)
        if hi - lo < 1e-12:
            # Every cluster has the same mean (e.g. a model that always gives the same answer
            # to each WorldSense tuple): the sandwich variance is 0, which is not certainty.
            lo, hi = wilson_interval(p * G, G, level)
            return Interval(p, lo, hi, n, G, "wilson-clusters", n_missing)
        return Interval(p, lo, hi, n, G, "cluster-t", n_missing)
    if method == "bootstrap":
        lo, hi = _boot_ratio(y, m, n_boot, seed, level)
        return Interval(p, lo, hi, n, G, "cluster-bootstrap", n_missing)
    raise ValueError(f"unknown method {method!r}")


def cluster_bootstrap(
    stat_fn: Callable[[pd.DataFrame], float],
    df: pd.DataFrame,
    cluster_col: str | None,
    *,
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> BootstrapResult:
    """Percentile interval of ``stat_fn(df)`` resampling whole clusters with replacement.

    ``cluster_col=None`` resamples rows. A resampled frame repeats the rows of a cluster
    drawn twice; replicates where ``stat_fn`` returns NaN are dropped.
    """
    est = float(stat_fn(df))
    if cluster_col is None:
        groups = [np.array([i]) for i in range(len(df))]
    else:
        codes, _ = pd.factorize(df[cluster_col], sort=False)
        order = np.argsort(codes, kind="stable")
        bounds = np.flatnonzero(np.diff(codes[order])) + 1
        groups = np.split(order, bounds)
    G = len(groups)
    rng = np.random.default_rng(seed)
    reps = np.empty(n_boot)
    for b in range(n_boot):
        pick = rng.integers(0, G, size=G)
        idx = np.concatenate([groups[i] for i in pick]) if G else np.array([], dtype=int)
        reps[b] = stat_fn(df.iloc[idx])
    reps = reps[~np.isnan(reps)]
    a = (1 - level) / 2
    if len(reps):
        lo, hi = (float(x) for x in np.quantile(reps, [a, 1 - a]))
    else:
        lo = hi = math.nan
    return BootstrapResult(est, lo, hi, G, n_boot, reps)


def accuracy_table(
    df: pd.DataFrame,
    by: Sequence[str] = (),
    *,
    correct_col: str = "correct",
    cluster_col: str | None = None,
    method: str = "auto",
    n_boot: int = 2000,
    seed: int = 0,
) -> pd.DataFrame:
    """Per-group :func:`accuracy_ci`; columns ``by + [mean, lo, hi, n, n_clusters, method,
    n_missing]``. With empty ``by`` a single overall row."""
    by = list(by)
    rows = []
    parts = df.groupby(by, sort=True, dropna=False) if by else [((), df)]
    for key, part in parts:
        key = key if isinstance(key, tuple) else (key,)
        iv = accuracy_ci(
            part[correct_col],
            part[cluster_col] if cluster_col else None,
            method=method,
            n_boot=n_boot,
            seed=seed,
        )
        rows.append({**dict(zip(by, key, strict=True)), **iv.to_dict()})
    return pd.DataFrame(rows)
