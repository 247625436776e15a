"""The marginal-ML fit of item response theory (Bock-Aitkin EM) and MAP abilities, for
`analysis/irt.py`: 2PL or a common-slope (Rasch) model of a runs x items 0/1 matrix with missing
cells, each item's standard errors from its own block of the observed information."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# -- the marginal-ML fit (Bock-Aitkin EM) ---------------------------------------------------------
# Written here rather than taken from mirt for memory and precision. mirt's standard errors build
# the full information matrix of every item parameter (2 per item), which grows with the square
# of the items: 37.6 GB for the 35 x 13,221 matrix of the published commonsense data. Its
# defaults (21 quadrature points, tolerance 1e-4) also stop short of the maximum: on simulated
# data its slopes come out 5-12% low. Items are conditionally independent given ability, so the
# EM's M-step is one small logistic fit per item and the E-step two matrix products: memory is
# O(runs x items + items x quadrature points), and each item's standard errors come from its own
# 2 x 2 block of the observed information (Louis' formula), not from the full matrix.
QUAD_POINTS = 61
QUAD_RANGE = 6.0  # nodes on [-6, 6]: the N(0, 1) ability prior beyond it weighs < 1e-8
TOLERANCE = (
    1e-6  # largest change between EM cycles of a parameter inside its bounds, at convergence
)
MAX_CYCLES = 5000
SLOPE_BOUNDS = (0.05, 10.0)
"""Bounds of a fitted discrimination (reversed items are fitted as 1 - x, so the fit is always
positive). An item that one run's answers separate perfectly has no finite maximum: its slope
runs to the upper bound, where it is reported with `at_bound` and no interval."""
INTERCEPT_BOUND = 30.0
M_STEPS = 5  # Newton steps of each M-step (each guarded: it never lowers an item's objective)


def _inside(a: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Items whose parameters are inside their bounds (not pinned at one)."""
    lo, hi = SLOPE_BOUNDS
    return (
        (a > lo * (1 + 1e-6)) & (a < hi * (1 - 1e-6)) & (np.abs(d) < INTERCEPT_BOUND * (1 - 1e-6))
    )


@dataclass(frozen=True)
class EmResult:
    """Slopes a and intercepts d (P(x = 1 | theta) = logistic(a theta + d)), their 2 x 2
    covariance blocks, the marginal log-likelihood and whether the EM met its tolerance."""

    slope: np.ndarray
    intercept: np.ndarray
    cov: np.ndarray  # items x 2 x 2 over (a, d); NaN where not identified
    log_likelihood: float
    converged: bool
    cycles: int
    common_slope: bool


def _quadrature() -> tuple[np.ndarray, np.ndarray]:
    nodes = np.linspace(-QUAD_RANGE, QUAD_RANGE, QUAD_POINTS)
    w = np.exp(-0.5 * nodes**2)
    return nodes, w / w.sum()


def _posterior(
    obs: np.ndarray, right: np.ndarray, a: np.ndarray, d: np.ndarray
) -> tuple[np.ndarray, float]:
    """Runs x nodes posterior weights and the marginal log-likelihood."""
    nodes, prior = _quadrature()
    z = np.outer(a, nodes) + d[:, None]  # items x nodes
    log_p, log_q = -np.logaddexp(0.0, -z), -np.logaddexp(0.0, z)
    ll = right @ log_p + (obs - right) @ log_q + np.log(prior)[None, :]  # runs x nodes
    m = ll.max(axis=1, keepdims=True)
    lik = np.exp(ll - m)
    tot = lik.sum(axis=1, keepdims=True)
    return lik / tot, float(np.sum(np.log(tot[:, 0]) + m[:, 0]))


def fit_em(x: np.ndarray, common_slope: bool = False) -> EmResult:
    """Marginal-ML 2PL (or, with `common_slope`, the 1PL) of a runs x items 0/1 matrix (NaN =
    missing) under an N(0, 1) ability prior, by Bock-Aitkin EM on `QUAD_POINTS` nodes."""
    try:  # the products are small: BLAS threads only contend with each other on a busy machine
        from threadpoolctl import threadpool_limits
    except ImportError:
        return _fit_em(x, common_slope)
    with threadpool_limits(limits=1, user_api="blas"):
        return _fit_em(x, common_slope)


