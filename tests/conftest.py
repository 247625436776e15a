"""Shared fixtures: a scratch database and an isolated model cache.

Helpers live in tests/helpers/ and are imported as `from tests.helpers.<module> import ...`.
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "test.duckdb"


@pytest.fixture(autouse=True)
def _isolated_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Converted GGUF models are cached per user; tests share one cache dir per session
    # (not the user's) so they neither depend on nor pollute it.
    cache = tmp_path_factory.getbasetemp() / "llmscope-cache"
    monkeypatch.setenv("LLMSCOPE_CACHE", os.environ.get("LLMSCOPE_TEST_CACHE", str(cache)))
    # Tests measure models and servers (request counts, retries, kills mid-run), so the
    # response cache shared across runs is off unless a test turns it on (tests/engine/test_cache.py).
    monkeypatch.setenv("LLMSCOPE_RESPONSE_CACHE", "off")


# -- test durations on a shared machine ------------------------------------------------------
# Wall-clock durations (`--durations`) swing with the load from other processes; the CPU time
# a test spends (this process plus the subprocesses it waited for) does not. With
# LLMSCOPE_TEST_TIMES=FILE set, one JSON line per test goes to FILE (setup, call and teardown
# together, so a module fixture is charged to the first test that uses it);
# `python -m tests.helpers.durations FILE` sums them per file and lists the heaviest.
_TIMES = os.environ.get("LLMSCOPE_TEST_TIMES")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    if not _TIMES:
        yield
        return
    t0, r0, c0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN
    )
    yield
    r1, c1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    rec = {
        "test": item.nodeid,
        "wall_s": round(time.perf_counter() - t0, 3),
        "cpu_s": round(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime, 3),
        "child_cpu_s": round(c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime, 3),
        "markers": sorted({m.name for m in item.iter_markers()}),
    }
    with open(_TIMES, "a", encoding="utf-8") as f:
        f.write(json.dumps(rec) + "\n")
