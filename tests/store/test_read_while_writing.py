"""Reading a database while another process writes it, with real processes (store/snapshot.py).

A `llmscope run` against the scripted OpenAI-compatible server (one request at a time) writes
the file; other processes read it with the CLI, the notebook API and plain read loops. Every
wait is on an event (rows stored, a line printed by a helper process), never on a sleep.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import duckdb
import pytest

from tests.helpers.cli import api_run_args, cli_cmd, cli_env, record
from tests.helpers.midrun import WAIT_S
from tests.helpers.oai import OAIServer, oai, oai_server  # noqa: F401

N = 729  # commonsense-sample's prompts

# A reader loop: snapshot reads of the stored count until a read finds the file free (the writer
# gone); prints every count it saw as one JSON line.
READ_LOOP = textwrap.dedent("""
    import json, sys
    from llmscope.store.db import Store
    counts = []
    while True:
        st = Store(sys.argv[1], read_only=True, snapshot=True)
        try:
            counts.append(st.execute("SELECT count(*) FROM results").fetchone()[0])
            writing = st.snapshot_of is not None
        finally:
            st.close()
        print(counts[-1], flush=True)
        if not writing:
            break
    print(json.dumps(counts), flush=True)
""")

# A reader stopped in the middle of its copy: it holds the snapshot lock shared until killed.
HOLD_SHARED = textwrap.dedent("""
    import fcntl, os, sys, time
    from llmscope.store.snapshot import lock_path
    fd = os.open(lock_path(sys.argv[1]), os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_SH)
    print("holding", flush=True)
    sys.stdin.readline()
