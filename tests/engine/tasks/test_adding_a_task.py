"""docs/ADDING_A_TASK.md, run as written: its task module, suite spec and items.

The module from the page is written to a file and imported (that registers the task;
no other file changes), its suite runs on the tiny local model into a real DuckDB
file, and the stored rows are checked against log-likelihoods asked of the backend
directly. The task is unregistered afterwards so other tests see the built-in list.
"""

from __future__ import annotations

import asyncio
import importlib.util
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llmscope.data.suites import SuiteError, load_suite
from llmscope.engine.backend import Backend, BackendConfigError, Capabilities
from llmscope.engine.runner import Runner, RunPlan
from llmscope.engine.tasks import TASKS, get_task, task_names
from llmscope.engine.types import LogLikOut, NextTokenOut
from llmscope.store.db import Store
from tests.helpers.paths import ROOT
from tests.helpers.tinymodel import make_tiny_model, tiny_spec

DOC = ROOT / "docs" / "ADDING_A_TASK.md"


def blocks(lang: str) -> list[str]:
    """The page's fenced code blocks in ``lang``."""
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


@pytest.fixture()
def prefers(tmp_path: Path) -> Iterator[type]:
    path = tmp_path / "prefers_task.py"
    path.write_text(blocks("python")[0], encoding="utf-8")
    spec = importlib.util.spec_from_file_location("prefers_task", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["prefers_task"] = mod
    spec.loader.exec_module(mod)
    try:
        yield get_task("prefers")
    finally:
        TASKS.pop("prefers", None)
        sys.modules.pop("prefers_task", None)


def write_suite(tmp_path: Path, items: str | None = None) -> Path:
    (tmp_path / "suite.yaml").write_text(blocks("yaml")[0], encoding="utf-8")
    (tmp_path / "items.jsonl").write_text(
        items if items is not None else blocks("jsonl")[0], encoding="utf-8"
    )
    return tmp_path / "suite.yaml"


def test_the_module_registers_one_task(prefers: type) -> None:
    assert prefers.name == "prefers" and "prefers" in task_names()
    assert [s.name for s in prefers.option_specs] == ["separator"]


def test_the_suite_runs_end_to_end_on_a_local_model(
    prefers: type, tmp_path: Path, db_path: Path
) -> None:
    from llmscope.engine.hf import HFBackend

    suite = load_suite(write_suite(tmp_path))
    assert [it.text for it in suite.items()] == ["mat | theorem", "four | purple", "door | of"]
    model, tok = make_tiny_model(tmp_path)
    backend = HFBackend(
        tiny_spec(tmp_path), model=model, tokenizer=tok, device="cpu", dtype="float32"
    )
    plan = RunPlan(suite=suite, model_label="tiny", model_arg="tiny")

    async def main(store: Store) -> dict[str, float]:
        try:
            await runner.run()
            # the oracle: the same questions asked of the backend directly, outside the run
            want = {}
            for it in suite.items():
                a, b = await backend.loglik(
                    [
                        (it.fields["context"], " " + it.fields["a"]),
                        (it.fields["context"], " " + it.fields["b"]),
                    ]
                )
                want[it.item_id] = a.logprob - b.logprob
            return want
        finally:
            await backend.aclose()

    with Store(db_path) as store:
        runner = Runner(plan, backend, store)
        want = asyncio.run(main(store))
        run = store.get_run(runner.run_id)
        assert run is not None
        df = store.results_frame(runner.run_id)
    assert run["task"] == "prefers" and run["status"] == "completed"
    assert len(df) == 3 and df["error"].isna().all()
    import json

    for rec in df.to_dict("records"):
        margin = (
            json.loads(rec["extra"])["margin"]
            if isinstance(rec["extra"], str)
            else rec["extra"]["margin"]
        )
        assert margin == pytest.approx(want[rec["item_id"]], abs=1e-4)
        assert rec["prediction"] == ("a" if want[rec["item_id"]] >= 0 else "b")
        assert rec["correct"] == float(rec["prediction"] == "a")


def test_item_rules_name_file_line_and_field(prefers: type, tmp_path: Path) -> None:
    items = '{"id": "1", "context": "x", "a": "y", "b": "z", "gold": "a"}\n{"id": "2", "context": "x", "a": "y"}\n'
    with pytest.raises(SuiteError) as e:
        load_suite(write_suite(tmp_path, items)).items()
    assert (
        (e.value.line, e.value.field) == (2, "b")
        and e.value.path
        and e.value.path.endswith("items.jsonl")
    )
    items = '{"id": "1", "context": "x", "a": "y", "b": "z", "gold": "c"}\n'
    with pytest.raises(SuiteError, match="gold 'c' must be 'a' or 'b'"):
        load_suite(write_suite(tmp_path, items)).items()


class NoLoglik(Backend):
    """A backend that says it has no log-likelihoods (and is never asked for any)."""

    kind = "stub"

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(loglik=False)

    def describe(self) -> dict[str, Any]:
        return {"backend": "stub", "model": "stub-1"}

    async def next_token(
        self, prompt: str, answers: list[str], *, chat: bool = True, top_k: int = 20
    ) -> NextTokenOut:
        raise AssertionError("not called")

    async def loglik(
        self, requests: list[tuple[str, str]], *, chat: bool = False
    ) -> list[LogLikOut]:
        raise AssertionError("not called")


def test_a_missing_capability_stops_the_run_before_anything_is_stored(
    prefers: type, tmp_path: Path, db_path: Path
) -> None:
    plan = RunPlan(suite=load_suite(write_suite(tmp_path)), model_label="stub", model_arg="stub")
    with Store(db_path) as store:
        with pytest.raises(
            BackendConfigError, match="task 'prefers' needs loglik, which stub backend 'stub-1'"
        ):
            asyncio.run(Runner(plan, NoLoglik(), store).run())
        assert store.runs().empty
