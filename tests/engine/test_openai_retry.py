"""Retries, rate limits, timeouts and HTTP errors of OpenAIBackend (scripted server)."""

from __future__ import annotations

import asyncio
import json
import math
import random
import socket
import time
from contextlib import asynccontextmanager
from email.utils import formatdate

import pytest

from llmscope.engine.backend import BackendError
from llmscope.engine.openai import OpenAIBackend
from llmscope.engine.retry import RetryPolicy, parse_retry_after
from tests.helpers import oai as oai_fixtures
from tests.helpers.midrun import release_when_held
from tests.helpers.oai import OAIServer, start_server, stop_server

YES_NO = ["yes", "no"]
TOP = [["Yes", -0.1], ["No", -2.5]]

oai_server = oai_fixtures.oai_server
oai = oai_fixtures.oai


@asynccontextmanager
async def backend(server: OAIServer, **kw):
    kw.setdefault("timeout", 5.0)
    kw.setdefault("backoff_base", 0.01)  # keep un-told backoffs short in tests
    kw.setdefault("jitter_seed", 0)
    b = OpenAIBackend(model="test-model", base_url=server.base_url, **kw)
    try:
        yield b
    finally:
        await b.aclose()


# ---------------------------------------------------------------- pure timing rules


def test_parse_retry_after_forms() -> None:
    assert parse_retry_after({"Retry-After": "3"}) == 3.0
    assert parse_retry_after({"retry-after": "0.25"}) == 0.25
    assert parse_retry_after({"retry-after-ms": "150", "Retry-After": "9"}) == 0.15
    now = 1_700_000_000.0
    date = formatdate(now + 7, usegmt=True)  # an HTTP date 7 s ahead
    assert parse_retry_after({"Retry-After": date}, now=now) == pytest.approx(7.0)
    assert parse_retry_after({"Retry-After": formatdate(now - 30, usegmt=True)}, now=now) == 0.0
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after({}) is None and parse_retry_after(None) is None


def test_backoff_full_jitter_windows_and_retry_after() -> None:
    p = RetryPolicy(base=0.5, cap=4.0, max_retry_after=10.0)
    rng = random.Random(1)
    for attempt, window in [(0, 0.5), (1, 1.0), (2, 2.0), (3, 4.0), (6, 4.0)]:
        delays = [p.delay(attempt, None, rng) for _ in range(200)]
        assert all(0.0 <= d <= window for d in delays)
        assert max(delays) > 0.8 * window  # full jitter spreads over the whole window
    assert all(0.2 <= p.delay(5, 0.2, rng) <= 0.22 for _ in range(50))
    assert all(10.0 <= p.delay(0, 3600.0, rng) <= 11.0 for _ in range(10))  # capped


# ---------------------------------------------------------------- over HTTP


async def test_429_retry_after_is_honoured_and_counted(oai: OAIServer) -> None:
    m = oai.script(
        "[429]",
        top=TOP,
        faults=[
            {"status": 429, "headers": {"Retry-After": "0.2"}},
            {"status": 429, "headers": {"retry-after-ms": "200"}},
        ],
    )
    async with backend(oai) as b:
        t0 = time.monotonic()
        out = await b.next_token(f"{m} q", YES_NO)
        elapsed = time.monotonic() - t0
        st = b.stats()
    assert out.meta["rule"] == "all-present"
    assert (st["requests"], st["retries"], st["rate_limited"], st["failed"]) == (3, 2, 2, 0)
    assert elapsed >= 0.4
    t = [r["t"] for r in oai.log(m)]
    assert t[1] - t[0] >= 0.2 and t[2] - t[1] >= 0.2  # as seen by the server


async def test_500_and_malformed_bodies_are_retried(oai: OAIServer) -> None:
    m = oai.script("[5xx]", top=TOP, faults=[{"status": 500}, {"malformed": True}, {"status": 503}])
    async with backend(oai) as b:
        out = await b.next_token(f"{m} q", YES_NO)
        st = b.stats()
    assert out.probs["yes"] > 0.9
    assert (st["server_errors"], st["malformed"], st["retries"], st["requests"]) == (2, 1, 3, 4)


