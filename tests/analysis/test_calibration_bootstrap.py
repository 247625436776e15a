"""The approximate ECE/MCE cluster bootstrap (bin totals drawn) against the exact one."""

from __future__ import annotations

import numpy as np
import pytest

from llmscope.analysis.calibration_bootstrap import (
    APPROX_METHOD,
    EXACT_MAX_CLUSTERS,
    EXACT_METHOD,
    calibration_bootstrap,
)

# Interval ends of the approximation within this share of the exact interval's width. Two exact
# bootstraps with different seeds differ by 0.01-0.04 of the width on these data (Monte Carlo
# error of 2,000 resamples); the approximation measured 0.00-0.05.
TOLERANCE = 0.12


def _data(G, *, thin=0, mid=0, per=3, seed=1):
    """G clusters of `per` rows; `thin` clusters in a thin bin [0, 0.1) answered 60% right (an MCE
    set by few clusters), `mid` clusters in [0.3, 0.4) at 50% (a bin just above the thin bound)."""
    rng = np.random.default_rng(seed)
    conf = np.clip(
        np.repeat(rng.random(G), per) * 0.5 + 0.5 + rng.normal(0, 0.05, G * per), 0.5, 1.0
    )
    corr = (rng.random(G * per) < conf).astype(float)
    if thin:
        conf[: thin * per] = rng.uniform(0.0, 0.1, thin * per)
        corr[: thin * per] = rng.random(thin * per) < 0.6
    if mid:
        s = slice(thin * per, (thin + mid) * per)
        conf[s] = rng.uniform(0.3, 0.4, mid * per)
        corr[s] = rng.random(mid * per) < 0.5
    return conf, corr, np.repeat(np.arange(G), per)


@pytest.mark.parametrize("thin,mid", [(0, 0), (40, 1100), (200, 0)])
def test_normal_bins_within_tolerance_of_exact(thin, mid):
    G = EXACT_MAX_CLUSTERS + 2000  # just above the threshold: the approximation's smallest use
    conf, corr, cl = _data(G, thin=thin, mid=mid)
    exact = calibration_bootstrap(conf, corr, cl, 10, 2000, 0, 0.95, method="exact")
    approx = calibration_bootstrap(conf, corr, cl, 10, 2000, 0, 0.95, method="normal-bins")
    assert (exact.method, approx.method) == (EXACT_METHOD, APPROX_METHOD)
    for key in ("ece", "mce"):
        e, a = getattr(exact, key), getattr(approx, key)
        width = e[1] - e[0]
        assert width > 0
        assert abs(a[0] - e[0]) <= TOLERANCE * width, (key, e, a)
        assert abs(a[1] - e[1]) <= TOLERANCE * width, (key, e, a)


def test_auto_switches_above_the_threshold_and_names_it():
    conf, corr, cl = _data(EXACT_MAX_CLUSTERS)
    assert calibration_bootstrap(conf, corr, cl, 10, 50, 0, 0.95).method == EXACT_METHOD
    conf, corr, cl = _data(EXACT_MAX_CLUSTERS + 1)
    assert calibration_bootstrap(conf, corr, cl, 10, 50, 0, 0.95).method == APPROX_METHOD
