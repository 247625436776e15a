"""Snapshot tests at 80x24, 120x40 and 200x60 on fixed data (no clocks, rates or temporary
paths on screen): home, dashboard, item and compare at each size, help at 120x40.

Update after an intended change with `pytest tests/tui/test_snapshots.py --snapshot-update`
and review the SVGs under tests/tui/__snapshots__/.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llmscope.tui.app import LlmscopeApp
from tests.helpers.tui import make_db, settle

SIZE = (120, 40)
# The sizes the layout is made for: a small terminal (the dashboard shows one panel at a time),
# the common one, and a big one (panels share the width and grow).
SIZES = {"80x24": (80, 24), "120x40": (120, 40), "200x60": (200, 60)}


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LlmscopeApp:
    monkeypatch.chdir(tmp_path)  # the DB path shown in the header is then just its name
    # A fixed suites list on the home screen: new built-in suites do not change the snapshots.
    import llmscope.data.suites as suites

    monkeypatch.setattr(
        suites, "builtin_names", lambda: ["commonsense-sample", "mc-sample", "minimal-pairs"]
    )
    make_db(Path("t.duckdb"), runs=(("run-a", "model-A", 0), ("run-b", "model-B", 13)))
    # No refresh ticks while a snapshot is taken: on a loaded machine a tick could start a
    # reload of the runs list between the last settle and the screenshot.
    return LlmscopeApp("t.duckdb", refresh_s=3600)


@pytest.mark.parametrize("size", SIZES)
def test_snapshot_dashboard(snap_compare, app: LlmscopeApp, size: str) -> None:
    async def before(pilot) -> None:
        await settle(pilot)
        await pilot.press("down", "enter")
        await settle(pilot)

    assert snap_compare(app, terminal_size=SIZES[size], run_before=before)


@pytest.mark.parametrize("size", SIZES)
def test_snapshot_item(snap_compare, app: LlmscopeApp, size: str) -> None:
    async def before(pilot) -> None:
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)

    assert snap_compare(app, terminal_size=SIZES[size], run_before=before)


@pytest.mark.parametrize("size", SIZES)
def test_snapshot_compare(snap_compare, app: LlmscopeApp, size: str) -> None:
    async def before(pilot) -> None:
        await settle(pilot)
        await pilot.press("space", "down", "space", "c")
        await settle(pilot)

    assert snap_compare(app, terminal_size=SIZES[size], run_before=before)


@pytest.mark.parametrize("size", SIZES)
def test_snapshot_home(snap_compare, app: LlmscopeApp, size: str) -> None:
    async def before(pilot) -> None:
        await settle(pilot)

    assert snap_compare(app, terminal_size=SIZES[size], run_before=before)


def test_snapshot_help(snap_compare, app: LlmscopeApp) -> None:
    async def before(pilot) -> None:
        await settle(pilot)
        await pilot.press("question_mark")
        await settle(pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=before)
