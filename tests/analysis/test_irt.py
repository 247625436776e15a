"""Item response theory across runs (analysis/irt.py, `llmscope irt`).

Expected values are the parameters the data were simulated with, and a label flipped on purpose
in a real DuckDB file: the fits must recover the first and flag the second.

Tolerances (root mean square error against the true values; measured with these seeds in
parentheses; MML with N(0, 1) abilities, so the estimates are on the true scale):
- 2PL, 500 runs x 25 items: discrimination 0.25 (0.16), difficulty 0.30 (0.2), ability 0.50 (0.4);
- Rasch, 300 runs x 20 items: difficulty 0.20, ability 0.55, common discrimination within 0.15 of 1.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from llmscope.analysis.irt import MODELS, IrtError, ResponseMatrix, fit_irt, response_matrix
from llmscope.store.db import Store
from tests.helpers.cli import assert_clean_error, cli
from tests.helpers.irt import FLIPPED, N_RUNS, write_flipped_db


def _simulate(
    n_runs: int, n_items: int, seed: int, rasch: bool = False, flip: tuple[int, ...] = ()
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = np.ones(n_items) if rasch else rng.lognormal(0.0, 0.3, n_items)
    b = rng.normal(0.0, 1.0, n_items)
    theta = rng.normal(0.0, 1.0, n_runs)
    for j in flip:
        a[j] = -a[j]
    p = 1.0 / (1.0 + np.exp(-a[None, :] * (theta[:, None] - b[None, :])))
    return (rng.random(p.shape) < p).astype(float), a, b, theta


def _matrix(x: np.ndarray) -> ResponseMatrix:
    n_runs, n_items = x.shape
    return ResponseMatrix(
        runs=[f"r{i}" for i in range(n_runs)],
        models=["m"] * n_runs,
        items=[f"q{j}" for j in range(n_items)],
        correct=x,
        expected=np.full(x.shape, np.nan),
    )


def _rmse(est: list[float], true: np.ndarray) -> float:
    return float(np.sqrt(np.mean((np.asarray(est) - true) ** 2)))


def test_2pl_recovers_known_parameters_and_flags_the_negative_item() -> None:
    x, a, b, theta = _simulate(500, 25, seed=3, flip=(4,))
    fit = fit_irt(_matrix(x), "2pl")
    assert [i.item for i in fit.items] == [
        f"q{j}" for j in range(25)
    ]  # no item answered alike by all
    assert _rmse([i.discrimination for i in fit.items], a) < 0.25
    assert _rmse([i.difficulty for i in fit.items], b) < 0.30
    assert _rmse([r.theta for r in fit.abilities], theta) < 0.50
    assert [i.item for i in fit.flagged] == ["q4"]
    q4 = fit.items[4]
    assert q4.reversed and q4.discrimination < 0 and q4.discrimination_ci[1] is not None
    assert q4.discrimination_ci[0] <= a[4] <= q4.discrimination_ci[1]  # type: ignore[operator]
    # the intervals cover most true values (Wald 95%; 25 items, so not every one)
    covered = [
        lo is not None and lo <= t <= hi
        for (lo, hi), t in zip((i.difficulty_ci for i in fit.items), b, strict=True)  # type: ignore[operator]
    ]
    assert sum(covered) >= 20
    assert (
        sum(r.ci[0] <= t <= r.ci[1] for r, t in zip(fit.abilities, theta, strict=True)) >= 0.9 * 500
    )
    assert fit.converged


def test_rasch_recovers_difficulties_and_abilities() -> None:
    x, _, b, theta = _simulate(300, 20, seed=5, rasch=True)
    fit = fit_irt(_matrix(x), "rasch")
    assert len({round(i.discrimination, 9) for i in fit.items}) == 1  # one common discrimination
    assert abs(fit.items[0].discrimination - 1.0) < 0.15
    assert _rmse([i.difficulty for i in fit.items], b) < 0.20
    assert _rmse([r.theta for r in fit.abilities], theta) < 0.55
    assert not fit.flagged  # Rasch never flags (no sign to estimate)


def test_constant_items_are_left_out_and_too_little_data_is_refused() -> None:
    x, *_ = _simulate(200, 6, seed=1)
    x[:, 0] = 1.0  # everyone right
    x[:, 1] = 0.0  # everyone wrong
    fit = fit_irt(_matrix(x), "2pl")
    assert fit.constant_items == ["q0", "q1"]
    assert [i.item for i in fit.items] == ["q2", "q3", "q4", "q5"]
    with pytest.raises(IrtError, match="at least 2"):
        fit_irt(_matrix(np.ones((5, 4))), "2pl")
    with pytest.raises(IrtError, match="one of"):
        fit_irt(_matrix(x), "3pl")


def test_cli_model_names_match_the_analysis() -> None:
    from llmscope.cli import irt as irt_report

    assert irt_report.MODELS == MODELS


# -- a built-in example: a suite with one label flipped, in a real DuckDB (tests/helpers/irt.py)
@pytest.fixture(scope="module")
def flipped_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[float]]]:
    db = tmp_path_factory.mktemp("irt") / "flipped.duckdb"
    return db, write_flipped_db(db)


def test_the_flipped_label_is_flagged_from_stored_runs(
    flipped_db: tuple[Path, dict[str, list[float]]],
) -> None:
    db, expected = flipped_db
    with Store(db, read_only=True) as st:
        runs = [st.get_run(f"run{i:02d}") for i in range(N_RUNS)]
        matrix = response_matrix(st, [r for r in runs if r is not None])
    fit = fit_irt(matrix, "2pl")
    assert [i.item for i in fit.flagged] == [FLIPPED]
    for it in fit.items:
        assert it.expected_accuracy == pytest.approx(float(np.mean(expected[it.item])), abs=1e-12)
    by_run = {r.run_id: r for r in fit.abilities}
    # a run's accuracy is its share right on the fitted items, from the stored rows
    with Store(db, read_only=True) as st:
        df = st.query_df("SELECT run_id, item_id, correct FROM results")
    keep = {i.item for i in fit.items}
    sub = df[df["item_id"].isin(keep)]
    for rid, acc in sub.groupby("run_id")["correct"].mean().items():
        assert by_run[str(rid)].accuracy == pytest.approx(acc, abs=1e-12)


@pytest.mark.slow
def test_cli_irt_end_to_end(flipped_db: tuple[Path, dict[str, list[float]]]) -> None:
    db, _ = flipped_db
    proc = cli("irt", "--db", str(db), "--suite", "flipped", "--json")
    assert proc.returncode == 0, proc.stderr
    (fit,) = json.loads(proc.stdout)
    assert fit["model"] == "2pl" and len(fit["abilities"]) == N_RUNS
    assert [i["item"] for i in fit["items"] if i["flagged"]] == [FLIPPED]
    proc = cli(
        "irt",
        "--db",
        str(db),
        "--runs",
        ",".join(f"run{i:02d}" for i in range(N_RUNS)),
        "--model",
        "both",
    )
    assert proc.returncode == 0, proc.stderr
    assert "IRT rasch" in proc.stdout and "IRT 2pl" in proc.stdout
    flagged = [ln for ln in proc.stdout.splitlines() if "LIKELY LABEL ERROR" in ln]
    assert len(flagged) == 1 and flagged[0].split()[0] == FLIPPED
    assert_clean_error(cli("irt", "--db", str(db)), "--runs", "--suite")
    assert_clean_error(cli("irt", "--db", str(db), "--suite", "nope"), "flipped")
    assert_clean_error(cli("irt", "--db", str(db), "--runs", "run00"), "at least 2 runs")


@pytest.mark.slow
def test_abilities_are_continuous_with_the_information_s_standard_error() -> None:
    # with a few hundred items a run's posterior is narrower than mirt's 21-point EAP grid: the
    # abilities must not collapse onto grid points, and each one's standard error must be the
    # posterior's curvature, 1 / sqrt(1 + sum_j a_j^2 P_j (1 - P_j)) at the ability (N(0, 1)
    # prior), computed here by hand from the fitted items
    x, _, _, theta = _simulate(35, 300, seed=1)
    fit = fit_irt(_matrix(x), "2pl")
    est = np.array([r.theta for r in fit.abilities])
    assert len(np.unique(np.round(est, 6))) == len(est)
    assert np.corrcoef(est, theta)[0, 1] > 0.95
    a = np.array([i.discrimination for i in fit.items])
    b = np.array([i.difficulty for i in fit.items])
    for r in fit.abilities:
        p = 1.0 / (1.0 + np.exp(-a * (r.theta - b)))
        assert r.se == pytest.approx(1.0 / np.sqrt(1.0 + np.sum(a**2 * p * (1 - p))), rel=0.05)


def _independent_mml(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An independent marginal-ML 2PL: the marginal log-likelihood on 81 Gauss-Hermite nodes
    (not the fit's evenly spaced grid), maximised directly over every parameter at once by
    scipy's L-BFGS-B with its analytic gradient (not EM); abilities MAP by scipy's bounded
    scalar minimiser. Returns slopes, difficulties, abilities."""
    from scipy.optimize import minimize, minimize_scalar

    nodes, weights = np.polynomial.hermite_e.hermegauss(81)
    logw = np.log(weights / weights.sum())
    n_items = x.shape[1]

    def nll(v: np.ndarray) -> tuple[float, np.ndarray]:
        a, d = v[:n_items], v[n_items:]
        z = np.outer(nodes, a) + d  # nodes x items
        p = 1.0 / (1.0 + np.exp(-z))
        ll = x @ np.log(p).T + (1 - x) @ np.log1p(-p).T + logw  # runs x nodes
        m = ll.max(1, keepdims=True)
        post = np.exp(ll - m)
        tot = post.sum(1, keepdims=True)
        post /= tot
        resid = post.T @ x - post.sum(0)[:, None] * p  # nodes x items: E[x - P]
        grad = np.concatenate([-(nodes @ resid), -resid.sum(0)])
        return -float(np.sum(np.log(tot) + m)), grad

    v0 = np.concatenate([np.ones(n_items), np.zeros(n_items)])
    res = minimize(nll, v0, jac=True, method="L-BFGS-B", options={"maxiter": 5000, "gtol": 1e-9})
    a, d = res.x[:n_items], res.x[n_items:]
    theta = np.array(
        [
            minimize_scalar(
                lambda t, row=row: (
                    -(np.sum(row * (a * t + d) - np.logaddexp(0, a * t + d)) - t * t / 2)
                ),
                bounds=(-8, 8),
                method="bounded",
                options={"xatol": 1e-9},
            ).x
            for row in x
        ]
    )
    return a, -d / a, theta