def _item_q(r_q: np.ndarray, n_q: np.ndarray, a: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Each item's expected complete-data log-likelihood (the M-step's objective, concave in
    (a, d): a logistic regression on the quadrature nodes with the E-step's counts)."""
    nodes, _ = _quadrature()
    z = np.outer(a, nodes) + d[:, None]
    return np.sum(r_q * -np.logaddexp(0.0, -z) + (n_q - r_q) * -np.logaddexp(0.0, z), axis=1)


def _m_step(
    r_q: np.ndarray, n_q: np.ndarray, a: np.ndarray, d: np.ndarray, common_slope: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Maximise every item's `_item_q` from (a, d): Newton steps, each halved until it does not
    lower the item's objective, projected onto the bounds. Never lowering an item's objective
    keeps EM monotone in the marginal likelihood; an unguarded Newton step overshoots on items
    the runs nearly separate and made the EM cycle between two points without converging."""
    nodes, _ = _quadrature()
    lo, hi = SLOPE_BOUNDS
    q = _item_q(r_q, n_q, a, d)
    for _ in range(M_STEPS):
        z = np.outer(a, nodes) + d[:, None]
        pz = 1.0 / (1.0 + np.exp(-z))
        res = r_q - n_q * pz
        info = n_q * pz * (1 - pz)
        g_a, g_d = res @ nodes, res.sum(1)
        h_aa, h_ad, h_dd = info @ nodes**2, info @ nodes, info.sum(1)
        if common_slope:
            # d given a per item, then the one slope given the d's (the slope is not searched:
            # one parameter over all items moves smoothly)
            step_d = g_d / np.maximum(h_dd, 1e-12)
            a = np.clip(
                a
                + g_a.sum()
                / max(float(h_aa.sum() - np.sum(h_ad**2 / np.maximum(h_dd, 1e-12))), 1e-12),
                lo,
                hi,
            )
            step_a = np.zeros_like(a)
            q = _item_q(r_q, n_q, a, d)
        else:
            det = h_aa * h_dd - h_ad**2
            ok = det > 1e-12 * np.maximum(h_aa * h_dd, 1e-300)
            sd_ = np.where(ok, det, 1.0)
            step_a = np.where(ok, (h_dd * g_a - h_ad * g_d) / sd_, 0.0)
            step_d = np.where(ok, (h_aa * g_d - h_ad * g_a) / sd_, g_d / np.maximum(h_dd, 1e-12))
        t = np.ones_like(a)
        todo = np.ones(len(a), dtype=bool)
        new_a, new_d = a.copy(), d.copy()
        for _ in range(30):  # step halving, only where the objective would fall
            cand_a = np.clip(a[todo] + t[todo] * step_a[todo], lo, hi)
            cand_d = np.clip(d[todo] + t[todo] * step_d[todo], -INTERCEPT_BOUND, INTERCEPT_BOUND)
            cand_q = _item_q(r_q[todo], n_q[todo], cand_a, cand_d)
            good = cand_q >= q[todo] - 1e-12 * np.abs(q[todo])
            idx = np.flatnonzero(todo)
            new_a[idx[good]], new_d[idx[good]] = cand_a[good], cand_d[good]
            q[idx[good]] = cand_q[good]
            todo[idx[good]] = False
            if not todo.any():
                break
            t[todo] *= 0.5
        a, d = new_a, new_d
    return a, d


def _start(obs: np.ndarray, right: np.ndarray, common_slope: bool) -> tuple[np.ndarray, np.ndarray]:
    """Start values: each item's M-step given every run placed at its standardised sum score
    (share right of the items it answered), so that the EM starts on a scale oriented with the
    sum score (from a common start of a = 1 it stopped at a lower maximum on the commonsense
    data)."""
    nodes, _ = _quadrature()
    share = right.sum(1) / np.maximum(obs.sum(1), 1)
    sd = float(share.std())
    z = (share - share.mean()) / sd if sd > 0 else np.zeros_like(share)
    w = np.zeros((len(share), len(nodes)))
    w[np.arange(len(share)), np.abs(z[:, None] - nodes[None, :]).argmin(1)] = 1.0
    p = np.clip(right.sum(0) / np.maximum(obs.sum(0), 1), 0.02, 0.98)
    a = np.ones(right.shape[1])
    d = np.log(p / (1 - p)) * math.sqrt(1 + 1.0)  # on the standardised scale
    return _m_step(right.T @ w, obs.T @ w, a, d, common_slope)


def _fit_em(x: np.ndarray, common_slope: bool) -> EmResult:
    obs = (~np.isnan(x)).astype(float)
    right = np.nan_to_num(x)
    a, d = _start(obs, right, common_slope)
    converged, cycles = False, 0
    for cycle in range(1, MAX_CYCLES + 1):
        cycles = cycle
        w, _ = _posterior(obs, right, a, d)
        n_q = obs.T @ w  # items x nodes: expected answers at each node
        r_q = right.T @ w  # expected right answers
        a_old, d_old = a, d
        a, d = _m_step(r_q, n_q, a, d, common_slope)
        # converged when no parameter inside the bounds moves more than TOLERANCE: an item the
        # runs separate perfectly has no finite maximum and creeps toward its bound for ever
        inside = _inside(a, d) & _inside(a_old, d_old)
        change = np.maximum(np.abs(a - a_old), np.abs(d - d_old))
        if not np.any(change[inside] >= TOLERANCE):
            converged = True
            break
    w, loglik = _posterior(obs, right, a, d)
    return EmResult(
        slope=a,
        intercept=d,
        cov=_item_covariance(obs, right, w, a, d, common_slope),
        log_likelihood=loglik,
        converged=converged,
        cycles=cycles,
        common_slope=common_slope,
    )


def _item_covariance(
    obs: np.ndarray, right: np.ndarray, w: np.ndarray, a: np.ndarray, d: np.ndarray, common: bool
) -> np.ndarray:
    """Each item's 2 x 2 covariance of (a, d) from its block of the observed information by
    Louis' formula: the expected complete-data information minus the posterior variance of the
    complete-data score, summed over runs (the items' cross terms, which would need the full
    matrix, are left out). With a common slope, d's variance is from its 1 x 1 block and the
    slope's from the sum over items."""
    nodes, _ = _quadrature()
    z = np.outer(a, nodes) + d[:, None]
    pz = 1.0 / (1.0 + np.exp(-z))  # items x nodes
    n_q = obs.T @ w
    info = n_q * pz * (1 - pz)
    e_aa, e_ad, e_dd = info @ nodes**2, info @ nodes, info.sum(1)

    # per run: score s = (x - P)(theta, 1); E_w[s] and E_w[s s^T] over the run's posterior
    # E[(x-P)] = x*E[1] - E[P]; E[(x-P)^2] = x - 2x E[P] + E[P^2] (x is 0/1)
    def moments(k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        t = nodes**k
        ep = (w * t) @ pz.T  # runs x items: E[theta^k P]
        ep2 = (w * t) @ (pz**2).T
        return ep, ep2, (w @ t)[:, None]

    ep0, ep20, et0 = moments(0)
    ep1, ep21, et1 = moments(1)
    ep2_, ep22, et2 = moments(2)
    x = right
    # E[theta^k (x-P)] and E[theta^k (x-P)^2]
    m1_d = obs * (x * et0 - ep0)
    m1_a = obs * (x * et1 - ep1)
    v_dd = obs * (x * et0 - 2 * x * ep0 + ep20) - m1_d**2
    v_ad = obs * (x * et1 - 2 * x * ep1 + ep21) - m1_a * m1_d
    v_aa = obs * (x * et2 - 2 * x * ep2_ + ep22) - m1_a**2
    i_aa = e_aa - v_aa.sum(0)
    i_ad = e_ad - v_ad.sum(0)
    i_dd = e_dd - v_dd.sum(0)
    cov = np.full((len(a), 2, 2), np.nan)
    if common:
        va = 1.0 / i_aa.sum() if i_aa.sum() > 0 else np.nan
        cov[:, 0, 0] = va
        cov[:, 1, 1] = np.where(i_dd > 0, 1.0 / np.where(i_dd > 0, i_dd, 1), np.nan)
        cov[:, 0, 1] = cov[:, 1, 0] = 0.0
        return cov
    det = i_aa * i_dd - i_ad**2
    ok = (det > 0) & (i_aa > 0)
    sd = np.where(ok, det, 1.0)
    cov[ok, 0, 0] = (i_dd / sd)[ok]
    cov[ok, 1, 1] = (i_aa / sd)[ok]
    cov[ok, 0, 1] = cov[ok, 1, 0] = (-i_ad / sd)[ok]
    return cov


def map_abilities(x: np.ndarray, a: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each run's MAP ability under the N(0, 1) prior (Newton from the posterior mean on the
    quadrature grid) and its standard error, 1 / sqrt(1 + sum_j a_j^2 P_j (1 - P_j))."""
    obs = (~np.isnan(x)).astype(float)
    right = np.nan_to_num(x)
    nodes, _ = _quadrature()
    w, _ = _posterior(obs, right, a, d)
    theta = w @ nodes
    for _ in range(100):
        pz = 1.0 / (1.0 + np.exp(-(np.outer(theta, a) + d[None, :])))
        g = ((right - pz) * obs) @ a - theta
        h = (pz * (1 - pz) * obs) @ a**2 + 1.0
        step = np.clip(g / h, -1.0, 1.0)
        theta = theta + step
        if np.max(np.abs(step)) < 1e-10:
            break
    pz = 1.0 / (1.0 + np.exp(-(np.outer(theta, a) + d[None, :])))
    se = 1.0 / np.sqrt((pz * (1 - pz) * obs) @ a**2 + 1.0)
    return theta, se
