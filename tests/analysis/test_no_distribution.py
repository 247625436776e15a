"""Rows without a choice distribution (an abstention: every option's label probability 0, so
every log score -inf; a yes/no row without mass on yes or no) in the softmax-based statistics:
left out of them and counted (`left_out_no_distribution`), never a crash, a uniform distribution
or a NaN. Every other number equals the same run's with an error row (left out of everything)
in place of the abstention.

Real DuckDB files written through `Store` (tests/helpers/mixed.py); expected values by hand.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from llmscope.report import build_report, results_with_fields
from llmscope.store.db import Store
from tests.helpers.cli import cli
from tests.helpers.mixed import write_labels_db, write_yesno_db

# statistics over rows with a choice distribution: identical with the abstention or an error row
SOFTMAX_METRICS = set(
    "softmax_accuracy fit_alpha human_loglik human_ll_uniform human_ll_empirical"
    " human_ll_per_choice softmax_accuracy_fitted human_tv_distance human_majority_agreement".split()
)


@pytest.fixture()
def labels_db(tmp_path: Path) -> Path:
    return write_labels_db(tmp_path / "labels.duckdb")


def _report(db: Path, run_id: str) -> list[dict[str, Any]]:
    with Store(db, read_only=True) as st:
        run = st.find_run(run_id)
        assert run is not None
        return build_report(st, run)


def _by(rows: list[dict[str, Any]], metric: str) -> list[dict[str, Any]]:
    return [r for r in rows if r["metric"] == metric]


def _key(r: dict[str, Any]) -> tuple[str, str]:
    return r["metric"], json.dumps(r["group"], sort_keys=True)


def test_labels_run_with_an_abstention_reports_softmax_statistics(labels_db: Path) -> None:
    rows = _report(labels_db, "lab-abs")
    # softmax(α log p)[b] = 0.7^α / (0.3^α + 0.7^α) on each of the 3 answered rows (i3 abstains)
    curve = {
        r["group"]["alpha"]: r
        for r in _by(rows, "softmax_accuracy")
        if r["group"]["scheme"] == "labels"
    }
    assert sorted(curve) == [0.5, 1.0, 2.0, 4.0]
    for a, r in curve.items():
        assert r["value"] == pytest.approx(0.7**a / (0.3**a + 0.7**a))
        assert r["n"] == 3
    # human shares 0.3 / 0.7 on every item: alpha = 1 reproduces them exactly
    fit = [r for r in _by(rows, "fit_alpha") if r["group"].get("scheme") == "labels"]
    assert len(fit) == 1 and fit[0]["value"] == pytest.approx(1.0, abs=1e-5) and fit[0]["n"] == 3
    acc = [r for r in _by(rows, "softmax_accuracy_fitted") if r["group"].get("scheme") == "labels"]
    assert acc[0]["value"] == pytest.approx(0.7, abs=1e-5) and acc[0]["n"] == 3
    # the human choice distance: model (0.3, 0.7) = human on the answered rows; the abstention is
    # no (0, 0) "distribution" at TV 0.5 that disagrees with the human majority
    tv = _by(rows, "human_tv_distance")
    assert tv[0]["value"] == pytest.approx(0.0) and tv[0]["n"] == 3
    agree = _by(rows, "human_majority_agreement")
    assert agree[0]["value"] == pytest.approx(1.0) and agree[0]["n"] == 3
    # each statistic says it left one of its four rows out
    left = {r["group"]["of"]: r for r in _by(rows, "left_out_no_distribution")}
    assert sorted(left) == ["human_choice", "human_fit", "softmax_accuracy"]
    assert all((r["value"], r["n"]) == (1, 4) for r in left.values())
    assert left["softmax_accuracy"]["group"]["scheme"] == "labels"
    assert not any(isinstance(r["value"], float) and math.isnan(r["value"]) for r in rows)


def test_abstention_leaves_the_other_rows_numbers_unchanged(labels_db: Path) -> None:
    """The softmax statistics of the run with the abstention are those of the same run with an
    error row (left out of everything) in its place: nothing is imputed for the abstention."""
    abs_rows = {_key(r): r for r in _report(labels_db, "lab-abs") if r["metric"] in SOFTMAX_METRICS}
    err_rows = {_key(r): r for r in _report(labels_db, "lab-err") if r["metric"] in SOFTMAX_METRICS}
    assert abs_rows and sorted(abs_rows) == sorted(err_rows)
    for k, r in abs_rows.items():
        e = err_rows[k]
        assert (r["value"], r["ci95"], r["n"]) == (e["value"], e["ci95"], e["n"]), k
    assert not _by(_report(labels_db, "lab-err"), "left_out_no_distribution")


def test_cli_report_on_a_labels_run_with_an_abstention(labels_db: Path) -> None:
    text = cli("report", "--db", str(labels_db), "--run", "lab-abs")
    assert text.returncode == 0, text.stderr
    assert "Traceback" not in text.stderr
    assert "softmax_accuracy" in text.stdout and "left_out_no_distribution" in text.stdout
    js = cli("report", "--db", str(labels_db), "--run", "lab-abs", "--json")
    assert js.returncode == 0, js.stderr
    rows = json.loads(js.stdout, parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))
    left = [
        r
        for r in rows
        if r["metric"] == "left_out_no_distribution" and r["group"]["of"] == "softmax_accuracy"
    ]
    assert [(r["value"], r["n"]) for r in left] == [(1, 4)]


def test_human_vs_model_and_tui_human_data_leave_the_abstention_out(labels_db: Path) -> None:
    """The TUI's methods panel (human_vs_model) and human panel (choice table) on the same run."""
    from llmscope.analysis.methods import human_vs_model
    from llmscope.tui.panels.human import human_data

    with Store(labels_db, read_only=True) as st:
        df = results_with_fields(st, "lab-abs")
        spec = st.suite_spec("s-lab")
        run = st.get_run("lab-abs")
        assert run is not None
        hd = human_data(st, run)
    hvm = human_vs_model(df, spec, scheme="labels")
    assert hvm is not None and len(hvm["variants"]) == 1
    (v,) = hvm["variants"]
    assert v["alpha"] == pytest.approx(1.0, abs=1e-5)
    assert [i["item_id"] for i in v["items"]] == ["i0", "i1", "i2"]
    # label probabilities 0.3 / 0.7: normalised, and the fitted model at α = 1, are both those
    assert all(i["fitted"] == pytest.approx([0.3, 0.7]) for i in v["items"])
    assert all(i["model_p"] == pytest.approx([0.3, 0.7]) for i in v["items"])
    assert hd.choices is not None and sorted(hd.choices["item_id"]) == ["i0", "i1", "i2"]