""")


def _py(script: str, *args: str, **kw: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        env=cli_env(),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **kw,
    )  # type: ignore[call-overload]


ITEMS = "Consider the statement"  # in every prompt of the suite (not in the server probe)


def _writer(server: OAIServer, db: Path) -> subprocess.Popen[str]:
    """The writing run: its first 300 prompts answered, the rest held until the test releases
    ITEMS, so the reads meet a run mid-way on any machine (tests/helpers/midrun.py)."""
    server.script(ITEMS, hold_after=300)
    return subprocess.Popen(
        cli_cmd(*api_run_args("commonsense-sample", db, server.base_url, "--concurrency", "1")),
        env=cli_env(OPENAI_API_KEY="sk-test"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_stored(db: Path, writer: subprocess.Popen[str], at_least: int = 1) -> int:
    """Read the file (a snapshot while it is written) until it holds `at_least` result rows."""
    from llmscope.store.db import Store, StoreError

    deadline = time.monotonic() + WAIT_S  # catches a hang, not a slow machine
    while time.monotonic() < deadline:
        assert writer.poll() is None, writer.communicate()
        if db.exists():
            try:
                st = Store(db, read_only=True, snapshot=True)
            except StoreError:  # the file is being created
                continue
            try:
                n = (
                    st.execute("SELECT count(*) FROM results").fetchone()[0]
                    if _has_results(st)
                    else 0
                )
            finally:
                st.close()
            if n >= at_least:
                return int(n)
    raise AssertionError(f"{db} never held {at_least} rows")


def _has_results(st: object) -> bool:
    return bool(
        st.execute(  # type: ignore[attr-defined]
            "SELECT 1 FROM duckdb_tables() WHERE table_name = 'results'"
        ).fetchone()
    )


def _final(db: Path) -> tuple[int, int]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        n, errors = con.execute("SELECT count(*), count(error) FROM results").fetchone()  # type: ignore[misc]
    finally:
        con.close()
    return int(n), int(errors)


@pytest.mark.slow
def test_every_read_command_answers_while_a_run_writes(oai: OAIServer, tmp_path: Path) -> None:  # noqa: F811
    db = tmp_path / "w.duckdb"
    writer = _writer(oai, db)
    try:
        first = _wait_stored(db, writer)
        # a reader killed in the middle of its copy (holding the lock) leaves the writer unharmed
        stuck = _py(HOLD_SHARED, str(db), stdin=subprocess.PIPE)
        assert stuck.stdout is not None and stuck.stdout.readline().strip() == "holding"
        stuck.kill()
        stuck.wait(timeout=30)
        loops = [_py(READ_LOOP, str(db)) for _ in range(3)]
        env = cli_env()
        out = tmp_path / "rows.jsonl"

        def cli_read(*args: str) -> subprocess.Popen[str]:
            return subprocess.Popen(
                cli_cmd(*args, "--db", str(db)),
                env=env,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )

        reads = {
            "runs": cli_read("runs", "--json"),
            "report": cli_read("report", "--json"),
            "export": cli_read("export", "--run", "last", "--format", "jsonl", "-o", str(out)),
            "notebook": _py(
                "import llmscope, sys; print(len(llmscope.open(sys.argv[1]).runs()))", str(db)
            ),
        }
        answers = {}
        for name, p in reads.items():
            stdout, stderr = p.communicate(timeout=300)
            assert p.returncode == 0, (name, stderr)
            assert "Traceback" not in stderr, (name, stderr)
            answers[name] = (stdout, stderr)
        # each read saw stored rows; the CLI said in one line that the file is being written
        runs = json.loads(answers["runs"][0])
        assert len(runs) == 1 and runs[0]["n_done"] >= first > 0
        assert answers["runs"][1].count("still being written") == 1
        report = json.loads(answers["report"][0])
        assert report and report[0]["n"] >= first
        assert sum(1 for _ in out.open()) >= first
        assert (
            answers["notebook"][0].strip() == "1"
            and "still being written" in answers["notebook"][1]
        )
        assert writer.poll() is None  # the reads met it mid-way: it cannot end while held
        oai.release(ITEMS)
        stdout, stderr = writer.communicate(timeout=600)
        assert writer.returncode == 0, stderr
        seen = []
        for p in loops:
            lines, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
            seen.append(json.loads(lines.strip().splitlines()[-1]))
    finally:
        for p in [writer, *locals().get("loops", [])]:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert "completed: 729/729 stored, 0 errors" in stderr
    assert _final(db) == (N, 0)
    for counts in seen:  # never down, never above what the writer stored
        assert counts == sorted(counts) and counts[-1] == N and max(counts) <= N
    record(
        "read_while_writing",
        reader_loops=len(seen),
        reads=sum(len(c) for c in seen),
        stored=N,
        errors=0,
    )


def test_kill_9_of_the_writer_during_reads_loses_nothing_flushed(
    oai: OAIServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    db = tmp_path / "w.duckdb"
    writer = _writer(oai, db)
    loop = None
    try:
        _wait_stored(db, writer)
        loop = _py(READ_LOOP, str(db))
        assert loop.stdout is not None
        # the loop has read a snapshot holding rows: kill the writer while it keeps reading
        seen = int(loop.stdout.readline())
        assert writer.poll() is None  # held mid-way
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait(timeout=30)
        rest, err = loop.communicate(timeout=120)
        assert loop.returncode == 0, err
        counts = json.loads(rest.strip().splitlines()[-1])
    finally:
        for p in (writer, loop):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    stored, _ = _final(db)
    assert seen > 0 and counts[0] == seen
    assert counts == sorted(counts) and max(counts) <= stored  # nothing read was lost
    assert counts[-1] == stored  # the last read, of the free file, is the file


def test_study_status_of_a_held_file_equals_the_free_file(tmp_path: Path) -> None:
    """`study status` while an llmscope writer holds the file: the same cells, counts and
    metrics as once it is free, and one line saying it is being written."""
    from tests.helpers.cli import cli
    from tests.helpers.study import NAME, write_study_db

    db = tmp_path / "study.duckdb"
    write_study_db(db, tmp_path)
    free = cli("study", "status", NAME, "--db", str(db), "--json")
    assert free.returncode == 0 and "still being written" not in free.stderr, free.stderr
    holder = _py(
        "import sys; from llmscope.store.db import Store; st = Store(sys.argv[1]);"
        "print('held', flush=True); sys.stdin.readline(); st.close()",
        str(db),
        stdin=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        held = cli("study", "status", NAME, "--db", str(db), "--json")
    finally:
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.close()
        holder.wait(timeout=60)
    assert held.returncode == 0, held.stderr
    assert held.stderr.count("still being written") == 1, held.stderr
    assert json.loads(held.stdout) == json.loads(free.stdout)
