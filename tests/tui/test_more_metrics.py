"""The dashboard lists a stored run's contamination-probe numbers, equal to `llmscope report --json`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from llmscope.tui.app import LlmscopeApp
from llmscope.tui.screens import DashboardScreen
from tests.helpers.cli import cli, contamination_db
from tests.helpers.tinymodel import make_tiny_model
from tests.helpers.tui import screen_text, settle, wait_until


@pytest.mark.slow
async def test_contamination_numbers_on_the_dashboard_equal_the_report(tmp_path: Path) -> None:
    make_tiny_model(tmp_path, save=True)
    db = contamination_db(tmp_path, 3)
    rep = cli("report", "--db", str(db), "--json", timeout=600)
    assert rep.returncode == 0, rep.stderr[-2000:]
    rows = [
        m
        for m in json.loads(rep.stdout)
        if not m["group"]
        and m["value"] is not None
        and m["metric"] in ("flagged_rate", "min_k_prob", "ngram_overlap")
    ]
    assert {m["metric"] for m in rows} == {"flagged_rate", "min_k_prob", "ngram_overlap"}
    app = LlmscopeApp(db)
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot)
        await pilot.press("enter")
        assert await wait_until(
            pilot,
            lambda: isinstance(app.screen, DashboardScreen) and "more metrics" in screen_text(app),
        )
        text = screen_text(app)
        for m in rows:
            lo, hi = m["ci95"]
            want = rf"{m['metric']} {m['value']:.3f} \[{lo:.3f}, {hi:.3f}\]\s+n 3"
            assert re.search(want, text), (want, text)
