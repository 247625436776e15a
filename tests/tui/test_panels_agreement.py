"""Agreement of the methods (`m`), human (`h`) and plots (`p`) screens with `llmscope report
--json`: every metric number they render is a report row at the displayed precision, under the
report's name, for small runs (tiny random model) of the built-in suites with human data: yes/no
statements with a human majority and two gold templates beside one without gold
(commonsense-sample), choice items with human counts and conditions (pragmatics-choice) and
ratings (rating-sample).

The screens are driven with Textual's Pilot from the dashboard's keys and read as rendered; the
report is the CLI's JSON. Nothing here calls the metrics pipeline.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from llmscope.analysis.metric_values import HEADLINE
from tests.helpers.tui import screen_text, settle, wait_until
from tests.helpers.tui_pilot import started
from tests.tui.test_metrics_agreement import f3, make_runs, one, report_rows

SUITES = ["commonsense-sample", "pragmatics-choice", "rating-sample"]
# the overall human rows the human screen's summary lists (tui/panels/human.py HUMAN_METRICS)
HUMAN_OVERALL = (
    "consensus",
    "awareness",
    "commonsensicality",
    "human_pearson",
    "human_spearman",
    "human_majority_agreement",
    "human_tv_distance",
)
NUM = r"-?\d+\.\d{3}"


def cell(r: dict) -> str:
    """A row's value and interval as the screens print them."""
    ci = f" [{f3(r['ci95'][0])}, {f3(r['ci95'][1])}]" if r.get("ci95") else ""
    return f3(r["value"]) + ci


def check_methods(text: str, rows: list[dict], rid: str) -> int:
    checked = 0
    fits = [
        r
        for r in rows
        if r["run"] == rid
        and r["metric"] in ("fit_alpha", "human_ll_per_choice", "softmax_accuracy_fitted")
        and set(r["group"]) <= {"scheme", "variant", "alpha_at_bound"}
    ]
    variants = {str(r["group"].get("variant", "")) for r in fits}
    for r in fits:
        g = r["group"]
        who = f"{g['scheme']}, {g['variant']}" if any(variants) else g["scheme"]
        label = r["metric"] + (" (fitted" if r["metric"] == "fit_alpha" else "")
        ci = f"[{f3(r['ci95'][0])}, {f3(r['ci95'][1])}]" if r.get("ci95") else ""
        pat = (
            rf"│ {re.escape(who)}\s+│ {re.escape(label)}[^│]*│\s+{re.escape(f3(r['value']))} │ "
            rf"{re.escape(ci)}\s*│\s+{r['n']} │"
        )
        assert re.search(pat, text), (rid, r, text)
        checked += 1
    # every α on the screen is one the pipeline fitted (no pooled fit of the panel's own)
    alphas = {f3(r["value"]) for r in fits if r["metric"] == "fit_alpha"}
    shown = re.findall(rf"fit_alpha ({NUM})", text)
    assert set(shown) <= alphas, (shown, alphas)
    # the human-vs-model titles: the fit's log-likelihoods and baselines for the same template
    for m in re.finditer(
        rf"Human vs model(?:, variant (\S+))?\s+\(scheme (\w+)\):\s+fit_alpha\s+({NUM}).*?"
        rf"human_loglik\s+({NUM})\s+at\s+the\s+fitted\s+α;\s+human_ll_uniform\s+({NUM}),\s+"
        rf"human_ll_empirical\s+({NUM})",
        text,
        re.S,
    ):
        var, scheme, alpha, ll, uni, emp = m.groups()
        g = {"scheme": scheme, **({"variant": var} if var else {})}
        fa = one(rows, rid, "fit_alpha", g) or one(
            rows, rid, "fit_alpha", {**g, "alpha_at_bound": True}
        )
        hl = one(rows, rid, "human_loglik", g) or one(
            rows, rid, "human_loglik", {**g, "alpha_at_bound": True}
        )
        gv = {"variant": var} if var else {}
        assert (
            fa is not None and hl is not None and alpha == f3(fa["value"]) and ll == f3(hl["value"])
        )
        assert uni == f3(one(rows, rid, "human_ll_uniform", gv)["value"])  # type: ignore[index]
        assert emp == f3(one(rows, rid, "human_ll_empirical", gv)["value"])  # type: ignore[index]
        checked += 1
    for r in rows:
        if r["run"] == rid and r["metric"] == "accuracy" and set(r["group"]) == {"method"}:
            assert re.search(
                rf"│ {re.escape(str(r['group']['method']))}\s+│ {re.escape(f3(r['value']))}\s+│",
                text,
            )
            checked += 1
    return checked


