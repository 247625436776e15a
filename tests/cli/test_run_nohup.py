"""`nohup llmscope run ... &` survives the terminal closing.

A signal the shell hands down as ignored stays ignored: SIGHUP under `nohup`, SIGINT for a job
started with `&` by a non-interactive shell. Real processes started the way a user does (the
`nohup` binary; `sh -c '... &'`), the scripted OpenAI-wire server, which holds the run's later
requests until the signal is sent (so it lands mid-run on any machine); the run must finish
with every row.
"""

from __future__ import annotations

import shlex
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import pytest

from tests.helpers.cli import api_run_args, cli_cmd, cli_env, record, write_yesno_suite
from tests.helpers.midrun import wait_until
from tests.helpers.oai import OAIServer, start_server, stop_server

pytestmark = pytest.mark.reliability

N = 60  # 120 requests, one at a time
MARKERS = ("Question", "Is it true")  # the two templates of write_yesno_suite


@pytest.fixture(scope="module")
def server() -> Iterator[OAIServer]:
    s = start_server()
    try:
        yield s
    finally:
        stop_server(s)


def _hold(server: OAIServer) -> None:
    """Answer the first 5 requests of each template, then hold them until `_signal_then_go_on`."""
    for m in MARKERS:
        server.script(m, hold_after=5)


def _signal_then_go_on(
    server: OAIServer, proc: subprocess.Popen[str], send: Callable[[], None]
) -> None:
    """Once a request is held (10 answered, 110 to go), signal the run, then let it go on."""
    wait_until(lambda: any(server.held(m) for m in MARKERS), "a request was held", proc)
    send()
    for m in MARKERS:
        server.release(m)


def _cmd(spec: Path, db: Path, server: OAIServer) -> list[str]:
    return cli_cmd(
        *api_run_args(spec, db, server.base_url),
        "--no-report",
        "--quiet",
        "--no-cache",
        "--concurrency",
        "1",
    )


def _stored(db: Path) -> tuple[int, str]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        n = con.execute("SELECT count(DISTINCT (item_id, variant)) FROM results").fetchone()[0]
        status = con.execute("SELECT status FROM runs").fetchone()[0]
        return int(n), str(status)
    finally:
        con.close()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nohup") is None, reason="needs the nohup command")
def test_sighup_under_nohup_does_not_stop_the_run(tmp_path: Path, server: OAIServer) -> None:
    spec = write_yesno_suite(tmp_path / "s", N)
    db = tmp_path / "nohup.duckdb"
    _hold(server)
    proc = subprocess.Popen(
        ["nohup", *_cmd(spec, db, server)],
        env=cli_env(OPENAI_API_KEY="sk-test"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        # nohup execs the run: this pid is the run's
        _signal_then_go_on(server, proc, lambda: proc.send_signal(signal.SIGHUP))
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, (proc.returncode, err)  # not 129, and the run not `interrupted`
    assert _stored(db) == (2 * N, "completed")
    record("nohup", merge=True, sighup_under_nohup=f"run completed {2 * N}/{2 * N}")


@pytest.mark.slow
def test_sigint_to_a_background_job_of_a_script(tmp_path: Path, server: OAIServer) -> None:
    """`sh -c 'llmscope run ... &'`: the shell starts the job with SIGINT ignored (no job
    control), so a Ctrl-C meant for the script's foreground leaves the run alone."""
    spec = write_yesno_suite(tmp_path / "s", N)
    db = tmp_path / "bg.duckdb"
    _hold(server)
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
        import os

        _signal_then_go_on(server, sh, lambda: os.kill(pid, signal.SIGINT))
        out, _ = sh.communicate(timeout=300)
    finally:
        if sh.poll() is None:
            sh.kill()
            sh.wait()
    assert "rc=0" in out, (out, (tmp_path / "err.txt").read_text())
    assert _stored(db) == (2 * N, "completed")
    record("nohup", merge=True, sigint_background_job=f"run completed {2 * N}/{2 * N}")
