"""Starting a run from the TUI's form: it runs in-process (against the scripted
OpenAI-compatible server on 127.0.0.1) while the interface stays live."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Input

from llmscope.store.db import Store
from llmscope.tui.app import LlmscopeApp
from llmscope.tui.screens import HomeScreen
from tests.helpers.oai import oai, oai_server  # noqa: F401
from tests.helpers.tui import screen_text, settle, wait_until
from tests.helpers.tui_pilot import dashboard_opened, home_screen, start_api_run, started


@pytest.mark.slow
async def test_start_run_from_form(tmp_path: Path, oai) -> None:  # noqa: F811
    db = tmp_path / "run.duckdb"
    app = LlmscopeApp(db, refresh_s=0.1)
    async with started(app) as pilot:
        await start_api_run(pilot, oai.base_url, limit="4", concurrency="4")
        dash = await dashboard_opened(pilot)  # the run opens it by itself once it has started
        assert await wait_until(
            pilot, lambda: "12/12 results" in screen_text(app) and "completed" in screen_text(app)
        )
        assert await wait_until(pilot, lambda: not dash.active)
        await settle(pilot)
        run_id = dash.run_id
        # the run ended: the write connection is released (reads open and close their own)
        assert await wait_until(pilot, lambda: not app.handle.writing)
        with app.handle.use() as store:
            df = store.query_df("SELECT correct, error FROM results WHERE run_id = ?", [run_id])
        assert len(df) == 12 and df["error"].isna().all()
        scored = df["correct"].dropna()
        assert f"accuracy {scored.mean():.3f}" in screen_text(app)
        # the run also published the live channel for other terminals
        assert (Path(str(db) + ".live") / run_id / "ended").exists()
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, HomeScreen)
        assert run_id in screen_text(app)
    with Store(db, read_only=True) as s:
        run = s.get_run(run_id)
        assert run is not None and run["status"] == "completed"


async def test_bad_form_is_reported(tmp_path: Path) -> None:
    app = LlmscopeApp(tmp_path / "x.duckdb")
    async with started(app) as pilot:
        home = home_screen(app)
        home.query_one("#f-suite", Input).value = "no-such-suite"
        await pilot.click("#start")
        # beside the field that caused it, and it stays (once a toast that vanished)
        label = home.query_one("#f-suite-label")
        assert await wait_until(pilot, lambda: "✘" in str(label.render()))
        assert label.has_class("-invalid") and home.query_one("#f-suite").has_class("-invalid")
        assert "no built-in suite" in str(home.query_one("#f-check").render())
        assert "no built-in suite" in str(home.query_one("#f-suite").tooltip)
        assert app.focused is not None and app.focused.id == "f-suite"
        assert not any("no built-in suite" in n.message for n in app._notifications)
        assert isinstance(app.screen, HomeScreen) and not app.running
        # a good suite clears the mark
        home.query_one("#f-suite", Input).value = "commonsense-sample"
        assert await wait_until(pilot, lambda: "✘" not in str(label.render()))
        assert not home.query_one("#f-suite").has_class("-invalid")


async def test_view_mode_offers_no_run_form(tmp_path: Path) -> None:
    """`llmscope view` (watch mode) cannot start runs: the form is not offered; in its place a
    line says how to start one, and `n` does not take the keys into a form it cannot use."""
    from tests.helpers.tui import make_db

    db = make_db(tmp_path / "t.duckdb")
    app = LlmscopeApp(db, watch=True)
    async with started(app, (80, 24)) as pilot:
        home = home_screen(app)
        assert not home.query_one("#run-form").display and home.query_one("#form-off").display
        assert "only watches" in screen_text(app) and "Start run" not in screen_text(app)
        assert "New run" not in screen_text(app)  # nor does the footer offer the key
        await pilot.press("n")
        await settle(pilot)
        assert app.focused is None or app.focused.id != "f-suite"
    app = LlmscopeApp(db)  # the full interface offers it
    async with started(app, (80, 24)):
        assert (
            app.screen.query_one("#run-form").display
            and not app.screen.query_one("#form-off").display
        )
        assert "New run" in screen_text(app)
