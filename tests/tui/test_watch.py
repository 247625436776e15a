"""A window on a file another process is writing (`llmscope`, `llmscope view`): it reads the
stored rows from a copy taken between the writer's commits, follows the running run's dashboard
on its live channel, and reads the file itself once the writer lets go. A holder that allows no
copy (another DuckDB client) leaves the window on the live channel until the file is free."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llmscope.tui.app import LlmscopeApp
from llmscope.tui.screens import DashboardScreen, HomeScreen
from tests.helpers.paths import ROOT
from tests.helpers.tui import create_run, make_db, screen_text, settle, wait_until
from tests.helpers.tui_pilot import started

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


def _writing(db: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """(db, the WRITER process holding it, once ready); the process is killed afterwards."""
    code = WRITER.format(root=str(ROOT), db=str(db))
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    yield db, proc
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)


@pytest.fixture
def writer(tmp_path: Path):
    db = make_db(tmp_path / "w.duckdb")
    yield from _writing(db)


def _errors(app: LlmscopeApp) -> list[str]:
    return [n.message for n in app._notifications if n.severity == "error"]


def _row(app: LlmscopeApp, run_id: str) -> dict[str, Any]:
    home = app.screen
    assert isinstance(home, HomeScreen)
    return next((r for r in home.rows if str(r["run_id"]) == run_id), {})


async def test_view_reads_the_stored_rows_while_a_run_writes_then_the_file(writer) -> None:
    db, proc = writer
    app = LlmscopeApp(db, watch=True, refresh_s=0.1)
    async with started(app) as pilot:
        assert isinstance(app.screen, HomeScreen)
        # the run list is read by a worker on the refresh timer: wait for it (bounded); its
        # rows are the database's (run-a is on no live channel), the running run's progress
        # its live channel's (5 of 12 stored)
        assert await wait_until(pilot, lambda: _row(app, "run-w").get("live") is True)
        assert _row(app, "run-a")["status"] == "completed" and _row(app, "run-a")["n_done"] == 24
        assert _row(app, "run-w")["n_done"] == 5 and "running (live)" in screen_text(app)
        assert app.blocked is None
        assert await wait_until(
            pilot, lambda: f"written by process {proc.pid}" in str(app.sub_title)
        )
        assert "read-only" in str(app.sub_title)
        assert "showing the live channel" not in screen_text(app)
        home = app.screen
        assert isinstance(home, HomeScreen)
        for _ in range([str(r["run_id"]) for r in home.rows].index("run-w")):
            await pilot.press("down")
        await pilot.press("enter")
        await settle(pilot)
        dash = app.screen
        assert isinstance(dash, DashboardScreen)
        assert await wait_until(pilot, lambda: "5/12 results" in screen_text(app))
        right5 = sum(
            1
            for i in range(5)
            if ((0.05 + (i * 37 % 81) / 100) > 0.85 - (i * 37 % 81) / 100) == (i % 2 == 0)
        )
        assert f"accuracy {right5 / 5:.3f}" in screen_text(app)
        assert _errors(app) == []
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ended"
        proc.wait(timeout=30)
        # once ended, the dashboard reads the database itself, read-only, for full detail
        assert await wait_until(pilot, lambda: dash.source == "db")
        assert await wait_until(pilot, lambda: "12/12 results" in screen_text(app))
        assert "completed" in screen_text(app)
        await pilot.press("enter")  # an item now has its stored prompt
        await settle(pilot)
        assert "prompt (exactly as rendered for the model)" in screen_text(app)
        assert _errors(app) == []


async def test_a_window_on_a_file_another_run_writes_reads_it_and_is_never_blocked(
    writer,
) -> None:
    """`llmscope` on a file another llmscope process writes: the runs are read from copies of
    the file (never "in use by another process"), and from the file itself once it is free."""
    db, proc = writer
    app = LlmscopeApp(db, refresh_s=0.1)
    async with started(app) as pilot:
        assert await wait_until(pilot, lambda: _row(app, "run-w").get("n_done") == 5)
        assert await wait_until(
            pilot, lambda: f"written by process {proc.pid}" in str(app.sub_title)
        )
        assert app.blocked is None and not app.watch_mode
        assert "in use by another process" not in screen_text(app)
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ended"
        proc.wait(timeout=30)  # the file is free
        assert await wait_until(pilot, lambda: _row(app, "run-w").get("status") == "completed")
        assert _row(app, "run-w")["n_done"] == 12
        assert await wait_until(pilot, lambda: "written by" not in str(app.sub_title))
        assert app.handle.written_by is None and app.blocked is None
        assert _errors(app) == []


HOLDER = textwrap.dedent(
    """
    import sys, duckdb
    con = duckdb.connect({db!r})  # a DuckDB client that is not llmscope: no copy is allowed
    print("ready", flush=True)
    sys.stdin.readline()
    con.close()
    print("ended", flush=True)
    """
)


async def test_a_file_held_by_another_duckdb_client_shows_why_until_it_is_free(
    tmp_path: Path,
) -> None:
    db = make_db(tmp_path / "h.duckdb")
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER.format(db=str(db))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        app = LlmscopeApp(db, refresh_s=0.1)
        async with started(app) as pilot:
            assert await wait_until(pilot, lambda: app.blocked is not None)
            assert "in use by another process" in screen_text(app)
            assert "in use by another process" in str(app.sub_title)
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
            assert proc.stdout.readline().strip() == "ended"
            proc.wait(timeout=30)
            assert await wait_until(pilot, lambda: app.blocked is None)
            assert await wait_until(
                pilot, lambda: "in use by another process" not in screen_text(app)
            )
            assert any("is free again" in n.message for n in app._notifications)
            assert _errors(app) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


async def test_view_without_database(tmp_path: Path) -> None:
    app = LlmscopeApp(tmp_path / "missing.duckdb", watch=True)
    async with started(app):
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
    yield from _writing(db)


async def test_a_finished_run_opens_while_another_run_writes(writer_after_a_finished_run) -> None:
    """From another terminal, open a finished run while a run writes the database
    (whose file DuckDB then locks): its dashboard and items come from its live-channel record."""
    from tests.helpers.tui import expected_accuracy

    db, proc = writer_after_a_finished_run
    app = LlmscopeApp(db, watch=True, refresh_s=0.1)
    async with started(app) as pilot:
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
