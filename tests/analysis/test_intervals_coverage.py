"""Coverage simulation for the automatic clustered interval: close to nominal 0.95.

12 clusters (statements) of 3 correlated trials (prompt variants): each statement has its
own probability of being answered right, drawn from Beta(1.2, 0.8) (mean 0.6, intra-cluster
correlation 0.5). The true accuracy is 0.6. A 95% interval should contain it in about
95% of simulated runs; the seed is fixed, so the test is deterministic.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from llmscope.analysis.intervals import accuracy_ci

P, G, M, R = 0.6, 12, 3, 600


def _coverage(method: str) -> float:
    rng = np.random.default_rng(12)
    hits = 0
    g = np.repeat(np.arange(G), M)
    for _ in range(R):
        pc = rng.beta(2 * P, 2 * (1 - P), size=G)
        y = (rng.random((G, M)) < pc[:, None]).astype(float).ravel()
        iv = accuracy_ci(y, g, method=method, n_boot=400)
        hits += iv.lo <= P <= iv.hi
    return hits / R


def test_auto_interval_covers_near_nominal_with_12_clusters():
    cov = _coverage("auto")
    # binomial 99% band about 0.95 for 600 runs: 0.95 ± 2.58 * sqrt(.95*.05/600) = [0.927, 0.973]
    half = stats.norm.ppf(0.995) * np.sqrt(0.95 * 0.05 / R)
    assert 0.95 - half <= cov <= 0.95 + half, cov
