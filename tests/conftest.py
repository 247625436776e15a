"""Shared fixtures: a scratch database and an isolated model cache.

Helpers live in tests/helpers/ and are imported as `from tests.helpers.<module> import ...`.
"""

from __future__ import annotations

import json
import os
import resource
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# pytest-xdist runs the suite in worker processes (`-n 2` in pyproject's addopts). Each worker
# gets one torch thread, and so do the `llmscope` subprocesses it starts (they inherit the
# variable): two workers with a pool each would oversubscribe a 2-core machine, and torch's
# spinning threads slow a tiny model down ~30x (RELIABILITY.md, "findings"). Set before
# anything imports torch; a test that needs another value sets it with monkeypatch.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if _WORKER:
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_configure(config: pytest.Config) -> None:
    # The user's own config folder (settings, the endpoints they chose) is this test process's,
    # never the real one: a test run neither reads the developer's config nor leaves endpoints
    # in it. Set here, not in a fixture, so module-scoped fixtures' runs see it too (their run
    # remembers its server's endpoint for the resumes the module's tests make).
    os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="llmscope-test-config-")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist, files with slow tests first (file order otherwise kept).

    xdist hands out whole files (`--dist loadfile`) in collection order; a file that loads
    real models (minutes) handed out last would leave one worker idle while the other ends it.
    Every worker sorts the same way, so the collections still agree."""
    if not _WORKER:
        return
    slow = {it.path for it in items if it.get_closest_marker("slow")}
    items.sort(key=lambda it: it.path not in slow)  # stable: tests keep their order in a file


# pyproject's addopts: the default run leaves these tiers out (a -m of one's own replaces it).
DEFAULT_TIER = "not slow and not server and not vllm"


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Say what the default run left out, so that "passed" is not read as the whole suite."""
    if config.option.markexpr == DEFAULT_TIER and not _WORKER:
        terminalreporter.write_line(
            "the fast tier ran: tests marked slow, server and vllm were left out; run them with "
            "-m 'slow and not load', -m server, -m vllm (CONTRIBUTING.md, Tests)"
        )


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "test.duckdb"


@pytest.fixture(autouse=True)
def _isolated_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Converted GGUF models are cached per user; tests share one cache dir per session
    # (not the user's) so they neither depend on nor pollute it. Under xdist the workers share
    # it too (the session's root, above each worker's basetemp): a model is converted once per
    # run, and every cache writes through a temporary file and a rename, or SQLite's locking.
    base = tmp_path_factory.getbasetemp()
    cache = (base.parent if _WORKER else base) / "llmscope-cache"
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
    rec = {
        "test": test,
        "wall_s": round(d[0], 3),
        "cpu_s": round(d[1], 3),
        "child_cpu_s": round(d[2], 3),
        "markers": markers,
    }
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
