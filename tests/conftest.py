"""Shared fixtures: a scratch database and an isolated model cache.

Helpers live in tests/helpers/ and are imported as `from tests.helpers.<module> import ...`.
"""

from __future__ import annotations

import os
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
