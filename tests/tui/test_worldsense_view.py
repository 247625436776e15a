"""WorldSense in the TUI reads like the paper: the dashboard leads with the authors'
`worldsense_accuracy` (the number `llmscope report` leads with), item ids are shown whole, and
the drill-down explains how a row was counted: its response, the gold, the class each falls in
under the authors' answer mapping (1 and 2 are one answer, KNOW), and the verdict.

A small run of the WorldSense test set (../shared) with the tiny random model; the screens are
driven with Pilot and read as rendered; the report is the CLI's JSON.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pytest

from llmscope.cli import main
from tests.helpers.cli import tiny_model_dir
from tests.helpers.paths import shared_path
from tests.helpers.tui import screen_text, settle, wait_until
from tests.helpers.tui_runs import tiny_run

# the authors' answer classes (Benchekroun et al. 2023, worldsense/analysis.py), written out
CLASSES = {"1": "KNOW", "2": "KNOW", "3": "UNKNOWN"}


@pytest.fixture(scope="module")
def ws_db(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("ws")
    data = shared_path("data", "worldsense", "test_set")
    db = tmp / "ws.duckdb"
    tiny_run(db, tiny_model_dir(tmp), "worldsense", 12, "--suite-path", str(data))
    return db


def _rows(db: Path) -> list[tuple[str, str, str, float]]:
    with duckdb.connect(str(db), read_only=True) as c:
        return [
            (str(i), str(p), str(g), float(k))
            for i, p, g, k in c.execute(
                "SELECT item_id, prediction, gold, correct FROM results"
            ).fetchall()
        ]


@pytest.mark.slow
async def test_worldsense_dashboard_and_drilldown(ws_db: Path, capsys) -> None:
    from llmscope.tui.app import LlmscopeApp
    from llmscope.tui.screens import DashboardScreen
    from llmscope.tui.screens.item import ItemScreen

    capsys.readouterr()
    assert main(["report", "--db", str(ws_db), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    ws = next(r for r in report if r["metric"] == "worldsense_accuracy" and not r["group"])
    ia = next(r for r in report if r["metric"] == "item_accuracy" and not r["group"])
    rows = _rows(ws_db)
    run_id = ws["run"]
    app = LlmscopeApp(ws_db)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        app.push_screen(DashboardScreen(run_id))
        await settle(pilot)
        assert await wait_until(pilot, lambda: "item_accuracy" in screen_text(app))
        text = screen_text(app)
        head = next(ln for ln in text.splitlines() if "results" in ln and "errors" in ln)
        # the published metric first, then the plain per-item share, each as the report has it
        assert re.search(
            rf"worldsense_accuracy {ws['value']:.3f}.*item_accuracy {ia['value']:.3f}", head
        ), head
        # the failing list shows whole ids (20 characters with the sign)
        failing = [i for i, p, g, k in rows if k < 0.5]
        assert failing and all(i in text for i in failing[:5]), (failing, text)
        # the drill-down of each row says how it was counted
        odd = [r for r in rows if r[3] == 1.0 and r[1] != r[2]]  # correct, prediction != gold
        assert odd, rows  # the tiny model answers 1 for a gold 2 on these 12 items
        for item_id, pred, gold, correct in [*odd[:2], *[r for r in rows if r[3] == 0.0][:1]]:
            app.push_screen(ItemScreen([run_id], item_id))
            assert await wait_until(pilot, lambda: "scored by answer class" in screen_text(app))
            t = screen_text(app)
            assert re.search(
                rf"response\s+{re.escape(pred)}\s+→\s+class {CLASSES.get(pred, pred)}\b", t
            ), t
            assert re.search(
                rf"gold\s+{re.escape(gold)}\s+→\s+class {CLASSES.get(gold, gold)}\b", t
            ), t
            verdict = (
                "same class: counted correct"
                if correct == 1.0
                else "different classes: counted wrong"
            )
            assert verdict in t
            assert "1, 2 → KNOW; 3 → UNKNOWN" in t
            assert "raw response" in t
            app.pop_screen()
            await settle(pilot)
