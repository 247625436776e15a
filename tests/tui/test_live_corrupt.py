"""A damaged live channel: a progress file that is not UTF-8 or not a JSON
object, and one bad line in a run's results.jsonl. Readers skip the bad records, keep every
valid one and say how many they skipped: `llmscope view` still lists the live run (with a
notice), the dashboard's tail keeps the rows after the bad line, and the "in use" error of a
run refused by the lock stays one line (no chained tracebacks)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from llmscope.runs.live import ResultTail, live_dir, read_live
from llmscope.tui.app import LlmscopeApp
from llmscope.tui.screens import HomeScreen
from tests.helpers.cli import api_run_args, cli_cmd, cli_env, record, write_yesno_suite
from tests.helpers.paths import ROOT
from tests.helpers.tui import make_db, screen_text, wait_until
from tests.helpers.tui_pilot import started
from tests.tui.test_watch import WRITER

BAD_PROGRESS = {
    "not-utf8": b'{"run": {"run_id": "x\xff\xfe"}, "time": 1}',
    "a-list": b"[1, 2, 3]",
    "run-not-object": b'{"run": [1], "progress": {}, "time": 2}',
}


@pytest.fixture
def damaged(tmp_path: Path):
    """A writer holding the file and publishing run-w (5 of 12 rows so far), three damaged
    progress files beside it, and a bad line in run-w's results before the next 7 rows."""
    db = make_db(tmp_path / "w.duckdb")
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER.format(root=str(ROOT), db=str(db))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    base = live_dir(db)
    for name, data in BAD_PROGRESS.items():
        (base / name).mkdir()
        (base / name / "progress.json").write_bytes(data)
    with open(base / "run-w" / "results.jsonl", "ab") as f:
        f.write(b'{"item_id": "s099", "variant": "\xff\xfe broken\n')  # not UTF-8
        f.write(b'"just a string"\n')  # JSON, not a row
    yield db, proc
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)


def _finish(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("go\n")
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == "ended"


def test_readers_skip_bad_records_and_keep_the_rest(damaged) -> None:
    db, proc = damaged
    snaps = read_live(db)
    assert [s["run"]["run_id"] for s in snaps] == ["run-w"]
    assert sorted(Path(p).parent.name for p in snaps.skipped) == sorted(BAD_PROGRESS)
    tail = ResultTail(live_dir(db) / "run-w" / "results.jsonl")
    first = tail.read_new()
    _finish(proc)  # 7 more rows after the bad lines
    rest = tail.read_new()
    assert len(first) == 5 and len(rest) == 7  # before: the chunk with the bad line was lost
    assert tail.skipped == 2
    assert tail.detail(rest[-1]["item_id"])[0]["item_id"] == rest[-1]["item_id"]
    record(
        "live_channel_damage",
        merge=True,
        bad_progress_files=f"{len(BAD_PROGRESS)} skipped, run listed",
        bad_result_lines="2 skipped, 12/12 valid rows kept",
    )


def test_in_use_message_stays_one_line(damaged, tmp_path: Path) -> None:
    db, _ = damaged
    spec = write_yesno_suite(tmp_path / "s", 3)
    p = subprocess.run(
        # nothing listens at the URL: the run is refused before it asks the server anything
        cli_cmd(*api_run_args(spec, db, "http://127.0.0.1:9/v1", "--no-report")),
        env=cli_env(OPENAI_API_KEY="sk-test", LLMSCOPE_LOCK_WAIT="0.3"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert "in use by another process" in p.stderr and "it is writing run run-w" in p.stderr
    assert "3 unreadable live-channel file(s) skipped" in p.stderr


async def test_view_lists_the_live_run_and_says_what_it_skipped(damaged) -> None:
    db, _ = damaged
    app = LlmscopeApp(db, watch=True, refresh_s=0.1)
    async with started(app, (160, 40)) as pilot:
        assert isinstance(app.screen, HomeScreen)
        assert await wait_until(pilot, lambda: "running (live)" in screen_text(app))
        text = screen_text(app)
        assert "run-w" in text and "3 unreadable live-channel file(s) skipped" in text, text


def test_live_run_whose_pid_was_recycled_reads_stopped() -> None:
    """A live-channel run without `ended` whose pid now belongs to a process started after the
    writer last published (kill -9, then the pid reused) is shown stopped, not `running (live)`."""
    import socket
    import time

    from llmscope.tui.data.live import owner_gone

    published = time.time() - 10
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        run = {"owner_pid": sleeper.pid, "owner_host": socket.gethostname()}
        assert owner_gone(run, published)  # started after the last publication: not the writer
        assert not owner_gone(run, time.time() + 5)  # published after it started: may be it
    finally:
        sleeper.kill()
        sleeper.wait()
    assert owner_gone(run, None)  # no such process any more
