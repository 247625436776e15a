"""The dashboard lists a stored run's contamination-probe numbers, equal to `llmscope report --json`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from llmscope.tui.app import LlmscopeApp
from llmscope.tui.screens import DashboardScreen
from tests.helpers.tinymodel import make_tiny_model
from tests.helpers.tui import screen_text, settle, wait_until


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "llmscope", *args], capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow
async def test_contamination_numbers_on_the_dashboard_equal_the_report(tmp_path: Path) -> None:
    make_tiny_model(tmp_path, save=True)
    db = tmp_path / "c.duckdb"
    r = _cli(
        "run",
        "--suite",
        "contamination-sample",
        "--limit",
        "3",
        "--db",
        str(db),
        "--model",
        str(tmp_path / "tiny-llama"),
        "--opt",
        "max_new_tokens=4",
    )
    assert r.returncode == 0, r.stderr[-2000:]
    rep = _cli("report", "--db", str(db), "--json")
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
