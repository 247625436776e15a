"""The 2PL fit at the shape of the published commonsense data (few runs, many items): it
converges, leaves out and counts the items every run answers alike, recovers the simulated
abilities and orients them with the runs' accuracy.

Expected values are the simulation's own (true abilities) and counts and correlations computed
here with numpy and scipy from the simulated matrix, not read back from the fit."""

from __future__ import annotations

import json

import numpy as np
from scipy.stats import spearmanr

from llmscope.analysis.irt import ResponseMatrix, fit_irt
from llmscope.cli.irt import format_fit
from tests.helpers.paths import shared_path


def _simulate(
    n_runs: int, n_items: int, seed: int, negative_share: float = 0.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """0/1 answers of a 2PL with N(0, 1) abilities, lognormal slopes and N(0, 1.5) difficulties
    (wide, so that many items come out answered alike by all 35 runs); a share of the items
    keyed negatively (their right answer falls as ability rises)."""
    rng = np.random.default_rng(seed)
    a = rng.lognormal(0.0, 0.4, n_items)
    a[rng.random(n_items) < negative_share] *= -1.0
    b = rng.normal(0.0, 1.5, n_items)
    theta = rng.normal(0.0, 1.0, n_runs)
    p = 1.0 / (1.0 + np.exp(-a[None, :] * (theta[:, None] - b[None, :])))
    return (rng.random(p.shape) < p).astype(float), theta, a


def _matrix(x: np.ndarray) -> ResponseMatrix:
    return ResponseMatrix(
        runs=[f"r{i}" for i in range(x.shape[0])],
        models=[f"m{i}" for i in range(x.shape[0])],
        items=[f"q{j:04d}" for j in range(x.shape[1])],
        correct=x,
        expected=np.full(x.shape, np.nan),
        suite="sim",
    )


def test_few_runs_many_items_with_constant_items_converges_and_recovers_abilities() -> None:
    x, theta, _ = _simulate(35, 2000, seed=11)
    x[:, :150] = 1.0  # and some items forced alike, both ways
    x[:, 150:250] = 0.0
    p = x.mean(axis=0)
    n_right, n_wrong = int(np.sum(p == 1)), int(np.sum(p == 0))
    assert n_right >= 150 and n_wrong >= 100  # the simulation has many of its own as well
    fit = fit_irt(_matrix(x), "2pl")

    assert fit.converged and fit.cycles is not None and fit.cycles < 5000
    assert fit.excluded == {
        "right_by_every_run": n_right,
        "wrong_by_every_run": n_wrong,
        "answered_by_fewer_than_2_runs": 0,
    }
    assert len(fit.constant_items) == n_right + n_wrong
    assert len(fit.items) == 2000 - n_right - n_wrong
    assert set(fit.constant_items) == {f"q{j:04d}" for j in np.flatnonzero((p == 0) | (p == 1))}
    # shown on screen and in the JSON
    assert f"{n_right + n_wrong} of 2000 items left out ({n_right} right by every run, " in (
        format_fit(fit)
    )
    out = json.loads(json.dumps(fit.to_dict()))
    assert out["excluded"]["right_by_every_run"] == n_right
    assert out["excluded"]["wrong_by_every_run"] == n_wrong

    est = np.array([a.theta for a in fit.abilities])
    assert spearmanr(est, theta).statistic > 0.9
    varies = (p > 0) & (p < 1)
    acc = x[:, varies].mean(axis=1)
    rho_acc = spearmanr(est, acc).statistic
    assert rho_acc > 0.9
    assert fit.ability_accuracy_rho is not None and abs(fit.ability_accuracy_rho - rho_acc) < 1e-12
    assert not any("did not converge" in w or "do not follow" in w for w in fit.warnings)


def test_the_scale_follows_accuracy_when_most_items_are_keyed_against_the_trait() -> None:
    # two thirds of the items are right more often for runs low on the simulated trait, so the
    # runs' accuracy falls as the simulated trait rises: an EM that started every item's slope
    # positive on the raw answers would orient its scale with the minority of items. The fit's
    # abilities must rise with accuracy, i.e. run against the simulated trait.
    x, theta, a_true = _simulate(35, 600, seed=5, negative_share=2 / 3)
    p = x.mean(axis=0)
    varies = (p > 0) & (p < 1)
    acc = x[:, varies].mean(axis=1)
    assert spearmanr(acc, theta).statistic < -0.9  # the premise, from the simulation
    fit = fit_irt(_matrix(x), "2pl")
    est = np.array([a.theta for a in fit.abilities])
    assert fit.converged
    assert spearmanr(est, acc).statistic > 0.9
    assert spearmanr(est, -theta).statistic > 0.9
    # the items keyed against the trait are the ones fitted reversed (negative discrimination)
    # on the fit's scale (minus the simulated trait) the positively keyed items turn negative
    fitted_neg = np.array([i.discrimination < 0 for i in fit.items])
    assert np.mean(fitted_neg == (a_true[varies] > 0)) > 0.9


def test_the_published_commonsense_answers_agree_with_mirt_and_are_not_read_as_abilities() -> None:
    # the runs x items matrix built here from the published file with pandas (not through the
    # import): 35 models' binarised answers to q1 and q2 on the first 1,000 statements, right
    # when equal to the human majority. mirt fits the same items (without its standard errors,
    # the part that needs memory quadratic in the items).
    import mirt
    import pandas as pd

    df = pd.read_csv(shared_path("data", "commonsense", "all_models_binarythresh.csv")).iloc[:1000]
    models = [c[:-3] for c in df.columns if c.endswith("_q1") and c != "human_q1"]
    gold = df["human_q1"].to_numpy()
    x = np.concatenate(
        [(df[[f"{m}_{q}" for m in models]].to_numpy() == gold[:, None]).T for q in ("q1", "q2")],
        axis=1,
    ).astype(float)
    p = x.mean(axis=0)
    x = x[:, (p > 0) & (p < 1)]
    fit = fit_irt(_matrix(x), "2pl")
    res = mirt.fit_mirt(x.astype(int), model="2PL", compute_standard_errors=False, max_iter=2000)
    coef = res.coef()
    a_m = coef["discrimination"].to_numpy(dtype=float)
    b_m = coef["difficulty"].to_numpy(dtype=float)
    th_m = np.asarray(mirt.fscores(res, x.astype(int), method="MAP").theta, dtype=float).ravel()
    th = np.array([r.theta for r in fit.abilities])
    a = np.array([i.discrimination for i in fit.items])
    b = np.array([i.difficulty for i in fit.items])
    # items inside both fits' bounds (mirt's: slopes [0.1, 5], difficulties [-6, 6]) and not
    # fitted reversed here (mirt bounds slopes above 0)
    inner = (
        np.array([not (i.at_bound or i.reversed) for i in fit.items])
        & (a_m > 0.1001)
        & (a_m < 4.99)
        & (np.abs(b_m) < 5.99)
    )
    assert fit.converged
    assert np.corrcoef(th, th_m)[0, 1] > 0.95
    assert np.corrcoef(b[inner], b_m[inner])[0, 1] > 0.95
    assert np.corrcoef(a[inner], a_m[inner])[0, 1] > 0.6
    # both find the same trait, and it is not the models' accuracy: the warning says so
    acc = x.mean(axis=1)
    assert spearmanr(th_m, acc).statistic < 0.5
    assert spearmanr(th, acc).statistic < 0.5
    assert any("do not follow the runs' accuracy" in w for w in fit.warnings)
