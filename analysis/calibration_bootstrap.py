"""Cluster-bootstrap intervals of ECE and MCE: exact up to a cluster count, then a stated approximation.

A resample of the cluster bootstrap draws ``G`` clusters with replacement; ECE and MCE of the
resample depend only on its per-bin totals ``n_b`` (rows), ``sum_b(correct) - sum_b(confidence)``
(``d_b``), the sums over the drawn clusters of each cluster's per-bin vector. The exact bootstrap
draws every multiplicity (``G x resamples`` draws: 666 million for a 1M-row yes/no run of 333k
statements, ~40 s). Above :data:`EXACT_MAX_CLUSTERS` clusters this module draws the bin totals
instead, exactly in distribution where they are far from normal and by the central limit
theorem where they are not:

* A bin with fewer than :data:`THIN_BIN_CLUSTERS` clusters is *thin*; every cluster with a row
  in a thin bin is drawn exactly: the number of draws that land among these ``S`` clusters is
  ``Binomial(G, |S|/G)`` (as under the multinomial of the bootstrap), each such draw picks one of
  them uniformly.
* The remaining ``m = G - N_S`` draws come uniformly from the other clusters ``D``, whose
  vectors have mean ``mu`` and covariance ``Sigma`` (divisor ``|D|``); their sum is drawn from
  ``Normal(m mu, m Sigma)``. Only dense bins (each with at least THIN_BIN_CLUSTERS clusters) get
  this normal part, so a total near zero (where ECE's absolute value and MCE's ratio bend) is
  never approximated by a normal.

The interval method then reads ``cluster-bootstrap (normal bin totals)``; at or below the
threshold it is the exact ``cluster-bootstrap``. tests/analysis/test_calibration_bootstrap.py
checks the approximation's interval ends against the exact bootstrap's (docs/PERFORMANCE.md
has the measured differences).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .calibration import uniform_bin
from .definitions import EXACT_MAX_CLUSTERS, THIN_BIN_CLUSTERS
from .intervals import cluster_codes, resample_weights

__all__ = [
    "EXACT_MAX_CLUSTERS",
    "THIN_BIN_CLUSTERS",
    "EXACT_METHOD",
    "APPROX_METHOD",
    "CalibrationInterval",
    "calibration_bootstrap",
]

# EXACT_MAX_CLUSTERS and THIN_BIN_CLUSTERS are set in analysis/definitions.py, beside the
# interval description that states them (that module imports no numerics).

EXACT_METHOD = "cluster-bootstrap"
APPROX_METHOD = "cluster-bootstrap (normal bin totals)"

# Cells of one chunk of exact draws among the thin bins' clusters (as intervals._CHUNK_CELLS).
_CHUNK_CELLS = 2_000_000


@dataclass(frozen=True)
class CalibrationInterval:
    """Percentile intervals of ECE and MCE, the cluster count and the method that drew them."""

    ece: tuple[float, float]
    mce: tuple[float, float]
    n_clusters: int
    method: str


def _codes(clusters: np.ndarray) -> np.ndarray:
    return cluster_codes(np.asarray(clusters))  # MetricContext.clusters' codes: no object pass


def _stats(n_b: np.ndarray, d_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ECE and MCE of each row of bin totals (rows = resamples), as `reliability` computes them."""
    gap = np.abs(d_b)
    ece = gap.sum(axis=1) / n_b.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mce = np.where(n_b > 0, gap / n_b, -np.inf).max(axis=1)
    return ece, mce


class _Cells(NamedTuple):
    """The rows as (cluster, bin) cells: `cell` = cluster code * n_bins + bin, per row."""

    cell: np.ndarray
    conf: np.ndarray
    correct: np.ndarray
    G: int
    n_bins: int


def calibration_bootstrap(
    conf: np.ndarray,
    correct: np.ndarray,
    clusters: np.ndarray,
    n_bins: int,
    resamples: int,
    seed: int,
    level: float,
    *,
    method: str = "auto",
) -> CalibrationInterval:
    """Cluster-bootstrap percentile intervals of ECE and MCE over ``n_bins`` equal-width bins.

    ``method``: ``"exact"`` (every cluster multiplicity drawn), ``"normal-bins"`` (the module's
    approximation) or ``"auto"``: exact up to :data:`EXACT_MAX_CLUSTERS` clusters.
    """
    codes = _codes(clusters)
    G = int(codes.max()) + 1 if len(codes) else 0
    nan2 = (math.nan, math.nan)
    if G < 2:
        return CalibrationInterval(nan2, nan2, G, EXACT_METHOD)
    if method == "auto":
        method = "exact" if G <= EXACT_MAX_CLUSTERS else "normal-bins"
    b = uniform_bin(conf, n_bins)
    cell = codes * n_bins + b
    if method not in _DRAWS:
        raise ValueError(f"unknown method {method!r}; allowed: auto, {', '.join(_DRAWS)}")
    draw, how = _DRAWS[method]
    eces, mces = draw(_Cells(cell, conf, correct, G, n_bins), resamples, seed)
    a = (1 - level) / 2
    e = np.quantile(eces, [a, 1 - a])
    m = np.quantile(mces, [a, 1 - a])
    return CalibrationInterval((float(e[0]), float(e[1])), (float(m[0]), float(m[1])), G, how)