def test_2pl_agrees_with_an_independent_marginal_ml_fit() -> None:
    # at the field's precision the fit reaches the maximum another method finds: slopes within
    # 3%, abilities within 0.05, and difficulties within 0.05, of the independent fit
    x, a_true, _, _ = _simulate(300, 30, seed=7)
    fit = fit_irt(_matrix(x), "2pl")
    a_ind, b_ind, theta_ind = _independent_mml(x)
    a = np.array([i.discrimination for i in fit.items])
    b = np.array([i.difficulty for i in fit.items])
    theta = np.array([r.theta for r in fit.abilities])
    assert fit.converged and not fit.warnings
    assert np.max(np.abs(a / a_ind - 1)) < 0.03
    assert np.max(np.abs(b - b_ind)) < 0.05
    assert np.max(np.abs(theta - theta_ind)) < 0.05
    # and both recover the simulated slopes without the low bias of a coarse grid
    assert abs(float(np.mean(a / a_true)) - 1) < 0.1


@pytest.mark.slow
def test_2pl_agrees_with_mirt_on_a_subset_that_fits_in_memory() -> None:
    # mirt's full fit (its information matrix is quadratic in the items, so only a subset fits
    # at the published data's size) and this fit order items and runs the same way
    import mirt
    import pandas as pd

    x, *_ = _simulate(35, 300, seed=3)
    keep = (x.mean(0) > 0) & (x.mean(0) < 1)
    x = x[:, keep]
    fit = fit_irt(_matrix(x), "2pl")
    res = mirt.fit_mirt(pd.DataFrame(x, columns=[f"i{k}" for k in range(x.shape[1])]), model="2PL")
    coef = res.coef()
    a_m = coef["discrimination"].to_numpy(dtype=float)
    b_m = coef["difficulty"].to_numpy(dtype=float)
    a = np.array([i.discrimination for i in fit.items])
    b = np.array([i.difficulty for i in fit.items])
    # items both fits place inside their bounds, and not reversed (mirt bounds slopes below
    # at 0.1, so it cannot fit a negatively discriminating item as this fit does)
    inner = (
        (a_m < 4.9) & (a_m > 0.3) & np.array([not (i.reversed or i.at_bound) for i in fit.items])
    )
    assert np.corrcoef(a[inner], a_m[inner])[0, 1] > 0.9
    assert np.corrcoef(b[inner], b_m[inner])[0, 1] > 0.97
    th_m = np.asarray(mirt.fscores(res, pd.DataFrame(x), method="MAP").theta, dtype=float).ravel()
    assert np.corrcoef([r.theta for r in fit.abilities], th_m)[0, 1] > 0.99


