"""Agreement: every number the TUI dashboard shows equals `llmscope report --json` at the
displayed precision, for one small run of every built-in suite (tiny random model).

The dashboard is driven with Textual's Pilot and read from the rendered screen; the report
is read from the CLI's JSON output. Nothing here calls the metrics pipeline directly.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from llmscope.cli import main  # noqa: E402
from tests.helpers.cli import tiny_model_dir  # noqa: E402
from tests.helpers.tui import screen_text, settle  # noqa: E402

SUITES = ("commonsense-sample", "mc-sample", "minimal-pairs", "rating-sample", "generation-sample")


def f3(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("agree")
    model = tiny_model_dir(tmp)
    db = tmp / "a.duckdb"
    for s in SUITES:
        assert main(["run", "--suite", s, "--model", f"hf:{model}", "--limit", "3", "--db", str(db),
                     "--threads", "1", "--quiet", "--no-report"]) == 0, s
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


@pytest.mark.slow
async def test_dashboard_equals_report_for_every_builtin_suite(runs, capsys):
    from llmscope.store.db import Store
    from llmscope.tui.app import LlmscopeApp
    from llmscope.tui.screens import DashboardScreen

    rows = report_rows(runs, capsys)
    with Store(runs, read_only=True) as st:
        run_ids = {st.get_run(r)["suite_name"]: r for r in st.runs()["run_id"]}
    assert set(run_ids) == set(SUITES)
    checked = 0
    app = LlmscopeApp(runs)
    async with app.run_test(size=(200, 70)) as pilot:
        await settle(pilot)
        for suite, rid in sorted(run_ids.items()):
            app.push_screen(DashboardScreen(rid))
            await settle(pilot)
            text = screen_text(app)
            acc = one(rows, rid, "accuracy")
            if acc is not None:
                lo, hi = acc["ci95"]
                assert f"accuracy {f3(acc['value'])} [{f3(lo)}, {f3(hi)}]" in text, (suite, text)
                checked += 1
                # per prompt variant rows of the accuracy panel: "  <variant>  <mean>"
                for r in rows:
                    if r["run"] == rid and r["metric"] == "accuracy" and set(r["group"]) == {"variant"}:
                        v = r["group"]["variant"]
                        assert re.search(rf"\b{re.escape(v)}\s+{re.escape(f3(r['value']))}\b", text), (suite, v)
                        checked += 1
            for name in ("ece", "mce", "brier", "brier_yes"):
                r = one(rows, rid, name)
                if r is not None:
                    assert f"{name} {f3(r['value'])}" in text, (suite, name, text)
                    checked += 1
            if suite == "commonsense-sample":
                # the yes/no table: one row per metric, its first column is all variants together
                for m in ("mean_p_yes", "pred_yes_rate", "gold_yes_rate", "yes_bias"):
                    v = f3(one(rows, rid, m)["value"])
                    assert re.search(rf"\b{m}\s+{re.escape(v)}\b", text), (m, v, text)
                    checked += 1
                yb = one(rows, rid, "yes_bias")
                want = f"(yes_bias 95% CI [{f3(yb['ci95'][0])}, {f3(yb['ci95'][1])}])"
                assert want in text, [ln for ln in text.splitlines() if "yes_bias" in ln]
                checked += 1
            app.pop_screen()
            await settle(pilot)
    assert checked >= 15
