"""Shared fixtures: where the third-party data lives, and a scratch database."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("LLMSCOPE_SHARED", ROOT.parent / "shared"))


def shared_path(*parts: str) -> Path:
    """A path under ../shared, or skip the test with the reason."""
    p = SHARED.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"needs the shared data file {p} (absent on this machine)")
    return p


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
    # response cache shared across runs is off unless a test turns it on (tests/test_cache.py).
    monkeypatch.setenv("LLMSCOPE_RESPONSE_CACHE", "off")
