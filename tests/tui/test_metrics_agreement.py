"""Agreement: every number the TUI dashboard shows equals `llmscope report --json` at the
displayed precision, for one small run of every built-in suite (tiny random model), and of
the loaders of the full third-party corpora when ../shared holds them.

The suites are the ones `llmscope suites` lists. The dashboard is driven with Textual's Pilot
and read from the rendered screen; the report is read from the CLI's JSON output. Nothing
here calls the metrics pipeline directly.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest

from llmscope.cli import main  # noqa: E402
from tests.helpers.cli import tiny_model_dir  # noqa: E402
from tests.helpers.paths import SHARED
from tests.helpers.tui import screen_text, settle, wait_until  # noqa: E402
from tests.helpers.tui_pilot import started
from tests.helpers.tui_runs import tiny_run

# Loaders of full corpora take the first N items; WorldSense needs whole tuples (3 trials).
LIMIT = {"worldsense": 6}
HUMAN_PANEL = ("human_majority_agreement", "human_tv_distance", "human_rating_share")


def listed_suites() -> tuple[list[str], list[str]]:
    """(built-in suites with items, loaders of external corpora) as `llmscope suites` lists them."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["suites"]) == 0
    builtin: list[str] = []
    external: list[str] = []
    for line in out.getvalue().splitlines():
        parts = line.split()
        if len(parts) >= 3:
            (external if parts[2] == "-" else builtin).append(parts[0])
    return builtin, external


