"""A study whose grid varies prompt templates (derived suites `<suite>~<level>`) in the study
screen: labels readable (`api template=terse`, suites by their labels), the numbers `study
status --json` gives, the template factor across, and Enter opening a derived suite's run.

Real parts: `llmscope study run` in a subprocess against the scripted OpenAI-wire server, a
real DuckDB file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from textual.coordinate import Coordinate
from textual.widgets import DataTable

from llmscope.tui.app import LlmscopeApp
from llmscope.tui.screens import DashboardScreen
from llmscope.tui.screens.study import StudyScreen
from tests.helpers.cli import cli, cli_env, write_choice_suite, write_yesno_suite
from tests.helpers.oai import start_server, stop_server
from tests.helpers.tui import screen_text, settle, wait_until

SIZE = (140, 40)
NAME = "tplscreen"


@pytest.fixture(scope="module")
def study_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, Any]]]:
    base = tmp_path_factory.mktemp("tplstudy")
    yn, ch = write_yesno_suite(base / "yn", 4), write_choice_suite(base / "ch", 3)
    server = start_server()
    try:
        study = base / "s.yaml"
        study.write_text(
            f"""name: {NAME}
suites: [{{suite: {yn}, label: yn}}, {{suite: {ch}, label: ch}}]
models:
  - {{model: "openai:test-model", base_url: "{server.base_url}", label: api}}
grid:
  template:
    own: {{}}
    terse:
      templates:
        yn: {{a: "Yes or no: {{text}}", b: "True? {{text}}"}}
        ch: "Q: {{text}}"
""",
            encoding="utf-8",
        )
        db = base / "t.duckdb"
        proc = cli("study", "run", str(study), "--db", str(db), "--trust-study", env=cli_env(
            OPENAI_API_KEY="sk-test"))  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
    finally:
        stop_server(server)
    out = cli("study", "status", NAME, "--db", str(db), "--json")
    assert out.returncode == 0, out.stderr
    return db, {c["cell"]: c for c in json.loads(out.stdout)["cells"]}


async def _open(app: LlmscopeApp, pilot: Any) -> StudyScreen:
    await settle(pilot)
    assert await wait_until(pilot, lambda: isinstance(app.screen, StudyScreen) and app.screen.rows)
    await settle(pilot)
    assert isinstance(app.screen, StudyScreen)
    return app.screen


@pytest.mark.slow
async def test_template_factor_labels_numbers_and_derived_runs(study_db) -> None:
    db, status = study_db
    assert {c["state"] for c in status.values()} == {"done"}
    app = LlmscopeApp(db, study=NAME, refresh_s=3600)
    async with app.run_test(size=SIZE) as pilot:
        screen = await _open(app, pilot)
        assert [r.to_dict() for r in screen.rows] == list(status.values())
        text = screen_text(app)
        assert "api template=own" in text and "api template=terse" in text, text
        m = screen.matrix
        assert m is not None
        t = screen.query_one("#study-matrix", DataTable)
        for (i, j), c in m.cells.items():  # each cell shows its run's headline, from the CLI
            if j in screen._shown_cols and status[c.cell]["value"] is not None:
                shown = t.get_cell_at(Coordinate(i, screen._shown_cols.index(j) + 1)).plain
                assert f"{status[c.cell]['value']:.3f}" in shown, (c.cell, shown)
        await pilot.press("f")  # the template factor across
        await pilot.pause()
        m = screen.matrix
        assert m is not None and m.col_factor == "template" and m.col_labels == ["own", "terse"]
        # Enter on a terse cell opens its run: the derived suite, by its name
        key = "yn | api | template=terse"
        (i, j) = next(ij for ij, c in m.cells.items() if c.cell == key)
        t.move_cursor(row=i, column=screen._shown_cols.index(j) + 1)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, DashboardScreen)
        assert app.screen.run_id == status[key]["run_id"]
        assert "rel-yesno~terse" in screen_text(app)


def test_live_item_reader_builds_the_derived_suite(tmp_path: Path) -> None:
    """A running derived-suite run's items and spec, read from its files for the dashboard."""
    from llmscope.data.derived import with_templates
    from llmscope.data.suites import load_suite
    from llmscope.tui.data.live import items_from_suite

    yn = write_yesno_suite(tmp_path / "yn", 3)
    d = with_templates(load_suite(yn), {"a": "Q: {text}"}, "terse")
    spec, items = items_from_suite({"meta": {"suite": d.describe()}})
    assert spec["name"] == "rel-yesno~terse" and spec["templates"] == {"a": "Q: {text}"}
    assert sorted(items) == ["q0", "q1", "q2"]
