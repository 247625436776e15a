"""One way to start a run: the same request twice says the run is complete before
any model is built, and keeps the first session's record; `--limit` extends the same run and
appends a session; runs started from the TUI form and by `rerun` reuse the response cache the
CLI filled. Real HTTP against the scripted OpenAI-wire server; real DuckDB files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pytest

from tests.helpers.cli import cli, cli_env
from tests.helpers.oai import CANARY_KEY, oai, oai_server, write_marked_suite  # noqa: F401
from tests.helpers.tui import settle, wait_until

N = 5  # items; two templates each


def _suite(folder: Path) -> Path:
    return write_marked_suite(folder, "sessions", N, "k", "[sess] claim {i}", topics=True)


def _runs(db: Path) -> dict[str, dict[str, Any]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        cur = con.execute("SELECT * FROM runs")
        cols = [d[0] for d in cur.description]
        out = {}
        for row in cur.fetchall():
            rec = dict(zip(cols, row, strict=True))
            rec["meta"] = json.loads(rec["meta"] or "{}")
            rec["options"] = json.loads(rec["options"] or "{}")
            rec["n_rows"] = con.execute(
                "SELECT count(*) FROM results WHERE run_id = ?", [rec["run_id"]]
            ).fetchone()[0]
            out[str(rec["run_id"])] = rec
        return out
    finally:
        con.close()


def _run(oai: Any, suite: Path, db: Path, *extra: str, env: dict[str, str] | None = None) -> Any:  # noqa: F811
    return cli(
        "run",
        "--suite",
        str(suite),
        "--model",
        "openai:test-model",
        "--base-url",
        oai.base_url,
        "--db",
        str(db),
        "--no-report",
        *extra,
        env=env or cli_env(OPENAI_API_KEY=CANARY_KEY),
    )


def test_the_same_run_twice_is_complete_before_anything_loads(oai, tmp_path: Path) -> None:  # noqa: F811
    oai.script("[sess]", top=[["Yes", -0.3], ["No", -1.4]])
    suite, db = _suite(tmp_path / "s"), tmp_path / "r.duckdb"
    first = _run(oai, suite, db)
    assert first.returncode == 0, first.stderr
    (run,) = _runs(db).values()
    assert run["status"] == "completed" and run["n_rows"] == 2 * N
    before = run["meta"]
    n_requests = len(oai.log())
    again = _run(oai, suite, db)
    assert again.returncode == 0, again.stderr
    lines = [ln for ln in again.stderr.splitlines() if ln.strip()]
    assert (
        len(lines) == 1
        and f"run {run['run_id']} is already complete ({2 * N}/{2 * N} results" in lines[0]
    )
    assert "loading model" not in again.stderr  # nothing built
    assert len(oai.log()) == n_requests  # not even a probe reached the server
    after = _runs(db)[run["run_id"]]
    # the first session's record is intact: nothing overwritten by the second command
    assert after["meta"] == before
    assert after["meta"]["last_session"]["items"] == 2 * N
    assert [s["items"] for s in after["meta"]["sessions"]] == [2 * N]


@pytest.mark.slow
def test_limit_is_the_same_run_partly_done(oai, tmp_path: Path) -> None:  # noqa: F811
    oai.script("[sess]", top=[["Yes", -0.3], ["No", -1.4]])
    suite, db = _suite(tmp_path / "s"), tmp_path / "r.duckdb"
    assert _run(oai, suite, db, "--limit", "2").returncode == 0
    (rid,) = _runs(db)
    same = _run(oai, suite, db, "--limit", "2")
    assert "is already complete (4/4 results" in same.stderr, same.stderr
    smaller = _run(oai, suite, db, "--limit", "1")
    assert "is already complete (2/2 results asked for; the run holds 4/4)" in smaller.stderr, (
        smaller.stderr
    )
    whole = _run(oai, suite, db)  # no limit: the same run, extended to every item
    assert whole.returncode == 0, whole.stderr
    runs = _runs(db)
    assert list(runs) == [rid]
    run = runs[rid]
    assert run["n_rows"] == 2 * N and run["status"] == "completed" and run["n_total"] == 2 * N
    sessions = run["meta"]["sessions"]
    assert [(s["items"], s["limit"]) for s in sessions] == [(4, 2), (2 * N - 4, None)]
    assert run["meta"]["last_session"]["items"] == 2 * N - 4
    assert run["options"]["limit"] is None  # --resume continues what was asked last
    done = _run(oai, suite, db)
    assert "is already complete (10/10 results" in done.stderr


def test_a_rerun_does_not_hide_the_finished_run(oai, tmp_path: Path) -> None:  # noqa: F811
    """A rerun is a new run with the request of the run it re-scores; the same `run` command
    after it once matched the rerun (the newest run with that request), missed that the run
    is complete, loaded the model and appended an empty session each time."""
    oai.script("[sess]", top=[["Yes", -0.3], ["No", -1.4]])
    suite, db = _suite(tmp_path / "s"), tmp_path / "r.duckdb"
    assert _run(oai, suite, db).returncode == 0
    (rid,) = _runs(db)
    proc = cli(
        "rerun",
        rid,
        "--where",
        "item_id = 'k1'",
        "--db",
        str(db),
        "--no-report",
        env=cli_env(OPENAI_API_KEY=CANARY_KEY),
    )
    assert proc.returncode == 0, proc.stderr
    before = _runs(db)[rid]["meta"]
    again = _run(oai, suite, db)
    assert again.returncode == 0, again.stderr
    assert f"run {rid} is already complete ({2 * N}/{2 * N} results" in again.stderr, again.stderr
    assert "loading model" not in again.stderr
    assert _runs(db)[rid]["meta"] == before  # no empty session appended


def _hits(run: dict[str, Any]) -> int:
    return int((run["meta"]["sessions"][-1].get("backend_stats") or {}).get("cache_hits") or 0)


def test_rerun_reuses_the_response_cache(oai, tmp_path: Path) -> None:  # noqa: F811
    oai.script("[sess]", top=[["Yes", -0.3], ["No", -1.4]])
    suite, db = _suite(tmp_path / "s"), tmp_path / "r.duckdb"
    env = cli_env(
        OPENAI_API_KEY=CANARY_KEY, LLMSCOPE_RESPONSE_CACHE=str(tmp_path / "responses.sqlite")
    )
    assert _run(oai, suite, db, env=env).returncode == 0
    (rid,) = _runs(db)
    n_requests = len(oai.log())
    proc = cli("rerun", rid, "--where", "item_id = 'k1'", "--db", str(db), "--no-report", env=env)
    assert proc.returncode == 0, proc.stderr
    (new,) = [r for k, r in _runs(db).items() if k != rid]
    assert (
        new["meta"]["rerun_of"]["run_id"] == rid and new["n_rows"] == 2
    )  # one item, two templates
    assert _hits(new) == 2  # both prompts were scored by the first run
    assert len(oai.log()) - n_requests <= 1  # at most the capability probe


async def test_a_tui_form_run_reuses_the_cli_s_responses(oai, tmp_path: Path, monkeypatch) -> None:  # noqa: F811
    """A run started from the TUI's form goes through the same start as `llmscope run`: the
    response cache the CLI filled answers it (another database, the same prompts)."""
    from llmscope.tui.app import LlmscopeApp
    from llmscope.tui.panels.form import form_run

    oai.script("[sess]", top=[["Yes", -0.3], ["No", -1.4]])
    cache = str(tmp_path / "responses.sqlite")
    suite = _suite(tmp_path / "s")
    cli_db, tui_db = tmp_path / "cli.duckdb", tmp_path / "tui.duckdb"
    env = cli_env(OPENAI_API_KEY=CANARY_KEY, LLMSCOPE_RESPONSE_CACHE=cache)
    assert _run(oai, suite, cli_db, env=env).returncode == 0
    monkeypatch.setenv("LLMSCOPE_RESPONSE_CACHE", cache)
    run = form_run({"suite": str(suite), "model": "openai:test-model", "base_url": oai.base_url})
    app = LlmscopeApp(tui_db, refresh_s=0.1)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        app.start_run(run.params())
        assert await wait_until(pilot, lambda: any(h.reporter.ended for h in app.running.values()))
        await settle(pilot)
    (tui_run,) = _runs(tui_db).values()
    assert tui_run["n_rows"] == 2 * N and tui_run["status"] == "completed"
    assert _hits(tui_run) == 2 * N
