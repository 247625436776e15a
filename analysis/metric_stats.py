"""The intervals metrics are reported with: clustered rates and means (:func:`rate`,
:func:`mean_metric`), the CR1 t interval (:func:`mean_ci`) and the cluster bootstrap of any
statistic of the rows (:func:`cluster_bootstrap_stat`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from .definitions import BootstrapConfig
from .intervals import accuracy_ci, bootstrap_ratio, cluster_codes, resample_index
from .metric_values import Metric


def _floats(values: Any) -> np.ndarray:
    """Values as floats, anything not numeric as NaN (a float array as it is: callers read it)."""
    arr = np.asarray(values)
    if arr.dtype.kind in "fiub":
        return arr.astype(float, copy=False)
    return pd.to_numeric(pd.Series(np.asarray(values, dtype=object)), errors="coerce").to_numpy(
        float
    )


def rate(
    name: str,
    values: Any,
    clusters: np.ndarray,
    group: dict[str, Any] | None = None,
    producer: str = "",
) -> Metric | None:
    """A share or mean of per-item scores in [0, 1], with the clustered accuracy interval."""
    v = _floats(values)
    keep = np.isfinite(v)
    if not keep.any():
        return None
    every = bool(keep.all())  # no copy of the columns when every value is finite
    iv = accuracy_ci(v if every else v[keep], np.asarray(clusters)[slice(None) if every else keep])
    lo, hi = (None, None) if math.isnan(iv.lo) else (iv.lo, iv.hi)
    return Metric(
        name, iv.mean, lo, hi, iv.method, iv.n, iv.n_clusters, dict(group or {}), producer
    )


def mean_ci(
    values: Any, clusters: Any, level: float = 0.95
) -> tuple[float, float, float, int, int, str]:
    """Mean of per-item values with a cluster-robust (CR1) t interval over clusters.

    Not clipped (differences and scores may leave [0, 1]). Returns
    ``(mean, lo, hi, n, n_clusters, method)``; with one cluster the interval is NaN.
    """
    v = _floats(values)
    g = np.asarray(clusters)
    keep = np.isfinite(v)
    v, g = (v, g) if keep.all() else (v[keep], g[keep])  # all finite (usual): no copies
    n = len(v)
    if n == 0:
        return (math.nan, math.nan, math.nan, 0, 0, "empty")
    codes = cluster_codes(g)
    y = np.bincount(codes, weights=v)
    m = np.bincount(codes).astype(float)
    G = len(y)
    p = float(y.sum() / m.sum())
    if G < 2:
        return (p, math.nan, math.nan, n, G, "cluster-t")
    var = G / (G - 1) * float(np.sum((y - p * m) ** 2)) / float(m.sum()) ** 2
    from scipy import special  # loaded by the one metric that needs it, not by every importer

    t = float(special.stdtrit(G - 1, 0.5 + level / 2))
    half = t * math.sqrt(var)
    return (p, p - half, p + half, n, G, "cluster-t")


# The range each mean-type metric can take; its interval is clipped to it (a probability's
# mean cannot leave [0, 1]).
SUPPORT: dict[str, tuple[float, float]] = {"brier": (0.0, 2.0), "yes_bias": (-1.0, 1.0)}


def mean_metric(
    name: str, values: Any, clusters: Any, group: dict[str, Any] | None = None, producer: str = ""
) -> Metric | None:
    """:func:`mean_ci` as a Metric (None when there is no finite value), the interval clipped
    to the metric's range (:data:`SUPPORT`, default [0, 1])."""
    p, lo, hi, n, G, how = mean_ci(values, clusters)
    if n == 0:
        return None
    a, b = SUPPORT.get(name, (0.0, 1.0))
    lo, hi = max(a, lo), min(b, hi)
    return Metric(
        name,
        p,
        None if math.isnan(lo) else lo,
        None if math.isnan(hi) else hi,
        how,
        n,
        G,
        dict(group or {}),
        producer,
    )


@dataclass(frozen=True)
class Ratio:
    """A statistic ``sum(num) / sum(den)`` over the resampled rows (a mean: ``den`` all ones;
    a rate; a ratio of per-cluster sums). :func:`cluster_bootstrap_stat` bootstraps it with one
    matrix of resample weights instead of a call per resample."""

    num: Any
    den: Any = None  # None: ones (the mean of ``num``)


def cluster_bootstrap_stat(
    stat: Callable[[np.ndarray], float] | Ratio, n_rows: int, clusters: Any, cfg: BootstrapConfig
) -> tuple[float, float, float, int]:
    """Percentile interval of a statistic of the rows, resampling whole clusters.

    ``stat`` is a :class:`Ratio` (means, rates, ratios of per-cluster sums: vectorised, one
    weight matrix per chunk of resamples) or any function of an integer index array into the
    rows (clusters drawn twice repeat their rows; one call per resample). Both draw the same
    resamples for the same seed (:func:`intervals.resample_index`), so they give the same
    interval. Returns ``(estimate, lo, hi, n_clusters)``; NaN replicates are dropped.
    """
    codes, _ = pd.factorize(
        pd.Series(np.asarray(clusters, dtype=object), dtype="object"), sort=False
    )
    G = int(codes.max()) + 1 if len(codes) else 0
    if isinstance(stat, Ratio):
        num = _floats(stat.num)
        den = np.ones(len(num)) if stat.den is None else _floats(stat.den)
        with np.errstate(invalid="ignore", divide="ignore"):
            est = float(num.sum() / den.sum()) if len(num) else math.nan
        if G < 2:
            return est, math.nan, math.nan, G
        reps = bootstrap_ratio(
            np.bincount(codes, weights=num, minlength=G),
            np.bincount(codes, weights=den, minlength=G),
            cfg.resamples,
            cfg.seed,
        )
    else:
        est = float(stat(np.arange(n_rows)))
        if G < 2:
            return est, math.nan, math.nan, G
        order = np.argsort(codes, kind="stable")
        groups = np.split(order, np.flatnonzero(np.diff(codes[order])) + 1)
        reps = np.empty(cfg.resamples)
        done = 0
        for idx in resample_index(G, cfg.resamples, cfg.seed):
            for pick in idx:
                reps[done] = stat(np.concatenate([groups[i] for i in pick]))
                done += 1
    reps = reps[np.isfinite(reps)]
    if not len(reps):
        return est, math.nan, math.nan, G
    a = (1 - cfg.level) / 2
    lo, hi = np.quantile(reps, [a, 1 - a])
    return est, float(lo), float(hi), G


def cluster_bootstrap_mean(
    values: Any, clusters: Any, cfg: BootstrapConfig
) -> tuple[float, float, float, int]:
    """:func:`cluster_bootstrap_stat` of the mean of per-row values (vectorised).
    Returns ``(mean, lo, hi, n_clusters)``."""
    v = _floats(values)
    return cluster_bootstrap_stat(Ratio(v), len(v), clusters, cfg)
