"""Watching a run that another process is writing (`llmscope view`): the viewer reads the
live channel, never the locked DuckDB file, and opens the file read-only once the run ends."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from llmscope.tui.app import LlmscopeApp
from llmscope.tui.screens import DashboardScreen, HomeScreen
from tests.helpers.paths import ROOT
from tests.helpers.tui import create_run, make_db, screen_text, settle, wait_until

WRITER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {root!r})
    from tests.helpers.tui import create_run, toy_items, toy_result
    from llmscope.engine.progress import Progress
    from llmscope.runs.live import LiveWriter
    from llmscope.store.db import Store

    db = {db!r}
    store = Store(db)  # holds DuckDB's write lock, as `llmscope run` does
    items = toy_items(12)
    create_run(store, "run-w", 12, model="model-W", status="running")
    live = LiveWriter(db, interval_s=0.0)
    prog = Progress(run_id="run-w", total=12)
    live.on_start(store.get_run("run-w"), prog)
    first = [toy_result(it, i) for i, it in enumerate(items[:5])]
    store.write_results("run-w", first)
    prog.done = 5
    live.on_results(first, prog)
    live.on_progress(prog)
    print("ready", flush=True)
    sys.stdin.readline()
    rest = [toy_result(it, i) for i, it in enumerate(items) if i >= 5]
    store.write_results("run-w", rest, start_seq=5)
    prog.done, prog.status = 12, "completed"
    live.on_results(rest, prog)
    store.update_run("run-w", status="completed")
    store.close()
    live.on_end(prog)
    print("ended", flush=True)
    """
)


@pytest.fixture
def writer(tmp_path: Path):
    db = make_db(tmp_path / "w.duckdb")
    code = WRITER.format(root=str(ROOT), db=str(db))
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    yield db, proc
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)


def _errors(app: LlmscopeApp) -> list[str]:
    return [n.message for n in app._notifications if n.severity == "error"]


async def test_view_follows_live_run_then_opens_db(writer) -> None:
    db, proc = writer
    app = LlmscopeApp(db, watch=True, refresh_s=0.1)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, HomeScreen)
        # the run list is read by a worker on the refresh timer: wait for it (bounded)
        assert await wait_until(pilot, lambda: "running (live)" in screen_text(app))
        text = screen_text(app)
        assert "run-w" in text and "running (live)" in text
        assert "showing the live channel" in text
        await pilot.press("enter")
        await settle(pilot)
        dash = app.screen
        assert isinstance(dash, DashboardScreen) and dash.source == "live"
        assert await wait_until(pilot, lambda: "5/12 results" in screen_text(app))
        assert "(live channel)" in screen_text(app)
        right5 = sum(
            1
            for i in range(5)
            if ((0.05 + (i * 37 % 81) / 100) > 0.85 - (i * 37 % 81) / 100) == (i % 2 == 0)
        )
        assert f"accuracy {right5 / 5:.3f}" in screen_text(app)
        assert _errors(app) == []  # the locked file was never opened
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ended"
        # once ended, the viewer switches to the database, read-only, for full detail
        assert await wait_until(pilot, lambda: dash.source == "db")
        assert await wait_until(pilot, lambda: "12/12 results" in screen_text(app))
        assert "completed" in screen_text(app)
        await pilot.press("enter")  # an item now has its stored prompt
        await settle(pilot)
        assert "prompt (exactly as rendered for the model)" in screen_text(app)
        assert _errors(app) == []


async def test_tui_on_locked_db_watches_until_the_file_is_free(writer) -> None:
    """Issue 29: `llmscope` on a file another process holds shows its live channel, and goes
    back to reading (and starting runs on) the file by itself once the holder lets go."""
    db, proc = writer
    app = LlmscopeApp(
        db, refresh_s=0.1
    )  # `llmscope` wants to write, but another process holds the file
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert await wait_until(pilot, lambda: app.blocked is not None)
        assert not app.watch_mode  # never for good: only `llmscope view` watches
        text = screen_text(app)
        assert "in use by another process" in text
        assert "run-w" in text
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ended"
        proc.wait(timeout=10)  # the file is free
        assert await wait_until(pilot, lambda: app.blocked is None)
        assert await wait_until(pilot, lambda: "in use by another process" not in screen_text(app))
        assert any("is free again" in n.message for n in app._notifications)
        home = app.screen
        assert isinstance(home, HomeScreen)
        assert {str(r["run_id"]): r.get("status") for r in home.rows}.get("run-w") == "completed"
        assert _errors(app) == []


async def test_view_without_database(tmp_path: Path) -> None:
    app = LlmscopeApp(tmp_path / "missing.duckdb", watch=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert any("no database at" in m for m in _errors(app))
        assert not (tmp_path / "missing.duckdb").exists()


@pytest.fixture
def writer_after_a_finished_run(tmp_path: Path):
    """A database with a finished run published on the live channel (as `llmscope run` leaves
    it), then another process writing a second run and holding the file."""
    from llmscope.engine.progress import Progress
    from llmscope.runs.live import LiveWriter
    from llmscope.store.db import Store
    from tests.helpers.tui import toy_items, toy_result

    db = make_db(tmp_path / "w.duckdb", runs=())
    with Store(db) as store:
        create_run(store, "run-f", 12, model="model-F", status="running")
        live = LiveWriter(db, interval_s=0.0, store=store)
        prog = Progress(run_id="run-f", total=12)
        live.on_start(store.get_run("run-f") or {}, prog)
        rows = [toy_result(it, i, shift=7) for i, it in enumerate(toy_items(12))]
        store.write_results("run-f", rows)
        prog.done, prog.status = 12, "completed"
        live.on_results(rows, prog)
        store.update_run("run-f", status="completed")
        live.on_end(prog)
    code = WRITER.format(root=str(ROOT), db=str(db))
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    yield db, proc
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)


async def test_a_finished_run_opens_while_another_run_writes(writer_after_a_finished_run) -> None:
    """Issue 14: from another terminal, open a finished run while a run writes the database
    (whose file DuckDB then locks): its dashboard and items come from its live-channel record."""
    from tests.helpers.tui import expected_accuracy

    db, proc = writer_after_a_finished_run
    app = LlmscopeApp(db, watch=True, refresh_s=0.1)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert await wait_until(
            pilot, lambda: "run-f" in screen_text(app) and "run-w" in screen_text(app)
        )
        home = app.screen
        assert isinstance(home, HomeScreen)
        ids = [str(r["run_id"]) for r in home.rows]
        for _ in range(ids.index("run-f")):
            await pilot.press("down")
        await pilot.press("enter")
        await settle(pilot)
        dash = app.screen
        assert isinstance(dash, DashboardScreen) and dash.run_id == "run-f"
        acc = expected_accuracy(12, variants=("q1",), shift=7)
        assert await wait_until(pilot, lambda: f"accuracy {acc:.3f}" in screen_text(app)), (
            screen_text(app)
        )
        assert "12/12 results" in screen_text(app) and "completed" in screen_text(app)
        await pilot.press("enter")  # its first failing item, with the prompt as stored
        await settle(pilot)
        assert await wait_until(
            pilot, lambda: "prompt (exactly as rendered for the model)" in screen_text(app)
        )
        assert _errors(app) == []
        assert proc.poll() is None  # the writer was never disturbed
