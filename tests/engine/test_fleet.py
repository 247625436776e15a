"""Several base URLs when a replica dies: the others finish the run, every item once, and the
run record names what happened; a replica that comes back rejoins the rotation.

The rotation rules on a hand-driven clock, then two real scripted servers over HTTP (one
killed mid-run, then restarted on its port); the real-vLLM version is in
tests/engine/test_vllm_fleet.py."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from llmscope.engine.fleet import COOL_OFF_MAX_S, COOL_OFF_S, Fleet
from llmscope.engine.openai import OpenAIBackend
from tests.helpers.cli import api_run_args, write_api_suite
from tests.helpers.midrun import wait_until
from tests.helpers.oai import CANARY_KEY, start_server, stop_server
from tests.helpers.tui import HANG_S

TOP = [["Yes", -0.3], ["No", -1.6]]


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_a_dead_replica_leaves_the_rotation_and_gets_a_trial_after_its_cool_off() -> None:
    clock = Clock()
    f = Fleet(["http://a/v1", "http://b/v1", "http://c/v1"], clock=clock, wall=lambda: 5.0)
    assert [f.pick() for _ in range(6)] == [0, 1, 2, 0, 1, 2]
    assert f.failed(1, "connection error: refused") is True  # others are up: retry elsewhere
    assert [f.pick() for _ in range(4)] == [0, 2, 0, 2]
    # more failures of in-flight requests on the dead replica: still one `down` event
    f.failed(1, "connection error: reset")
    assert [e["event"] for e in f.events] == ["down"]
    clock.t += COOL_OFF_S
    assert f.pick() == 1  # its trial
    assert f.pick() != 1  # only one trial at a time
    f.failed(1, "connection error: refused")  # trial failed: twice the cool-off
    clock.t += COOL_OFF_S
    assert 1 not in [f.pick() for _ in range(4)]
    clock.t += COOL_OFF_S
    assert f.pick() == 1
    f.answered(1)
    assert f.healthy() == 3
    assert [(e["event"], e["endpoint"], e["url"]) for e in f.events] == [
        ("down", 1, "http://b/v1"),
        ("back", 1, "http://b/v1"),
    ]
    s = f.summary()
    assert s["endpoints_up"] == [True, True, True] and s["endpoint_failures"] == [0, 3, 0]


def test_cool_off_is_capped_and_every_replica_down_picks_the_earliest() -> None:
    clock = Clock()
    f = Fleet(["a", "b"], clock=clock)
    f.failed(0, "x")
    assert f.failed(1, "x") is False  # nobody left: the caller's breaker counts this one
    for _ in range(10):  # failed trials double the cool-off, up to the cap
        clock.t += COOL_OFF_MAX_S
        i = f.pick()
        f.failed(i, "x")
    assert max(r.cool_off for r in f.replicas) == COOL_OFF_MAX_S
    assert f.pick() in (0, 1)


def test_one_url_is_always_picked() -> None:
    f = Fleet(["a"])
    assert f.failed(0, "x") is False
    assert f.pick() == 0 and f.events == []


async def test_backend_finishes_every_call_when_a_replica_dies_and_takes_it_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    a, b = start_server(), start_server()
    port_b = b.port
    be = OpenAIBackend(
        "test-model", base_url=[a.base_url, b.base_url], concurrency=2, timeout=5, breaker_after=3
    )
    try:
        for s in (a, b):
            s.script("[f]", top=TOP, delay=0.05)
        first = await asyncio.gather(*(be.next_token(f"[f] {i}", ["yes", "no"]) for i in range(8)))
        assert len(b.log("[f]")) >= 3
        stop_server(b)
        # more calls than the breaker's limit: the failures on b are not "the server is gone"
        second = await asyncio.gather(
            *(be.next_token(f"[f] {i}", ["yes", "no"]) for i in range(8, 20))
        )
        st = be.stats()
        assert st["breaker"] is None
        assert st["endpoints_up"] == [True, False]
        assert [(e["event"], e["endpoint"]) for e in st["endpoint_events"]] == [("down", 1)]
        assert "connection error" in st["endpoint_events"][0]["reason"]
        assert len(first) + len(second) == 20
        assert all(o.probs["yes"] > o.probs["no"] for o in first + second)
        # b comes back on its port: after the cool-off it is tried and rejoins
        b = start_server("--port", str(port_b))
        b.script("[f]", top=TOP, delay=0.05)
        # (a loaded machine may have spent a cool-off and a failed trial while b was down, which
        # doubles the next wait: calls go on until b's trial is due, bounded only by HANG_S)
        end = time.monotonic() + HANG_S
        await asyncio.sleep(COOL_OFF_S + 0.2)
        i = 20
        while True:
            await asyncio.gather(
                *(be.next_token(f"[f] {k}", ["yes", "no"]) for k in range(i, i + 10))
            )
            i += 10
            st = be.stats()
            if st["endpoints_up"] == [True, True] or time.monotonic() > end:
                break
            await asyncio.sleep(0.5)
        assert st["endpoints_up"] == [True, True]
        assert [e["event"] for e in st["endpoint_events"]] == ["down", "back"]
        # its trial came first; once it answered, requests waiting for a slot went to it too
        after_trial = len(b.log("[f]"))
        assert after_trial >= 1
        await asyncio.gather(*(be.next_token(f"[f] {k}", ["yes", "no"]) for k in range(i, i + 10)))
        assert len(b.log("[f]")) > after_trial  # back in the rotation
    finally:
        await be.aclose()
        stop_server(a)
        stop_server(b)


def _items(tmp_path: Path, n: int) -> Path:
    texts = [f"s{k}" for k in range(n)]
    template = "[kill] {text} Answer yes or no."
    return write_api_suite(tmp_path, texts, "f", ids="i{k:03d}", template=template)


def test_cli_run_loses_a_replica_mid_run_and_stores_every_item_once(tmp_path: Path) -> None:
    a, b = start_server(), start_server()
    try:
        # b answers 8, then holds its next request until it is stopped: it goes down mid-run,
        # with work of the run in its hands, on any machine (tests/helpers/midrun.py)
        a.script("[kill]", top=TOP)
        b.script("[kill]", top=TOP, hold_after=8)
        n = 60
        spec, db = _items(tmp_path, n), tmp_path / "r.duckdb"
        env = {**os.environ, "OPENAI_API_KEY": CANARY_KEY, "OMP_NUM_THREADS": "1"}
        env.pop("OPENAI_BASE_URL", None)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "llmscope",
                *api_run_args(
                    spec,
                    db,
                    a.base_url,
                    "--base-url",
                    b.base_url,
                    "--concurrency",
                    "2",
                    "--quiet",
                    "--no-report",
                ),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        wait_until(lambda: b.held("[kill]"), "a request was held by replica b", proc)
        stop_server(b)  # mid-run: the held request fails over to a
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
        con = duckdb.connect(str(db), read_only=True)
        ids = [r[0] for r in con.execute("select item_id from results").fetchall()]
        errors = con.execute("select count(*) from results where error is not null").fetchone()[0]
        status, meta = con.execute("select status, meta from runs").fetchone()
        con.close()
        assert sorted(ids) == [f"i{k:03d}" for k in range(n)]  # 0 lost, 0 duplicated
        assert errors == 0 and status == "completed"
        stats = json.loads(meta)["backend_stats"]
        events = stats["endpoint_events"]
        assert [(e["event"], e["url"]) for e in events] == [("down", b.base_url)]
        assert stats["endpoints_up"] == [True, False]
        assert stats["breaker"] is None
    finally:
        stop_server(a)
        stop_server(b)


def test_pick_waits_for_a_free_slot_and_never_picks_an_excluded_replica() -> None:
    clock = Clock()
    f = Fleet(["a", "b", "c"], clock=clock)
    busy = {0: True, 1: False, 2: False}
    assert [f.pick(lambda i: not busy[i]) for _ in range(4)] == [1, 2, 1, 2]
    busy.update({1: True, 2: True})
    assert f.pick(lambda i: not busy[i]) is None  # every replica in the rotation is busy: wait
    f.exclude(1, "model_changed", "now serves 'x'")
    f.exclude(1, "model_changed", "again")  # one event
    busy = {0: False, 1: False, 2: False}
    assert 1 not in [f.pick(lambda i: not busy[i]) for _ in range(6)]
    f.answered(1)  # an answer does not bring back a replica of another model
    assert f.usable() == 2 and f.healthy() == 2
    assert [(e["event"], e["endpoint"]) for e in f.events] == [("model_changed", 1)]
    assert f.summary()["endpoints_excluded"] == [None, "now serves 'x'", None]
    f.failed(0, "x")
    f.failed(2, "x")
    assert f.next_trial_in() == COOL_OFF_S
    f.exclude(0, "model_changed", "y")
    f.exclude(2, "model_changed", "y")
    assert f.usable() == 0 and f.pick() is None and f.next_trial_in() is None
