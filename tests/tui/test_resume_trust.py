"""The TUI's resume key (`r`) and someone else's database (endpoint trust).

A run made against another server is handed over, stopped with results missing. Pressing `r`
on its dashboard must not send $OPENAI_API_KEY to the stored base URL that none of the user's
environment, own config or earlier choices names (resuming at once would send keyed
requests there); it says how to resume from a shell instead. A base URL the user typed into
the new-run form is their own choice: its resume proceeds (tests/tui/test_run_record.py)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from llmscope.tui.app import LlmscopeApp
from llmscope.tui.screens import DashboardScreen
from tests.helpers.cli import api_run_args, cli, cli_env, write_yesno_suite
from tests.helpers.oai import CANARY_KEY, OAIServer, oai_server  # noqa: F401
from tests.helpers.tui import screen_text, settle, wait_until


def _keyed(server: OAIServer) -> int:
    return sum(1 for e in server.log() if CANARY_KEY in e.get("auth", ""))


@pytest.mark.slow
async def test_resume_key_refuses_a_stored_endpoint_the_user_never_named(
    tmp_path: Path,
    oai_server: OAIServer,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,  # noqa: F811
) -> None:
    evil = oai_server  # someone else's server
    spec = write_yesno_suite(tmp_path / "suite", 4)
    db = tmp_path / "theirs.duckdb"
    other = tmp_path / "other"  # made under someone else's home and config
    made = cli(
        *api_run_args(spec, db, evil.base_url, "--no-report", "--quiet"),
        env=cli_env(
            OPENAI_API_KEY="sk-theirs-0000000000",
            HOME=str(other),
            XDG_CONFIG_HOME=str(other / "xdg"),
            LLMSCOPE_RESPONSE_CACHE="off",
        ),
    )
    assert made.returncode == 0, made.stderr
    con = duckdb.connect(str(db))
    (rid,) = con.execute("SELECT run_id FROM runs").fetchone()  # type: ignore[misc]
    con.execute(
        "DELETE FROM results WHERE item_id IN (SELECT DISTINCT item_id FROM results LIMIT 2)"
    )
    con.execute("UPDATE runs SET status = 'interrupted'")
    con.close()
    evil.reset()
    # this user: their own (empty) config folder, the key in the environment, no base URL
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "mine"))
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("LLMSCOPE_RESPONSE_CACHE", "off")
    app = LlmscopeApp(db, run=rid, refresh_s=0.1)
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        if not isinstance(app.screen, DashboardScreen):
            app.screen.open_run(rid)  # type: ignore[attr-defined]
        assert await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen))
        dash = app.screen
        assert isinstance(dash, DashboardScreen)
        assert await wait_until(pilot, lambda: dash.check_action("resume", ()) is True)
        await pilot.press("r")
        notes = lambda: [str(n.message) for n in app._notifications]  # noqa: E731
        assert await wait_until(
            pilot, lambda: any("not trusted" in n or "--trust-db" in n for n in notes())
        ), notes()
        await settle(pilot)
        msg = next(n for n in notes() if "--trust-db" in n)
        assert evil.base_url in msg and rid in msg and "nothing was sent" in msg
        assert "completed" not in screen_text(app)
    assert _keyed(evil) == 0 and evil.log() == []
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT count(DISTINCT item_id) FROM results").fetchone() == (2,)
    con.close()
