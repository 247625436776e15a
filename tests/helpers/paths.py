"""Where things are: the repository root and the third-party data under ../shared.

Tests never compute these from `Path(__file__)` (their depth under tests/ varies).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Third-party data (read-only, never copied into the repo); $LLMSCOPE_SHARED overrides.
SHARED = Path(os.environ.get("LLMSCOPE_SHARED", ROOT.parent / "shared"))


def shared_path(*parts: str) -> Path:
    """A path under ../shared, or skip the test with the reason."""
    p = SHARED.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"needs the shared data file {p} (absent on this machine)")
    return p
