"""Snapshot of the study screen at 120x40 on fixed data (tests/helpers/study.py: fixed run ids,
labels and results; no clocks or temporary paths on screen).

Update after an intended change with
`pytest tests/tui/test_study_snapshot.py --snapshot-update` and review the SVG under
tests/tui/__snapshots__/.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llmscope.tui.app import LlmscopeApp
from tests.helpers.study import NAME, write_study_db
from tests.helpers.tui import settle


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LlmscopeApp:
    monkeypatch.chdir(tmp_path)  # the DB path shown in the header is then just its name
    write_study_db(Path("g.duckdb"), Path("files"))
    return LlmscopeApp("g.duckdb", study=NAME, refresh_s=3600)  # no refresh ticks mid-snapshot


def test_snapshot_study(snap_compare, app: LlmscopeApp) -> None:
    async def before(pilot) -> None:
        await settle(pilot)
        await pilot.press("space", "down", "space")  # two cells marked
        await settle(pilot)

    assert snap_compare(app, terminal_size=(120, 40), run_before=before)
