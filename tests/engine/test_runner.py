"""The run loop on a tiny model: results stored once, resume, errors kept, progress reported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmscope.data.suites import load_suite
from llmscope.engine.progress import NullReporter, Progress
from llmscope.engine.runner import RunPlan
from llmscope.store.db import Store
from tests.helpers.tinymodel import make_tiny_model, run_plan, tiny_backend


def _suite(tmp: Path, n: int = 12) -> Path:
    lines = [
        json.dumps(
            {"id": f"s{i}", "text": f"The sky is number {i}.", "gold": "yes" if i % 2 else "no"}
        )
        for i in range(n)
    ]
    (tmp / "items.jsonl").write_text("\n".join(lines) + "\n")
    spec = tmp / "suite.yaml"
    spec.write_text(
        "name: tiny\ntask: yesno\nitems: items.jsonl\ntext_field: text\n"
        "templates:\n  a: 'Is it true? {text}'\n  b: 'Do you agree? {text}'\n"
    )
    return spec


class Recorder(NullReporter):
    def __init__(self) -> None:
        self.started: list[Progress] = []
        self.batches: list[int] = []
        self.counts: list[tuple[int, int]] = []  # (stored, done) as each batch arrives
        self.ended: Progress | None = None

    def on_start(self, run, progress):
        self.started.append(progress)

    def on_results(self, results, progress):
        self.batches.append(len(results))
        self.counts.append((progress.stored, progress.done))

    def on_end(self, progress):
        self.ended = progress


def _run(tmp_path, db, limit=None, batch_size=4):
    model, tok = make_tiny_model(tmp_path)
    backend = tiny_backend(tmp_path, model, tok, batch_size=batch_size)
    plan = RunPlan(
        suite=load_suite(_suite(tmp_path)), model_label="tiny", model_arg="tiny", limit=limit
    )
    rec = Recorder()

    with Store(db) as store:
        prog = run_plan(plan, backend, store, rec)
    return prog, rec


@pytest.mark.slow
def test_run_resume_and_exactly_once(tmp_path, db_path):
    prog, rec = _run(tmp_path, db_path, limit=5)
    assert prog.total == 10 and prog.done == 10 and prog.errors == 0
    assert sum(rec.batches) == 10 and rec.ended is not None and rec.ended.status == "completed"
    # The same plan with a larger limit continues the same run and only scores the new items.
    prog2, rec2 = _run(tmp_path, db_path, limit=None, batch_size=3)
    assert prog2.run_id == prog.run_id
    assert rec2.started[0].skipped == 10 and sum(rec2.batches) == 14
    with Store(db_path, read_only=True) as st:
        n, distinct = st.execute(
            "SELECT count(*), count(DISTINCT item_id || '/' || variant) FROM results"
        ).fetchone()
        assert n == distinct == 24
        seqs = [r[0] for r in st.execute("SELECT seq FROM results ORDER BY seq").fetchall()]
        assert seqs == list(range(24))
        sums = st.execute("SELECT max(abs(p_yes + p_no + other - 1)) FROM results").fetchone()[0]
        assert sums < 1e-6
        run = st.get_run(prog.run_id)
        assert run["status"] == "completed" and run["n_total"] == 24
        # gold is per variant; accuracy counted only where gold exists
        acc = st.execute("SELECT avg(correct), count(correct) FROM results").fetchone()
        assert acc[1] == 24
        assert prog2.scored == 24 and prog2.correct == pytest.approx(acc[0] * 24)
    # `stored` counts what the database holds: never ahead of what was scored, all at the end
    assert prog.stored == 10 and prog2.stored == 24
    assert all(10 <= stored <= done for stored, done in rec2.counts), rec2.counts


def test_item_errors_are_stored_not_scored(tmp_path, db_path):
    model, tok = make_tiny_model(tmp_path)
    # the items' prompts fit in 200 tokens with either test tokenizer (Qwen2.5 ~50, the trained
    # fallback ~86); the 400-word item does not
    backend = tiny_backend(tmp_path, model, tok, max_length=200)
    spec = _suite(tmp_path, 3)
    items = (tmp_path / "items.jsonl").read_text().splitlines()
    items.append(json.dumps({"id": "long", "text": "word " * 400, "gold": "yes"}))
    (tmp_path / "items.jsonl").write_text("\n".join(items) + "\n")
    plan = RunPlan(suite=load_suite(spec), model_label="tiny", model_arg="tiny")

    with Store(db_path) as store:
        prog = run_plan(plan, backend, store)
        assert prog.errors == 2 and prog.status == "completed_with_errors"
        rows = store.execute(
            "SELECT variant, error, correct, p_yes FROM results WHERE item_id = 'long'"
        ).fetchall()
        assert len(rows) == 2
        for _, err, correct, p_yes in rows:
            assert "tokens" in err and correct is None and p_yes is None
