"""Run status truth: a failed write ends the run `failed` with the error (never
`running`), the live channel gets `ended`, and a later session retries nothing twice;
`effective_status` judges owners by pid (same host) and heartbeat (other hosts)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import socket
from pathlib import Path
from typing import Any

import pytest

from llmscope.data.suites import load_suite
from llmscope.engine import runner as runner_mod
from llmscope.engine.types import NextTokenOut, TopToken
from llmscope.runs.live import LiveWriter
from llmscope.store.db import Store
from llmscope.store.errors import StoreError
from llmscope.store.run_status import STALE_REMOTE_S, effective_status
from tests.helpers.fakes import TableBackend


class ConstBackend(TableBackend):
    """P(yes) = 0.7, P(no) = 0.2 for every prompt."""

    async def next_token(
        self, prompt: str, answers: list[str], *, chat: bool = True, top_k: int = 20
    ) -> NextTokenOut:
        probs = {"yes": 0.7, "no": 0.2}
        return NextTokenOut(
            prompt=prompt,
            probs={a: probs.get(a, 0.0) for a in answers},
            other=0.1,
            top=[TopToken("yes", 1, 0.7), TopToken("no", 2, 0.2)],
            n_tokens=3,
        )


class FullDiskStore(Store):
    """Fails every results write after the first (as a disk that filled up would)."""

    writes = 0

    def write_results(self, run_id: str, results: Any, start_seq: int = 0) -> int:
        FullDiskStore.writes += 1
        if FullDiskStore.writes > 1:
            raise StoreError(
                f"cannot write {self.path}: the disk is full (simulated); nothing was half-written"
            )
        return super().write_results(run_id, results, start_seq)


def _suite(folder: Path, n: int) -> Any:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "items.jsonl").write_text(
        "".join(
            json.dumps({"id": f"i{k}", "text": f"claim {k}", "gold": "yes"}) + "\n"
            for k in range(n)
        )
    )
    (folder / "suite.yaml").write_text(
        "name: st\ntask: yesno\nitems: items.jsonl\ntemplates:\n  a: '{text}?'\n"
    )
    return load_suite(str(folder / "suite.yaml"))


def test_a_failed_write_ends_the_run_failed_with_the_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner_mod, "FLUSH_ROWS", 4)  # several writes for a small suite
    db = tmp_path / "f.duckdb"
    suite = _suite(tmp_path / "s", 40)
    FullDiskStore.writes = 0
    store = FullDiskStore(db)
    plan = runner_mod.RunPlan(suite=suite, model_label="const", model_arg="const", window=4)
    runner = runner_mod.Runner(plan, ConstBackend(), store, LiveWriter(db))
    with pytest.raises(StoreError, match="disk is full"):
        asyncio.run(runner.run())
    run = store.get_run(runner.run_id)
    assert run is not None
    assert run["status"] == "failed" and run["stored_status"] == "failed"
    assert "disk is full" in (run["error"] or "")
    n_stored, _ = store.count_results(runner.run_id)
    assert 0 < n_stored < 40 and run["n_done"] == n_stored  # the record counts what is stored
    assert (Path(str(db) + ".live") / runner.run_id / "ended").exists()
    store.close()
    # the next session (disk fixed) continues it: nothing twice, nothing lost, error cleared
    with Store(db) as s2:
        plan2 = runner_mod.RunPlan(
            suite=suite, model_label="const", model_arg="const", window=4, run_id=runner.run_id
        )
        prog = asyncio.run(runner_mod.Runner(plan2, ConstBackend(), s2).run())
        assert prog.done == 40
        run2 = s2.get_run(runner.run_id)
        assert run2 is not None and run2["status"] == "completed" and run2["error"] is None
        rows = s2.execute("SELECT item_id FROM results").fetchall()
        assert len(rows) == 40 and len(set(rows)) == 40


# The real time: an owner (this process) writes its heartbeat after it started (a beat from
# before its start time would be a recycled pid, store.run_status `_owner_alive`).
NOW = dt.datetime.now(dt.UTC).replace(tzinfo=None)


@pytest.mark.parametrize(
    ("rec", "expected"),
    [
        ({"status": "completed"}, "completed"),
        # same host, this (live) process, fresh heartbeat
        (
            {"status": "running", "owner_pid": "SELF", "owner_host": "HERE", "heartbeat_at": NOW},
            "running",
        ),
        # same host, live pid but silent for an hour (pid reused, or hung)
        (
            {
                "status": "running",
                "owner_pid": "SELF",
                "owner_host": "HERE",
                "heartbeat_at": NOW - dt.timedelta(hours=1),
            },
            "interrupted",
        ),
        # another host: judged by the heartbeat alone
        (
            {
                "status": "running",
                "owner_pid": 1,
                "owner_host": "elsewhere",
                "heartbeat_at": NOW - dt.timedelta(seconds=10),
            },
            "running",
        ),
        (
            {
                "status": "running",
                "owner_pid": 1,
                "owner_host": "elsewhere",
                "heartbeat_at": NOW - dt.timedelta(seconds=STALE_REMOTE_S + 1),
            },
            "interrupted",
        ),
        # no owner at all (written before schema 3): only a fresh update keeps it running
        ({"status": "running", "updated_at": NOW - dt.timedelta(days=1)}, "interrupted"),
    ],
)
def test_effective_status(rec: dict[str, Any], expected: str) -> None:
    import os

    rec = {
        k: (os.getpid() if v == "SELF" else socket.gethostname() if v == "HERE" else v)
        for k, v in rec.items()
    }
    assert effective_status(rec, now=NOW) == expected


def test_a_dead_owner_on_this_host_is_interrupted() -> None:
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    rec = {
        "status": "running",
        "owner_pid": p.pid,
        "owner_host": socket.gethostname(),
        "heartbeat_at": NOW,
    }
    assert effective_status(rec, now=NOW) == "interrupted"


def test_live_channel_of_a_killed_writer_reads_stopped(tmp_path: Path) -> None:
    import subprocess
    import sys

    from llmscope.tui.data.live import active_live_runs, live_runs

    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    d = tmp_path / "x.duckdb.live" / "run-k"
    d.mkdir(parents=True)
    run = {
        "run_id": "run-k",
        "owner_pid": p.pid,
        "owner_host": socket.gethostname(),
        "status": "running",
    }
    (d / "progress.json").write_text(
        json.dumps({"run": run, "progress": {"run_id": "run-k", "status": "running"}})
    )
    (row,) = live_runs(tmp_path / "x.duckdb")
    assert row["ended"] and row["status"] == "interrupted" and not row["live"]
    assert active_live_runs(tmp_path / "x.duckdb") == []
    # a live writer (this process) stays live
    run["owner_pid"] = __import__("os").getpid()
    (d / "progress.json").write_text(
        json.dumps({"run": run, "progress": {"run_id": "run-k", "status": "running"}})
    )
    (row,) = live_runs(tmp_path / "x.duckdb")
    assert row["live"] and row["status"] == "running (live)"