def check_human(text: str, rows: list[dict], rid: str) -> int:
    checked = 0
    for m in HUMAN_OVERALL:
        r = one(rows, rid, m)
        if r is not None and r["value"] is not None:
            assert f"{m} {cell(r)}" in text, (rid, m, text)
            checked += 1
    for m in ("human_pearson", "human_spearman"):  # the scatter's title
        r = one(rows, rid, m)
        if r is not None and r["value"] is not None:
            assert re.search(rf"{m} {re.escape(f3(r['value']))}(?!\d)", text), (rid, m)
    for r in rows:
        if r["run"] == rid and r["metric"] == "human_rating_share":
            mod = one(rows, rid, "model_rating_share", r["group"])
            assert mod is not None
            assert re.search(
                rf"\b{re.escape(str(r['group']['rating']))}\s+[^\d]*{re.escape(f3(r['value']))}\s+"
                rf"[^\d]*{re.escape(f3(mod['value']))}",
                text,
            ), (rid, r["group"])
            checked += 1
    return checked


def check_plots(text: str, rows: list[dict], rid: str) -> int:
    # the headline the report leads with for this run (the first metric of HEADLINE it has)
    for name in HEADLINE:
        r = one(rows, rid, name)
        if r is not None and r["value"] is not None:
            assert f"{name} {cell(r)}   n {r['n']}" in text, (rid, name, text)
            return 1
    return 0


async def drive(db: Path, rows: list[dict]) -> dict[str, int]:
    from llmscope.store.db import Store
    from llmscope.tui.app import LlmscopeApp
    from llmscope.tui.panels.human import HumanScreen
    from llmscope.tui.panels.methods import MethodsScreen
    from llmscope.tui.plots import PlotsScreen
    from llmscope.tui.screens import DashboardScreen

    with Store(db, read_only=True) as st:
        run_ids = {st.get_run(r)["suite_name"]: r for r in st.runs()["run_id"]}
    checked: dict[str, int] = {}
    app = LlmscopeApp(db)
    # tall enough that the methods page shows whole (the screens are read as rendered)
    async with started(app, (160, 400)) as pilot:
        for suite, rid in sorted(run_ids.items()):
            app.push_screen(DashboardScreen(rid))
            await settle(pilot)
            for key, scr, check, ready in (
                ("m", MethodsScreen, check_methods, lambda t: "computing" not in t),
                ("h", HumanScreen, check_human, lambda t: "loading ..." not in t),
                ("p", PlotsScreen, check_plots, lambda t: " results" in t),
            ):
                await pilot.press(key)
                assert await wait_until(pilot, lambda s=scr: isinstance(app.screen, s))
                assert await wait_until(pilot, lambda r=ready: r(screen_text(app)))
                await settle(pilot)
                checked[f"{suite} {key}"] = check(screen_text(app), rows, rid)
                await pilot.press("escape")
                await settle(pilot)
            app.pop_screen()
            await settle(pilot)
    return checked


@pytest.fixture(scope="module")
def panels_db(tmp_path_factory) -> Path:
    return make_runs(tmp_path_factory.mktemp("panels"), SUITES)


@pytest.mark.slow
async def test_methods_human_and_plots_equal_the_report(panels_db: Path, capsys) -> None:
    db = panels_db
    rows = report_rows(db, capsys)
    checked = await drive(db, rows)
    # commonsense: two gold templates, each its own fit (α, LL per choice, softmax accuracy,
    # the title); pragmatics: per-scheme fits; every suite's human numbers and headline
    assert checked["commonsense-sample m"] >= 2 * 3 + 2, checked
    assert checked["pragmatics-choice m"] >= 3, checked
    assert checked["commonsense-sample h"] >= 5 and checked["rating-sample h"] >= 3, checked
    assert all(checked[f"{s} p"] == 1 for s in SUITES), checked
