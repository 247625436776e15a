"""Fault-injection load test: a seeded fraction of 429/500/timeouts/malformed bodies.

Every call must still succeed with the right numbers, and the backend's counters must
match the faults the server says it injected.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator

import pytest

from llmscope.engine.backend import GenParams
from llmscope.engine.openai import OpenAIBackend
from tests.helpers.oai import OAIServer, start_server, stop_server

pytestmark = pytest.mark.reliability

TOP = [["Yes", -0.45], ["No", -1.3], ["Perhaps", -2.6]]  # top-k mass 0.984 (<= 1)


@pytest.fixture(scope="module")
def faulty() -> Iterator[OAIServer]:
    server = start_server("--fault-seed", "7", "--fault-sleep", "2.0", "--retry-after", "0.01")
    try:
        yield server
    finally:
        stop_server(server)


async def _run(server: OAIServer, n_calls: int, rate: float, concurrency: int, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-load")
    server.reset()
    m = server.script("[load]", top=TOP, content="Paris", token_logprobs={" sat": -2.0})
    server.faults(rate=rate, seed=11)
    b = OpenAIBackend(
        model="test-model",
        base_url=server.base_url,
        concurrency=concurrency,
        timeout=0.6,
        max_retries=30,  # 31 faults in a row at rate 0.3 is ~1e-16
        backoff_base=0.01,
        backoff_cap=0.2,
        jitter_seed=3,
        # random faults only: a run of identical 500s or timeouts here is chance, not a
        # broken server (those rules have their own tests in test_openai_faults.py)
        deterministic_after=0,
        breaker_after=0,
        echo_check=False,
    )
    try:

        async def one(i: int):
            if i % 5 == 3:
                return await b.loglik([(f"{m} {i} The cat", " sat")])
            if i % 5 == 4:
                return await b.generate(f"{m} {i}", GenParams(max_new_tokens=4))
            return await b.next_token(f"{m} {i}", ["yes", "no"])

        outs = await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(n_calls))), 300)
        st = b.stats()
    finally:
        await b.aclose()
    s = math.exp(-0.45) + math.exp(-1.3) + math.exp(-2.6)
    for i, out in enumerate(outs):
        if i % 5 == 3:
            assert out[0].logprob == pytest.approx(-2.0)
        elif i % 5 == 4:
            assert out.texts == ["Paris"]
        else:
            assert out.probs["yes"] == pytest.approx(math.exp(-0.45) / s)
            assert out.probs["no"] == pytest.approx(math.exp(-1.3) / s)
            assert out.other == pytest.approx(math.exp(-2.6) / s)
    injected = server.server_stats()["injected"]
    assert sum(injected.values()) > 0
    assert st["failed"] == 0
    assert st["rate_limited"] == injected["429"]
    assert st["server_errors"] == injected["500"]
    # A normal answer can also outlast the short client timeout on a busy machine: those extra
    # timeouts are retried like the injected ones, so count them on both sides.
    extra_timeouts = st["timeouts"] - injected["timeout"]
    assert extra_timeouts >= 0
    assert st["malformed"] == injected["malformed"]
    assert st["retries"] == sum(injected.values()) + extra_timeouts
    # Requests the client gave up on (timeouts) may still be queued at the server: let it catch up.
    for _ in range(100):
        if server.server_stats()["requests"] >= st["requests"]:
            break
        await asyncio.sleep(0.1)
    assert st["requests"] == n_calls + st["retries"] == server.server_stats()["requests"]


async def test_faults_small(faulty: OAIServer, monkeypatch: pytest.MonkeyPatch) -> None:
    await _run(faulty, n_calls=80, rate=0.3, concurrency=16, monkeypatch=monkeypatch)


@pytest.mark.load
@pytest.mark.slow
async def test_faults_full_load(faulty: OAIServer, monkeypatch: pytest.MonkeyPatch) -> None:
    await _run(faulty, n_calls=2000, rate=0.25, concurrency=32, monkeypatch=monkeypatch)
