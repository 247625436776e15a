"""`nohup llmscope run ... &` survives the terminal closing (issue 35, case 9).

A signal the shell hands down as ignored stays ignored: SIGHUP under `nohup`, SIGINT for a job
started with `&` by a non-interactive shell. Real processes started the way a user does (the
`nohup` binary; `sh -c '... &'`), the scripted OpenAI-wire server, a run slow enough (20 ms a
request, one at a time) for the signal to land mid-run; the run must finish with every row.
"""

from __future__ import annotations

import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from tests.helpers.cli import api_run_args, cli_cmd, cli_env, record, write_yesno_suite
from tests.helpers.oai import OAIServer, start_server, stop_server

pytestmark = pytest.mark.reliability

N = 60  # 120 requests of 20 ms: about 3 s of scoring


@pytest.fixture(scope="module")
def server() -> Iterator[OAIServer]:
    s = start_server()
    try:
        s.script("Question", delay=0.02)
        s.script("Is it true", delay=0.02)
        yield s
    finally:
        stop_server(s)


def _cmd(spec: Path, db: Path, server: OAIServer) -> list[str]:
    return cli_cmd(
        *api_run_args(spec, db, server.base_url),
        "--no-report",
        "--quiet",
        "--no-cache",
        "--concurrency",
        "1",
    )


def _wait_scoring(db: Path, limit: float = 120) -> None:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if any(
            p.read_bytes().count(b"\n") >= 5 for p in Path(f"{db}.live").glob("*/results.jsonl")
        ):
            return
        time.sleep(0.05)
    raise AssertionError("the run never started scoring")


def _stored(db: Path) -> tuple[int, str]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        n = con.execute("SELECT count(DISTINCT (item_id, variant)) FROM results").fetchone()[0]
        status = con.execute("SELECT status FROM runs").fetchone()[0]
        return int(n), str(status)
    finally:
        con.close()


@pytest.mark.skipif(shutil.which("nohup") is None, reason="needs the nohup command")
def test_sighup_under_nohup_does_not_stop_the_run(tmp_path: Path, server: OAIServer) -> None:
    spec = write_yesno_suite(tmp_path / "s", N)
    db = tmp_path / "nohup.duckdb"
    proc = subprocess.Popen(
        ["nohup", *_cmd(spec, db, server)],
        env=cli_env(OPENAI_API_KEY="sk-test"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        _wait_scoring(db)
        proc.send_signal(signal.SIGHUP)  # nohup execs the run: this pid is the run's
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, (proc.returncode, err)  # before: 129, run `interrupted`
    assert _stored(db) == (2 * N, "completed")
    record("nohup", merge=True, sighup_under_nohup=f"run completed {2 * N}/{2 * N} (was: exit 129)")


def test_sigint_to_a_background_job_of_a_script(tmp_path: Path, server: OAIServer) -> None:
    """`sh -c 'llmscope run ... &'`: the shell starts the job with SIGINT ignored (no job
    control), so a Ctrl-C meant for the script's foreground leaves the run alone."""
    spec = write_yesno_suite(tmp_path / "s", N)
    db = tmp_path / "bg.duckdb"
    script = f"{shlex.join(_cmd(spec, db, server))} 2>{shlex.quote(str(tmp_path / 'err.txt'))} & echo $!; wait $!; echo rc=$?"
    sh = subprocess.Popen(
        ["sh", "-c", script],
        env=cli_env(OPENAI_API_KEY="sk-test"),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert sh.stdout is not None
        pid = int(sh.stdout.readline())
        _wait_scoring(db)
        import os

        os.kill(pid, signal.SIGINT)
        out, _ = sh.communicate(timeout=120)
    finally:
        if sh.poll() is None:
            sh.kill()
            sh.wait()
    assert "rc=0" in out, (out, (tmp_path / "err.txt").read_text())
    assert _stored(db) == (2 * N, "completed")
    record("nohup", merge=True, sigint_background_job=f"run completed {2 * N}/{2 * N}")