def _exact(rows: _Cells, resamples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Per cluster and bin (count, sum of confidence, sum of correct); a resample is a vector of
    cluster multiplicities (`intervals.resample_weights`), so its bin totals are one matrix
    product. ECE of a resample = sum_b |sum_y - sum_c| / n, as in `reliability`."""
    cell, conf, correct, G, n_bins = rows
    cnt = np.bincount(cell, minlength=G * n_bins).reshape(G, n_bins).astype(float)
    sc = np.bincount(cell, weights=conf, minlength=G * n_bins).reshape(G, n_bins)
    sy = np.bincount(cell, weights=correct, minlength=G * n_bins).reshape(G, n_bins)
    eces = np.empty(resamples)
    mces = np.empty(resamples)
    done = 0
    for W in resample_weights(G, resamples, seed):
        k = W.shape[0]
        n_b, c_b, y_b = W @ cnt, W @ sc, W @ sy
        eces[done : done + k], mces[done : done + k] = _stats(n_b, y_b - c_b)
        done += k
    return eces, mces


def _normal_bins(rows: _Cells, resamples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The module docstring's draw: thin bins' clusters exactly, the rest's totals normal."""
    cell, conf, correct, G, n_bins = rows
    # per touched (cluster, bin) cell: rows and sum(correct - confidence); sparse, since a
    # cluster has rows in a few bins
    if G * n_bins <= max(4 * len(cell), 1 << 20):
        # cell numbers are bounded: count them directly (np.unique sorts, ~0.1 s per 1M rows);
        # the same cells in the same order, each sum accumulated in row order as below
        cnt = np.bincount(cell, minlength=G * n_bins)
        cells = np.flatnonzero(cnt)
        cn = cnt[cells].astype(float)
        cd = (
            np.bincount(cell, weights=correct, minlength=G * n_bins)[cells]
            - np.bincount(cell, weights=conf, minlength=G * n_bins)[cells]
        )
    else:
        if len(cell) and bool(np.all(cell[1:] >= cell[:-1])):
            # already in order (a cluster's rows together, clusters numbered in run order: a
            # run of one row per item): np.unique's cells and inverse without its sort
            new = np.empty(len(cell), dtype=bool)
            new[0] = True
            np.not_equal(cell[1:], cell[:-1], out=new[1:])
            cells = cell[new]
            inv = np.cumsum(new) - 1
        else:
            cells, inv = np.unique(cell, return_inverse=True)
        cn = np.bincount(inv).astype(float)
        cd = np.bincount(inv, weights=correct) - np.bincount(inv, weights=conf)
    cg, cb = cells // n_bins, cells % n_bins
    clusters_per_bin = np.bincount(cb, minlength=n_bins)
    thin_bin = clusters_per_bin < THIN_BIN_CLUSTERS
    in_s = np.zeros(G, dtype=bool)
    in_s[cg[thin_bin[cb]]] = True
    rng = np.random.default_rng(seed)
    R = resamples
    n_tot = np.zeros((R, n_bins))
    d_tot = np.zeros((R, n_bins))
    # exact part: the clusters of thin bins
    s_ids = np.flatnonzero(in_s)
    n_s = len(s_ids)
    if n_s:
        pos = np.full(G, -1)
        pos[s_ids] = np.arange(n_s)
        sel = in_s[cg]
        xs_n = np.zeros((n_s, n_bins))
        xs_d = np.zeros((n_s, n_bins))
        xs_n[pos[cg[sel]], cb[sel]] = cn[sel]
        xs_d[pos[cg[sel]], cb[sel]] = cd[sel]
        draws = rng.binomial(G, n_s / G, size=R)
        chunk = max(1, _CHUNK_CELLS // n_s)
        for r0 in range(0, R, chunk):
            k = draws[r0 : r0 + chunk]
            rid = np.repeat(np.arange(len(k)), k)
            pick = rng.integers(0, n_s, size=int(k.sum()))
            W = (
                np.bincount(rid * n_s + pick, minlength=len(k) * n_s)
                .reshape(len(k), n_s)
                .astype(float)
            )
            n_tot[r0 : r0 + len(k)] = W @ xs_n
            d_tot[r0 : r0 + len(k)] = W @ xs_d
    else:
        draws = np.zeros(R, dtype=np.int64)
    # normal part: the other clusters' totals in the dense bins
    n_d = G - n_s
    dense = np.flatnonzero(~thin_bin)
    if n_d and len(dense):
        sel = ~in_s[cg]
        col = np.full(n_bins, -1)
        col[dense] = np.arange(len(dense))
        nd = len(dense)
        dpos = np.cumsum(~in_s) - 1  # row of each D cluster among D
        X = np.zeros((n_d, 2 * nd))
        every = bool(sel.all())  # no thin bin's cluster: every cell, no masked copies
        at = (dpos[cg] if every else dpos[cg[sel]]) * (2 * nd) + (
            col[cb] if every else col[cb[sel]]
        )
        flat = X.reshape(-1)  # a view: each cell's (row, column) as one flat index
        flat[at] = cn if every else cn[sel]
        flat[at + nd] = cd if every else cd[sel]
        mu = X.mean(axis=0)
        X -= mu  # centred in place: the values of X - mu without a second (clusters x bins) matrix
        sigma = (X.T @ X) / n_d
        vals, vecs = np.linalg.eigh(sigma)
        root = vecs * np.sqrt(np.clip(vals, 0.0, None))  # sigma = root @ root.T
        m = (G - draws).astype(float)
        z = rng.standard_normal((R, 2 * nd)) @ root.T
        tot = m[:, None] * mu + np.sqrt(m)[:, None] * z
        n_tot[:, dense] += tot[:, :nd]
        d_tot[:, dense] += tot[:, nd:]
    return _stats(n_tot, d_tot)


# the resample draws by method name: (function, the interval method recorded with the result)
_DRAWS = {"exact": (_exact, EXACT_METHOD), "normal-bins": (_normal_bins, APPROX_METHOD)}