def test_a_tiny_fit_says_it_cannot_identify_the_parameters() -> None:
    x, *_ = _simulate(40, 2, seed=5)
    fit = fit_irt(_matrix(x), "2pl")
    assert any("cannot identify the parameters" in w for w in fit.warnings)
    from llmscope.cli.irt import format_fit

    assert "WARNING: the fit cannot identify the parameters" in format_fit(fit)
    assert fit.to_dict()["warnings"] == fit.warnings


def test_an_item_separated_perfectly_sits_at_the_bound_and_says_so() -> None:
    x, *_ = _simulate(60, 20, seed=9)
    order = np.argsort(x.sum(1))
    x[:, 0] = 0.0
    x[order[30:], 0] = 1.0  # the 30 strongest runs right, the rest wrong
    fit = fit_irt(_matrix(x), "2pl")
    first = fit.items[0]
    assert first.at_bound and first.discrimination_ci == (None, None)
    assert any("sit at a bound" in w for w in fit.warnings)
    from llmscope.analysis.irt import items_frame, read_item

    assert "bound" in read_item(first).text
    assert bool(items_frame([fit])["at_bound"].iloc[0])


def test_an_item_subset_is_fitted_and_named() -> None:
    from llmscope.analysis.irt import subset_matrix

    x, *_ = _simulate(100, 8, seed=2)
    x[:, 3] = 1.0
    sub = subset_matrix(_matrix(x), ["q1", "q3", "q5", "q6"])
    fit = fit_irt(sub, "2pl")
    assert [i.item for i in fit.items] == ["q1", "q5", "q6"] and fit.constant_items == ["q3"]
    assert "1 of 4 items left out (1 right by every run, 0 wrong by every run" in fit.notes[0]
    with pytest.raises(IrtError, match="'q9' is not in"):
        subset_matrix(_matrix(x), ["q9"])


