"""TUI: the word-surprisal drill-down and the SG panel of a syntaxgym run (real DuckDB, tiny model)."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

pytest.importorskip("torch")

from llmscope.tui.app import LlmscopeApp  # noqa: E402
from llmscope.tui.screens import DashboardScreen, ItemScreen  # noqa: E402
from tests.helpers.cli import syntax_sample_db  # noqa: E402
from tests.helpers.tui import screen_text, settle, wait_until  # noqa: E402


@pytest.fixture
def sg_db(tmp_path: Path) -> Path:
    return syntax_sample_db(tmp_path)


async def test_drilldown_shows_word_and_region_surprisal_and_sg_panel(sg_db: Path) -> None:
    db = sg_db
    con = duckdb.connect(str(db), read_only=True)
    (run_id,) = con.execute("SELECT run_id FROM runs").fetchone()
    extra = json.loads(
        con.execute("SELECT extra FROM results WHERE item_id = 'agr01'").fetchone()[0]
    )
    rows = con.execute("SELECT correct FROM results").fetchall()
    con.close()
    # region 3 (the verb) of match_sing is the sum of the surprisals of the words inside it
    words = extra["conditions"]["match_sing"]["words"]
    verb = sum(w["surprisal_bits"] for w in words if w["region"] == 3)
    app = LlmscopeApp(db)
    async with app.run_test(size=(160, 60)) as pilot:
        await settle(pilot)
        app.push_screen(ItemScreen([run_id], "agr01"))
        assert await wait_until(pilot, lambda: "region surprisal" in screen_text(app))
        text = screen_text(app)
        assert isinstance(app.screen, ItemScreen)
        assert f"{verb:.2f}" in text and "mismatch_plural" in text
        assert "(3;%match_sing%)" in text
        app.pop_screen()
        await settle(pilot)
        app.push_screen(DashboardScreen(run_id))
        assert await wait_until(pilot, lambda: "SG score" in screen_text(app))
        k = sum(r[0] for r in rows)
        assert f"{k / len(rows):.3f}" in screen_text(
            app
        )  # overall share of items meeting all predictions
