"""Live detail: a viewer (`llmscope view`) opened before a run's first write picks the run
up by itself, and an item's drill-down during the run equals the one after it (prompt as
rendered, top tokens, option scores, normalised answer, trace) — against a real
`llmscope run` process and the scripted OpenAI-compatible server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from llmscope.tui.app import LlmscopeApp
from llmscope.tui.plots import PlotsScreen
from llmscope.tui.screens import DashboardScreen, HomeScreen
from llmscope.tui.screens.item import ItemScreen, render_item
from tests.helpers.oai import CANARY_KEY, oai, oai_server  # noqa: F401
from tests.helpers.tui import settle, wait_until


def _text(details: list[dict]) -> str:
    con = Console(width=110, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    con.print(render_item(details))
    return con.export_text()


@pytest.mark.slow
async def test_viewer_picks_up_a_new_run_and_live_detail_equals_stored(tmp_path: Path, oai) -> None:  # noqa: F811
    db = tmp_path / "live.duckdb"
    # the items' prompts: the first 9 (3 items) answered, the rest held until the live views
    # have been read: the run is mid-way on any machine (tests/helpers/midrun.py)
    items = oai.script(
        "Consider the statement", top=[["Yes", -0.4], ["No", -1.3], ["Maybe", -3.0]], hold_after=9
    )
    app = LlmscopeApp(db, watch=True, refresh_s=0.1)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        home = app.screen
        assert isinstance(home, HomeScreen) and home.rows == []
        env = {**os.environ, "OPENAI_API_KEY": CANARY_KEY}
        env.pop("OPENAI_BASE_URL", None)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "llmscope",
                "run",
                "--db",
                str(db),
                "--suite",
                "commonsense-sample",
                "--model",
                "openai:test-model",
                "--base-url",
                oai.base_url,
                "--limit",
                "5",
                "--concurrency",
                "1",
                "--quiet",
                "--no-report",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            # no key pressed: the home list shows the new run by itself
            assert await wait_until(pilot, lambda: any(r.get("live") for r in home.rows))
            run_id = str(home.rows[0]["run_id"])
            home.open_run(run_id)
            assert await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen))
            dash = app.screen
            assert isinstance(dash, DashboardScreen)
            assert await wait_until(
                pilot,
                lambda: (
                    dash.source == "live"
                    and dash.model is not None
                    and len(dash.model.frame()) >= 3
                ),
            )
            item_id = str(dash.model.frame()["item_id"].iloc[0])
            app.push_screen(ItemScreen([run_id], item_id, dashboard=dash))
            assert await wait_until(
                pilot, lambda: isinstance(app.screen, ItemScreen) and app.screen.details
            )
            during = app.screen.details
            assert proc.poll() is None, (
                "the run ended before the drill-down was read; it must be mid-run"
            )
            assert any(v.get("prompt") for v in during[0]["variants"])
            await pilot.press("escape")
            # plots read the live channel too (accuracy and throughput over the run so far)
            await pilot.press("p")
            assert await wait_until(
                pilot, lambda: isinstance(app.screen, PlotsScreen) and app.screen._n_shown > 0
            )
            await pilot.press("escape")
            assert proc.poll() is None and oai.held(items) > 0
            oai.release(items)
            assert proc.wait(timeout=300) == 0, proc.stderr.read() if proc.stderr else ""
            # the dashboard moves to the database once the run has ended
            assert await wait_until(pilot, lambda: dash.source == "db")
            await settle(pilot)
            app.push_screen(ItemScreen([run_id], item_id, dashboard=dash))
            assert await wait_until(
                pilot, lambda: isinstance(app.screen, ItemScreen) and app.screen.details
            )
            after = app.screen.details
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    # the variants read live were complete: each equals its stored row, field by field
    stored = {v["variant"]: v for v in after[0]["variants"]}
    for v in during[0]["variants"]:
        s = stored[v["variant"]]
        for k in (
            "prompt",
            "probs",
            "top_tokens",
            "option_scores",
            "extra",
            "prediction",
            "gold",
            "correct",
            "confidence",
            "other",
        ):
            assert v.get(k) == s.get(k), (v["variant"], k)
    # and the drill-down shows the same text once the live rows cover every variant
    if len(during[0]["variants"]) == len(after[0]["variants"]):
        assert _text(during) == _text(after)
