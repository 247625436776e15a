"""Faults of the database file itself: a disk that fills during the final
checkpoint, a WAL damaged after a crash, a recycled owner pid.

Real processes, a real DuckDB file, the scripted OpenAI-wire server (no weights loaded). The
full disk is a per-process file size limit (RLIMIT_FSIZE, with SIGXFSZ ignored so that a write
past it fails with EFBIG as on a full disk): no mount or root needed.
"""

from __future__ import annotations

import datetime as dt
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from llmscope.store.db import Store
from llmscope.store.errors import StoreError
from llmscope.store.run_status import effective_status, process_started_at
from tests.helpers.cli import (
    api_run_args,
    cli_cmd,
    cli_env,
    module_figures,
    start_api_run,
    write_yesno_suite,
)
from tests.helpers.midrun import wait_stored
from tests.helpers.oai import OAIServer, oai_server  # noqa: F401

pytestmark = pytest.mark.reliability

FIGURES, _figures = module_figures("database_file", merge=True)


def _run(
    spec: Path, db: Path, server: OAIServer, *extra: str, fsize: int | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    def limit() -> None:  # in the child, before exec
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return subprocess.run(
        cli_cmd(
            *api_run_args(spec, db, server.base_url),
            "--no-report",
            "--quiet",
            "--no-cache",
            *extra,
        ),
        env=cli_env(OPENAI_API_KEY="sk-test", PYTHONDONTWRITEBYTECODE="1", **env),
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=limit if fsize is not None else None,
    )


def _results(db: Path) -> int:
    con = duckdb.connect(str(db))  # read-write: replays a WAL left behind
    try:
        return int(
            con.execute("SELECT count(DISTINCT (item_id, variant)) FROM results").fetchone()[0]
        )
    finally:
        con.close()


def test_full_disk_at_the_final_checkpoint(tmp_path: Path, oai_server: OAIServer) -> None:
    """The run's rows fit in the WAL, the checkpoint that folds them into the file does not:
    the command must not report success, and must say where the rows are."""
    n = 60
    spec = write_yesno_suite(tmp_path / "s", n)
    db = tmp_path / "full.duckdb"
    Store(db).close()  # an empty file of the current schema, made without the limit
    size = db.stat().st_size
    proc = _run(spec, db, oai_server, fsize=size + 64 * 1024)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    err = proc.stderr.lower()
    assert "could not fold the write log" in err and f"{db}.wal".lower() in err, proc.stderr
    assert Path(f"{db}.wal").stat().st_size > 0  # the rows are there, as said
    # With room again, opening the file folds the log in: nothing was lost.
    assert _results(db) == 2 * n
    assert not Path(f"{db}.wal").exists()
    FIGURES["full_disk_final_checkpoint"] = (
        f"exit 2 naming {db.name}.wal (was: exit 0 `completed`); reopened: {2 * n}/{2 * n} rows"
    )


def test_periodic_checkpoints_keep_the_file_self_contained(
    tmp_path: Path, oai_server: OAIServer
) -> None:
    """With checkpoints every 0 s (every write), a run killed by SIGKILL leaves its rows in the
    file itself, not only in the WAL."""
    n = 150
    spec = write_yesno_suite(tmp_path / "s", n)
    oai_server.script("Question", hold_after=20)  # then held: the kill lands mid-run on any machine
    db = tmp_path / "ck.duckdb"
    proc = start_api_run(
        spec, db, oai_server.base_url, "--concurrency", "1", LLMSCOPE_CHECKPOINT_S="0"
    )
    try:
        wait_stored(db, proc)  # rows written (and, every 0 s, checkpointed) before the kill
        proc.kill()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    oai_server.reset()
    # The file alone (its WAL moved aside) holds the rows written before the kill.
    wal = Path(f"{db}.wal")
    if wal.exists():
        wal.rename(tmp_path / "aside.wal")
    in_file = _results(db)
    assert in_file > 0, "without a checkpoint during the run, every row was only in the WAL"
    FIGURES["kill_9_rows_in_file_alone"] = f"{in_file} rows readable without the WAL (was: 0)"


def _killed_run(tmp_path: Path) -> tuple[Path, int]:
    """A file whose last session was killed with its rows in the WAL (no checkpoint)."""
    code = (
        "import os, sys\n"
        "from llmscope.store.db import Store\n"
        "s = Store(sys.argv[1])\n"
        "s.create_run({'run_id': 'r1', 'suite_id': 's', 'status': 'running'})\n"
        "for b in range(4):\n"
        "    s.append_results('r1', {'item_id': [f'i{b}-{k}' for k in range(500)], 'variant': ['v'] * 500,\n"
        "                            'prompt': ['p' * 50] * 500}, start_seq=b * 500)\n"
        "os._exit(0)\n"  # like kill -9: no checkpoint, no close
    )
    db = tmp_path / "crashed.duckdb"
    subprocess.run(
        [sys.executable, "-c", code, str(db)], check=True, env=cli_env(LLMSCOPE_CHECKPOINT_S="3600")
    )
    return db, Path(f"{db}.wal").stat().st_size


def test_damaged_wal_says_how_to_recover(tmp_path: Path) -> None:
    db, size = _killed_run(tmp_path)
    wal = Path(f"{db}.wal")
    data = bytearray(wal.read_bytes())
    data[size * 3 // 4] ^= 0xFF  # one flipped byte in the last quarter of the log
    wal.write_bytes(bytes(data))
    with pytest.raises(StoreError) as e:
        Store(db)
    msg = str(e.value)
    assert "write log" in msg and "damaged" in msg and str(wal) in msg, msg
    assert "os.truncate" in msg, msg
    cut = int(msg.split(f"os.truncate('{wal}', ")[1].split(")")[0])
    kept = int(msg.split("the file then holds ")[1].split(" ")[0])
    # The CLI says the same in one line, without a traceback, and changes nothing.
    before = wal.read_bytes()
    proc = subprocess.run(
        cli_cmd("runs", "--db", str(db)), env=cli_env(), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "os.truncate" in proc.stderr and wal.read_bytes() == before
    # Follow the advice: the rows before the damage come back, exactly as many as it said.
    os.truncate(wal, cut)
    with Store(db) as s:
        assert s.count_results("r1")[0] == kept
    assert 0 < kept < 2000
    FIGURES["damaged_wal"] = (
        f"clear error with the cut; {kept}/2000 rows kept (was: no hint, 0 readable)"
    )


def test_recycled_pid_is_not_the_owner() -> None:
    """A `running` run whose recorded pid now belongs to a process started after the run's last
    heartbeat reads `interrupted` (before: `running` for 600 s, naming that process)."""
    import socket

    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    me = process_started_at(os.getpid())
    assert me is not None and abs((me - now).total_seconds()) < 3600
    # this test process started before now: as owner with a fresh beat, it runs
    rec = {
        "status": "running",
        "owner_pid": os.getpid(),
        "owner_host": socket.gethostname(),
        "heartbeat_at": now,
    }
    assert effective_status(rec, now) == "running"
    # a beat recorded before this process started: this process cannot have written it
    rec["heartbeat_at"] = me - dt.timedelta(seconds=30)
    assert effective_status(rec, now) == "interrupted"
    FIGURES["recycled_pid"] = "interrupted at once (was: running for 600 s)"


def test_resume_of_a_run_whose_pid_was_recycled(tmp_path: Path, oai_server: OAIServer) -> None:
    """`--resume` of a run left `running` whose pid now belongs to an unrelated process (a
    `sleep` started after the run's last heartbeat): it resumes, instead of being refused as
    "being written by process <sleep>" for 600 s."""
    import socket

    n = 5
    spec = write_yesno_suite(tmp_path / "s", n)
    db = tmp_path / "pid.duckdb"
    first = _run(spec, db, oai_server)
    assert first.returncode == 0, first.stderr
    beat = dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(seconds=10)
    sleeper = subprocess.Popen(["sleep", "60"])  # started > 2 s after that beat
    try:
        with Store(db) as s:
            (rid,) = [r[0] for r in s.execute("SELECT run_id FROM runs").fetchall()]
            s.execute("DELETE FROM results WHERE variant = 'b'")  # something left to do
            s.update_run(
                rid,
                status="running",
                owner_pid=sleeper.pid,
                owner_host=socket.gethostname(),
                heartbeat_at=beat,
                ended_at=None,
            )
            s.checkpoint()
        proc = subprocess.run(
            cli_cmd(
                "run",
                "--resume",
                rid,
                "--db",
                str(db),
                "--no-report",
                "--quiet",
                "--no-cache",
                "--base-url",
                oai_server.base_url,
            ),
            env=cli_env(OPENAI_API_KEY="sk-test"),
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        sleeper.kill()
        sleeper.wait()
    assert proc.returncode == 0, proc.stderr
    assert str(sleeper.pid) not in proc.stderr
    assert _results(db) == 2 * n
