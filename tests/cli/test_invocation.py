"""The printed resume hint can be pasted: it names llmscope as this shell can run it
(llmscope/cli_common.py `invocation`) and --db only when it is not the default."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from llmscope.cli import DEFAULT_DB, resume_hint
from llmscope.cli_common import invocation


def _script(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / "llmscope"
    p.write_text("#!/bin/sh\n")
    p.chmod(0o755)
    return p


def test_a_script_not_on_path_is_named_by_its_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = _script(tmp_path / ".venv" / "bin")
    monkeypatch.setenv("PATH", str(tmp_path / "elsewhere"))
    monkeypatch.chdir(tmp_path)
    assert invocation(".venv/bin/llmscope") == ".venv/bin/llmscope"
    assert invocation(str(script)) == shlex.quote(str(script))


def test_the_llmscope_on_path_is_named_bare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = _script(tmp_path / "bin")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert invocation(str(script)) == "llmscope"
    # another llmscope earlier on PATH: this one by its path
    _script(tmp_path / "other")
    monkeypatch.setenv("PATH", f"{tmp_path / 'other'}:{tmp_path / 'bin'}")
    assert invocation(str(script)) == shlex.quote(str(script))


def test_a_module_start_is_python_dash_m(monkeypatch: pytest.MonkeyPatch) -> None:
    assert invocation("/x/llmscope/__main__.py") == f"{shlex.quote(sys.executable)} -m llmscope"


def test_resume_hint_names_db_only_when_not_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = _script(tmp_path / "bin")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setattr(sys, "argv", [str(script), "run"])
    assert resume_hint("abc123", DEFAULT_DB) == "llmscope run --resume abc123"
    assert resume_hint("abc123", "my runs.duckdb") == "llmscope run --resume abc123 --db 'my runs.duckdb'"
