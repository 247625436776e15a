"""Abstention: no evidence gives no prediction (engine/abstain.py, analysis/abstention.py).

Before: a yes/no item with P(yes) = P(no) = 0 was predicted "yes" (the first answer), so a
server that ignored `logprobs` and `n` scored 0.667 on a 2:1 yes/no suite from no evidence.
"""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd

from llmscope.analysis.abstention import abstention_rows
from llmscope.engine.tasks import get_task
from llmscope.engine.types import Item, Work
from tests.helpers.cli import api_run, cli_env, query, write_api_suite
from tests.helpers.fakes import TableBackend
from tests.helpers.oai import CANARY_KEY, start_server, stop_server


def _work(prompt: str, gold: str | None, options: list[str] | None = None) -> Work:
    return Work(
        item=Item(item_id="i", fields={}), variant="v", prompt=prompt, gold=gold, options=options
    )


def test_yesno_with_no_mass_abstains_instead_of_answering_yes():
    backend = TableBackend(next_table={"q": {"yes": 0.0, "no": 0.0, "Hmm": 0.9}})
    task = get_task("yesno")({})
    res = asyncio.run(task.score(_work("q", "yes"), backend))
    assert res.prediction is None
    assert res.correct == 0.0  # an abstention is not a right answer
    assert res.confidence is None
    assert res.extra["abstained"] is True and "no probability mass" in res.extra["abstain_reason"]
    assert res.error is None  # a model outcome, not a fault to retry
    # Any mass at all is evidence: P(no) = 0.01 > P(yes) = 0 predicts "no".
    backend = TableBackend(next_table={"q": {"yes": 0.0, "no": 0.01}})
    res = asyncio.run(task.score(_work("q", "yes"), backend))
    assert res.prediction == "no" and res.correct == 0.0 and "abstained" not in res.extra


def test_rating_with_no_label_mass_abstains_without_gold_counting():
    backend = TableBackend(next_table={"r": {"1": 0.0, "2": 0.0, "3": 0.0, "x": 1.0}})
    task = get_task("rating")({"answers": ["1", "2", "3"]})
    res = asyncio.run(task.score(_work("r", None), backend))
    assert res.prediction is None and res.correct is None and res.error is None
    assert res.extra["abstained"] is True and res.extra["label_mass"] == 0.0


def test_choice_with_no_finite_option_loglik_abstains():
    inf = -math.inf
    table = {("Q", " a"): [(" a", inf)], ("Q", " b"): [(" b", inf)]}
    backend = TableBackend(loglik_table=table)
    task = get_task("choice")(
        {"content_free": [], "domain_prompt": None, "continuation": " {option}"}
    )
    res = asyncio.run(task.score(_work("Q", "a", ["a", "b"]), backend))
    assert res.prediction is None and res.correct == 0.0
    assert res.extra["abstained"] is True


def test_abstention_rows_by_hand():
    # 4 items x 1 variant; items 2 and 3 abstained; of the answered, one right (item 0).
    extra = [
        None,
        json.dumps({"x": 1}),
        json.dumps({"abstained": True}),
        json.dumps({"abstained": True}),
    ]
    df = pd.DataFrame(
        {
            "item_id": ["0", "1", "2", "3"],
            "variant": "v",
            "error": [None] * 4,
            "correct": [1.0, 0.0, 0.0, 0.0],
            "extra": extra,
        }
    )
    rows = {
        r["metric"]: r
        for r in abstention_rows(df, {"run_id": "r", "model": "m", "task": "yesno"}, {})
    }
    assert rows["abstain_rate"]["value"] == 0.5 and rows["abstain_rate"]["n"] == 4
    lo, hi = rows["abstain_rate"]["ci95"]
    # Wilson interval for 2/4 (independent items), by hand: centre 0.5, half-width
    z = 1.959963984540054
    half = z * math.sqrt(0.25 / 4 + z * z / 64) / (1 + z * z / 4)
    assert math.isclose(lo, 0.5 - half, rel_tol=1e-9) and math.isclose(hi, 0.5 + half, rel_tol=1e-9)
    assert rows["accuracy_answered"]["value"] == 0.5 and rows["accuracy_answered"]["n"] == 2


def test_server_ignoring_logprobs_and_n_gives_abstentions_not_accuracy(tmp_path: Path):
    texts = ["[a] sky is blue", "[a] fire is hot", "[a] ice is hot"]
    golds = ["yes", "yes", "no"]
    spec = write_api_suite(tmp_path, texts, "abstain", golds)
    db = tmp_path / "a.duckdb"
    server = start_server()
    try:
        # Every request: no log-probs, one choice whatever `n` says, an answer that is neither yes nor no.
        for marker in ("[a]", "water wet"):
            server.script(marker, no_logprobs=True, ignore_n=True, content="Hmm, it depends.")
        proc = api_run(
            spec,
            db,
            server.base_url,
            "--samples",
            "3",
            "--no-report",
            env=cli_env(OPENAI_API_KEY=CANARY_KEY),
        )
    finally:
        stop_server(server)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = query(
        db, "SELECT prediction, correct, p_yes, p_no, extra, error FROM results ORDER BY item_id"
    )
    assert len(rows) == 3
    for pred, correct, p_yes, p_no, extra, error in rows:
        assert error is None
        assert pred is None and correct == 0.0
        assert p_yes == 0.0 and p_no == 0.0
        assert json.loads(extra)["abstained"] is True
    rep = subprocess.run(
        [sys.executable, "-m", "llmscope", "report", "--db", str(db), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert rep.returncode == 0, rep.stderr[-2000:]
    metrics = {r["metric"]: r for r in json.loads(rep.stdout) if not r["group"]}
    assert metrics["accuracy"]["value"] == 0.0  # not 0.667
    assert metrics["abstain_rate"]["value"] == 1.0
    assert metrics["accuracy_answered"]["value"] is None and metrics["accuracy_answered"]["n"] == 0
