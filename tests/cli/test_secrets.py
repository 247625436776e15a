"""Secrets: the API key never reaches the database, the live channel, exports or output.

A run against the local OpenAI-wire test server uses OPENAI_API_KEY=sk-canary-<random>.
Some requests fail (so retry and error paths run) and one item's error message echoes
the key back, as real providers do for a rejected key. Afterwards every byte llmscope
wrote or printed is searched for the canary (and for its first 20 characters).
"""

from __future__ import annotations

import secrets
import subprocess
from pathlib import Path

import pytest

from tests.helpers.cli import cli, cli_env, record
from tests.helpers.oai import start_server, stop_server

pytestmark = pytest.mark.reliability


@pytest.mark.slow
def test_api_key_is_never_written_or_printed(tmp_path: Path) -> None:
    canary = "sk-canary-" + secrets.token_hex(16)
    work = tmp_path / "work"
    work.mkdir()
    items = work / "items.jsonl"
    items.write_text(
        "".join(f'{{"id": {i}, "text": "Claim {i} [echo-key-{i % 5 == 0}]"}}\n' for i in range(40))
    )
    (work / "suite.yaml").write_text("name: secrets\ntask: yesno\nitems: items.jsonl\n")
    db = work / "s.duckdb"
    env = cli_env(OPENAI_API_KEY=canary, LLMSCOPE_LOG_LEVEL="DEBUG")
    server = start_server("--retry-after", "0.01")
    outputs: list[subprocess.CompletedProcess[str]] = []
    try:
        server.script(
            "[echo-key-True]",
            error={"status": 401, "message": f"Incorrect API key provided: {canary}."},
        )
        server.faults(rate=0.2, seed=3, sleep=5.0, retry_after="0.01")
        outputs.append(
            cli(
                "run",
                "--suite",
                str(work / "suite.yaml"),
                "--db",
                str(db),
                "--model",
                "openai:m",
                "--base-url",
                server.base_url,
                "--timeout",
                "1",
                env=env,
                cwd=work,
            )
        )
        log = server.log()
    finally:
        stop_server(server)
    assert outputs[0].returncode in (0, 1), outputs[0].stderr
    assert any(canary in e["auth"] for e in log), "the key was not sent: the test proves nothing"
    run = "last"
    for fmt, out in (("jsonl", "r.jsonl"), ("csv", "r.csv"), ("parquet", "r.parquet")):
        outputs.append(
            cli(
                "export",
                "--db",
                str(db),
                "--run",
                run,
                "--format",
                fmt,
                "-o",
                str(work / out),
                env=env,
                cwd=work,
            )
        )
    outputs.append(cli("export", "--db", str(db), "--run", run, env=env, cwd=work))
    outputs.append(cli("runs", "--db", str(db), "--json", env=env, cwd=work))
    outputs.append(cli("report", "--db", str(db), "--json", env=env, cwd=work))
    for p in outputs:
        assert "Traceback" not in p.stderr, p.stderr
        assert p.returncode in (0, 1), (p.args, p.stderr)
    errors = (work / "r.jsonl").read_text()
    assert "Incorrect API key provided" in errors  # the error is stored, redacted
    needles = [canary.encode(), canary[:20].encode(), canary[10:].encode()]
    files = [p for p in work.rglob("*") if p.is_file()]
    assert any(".live" in str(p) for p in files) and any(p.suffix == ".parquet" for p in files)
    searched = 0
    for p in files:
        data = p.read_bytes()
        searched += len(data)
        for n in needles:
            assert n not in data, f"the API key leaked into {p}"
    for p in outputs:
        for stream in (p.stdout, p.stderr):
            searched += len(stream)
            for n in needles:
                assert n.decode() not in stream, f"the API key leaked into the output of {p.args}"
    record(
        "secrets",
        files_searched=len(files),
        bytes_searched=searched,
        commands=len(outputs),
        leaks=0,
    )
