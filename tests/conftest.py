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


def _clock() -> tuple[float, float, float]:
    r, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter(), r.ru_utime + r.ru_stime, c.ru_utime + c.ru_stime


def _record(test: str, t0: tuple[float, float, float], markers: list[str]) -> tuple[float, ...]:
    t1 = _clock()
    d = tuple(b - a for a, b in zip(t0, t1, strict=True))
    rec = {"test": test, "wall_s": round(d[0], 3), "cpu_s": round(d[1], 3),
           "child_cpu_s": round(d[2], 3), "markers": markers}
    with open(_TIMES or os.devnull, "a", encoding="utf-8") as f:
        f.write(json.dumps(rec) + "\n")
    return d


# A file's last test also tears down the module (and, at the end, session) fixtures, and a child
# process's CPU is counted when it is reaped: a session-scoped server once charged its whole
# life (56 CPU s) to `test_view_without_database`, the suite's last test. That teardown gets a
# record of its own in the same file, taken off the test's.
_fixture_teardown: list[tuple[float, ...]] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    if not _TIMES or (nextitem is not None and nextitem.path == item.path):
        yield
        return
    t0 = _clock()
    yield
    name = item.nodeid.split("::")[0] + "::(fixtures torn down after " + item.name + ")"
    _fixture_teardown.append(_record(name, t0, []))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    if not _TIMES:
        yield
        return
    _fixture_teardown.clear()
    t0 = _clock()
    yield
    # Shift the start forward by the fixture teardown, so the test keeps only its own share.
    for d in _fixture_teardown:
        t0 = (t0[0] + d[0], t0[1] + d[1], t0[2] + d[2])
    _record(item.nodeid, t0, sorted({m.name for m in item.iter_markers()}))