async def test_tui_methods_panel_on_a_labels_run_with_an_abstention(labels_db: Path) -> None:
    from llmscope.tui.app import LlmscopeApp
    from llmscope.tui.panels.methods import MethodsScreen
    from tests.helpers.tui import screen_text, settle, wait_until

    app = LlmscopeApp(db=str(labels_db))
    async with app.run_test(size=(160, 60)) as pilot:
        await settle(pilot)
        app.push_screen(MethodsScreen("lab-abs"))
        # the panel's worker builds the report: before the fix it raised, and the panel stayed at
        # "computing ..."; the fit's baselines are over the 3 answered items' 10 choices each
        assert await wait_until(pilot, lambda: "log-likelihood baselines" in screen_text(app))
        text = screen_text(app)
        assert f"uniform {30 * math.log(0.5):.3f} (n=30)" in text
        assert "computing" not in text and "softmax of scores" not in text


def test_yesno_human_fit_leaves_an_abstention_out(tmp_path: Path) -> None:
    """Yes/no rows with the human majority (human_q1): the abstention's P(yes) = P(no) = 0 gives
    log scores -inf; it is left out of the fit, which equals the run with an error row there."""
    db = write_yesno_db(tmp_path / "yn.duckdb")
    rows = _report(db, "yn-abs")
    # 2 of the 3 answered items have a human "yes"; the model's yes/no log-odds are log 4 on each:
    # sigmoid(α log 4) = 2/3 -> α = log 2 / log 4 = 0.5
    fit = [r for r in _by(rows, "fit_alpha") if r["group"].get("scheme") == "raw"]
    assert len(fit) == 1 and fit[0]["value"] == pytest.approx(0.5, abs=1e-5) and fit[0]["n"] == 3
    left = [r for r in _by(rows, "left_out_no_distribution") if r["group"]["of"] == "human_fit"]
    assert [(r["value"], r["n"]) for r in left] == [(1, 4)]
    err = {_key(r): r for r in _report(db, "yn-err") if r["metric"] in SOFTMAX_METRICS}
    got = {_key(r): r for r in rows if r["metric"] in SOFTMAX_METRICS}
    assert got and sorted(got) == sorted(err)
    for k, r in got.items():
        assert (r["value"], r["ci95"], r["n"]) == (err[k]["value"], err[k]["ci95"], err[k]["n"]), k


def test_loglik_abstention_is_counted_as_left_out(tmp_path: Path) -> None:
    """A log-likelihood abstention stores every option's logprob as null (-inf is written null):
    the softmax curve leaves it out as before, and now says so."""
    from tests.helpers.mixed import write_mixed_db

    db = write_mixed_db(tmp_path / "mixed.duckdb")
    left = _by(_report(db, "r2"), "left_out_no_distribution")
    assert [(r["group"], r["value"], r["n"]) for r in left] == [
        ({"of": "softmax_accuracy", "scheme": "raw"}, 1, 1)
    ]
    assert not _by(_report(db, "r1"), "left_out_no_distribution")