@pytest.mark.slow
def test_cli_irt_fits_an_item_subset(flipped_db: tuple[Path, dict[str, list[float]]]) -> None:
    db, _ = flipped_db
    chosen = ["q00", "q01", "q02", "q03", FLIPPED]
    by_items = cli(
        "irt", "--db", str(db), "--suite", "flipped", "--items", ",".join(chosen), "--json"
    )
    assert by_items.returncode == 0, by_items.stderr
    fit = json.loads(by_items.stdout)[0]
    assert sorted(i["item"] for i in fit["items"]) + fit["constant_items"] == sorted(chosen)
    assert any("fitted items" in n for n in fit["notes"])
    quoted = ", ".join(f"'{c}'" for c in chosen)
    by_where = cli(
        "irt", "--db", str(db), "--suite", "flipped", "--where", f"item_id IN ({quoted})", "--json"
    )
    assert by_where.returncode == 0, by_where.stderr
    assert json.loads(by_where.stdout) == json.loads(by_items.stdout)
    table = cli("irt", "--db", str(db), "--suite", "flipped", "--items", ",".join(chosen))
    assert "note: accuracy here is over the" in table.stdout
    assert_clean_error(
        cli("irt", "--db", str(db), "--suite", "flipped", "--items", "nope"), "'nope' is not in"
    )
    assert_clean_error(
        cli("irt", "--db", str(db), "--suite", "flipped", "--where", "read_text('x') = 1"),
        "--where",
    )
