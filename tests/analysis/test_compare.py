import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from llmscope.analysis.compare import compare_runs, mcnemar


def test_mcnemar_exact_by_hand():
    # b=1, c=6, n=7: P(X<=1) = (1 + 7)/128 ; two-sided p = 16/128 = 0.125
    r = mcnemar(1, 6)
    assert r.method == "exact"
    assert r.pvalue == pytest.approx(16 / 128)
    assert r.pvalue == pytest.approx(stats.binomtest(1, 7, 0.5).pvalue)
    # b=0, c=5: p = 2/32
    assert mcnemar(0, 5).pvalue == pytest.approx(2 / 32)
    assert mcnemar(3, 3).pvalue == 1.0
    assert mcnemar(0, 0).pvalue == 1.0


def test_mcnemar_chi2_by_hand():
    # b=10, c=25, n=35 >= 25: chi2 = (15-1)^2/35 = 5.6 ; p = erfc(sqrt(5.6/2))
    r = mcnemar(10, 25)
    assert r.method == "chi2-cc"
    assert r.statistic == pytest.approx(5.6)
    assert r.pvalue == pytest.approx(math.erfc(math.sqrt(5.6 / 2)))
    # forcing the exact test agrees with scipy's binomtest
    assert mcnemar(10, 25, exact=True).pvalue == pytest.approx(stats.binomtest(10, 35, 0.5).pvalue)


def runs():
    ids = [f"i{k}" for k in range(10)]
    a = pd.DataFrame(
        {
            "item_id": ids,
            "variant": "v",
            "correct": [1, 1, 1, 0, 0, 1, 0, 1, 1, None],
            "prediction": list("yyynnynyyy"),
        }
    )
    b = pd.DataFrame(
        {
            "item_id": ids[::-1],  # order must not matter
            "variant": "v",
            "correct": [1, 1, 1, 1, 1, 1, 1, 0, 1, 1][::-1],
            "prediction": list("yyyyyyynyy")[::-1],
        }
    )
    return a, b


def test_compare_runs_by_hand():
    a, b = runs()
    cmp = compare_runs(a, b, n_boot=500)
    # i9 has no score in A -> 9 paired items
    assert cmp.n == 9
    assert cmp.acc_a == pytest.approx(6 / 9)
    assert cmp.acc_b == pytest.approx(8 / 9)
    assert cmp.diff == pytest.approx(2 / 9)
    # A-only right: i7 ; B-only right: i3, i4, i6 -> exact p = 2 * (1 + 4)/16
    assert (cmp.mcnemar.b, cmp.mcnemar.c) == (1, 3)
    assert cmp.mcnemar.pvalue == pytest.approx(10 / 16)
    assert sorted(cmp.disagreements["item_id"]) == ["i3", "i4", "i6", "i7"]
    assert set(cmp.disagreements.columns) >= {"prediction_a", "prediction_b", "d"}
    assert cmp.diff_lo <= cmp.diff <= cmp.diff_hi
    again = compare_runs(a, b, n_boot=500)
    assert (again.diff_lo, again.diff_hi) == (cmp.diff_lo, cmp.diff_hi)
    json.dumps(cmp.rows("r", "mB", "mA"))


def test_identical_runs_have_zero_width_interval():
    a, _ = runs()
    cmp = compare_runs(a, a.copy(), n_boot=200)
    assert cmp.diff == 0 and cmp.diff_lo == 0 and cmp.diff_hi == 0
    assert cmp.mcnemar.pvalue == 1.0 and len(cmp.disagreements) == 0


def test_cluster_bootstrap_pairs_variants():
    rng = np.random.default_rng(0)
    n = 60
    base_a = rng.random(n) < 0.5
    base_b = rng.random(n) < 0.7
    rows_a, rows_b = [], []
    for i in range(n):
        for v in ("p1", "p2", "p3"):  # identical variants: perfectly dependent
            rows_a.append({"item_id": i, "variant": v, "correct": float(base_a[i])})
            rows_b.append({"item_id": i, "variant": v, "correct": float(base_b[i])})
    a, b = pd.DataFrame(rows_a), pd.DataFrame(rows_b)
    naive = compare_runs(a, b, seed=1)
    clus = compare_runs(a, b, cluster_col="item_id", seed=1)
    assert clus.n_clusters == 60 and naive.n_clusters == 180
    assert (clus.diff_hi - clus.diff_lo) > 1.4 * (naive.diff_hi - naive.diff_lo)
