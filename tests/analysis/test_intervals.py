import json
import math

import numpy as np
import pandas as pd
import pytest

from llmscope.analysis.intervals import (
    accuracy_ci,
    accuracy_table,
    cluster_bootstrap,
    wilson_interval,
)
from llmscope.analysis.rows import frame_to_rows, metric_row

Z = 1.959963984540054  # Phi^-1(0.975)


def hand_wilson(k, n):
    # Wilson (1927): (p + z^2/2n ± z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n)
    p = k / n
    c = (p + Z**2 / (2 * n)) / (1 + Z**2 / n)
    h = Z * math.sqrt(p * (1 - p) / n + Z**2 / (4 * n**2)) / (1 + Z**2 / n)
    return c - h, c + h


def test_wilson_8_of_10_by_formula():
    lo, hi = wilson_interval(8, 10)
    elo, ehi = hand_wilson(8, 10)
    assert lo == pytest.approx(elo, abs=1e-12)
    assert hi == pytest.approx(ehi, abs=1e-12)
    # the well-known textbook values for 8/10
    assert lo == pytest.approx(0.4902, abs=1e-4)
    assert hi == pytest.approx(0.9433, abs=1e-4)


def test_accuracy_ci_without_clusters_is_wilson_and_excludes_missing():
    correct = [1, 1, None, 0, 1, 1, 1, 1, float("nan"), 1, 0, 1]
    iv = accuracy_ci(correct)
    assert iv.method == "wilson"
    assert iv.n == 10 and iv.n_missing == 2 and iv.n_clusters == 10
    assert iv.mean == pytest.approx(0.8)
    elo, ehi = hand_wilson(8, 10)
    assert (iv.lo, iv.hi) == (pytest.approx(elo), pytest.approx(ehi))
    assert iv.ci95 == [iv.lo, iv.hi]


def test_wilson_edge_cases():
    assert wilson_interval(0, 5)[0] == 0.0
    assert wilson_interval(5, 5)[1] == 1.0
    iv = accuracy_ci([None, None])
    assert iv.n == 0 and math.isnan(iv.mean) and iv.method == "empty"


def test_wilson_bounds_are_exact_at_none_and_all():
    # the closed form gives 0 and 1 exactly there; floating point left 2.8e-17 (n = 12) and
    # 0.9999999999999999 in printed reports
    for n in range(1, 200):
        assert wilson_interval(0, n)[0] == 0.0 and wilson_interval(n, n)[1] == 1.0, n
        if n > 1:  # one success of several: both bounds strictly inside
            assert 0.0 < wilson_interval(1, n)[0] < wilson_interval(1, n)[1] < 1.0


def _items(n=40, seed=1):
    rng = np.random.default_rng(seed)
    return (rng.random(n) < 0.65).astype(float)


def test_perfectly_correlated_variants_match_deduplicated_cluster_ci():
    base = _items()
    trip = np.repeat(base, 3)
    ids = np.repeat(np.arange(len(base)), 3)
    clustered = accuracy_ci(trip, ids, method="cluster")
    single = accuracy_ci(base, np.arange(len(base)), method="cluster")
    assert clustered.mean == pytest.approx(single.mean)
    assert clustered.lo == pytest.approx(single.lo)
    assert clustered.hi == pytest.approx(single.hi)
    assert clustered.n == 120 and clustered.n_clusters == 40

    # independent check of the closed form on de-duplicated data: var = G/(G-1) * s2 / G
    from scipy import stats

    G = len(base)
    p = base.mean()
    se = math.sqrt(G / (G - 1) * np.sum((base - p) ** 2) / G**2)
    t = stats.t.ppf(0.975, G - 1)
    assert single.lo == pytest.approx(p - t * se)
    assert single.hi == pytest.approx(p + t * se)

    # ignoring the dependence (Wilson on 120 trials) gives a much narrower interval
    naive = accuracy_ci(trip)
    assert (naive.hi - naive.lo) < 0.7 * (clustered.hi - clustered.lo)


