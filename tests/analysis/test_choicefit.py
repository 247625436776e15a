"""Softmax-choice fits against closed forms, a binomial-likelihood optimiser and sklearn."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize
from scipy.special import expit

from llmscope.analysis.choicefit import (
    condition_dists,
    condition_table,
    fit_alpha,
    fit_condition,
    loglik,
    softmax_accuracy,
)
from tests.helpers.paths import SHARED


def test_one_item_closed_form_mle_interval_and_baselines():
    # P(option 1) = sigmoid(α·2) must equal 7/10 at the MLE: α = logit(0.7) / 2
    fit = fit_alpha([[0.0, 2.0]], [[3, 7]])
    assert fit.alpha == pytest.approx(math.log(7 / 3) / 2, abs=1e-6)
    assert fit.loglik == pytest.approx(3 * math.log(0.3) + 7 * math.log(0.7), abs=1e-9)
    assert fit.ll_uniform == pytest.approx(10 * math.log(0.5))
    assert fit.ll_empirical == pytest.approx(3 * math.log(0.3) + 7 * math.log(0.7))
    assert fit.n_choices == 10 and fit.n_items == 1
    # likelihood-ratio interval of a binomial proportion, solved in p, mapped to α = logit(p)/2
    llmax = 3 * math.log(0.3) + 7 * math.log(0.7)

    def drop(p):
        return 2 * (llmax - (3 * math.log(1 - p) + 7 * math.log(p))) - 3.841458820694124

    p_lo = optimize.brentq(drop, 0.01, 0.7)
    p_hi = optimize.brentq(drop, 0.7, 0.999)
    assert fit.lo == pytest.approx(math.log(p_lo / (1 - p_lo)) / 2, abs=1e-5)
    assert fit.hi == pytest.approx(math.log(p_hi / (1 - p_hi)) / 2, abs=1e-5)


def test_binary_items_match_binomial_optimiser_and_sklearn():
    rng = np.random.default_rng(3)
    s = rng.normal(size=(12, 2)) * 3
    counts = rng.integers(0, 15, size=(12, 2))
    counts[0] = [5, 5]
    fit = fit_alpha(s, counts)
    x = s[:, 1] - s[:, 0]
    k, n = counts[:, 1], counts.sum(axis=1)

    def nll(a):
        p = expit(a[0] * x)
        return -float(np.sum(k * np.log(p) + (n - k) * np.log(1 - p)))

    ref = optimize.minimize(
        nll, [0.1], method="Nelder-Mead", options={"xatol": 1e-9, "fatol": 1e-12}
    )
    assert fit.alpha == pytest.approx(ref.x[0], abs=1e-5)
    assert fit.loglik == pytest.approx(-ref.fun, abs=1e-7)
    from sklearn.linear_model import LogisticRegression

    X = np.repeat(np.concatenate([x, x])[:, None], 1, axis=1)
    y = np.concatenate([np.ones(12), np.zeros(12)])
    w = np.concatenate([k, n - k]).astype(float)
    lr = LogisticRegression(C=np.inf, fit_intercept=False, tol=1e-10, max_iter=1000)
    lr.fit(X[w > 0], y[w > 0], sample_weight=w[w > 0])
    assert fit.alpha == pytest.approx(lr.coef_[0][0], abs=1e-4)


def test_three_options_loglik_and_softmax_accuracy_by_hand():
    s = [[0.0, 1.0, 2.0]]
    c = [[1, 2, 3]]
    z = math.exp(0) + math.exp(0.5) + math.exp(1.0)
    assert loglik(0.5, s, c) == pytest.approx(
        1 * math.log(1 / z) + 2 * math.log(math.exp(0.5) / z) + 3 * math.log(math.exp(1) / z)
    )
    assert softmax_accuracy(0.5, s, [2]) == pytest.approx(math.exp(1) / z)
    # very large α·s differences stay finite (log-space): the fit on raw log-likelihoods works
    fit = fit_alpha([[-3.0, -400.0]], [[9, 1]])
    assert math.isfinite(fit.loglik) and fit.alpha == pytest.approx(math.log(9) / 397, abs=1e-6)


def test_condition_aggregation_by_hand():
    # two items of one condition, the same option types in different orders
    s = [[1.0, 0.0, -1.0], [0.0, 3.0, 1.0]]
    types = [["t", "l", "d"], ["l", "t", "d"]]
    c = [[6, 3, 1], [2, 7, 1]]
    table = condition_table(s, c, ["A", "A"], types)
    assert table.types == ["t", "l", "d"]
    assert table.counts[0].tolist() == [13, 5, 2]
    mean = np.array([(1 + 3) / 2, (0 + 0) / 2, (-1 + 1) / 2])  # aligned t, l, d
    e = np.exp(mean)
    assert condition_dists(table, "scores", 1.0)[0] == pytest.approx(e / e.sum())
    p1 = np.exp([1.0, 0, -1]) / np.exp([1.0, 0, -1]).sum()
    p2 = np.exp([3.0, 0, 1]) / np.exp([3.0, 0, 1]).sum()
    assert condition_dists(table, "probs", 1.0)[0] == pytest.approx((p1 + p2) / 2)
    # winner-take-all: t wins both items; add-one smoothing: (2+1)/(2+3), 1/5, 1/5
    assert condition_dists(table, "wta", 1.0)[0] == pytest.approx([0.6, 0.2, 0.2])
    wta = fit_condition(table, "wta")
    assert wta.alpha is None
    assert wta.loglik == pytest.approx(13 * math.log(0.6) + 5 * math.log(0.2) + 2 * math.log(0.2))
    with pytest.raises(ValueError, match="one option of each type"):
        condition_table(s, c, ["A", "A"], [["t", "l", "d"], ["t", "t", "d"]])


def test_bad_counts_are_refused():
    with pytest.raises(ValueError, match="2 option scores but 3 human counts"):
        fit_alpha([[0.0, 1.0]], [[1, 2, 3]])
    with pytest.raises(ValueError, match="no item"):
        fit_alpha([[0.0, 1.0]], [[0, 0]])


def test_separable_data_flags_alpha_at_bound():
    fit = fit_alpha([[0.0, 1.0], [0.0, 2.0]], [[0, 5], [0, 3]])
    assert fit.at_bound and fit.alpha == pytest.approx(200.0, abs=1e-3)


def test_cfc_choice_items_from_shared_file():
    import json

    path = SHARED / "data" / "cfc" / "cfc_dev_targets.jsonl"
    if not path.is_file():
        pytest.skip(f"CFC targets not found at {path}")
    from llmscope.data.cfc import cfc_choice_items

    items = cfc_choice_items(path)
    first = json.loads(path.read_text().split("\n")[0])
    clusters = first["answers"]["clusters"]
    raw = first["answers"]["raw"]
    it = next(i for i in items if i.item_id == first["metadata"]["id"])
    assert it.fields["human_counts"] == [c["count"] for c in clusters.values()]
    # each option is its cluster's most frequent raw answer
    for opt, c in zip(it.options, clusters.values(), strict=True):
        assert raw[opt] == max(raw[a] for a in c["answers"])