def f3(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def make_runs(tmp: Path, suites: list[str]) -> Path:
    model = tiny_model_dir(tmp)
    db = tmp / "a.duckdb"
    for s in suites:
        tiny_run(db, model, s, LIMIT.get(s, 3))
    return db


def report_rows(db: Path, capsys) -> list[dict]:
    capsys.readouterr()
    assert main(["report", "--db", str(db), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def one(rows: list[dict], run: str, metric: str, group: dict | None = None) -> dict | None:
    for r in rows:
        if r["run"] == run and r["metric"] == metric and r["group"] == (group or {}):
            return r
    return None


def check_dashboard(text: str, rows: list[dict], rid: str, suite: str, group_by: list[str]) -> int:
    """Assert every number of the rendered dashboard `text` against the report rows; returns
    how many were checked."""
    checked = 0
    err = one(rows, rid, "errors")
    assert err is not None and re.search(
        rf"results(?: \([^)]*\))?\s+errors {int(err['value'])}\b", text
    ), (
        suite,
        text,
    )
    checked += 1
    name = "item_accuracy" if one(rows, rid, "item_accuracy") is not None else "accuracy"
    acc = one(rows, rid, name)
    if acc is not None:
        lo, hi = acc["ci95"]
        assert f"{name} {f3(acc['value'])} [{f3(lo)}, {f3(hi)}]" in text, (suite, text)
        checked += 1
        # rows of the accuracy panel: per prompt variant, per group_by value ("  <label>  <mean>  ...  <n>")
        for r in rows:
            if r["run"] != rid or r["metric"] != name or len(r["group"]) != 1:
                continue
            ((key, label),) = r["group"].items()
            if key != "variant" and key not in group_by:
                continue
            label = str(label)
            if len(label) > 18:  # the panel truncates long labels
                continue
            assert re.search(
                rf"\b{re.escape(label)}\s+{re.escape(f3(r['value']))}\b.*\b{r['n']}\b", text
            ), (suite, key, label, f3(r["value"]))
            checked += 1
    elif one(rows, rid, "item_accuracy") is None:  # a finished run without gold says so, not "yet"
        assert "no accuracy" in text and "no scored results yet" not in text, (suite, text)
        checked += 1
    for m in ("ece", "mce", "brier", "brier_yes"):
        r = one(rows, rid, m)
        if r is not None:
            assert f"{m} {f3(r['value'])}" in text, (suite, m, text)
            checked += 1
    if one(rows, rid, "mean_p_yes") is not None:
        # the yes/no table: one row per metric, its first column is all variants together
        for m in ("mean_p_yes", "pred_yes_rate", "gold_yes_rate", "yes_bias"):
            r = one(rows, rid, m)
            if r is None:
                continue
            assert re.search(rf"\b{m}\s+{re.escape(f3(r['value']))}\b", text), (suite, m, text)
            checked += 1
        yb = one(rows, rid, "yes_bias")
        if yb is not None and yb["ci95"]:
            assert f"(yes_bias 95% CI [{f3(yb['ci95'][0])}, {f3(yb['ci95'][1])}])" in text, suite
            checked += 1
    for r in rows:
        # the WorldSense table: problem, accuracy, its conf95, bias, its conf95 (the authors' metrics)
        if (
            r["run"] == rid
            and r["metric"] == "worldsense_accuracy"
            and set(r["group"]) == {"problemname"}
        ):
            p = r["group"]["problemname"]
            b = one(rows, rid, "worldsense_bias", {"problemname": p})
            assert b is not None
            # a problem with a single tuple has no conf95: the table shows "-"
            cells = [
                f3(r["value"]),
                f3(r["ci95"][1] - r["value"]) if r["ci95"] else "-",
                f3(b["value"]),
                f3(b["ci95"][1] - b["value"]) if b["ci95"] else "-",
            ]
            assert re.search(
                rf"\b{re.escape(p)}\s+" + r"\s+".join(re.escape(c) for c in cells), text
            ), (p, cells)
            checked += 1
    sg = one(rows, rid, "sg_score")
    if sg is not None and sg["ci95"]:
        assert f"sg_score {f3(sg['value'])} [{f3(sg['ci95'][0])}, {f3(sg['ci95'][1])}]" in text, (
            suite,
            text,
        )
        checked += 1
    for m, label in (
        ("consensus", "consensus"),
        ("awareness", "awareness"),
        ("commonsensicality", "commonsensicality"),
    ):
        r = one(rows, rid, m)
        if r is not None and r["value"] is not None:
            assert re.search(rf"{label}\s+{re.escape(f3(r['value']))}\b", text), (suite, m)
            checked += 1
    # the human panel: choice-count agreement and distance, rating histograms (pipeline metrics)
    for m in ("probeval_kl", "probeval_wrong_share"):  # "more metrics" of a finished run
        r = one(rows, rid, m)
        if r is not None and r["value"] is not None:
            cell = f3(r["value"]) + (
                f" [{f3(r['ci95'][0])}, {f3(r['ci95'][1])}]" if r["ci95"] else ""
            )
            assert re.search(rf"\b{m}\s+{re.escape(cell)}\s+n {r['n']}\b", text), (
                suite,
                m,
                cell,
                text,
            )
            checked += 1
    for m in ("human_majority_agreement", "human_tv_distance"):
        r = one(rows, rid, m)
        if r is not None:
            cell = f3(r["value"]) + (
                f" [{f3(r['ci95'][0])}, {f3(r['ci95'][1])}]" if r["ci95"] else ""
            )
            assert re.search(rf"\b{m}\s+{re.escape(cell)}", text), (suite, m, cell, text)
            checked += 1
    for r in rows:
        if r["run"] == rid and r["metric"] == "human_rating_share":
            label = r["group"]["rating"]
            mod = one(rows, rid, "model_rating_share", {"rating": label})
            assert mod is not None
            assert re.search(
                rf"│\s+{re.escape(str(label))}\s+[^\d│]*{re.escape(f3(r['value']))}\s+[^\d│]*"
                rf"{re.escape(f3(mod['value']))}\s",
                text,
            ), (suite, label, text)
            checked += 1
    return checked


async def drive(db: Path, rows: list[dict], suites: list[str]) -> int:
    from llmscope.store.db import Store
    from llmscope.tui.app import LlmscopeApp
    from llmscope.tui.screens import DashboardScreen

    with Store(db, read_only=True) as st:
        run_ids = {st.get_run(r)["suite_name"]: r for r in st.runs()["run_id"]}
        group_by = {
            s: list(st.suite_spec(st.get_run(r)["suite_id"]).get("group_by") or [])
            for s, r in run_ids.items()
        }
    assert set(run_ids) == set(suites)
    checked = 0
    app = LlmscopeApp(db)
    async with started(app, (200, 70)) as pilot:
        for suite, rid in sorted(run_ids.items()):
            app.push_screen(DashboardScreen(rid))
            await settle(pilot)
            if any(
                r["run"] == rid and r["metric"] in HUMAN_PANEL for r in rows
            ):  # filled by a worker
                assert await wait_until(pilot, lambda: "human vs model (" in screen_text(app))
            checked += check_dashboard(screen_text(app), rows, rid, suite, group_by[suite])
            app.pop_screen()
            await settle(pilot)
    return checked


@pytest.fixture(scope="module")
def builtin_db(tmp_path_factory) -> tuple[Path, list[str]]:
    builtin, _ = listed_suites()
    assert {
        "commonsense-sample",
        "mc-sample",
        "minimal-pairs",
        "rating-sample",
        "generation-sample",
        "pragmatics-choice",
        "syntax-sample",
        "contamination-sample",
    } <= set(builtin)
    return make_runs(tmp_path_factory.mktemp("agree"), builtin), builtin


@pytest.fixture(scope="module")
def external_db(tmp_path_factory) -> tuple[Path, list[str]]:
    _, external = listed_suites()
    have = [s for s in external if (SHARED / "data" / s.split("-")[0]).is_dir()]
    if not have:
        pytest.skip(
            f"no third-party corpora under {SHARED / 'data'} (worldsense, commonsense, cfc, syntaxgym)"
        )
    return make_runs(tmp_path_factory.mktemp("agree-ext"), have), have


@pytest.fixture(params=[("builtin_db", 3), ("external_db", 2)], ids=["builtin", "external"])
def agreement_runs(request) -> tuple[Path, list[str], int]:
    """Every built-in suite's runs, or the third-party corpora's; with the least number of
    cells each run's dashboard must show as the report does."""
    db, suites = request.getfixturevalue(request.param[0])
    return db, suites, request.param[1]


@pytest.mark.slow
async def test_dashboard_equals_report(agreement_runs, capsys):
    db, suites, per_suite = agreement_runs
    rows = report_rows(db, capsys)
    checked = await drive(db, rows, suites)
    assert checked >= per_suite * len(suites)
    if "worldsense" in suites:
        assert any(r["metric"] == "worldsense_accuracy" for r in rows)
