"""Runs for the TUI tests to read: `llmscope run` in this process on the tiny random-weight model.

Imported by the TUI tests (`from tests.helpers.tui_runs import ...`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def tiny_run(db: Path, model: Path, suite: str, limit: int, *extra: str) -> None:
    """`llmscope run` of `suite`'s first `limit` items on the tiny model in folder `model`, into
    `db` (one thread, no report); `extra` are more flags (e.g. `--suite-path`)."""
    from llmscope.cli import main

    argv = ["run", "--suite", suite, *extra, "--model", f"hf:{model}", "--limit", str(limit)]
    assert main([*argv, "--db", str(db), "--threads", "1", "--quiet", "--no-report"]) == 0, argv


def add_suite_run(st: Any, suite: Any, name: str, task: str, items: list[Any], run_id: str) -> None:
    """Store the loaded `suite` as `name` with `items`, and an empty run `run_id` of it on
    model "m" (the caller writes its rows)."""
    st.add_suite(suite.suite_id, name, task, suite.spec, "tests", items)
    meta = {"suite_id": suite.suite_id, "suite_name": name, "task": task, "model": "m"}
    st.create_run({"run_id": run_id, **meta, "n_total": len(items)})
