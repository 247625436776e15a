"""`--reasoning-effort`: validated, recorded with the run, and sent as the `reasoning_effort`
request parameter of every chat request (the scripted OpenAI-wire server logs the bodies)."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb

from tests.helpers.cli import assert_clean_error, cli, cli_env
from tests.helpers.oai import CANARY_KEY, oai, oai_server  # noqa: F401


def _run(db: Path, base_url: str, *extra: str):  # type: ignore[no-untyped-def]
    return cli(
        "run",
        "--suite",
        "commonsense-sample",
        "--limit",
        "1",
        "--model",
        "openai:test-model",
        "--base-url",
        base_url,
        "--chat",
        "--max-retries",
        "0",
        "--db",
        str(db),
        "--no-report",
        "--quiet",
        *extra,
        env=cli_env(OPENAI_API_KEY=CANARY_KEY),
    )


def _config(db: Path) -> dict:
    con = duckdb.connect(str(db), read_only=True)
    try:
        (raw,) = con.execute("SELECT backend_config FROM runs").fetchone() or ("{}",)
    finally:
        con.close()
    return json.loads(raw)


def test_effort_is_sent_with_every_chat_request_and_recorded(tmp_path: Path, oai) -> None:  # noqa: F811
    oai.script("", top=[["Yes", -0.3], ["No", -1.5]])
    db = tmp_path / "e.duckdb"
    proc = _run(db, oai.base_url, "--reasoning-effort", "high")
    assert proc.returncode == 0, proc.stderr[-2000:]
    chats = [e for e in oai.log() if e["path"].endswith("/chat/completions")]
    assert len(chats) >= 3  # one item, three prompt variants, all on the chat endpoint
    assert {e["body"].get("reasoning_effort") for e in chats} == {"high"}
    assert _config(db)["reasoning_effort"] == "high"


def test_without_the_flag_a_plain_model_gets_no_effort(tmp_path: Path, oai) -> None:  # noqa: F811
    oai.script("", top=[["Yes", -0.3], ["No", -1.5]])
    db = tmp_path / "n.duckdb"
    proc = _run(db, oai.base_url)
    assert proc.returncode == 0, proc.stderr[-2000:]
    chats = [e for e in oai.log() if e["path"].endswith("/chat/completions")]
    assert chats and all("reasoning_effort" not in e["body"] for e in chats)
    assert _config(db)["reasoning_effort"] is None


def test_a_rejected_effort_is_an_error_never_a_lower_effort(tmp_path: Path, oai) -> None:  # noqa: F811
    msg = "Unsupported value: 'reasoning_effort' does not support 'medium' with this model."
    oai.script(
        "",
        top=[["Yes", -0.3], ["No", -1.5]],
        reject=[{"param": "reasoning_effort", "equals": "medium", "message": msg}],
    )
    db = tmp_path / "r.duckdb"
    proc = _run(db, oai.base_url, "--reasoning-effort", "medium")
    # the capability probe meets the rejection first: the run stops before any item, saying why
    assert_clean_error(
        proc, "server rejects --reasoning-effort medium", "does not support 'medium'"
    )
    sent = {
        e["body"].get("reasoning_effort")
        for e in oai.log()
        if e["path"].endswith("/chat/completions")
    }
    assert sent == {"medium"}


def test_bad_effort_and_local_model_are_clean_errors(tmp_path: Path) -> None:
    db = str(tmp_path / "x.duckdb")
    assert_clean_error(
        cli(
            "run",
            "--suite",
            "mc-sample",
            "--db",
            db,
            "--model",
            "openai:m",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--reasoning-effort",
            "huge",
        ),
        "--reasoning-effort must be one of none, minimal, low, medium, high, got 'huge'",
    )
    assert_clean_error(
        cli("run", "--suite", "mc-sample", "--db", db, "--reasoning-effort", "low"),
        "--reasoning-effort applies to API models (openai:NAME) only",
    )