def test_auto_method_selection():
    base = _items(40)
    ids = np.repeat(np.arange(40), 3)
    assert accuracy_ci(np.repeat(base, 3), ids).method == "cluster-t"
    # few clusters: still the cluster-t interval (a bootstrap|Wilson rule
    # over-covers here); identical triplets -> CR1 on 10 cluster means with t(9)
    few = accuracy_ci(np.repeat(base[:10], 3), ids[:30])
    assert few.method == "cluster-t"
    b10 = base[:10]
    p10 = b10.mean()
    se10 = math.sqrt(10 / 9 * np.sum((3 * b10 - 3 * p10) ** 2) / 30**2)
    from scipy import stats

    t9 = stats.t.ppf(0.975, 9)
    assert few.lo == pytest.approx(max(0.0, p10 - t9 * se10)) and few.hi == pytest.approx(
        min(1.0, p10 + t9 * se10)
    )
    # one statement answered right under one prompt and wrong under the other: the interval
    # must not collapse to a point (each cluster counts once: Wilson for 0.5 of 1 trial)
    one = accuracy_ci(np.array([1.0, 0.0]), np.array([7, 7]))
    assert one.mean == 0.5 and one.lo == pytest.approx(hand_wilson(0.5, 1)[0])
    assert one.hi == pytest.approx(hand_wilson(0.5, 1)[1])
    # singleton clusters are independent trials
    assert accuracy_ci(base, np.arange(40)).method == "wilson"
    # all-correct clustered data: Wilson counted per cluster
    allc = accuracy_ci(np.ones(30), np.repeat(np.arange(10), 3))
    assert allc.method == "wilson-clusters"
    assert allc.lo == pytest.approx(hand_wilson(10, 10)[0])


def test_bootstrap_deterministic_under_seed():
    # fractional scores so the bootstrap distribution is continuous and seeds differ
    base = np.random.default_rng(3).random(12)
    y = np.repeat(base, 2)
    ids = np.repeat(np.arange(12), 2)
    a = accuracy_ci(y, ids, method="bootstrap", seed=7)
    b = accuracy_ci(y, ids, method="bootstrap", seed=7)
    c = accuracy_ci(y, ids, method="bootstrap", seed=8)
    assert (a.lo, a.hi) == (b.lo, b.hi)
    assert a.lo <= a.mean <= a.hi
    assert (a.lo, a.hi) != (c.lo, c.hi)


def test_cluster_bootstrap_generic_stat():
    df = pd.DataFrame({"g": np.repeat(np.arange(20), 2), "x": np.arange(40, dtype=float)})
    r1 = cluster_bootstrap(lambda d: d["x"].median(), df, "g", n_boot=300, seed=1)
    r2 = cluster_bootstrap(lambda d: d["x"].median(), df, "g", n_boot=300, seed=1)
    assert r1.estimate == pytest.approx(19.5)
    assert (r1.lo, r1.hi) == (r2.lo, r2.hi)
    assert r1.lo < 19.5 < r1.hi
    assert r1.n_clusters == 20
    # resampling whole clusters keeps pairs together: every replicate has an even row count
    sizes = []
    cluster_bootstrap(lambda d: sizes.append(len(d)) or 0.0, df, "g", n_boot=5, seed=0)
    assert all(s == 40 for s in sizes)


def test_accuracy_table_and_metric_rows_are_json():
    df = pd.DataFrame(
        {
            "variant": ["a"] * 10 + ["b"] * 10,
            "correct": [1] * 8 + [0] * 2 + [1] * 5 + [0] * 4 + [None],
        }
    )
    t = accuracy_table(df, ["variant"])
    assert list(t["variant"]) == ["a", "b"]
    assert list(t["n"]) == [10, 9]
    assert t.loc[0, "lo"] == pytest.approx(hand_wilson(8, 10)[0])
    rows = frame_to_rows(
        t,
        run="r1",
        model="m",
        group_cols=["variant"],
        metrics={"accuracy": ("mean", "lo", "hi", "n")},
    )
    assert rows[0] == {
        "run": "r1",
        "model": "m",
        "group": {"variant": "a"},
        "metric": "accuracy",
        "value": pytest.approx(0.8),
        "ci95": [pytest.approx(t.loc[0, "lo"]), pytest.approx(t.loc[0, "hi"])],
        "n": 10,
    }
    json.dumps(rows)
    r = metric_row("r", "m", "x", float("nan"), None, None)
    assert r["value"] is None and r["ci95"] is None and r["group"] == {}


def test_identical_cluster_means_do_not_give_a_zero_width_interval():
    # 40 tuples of two trials, exactly one right in each: the sandwich variance is 0
    y = np.tile([1.0, 0.0], 40)
    g = np.repeat(np.arange(40), 2)
    iv = accuracy_ci(y, g)
    assert iv.mean == 0.5 and iv.method == "wilson-clusters"
    assert (iv.lo, iv.hi) == pytest.approx(hand_wilson(20, 40))