async def test_json_without_choices_counts_as_malformed(oai: OAIServer) -> None:
    m = oai.script(
        "[nochoices]", top=TOP, faults=[{"json": {"error": "busy"}}, {"json": {"choices": []}}]
    )
    async with backend(oai) as b:
        out = await b.next_token(f"{m} q", YES_NO)
        st = b.stats()
    assert out.meta["rule"] == "all-present"
    assert (st["malformed"], st["retries"], st["requests"]) == (2, 2, 3)


async def test_retries_exhausted_raise(oai: OAIServer) -> None:
    m = oai.script("[tired]", faults=[{"status": 429, "headers": {"Retry-After": "0.01"}}] * 5)
    async with backend(oai, max_retries=2) as b:
        with pytest.raises(BackendError, match=r"giving up after 2 retries: HTTP 429"):
            await b.next_token(f"{m} q", YES_NO)
        st = b.stats()
    assert (st["requests"], st["retries"], st["rate_limited"], st["failed"]) == (3, 2, 3, 1)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_other_4xx_fail_at_once_with_status_and_message(oai: OAIServer, status: int) -> None:
    m = oai.script(
        f"[e{status}]", error={"status": status, "message": f"scripted failure {status}"}
    )
    async with backend(oai) as b:
        with pytest.raises(BackendError, match=rf"HTTP {status}: scripted failure {status}"):
            await b.next_token(f"{m} q", YES_NO)
        st = b.stats()
    assert (st["requests"], st["retries"], st["failed"]) == (1, 0, 1)


async def test_timeout_is_retried_and_does_not_hang(oai: OAIServer) -> None:
    m = oai.script("[slow]", top=TOP, faults=[{"sleep": 3.0}])
    async with backend(oai, timeout=0.3) as b:
        out = await asyncio.wait_for(b.next_token(f"{m} q", YES_NO), 30)
        st = b.stats()
    assert out.meta["rule"] == "all-present"
    # the held first request timed out and was retried; on a loaded machine a retry may also
    # miss the short timeout, and is retried in turn: every timeout is followed by one retry
    assert st["timeouts"] >= 1
    assert st["retries"] == st["timeouts"] and st["requests"] == st["timeouts"] + 1


async def test_timeout_without_retries_raises(oai: OAIServer) -> None:
    m = oai.script("[stuck]", faults=[{"sleep": 3.0}])
    async with backend(oai, timeout=0.2, max_retries=0) as b:
        with pytest.raises(BackendError, match="timed out"):
            await asyncio.wait_for(b.next_token(f"{m} q", YES_NO), 30)
        assert b.stats()["timeouts"] == 1


async def test_connection_refused_is_retried_then_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    b = OpenAIBackend(
        model="m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=2, backoff_base=0.01
    )
    try:
        with pytest.raises(BackendError, match="connection error"):
            await asyncio.wait_for(b.next_token("q", YES_NO), 30)
        st = b.stats()
    finally:
        await b.aclose()
    assert (st["connection_errors"], st["retries"], st["failed"]) == (3, 2, 1)


async def test_concurrency_limit(oai: OAIServer) -> None:
    # the first answered (it settles log-prob support), then requests held until 3 wait at
    # once (the limit) and let go: never a 4th in flight
    m = oai.script("[busy]", top=TOP, hold_after=1)
    async with backend(oai, concurrency=3, timeout=300) as b:
        outs = await asyncio.gather(
            release_when_held((oai, m, 3)),
            *(b.next_token(f"{m} {i}", YES_NO) for i in range(12)),
        )
        assert b.stats()["in_flight"] == 0
    assert len(outs[1:]) == 12
    assert oai.server_stats()["max_active"][m] == 3


async def test_scenario_file_scripts_and_faults(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = {
        "scripts": {
            "[file]": {
                "top": [["No", -0.2], ["Yes", -1.8]],
                "faults": [{"status": 500}, {"status": 429, "headers": {"Retry-After": "0.05"}}],
            }
        }
    }
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(scenario))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    server = start_server("--scenario", str(path))
    try:
        async with backend(server) as b:
            out = await b.next_token("[file] q", YES_NO)
            st = b.stats()
    finally:
        stop_server(server)
    s = math.exp(-0.2) + math.exp(-1.8)
    assert out.probs["no"] == pytest.approx(math.exp(-0.2) / s)
    assert (st["server_errors"], st["rate_limited"], st["retries"]) == (1, 1, 2)
