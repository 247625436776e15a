"""The dashboard's `w`: the run's page and the current panel's figure written beside the
database, in a thread worker, and a notification that says where."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from llmscope.tui.app import LlmscopeApp
from tests.helpers.tui import expected_accuracy, make_db, wait_until
from tests.helpers.tui_pilot import on_dashboard


async def test_w_writes_the_page_and_the_panel_figure(tmp_path: Path) -> None:
    db = make_db(tmp_path / "t.duckdb", n_items=12)
    folder = tmp_path / "t-figures"
    app = LlmscopeApp(db)
    async with on_dashboard(app) as pilot:
        await pilot.press("w")
        page = folder / "run-a.html"
        assert await wait_until(
            pilot, lambda: any("wrote" in n.message for n in app._notifications)
        )
        note = next(n.message for n in app._notifications if "wrote" in n.message)
        assert str(page) in note and str(folder / "run-a-accuracy.svg") in note
        html = page.read_text()
        assert f'<td class="num value">{expected_accuracy(12):.3f}</td>' in html
        assert "default-src 'none'" in html
        # the accuracy panel's figure: its bars are named in the SVG
        ids = {e.get("id") for e in ET.parse(folder / "run-a-accuracy.svg").getroot().iter()}
        assert "accuracy:accuracy:0:0" in ids
        # the calibration panel (v steps to it) hands off the reliability diagram
        app.clear_notifications()
        await pilot.press("v", "w")
        assert await wait_until(
            pilot, lambda: any("wrote" in n.message for n in app._notifications)
        )
        assert (folder / "run-a-reliability.svg").is_file()
        assert not any(n.severity == "error" for n in app._notifications)
