"""Signals during a run: SIGTERM and SIGHUP behave like Ctrl-C, kill -9 leaves
a run that reads `interrupted`, and in every case the printed (or `--resume ID`) command
finishes the run without loss or duplicates. A local run (tiny random Llama) and an API
run (the scripted OpenAI-wire server) each; the API resume is given no --base-url and
must reach the same server from the stored config.

Each signal lands mid-run on any machine (tests/helpers/midrun.py): it is sent once the run
reports stored results, while the server holds the API run's later requests, or while the
local run is frozen.
"""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pytest

from tests.helpers.cli import (
    cli,
    cli_env,
    record,
    start_cli,
    tiny_model_dir,
    write_yesno_suite,
)
from tests.helpers.midrun import signal_frozen, wait_stored
from tests.helpers.oai import oai, oai_server, write_marked_suite  # noqa: F401
from tests.helpers.tinymodel import tiny_run_args

pytestmark = [pytest.mark.reliability, pytest.mark.slow]

N_LOCAL = 1500  # 3,000 prompts at batch size 2: frozen (SIGSTOP) at its first stored results
N_API = 150  # 300 prompts, two in flight; the server answers the first HOLD_AFTER, then holds
HOLD_AFTER = 40


def _rows(db: Path) -> list[tuple[Any, ...]]:
    con = duckdb.connect(str(db))  # read-write: replays the WAL a killed writer left
    try:
        return con.execute("SELECT run_id, item_id, variant, error FROM results").fetchall()
    finally:
        con.close()


def _runs_json(db: Path, via_cli: bool = False) -> list[dict[str, Any]]:
    """`llmscope runs --json` (or the same Store.runs() in process: a subprocess costs seconds)."""
    if via_cli:
        proc = cli("runs", "--json", "--db", str(db))
        assert proc.returncode == 0, proc.stderr
        return list(json.loads(proc.stdout))
    from llmscope.store.db import Store

    with Store(db, read_only=True) as s:
        return list(s.runs().to_dict("records"))


@pytest.fixture(scope="module")
def local_setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("signals")
    return {
        "base": base,
        "model": tiny_model_dir(base),
        "suite": write_yesno_suite(base / "s", N_LOCAL),
    }


def _api_suite(folder: Path) -> Path:
    return write_marked_suite(
        folder, "sig-api", N_API, "a", "[sig] statement {i}", second="Is it so? {text}"
    )


def _interrupt_then_resume(
    cmd: list[str], db: Path, sig: int, total: int, send: Callable[[subprocess.Popen[str]], None]
) -> dict[str, Any]:
    """Start the run, and once it reports stored results (kill -9 leaves rows to keep) signal
    it with `send`, which holds its work; then resume it as printed."""
    proc = start_cli(*cmd)
    try:
        wait_stored(db, proc)
        send(proc)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    rows = _rows(db)
    (run_id,) = [p.name for p in Path(str(db) + ".live").iterdir()]
    assert 0 < len(rows) < total, f"signal landed too late: {len(rows)}/{total} stored"
    assert len(set(rows)) == len(rows)
    (run,) = _runs_json(db, via_cli=sig == signal.SIGKILL)
    assert run["status"] == "interrupted"  # never `running` once the owner is gone
    if sig == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
        resume = ["run", "--resume", run_id, "--db", str(db)]
    else:
        assert proc.returncode == 128 + sig, err
        assert "Traceback" not in err, err
        assert (Path(str(db) + ".live") / run_id / "ended").exists()
        m = re.search(r"llmscope (run --resume \S+ --db \S+)", err)
        assert m, err
        resume = shlex.split(m.group(1))  # exactly as printed
    stored_at_signal = len(rows)
    done = cli(*resume, "--quiet", "--no-report", env=cli_env(), timeout=1800)  # minutes under load
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    rows = _rows(db)
    keys = [(r[1], r[2]) for r in rows]
    assert len(keys) == total and len(set(keys)) == total  # nothing lost, nothing twice
    assert all(r[3] is None for r in rows)
    (run,) = _runs_json(db)
    assert run["status"] == "completed" and run["n_done"] == total
    return {"stored_at_signal": stored_at_signal, "total": total, "exit_code": proc.returncode}


SIGNALS = [("sigterm", signal.SIGTERM), ("sighup", signal.SIGHUP), ("sigkill", signal.SIGKILL)]


@pytest.mark.parametrize(("name", "sig"), SIGNALS)
def test_local_run_signal_then_resume(local_setup: dict[str, Path], name: str, sig: int) -> None:
    db = local_setup["base"] / f"{name}.duckdb"
    cmd = tiny_run_args(
        local_setup["suite"], local_setup["model"], db, "--batch-size", "2", "--threads", "1"
    )
    figures = _interrupt_then_resume(cmd, db, sig, 2 * N_LOCAL, lambda p: signal_frozen(p, db, sig))
    record(f"signal_local_{name}", **figures, items_lost=0, duplicates=0)


@pytest.mark.parametrize(("name", "sig"), SIGNALS)
def test_api_run_signal_then_resume_keeps_base_url(
    tmp_path: Path,
    oai,
    name: str,
    sig: int,  # noqa: F811
) -> None:  # noqa: F811
    oai.script("[sig]", top=[["Yes", -0.3], ["No", -1.5]], hold_after=HOLD_AFTER)
    db = tmp_path / f"{name}.duckdb"
    cmd = [
        "run",
        "--suite",
        str(_api_suite(tmp_path / "s")),
        "--model",
        "openai:test-model",
        "--base-url",
        oai.base_url,
        "--concurrency",
        "2",
        "--db",
        str(db),
        "--no-report",
        "--quiet",
    ]
    before = len(oai.log("[sig]"))

    def send(proc: subprocess.Popen[str]) -> None:
        proc.send_signal(sig)  # the run waits on held requests: it cannot have finished
        proc.wait(timeout=300)
        oai.release("[sig]")  # the resume's requests are answered

    figures = _interrupt_then_resume(cmd, db, sig, 2 * N_API, send)
    # the resume (given no --base-url) reached this server, not the default endpoint
    assert len(oai.log("[sig]")) - before >= 2 * N_API
    record(f"signal_api_{name}", **figures, items_lost=0, duplicates=0)
