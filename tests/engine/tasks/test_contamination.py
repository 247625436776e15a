"""Contamination probes: Min-K% probability, n-gram completion overlap, suite summary."""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import pandas as pd
import pytest

from llmscope.analysis.contamination import contamination_rows
from llmscope.engine.tasks.contamination import (
    ContaminationTask,
    min_k_prob,
    ngram_recall,
    split_half,
)
from llmscope.engine.types import Item, Work

torch = pytest.importorskip("torch")


def test_min_k_prob_by_hand():
    lps = [-0.1, -5.0, -0.2, -3.0, -0.3, -0.4, -0.5, -0.6, -0.7, -0.8]
    assert min_k_prob(lps, 20) == pytest.approx((-5.0 - 3.0) / 2)  # 2 lowest of 10
    assert min_k_prob(lps, 5) == pytest.approx(-5.0)  # at least one token
    assert min_k_prob(lps, 100) == pytest.approx(sum(lps) / 10)
    assert math.isnan(min_k_prob([], 20))


def test_ngram_recall_by_hand():
    ref = "the cat sat on the mat"
    assert ngram_recall("The cat sat on the mat.", ref, 3) == 1.0
    # reference trigrams: the-cat-sat, cat-sat-on, sat-on-the, on-the-mat; generated shares 2
    assert ngram_recall("a cat sat on a mat", ref, 3) == pytest.approx(1 / 4)
    assert ngram_recall("the cat sat", ref, 3) == pytest.approx(1 / 4)
    assert ngram_recall("", ref, 3) == 0.0
    # clipping: a repeated generated n-gram counts once per reference occurrence
    assert ngram_recall("the the the", "the the", 1) == 1.0
    assert split_half("one two three four five") == ("one two", "three four five")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Any]:
    from tests.helpers.tinymodel import make_tiny_model, tiny_spec

    d = tmp_path_factory.mktemp("tiny")
    model, tok = make_tiny_model(d, vocab="trained")
    return model, tok, tiny_spec(d)


def test_min_k_matches_direct_model_logprobs(tiny):
    from llmscope.engine.hf import HFBackend

    model, tok, spec = tiny
    text = "the cat can swim like a fish in the river water"
    backend = HFBackend(
        spec, model=model, tokenizer=tok, device="cpu", dtype="float32", batch_size=2
    )
    task = ContaminationTask({"mink_k": 30, "max_new_tokens": 6, "overlap_threshold": 0.0})
    work = Work(
        item=Item("t1", {"text": text}, text=text), variant="default", prompt=text, gold=None
    )

    async def go() -> Any:
        try:
            return await task.score(work, backend)
        finally:
            await backend.aclose()

    res = asyncio.run(go())
    ids = tok(text, add_special_tokens=False).input_ids
    first = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
    with torch.no_grad():
        logp = model(torch.tensor([[first, *ids]])).logits[0, :-1].float().log_softmax(-1)
    lps = sorted(float(logp[i, t]) for i, t in enumerate(ids))
    n = max(1, math.floor(len(ids) * 0.3))
    assert res.extra["min_k_prob"] == pytest.approx(sum(lps[:n]) / n, abs=1e-4)
    assert (
        res.extra["prefix"] == "the cat can swim like"
        and res.extra["reference"] == "a fish in the river water"
    )
    assert (
        res.extra["flagged"] is True and res.prediction == "flagged"
    )  # threshold 0 flags everything


def test_summary_rows_flag_rate_and_group_means():
    ex = [
        {"flagged": True, "min_k_prob": -2.0, "ngram_overlap": 0.8},
        {"flagged": False, "min_k_prob": -4.0, "ngram_overlap": 0.2},
        {"flagged": False, "min_k_prob": -9.0, "ngram_overlap": 0.0},
    ]
    df = pd.DataFrame(
        {
            "item_id": ["a", "b", "c"],
            "error": [None] * 3,
            "extra": [json.dumps(e) for e in ex],
            "fields": [json.dumps({"kind": k}) for k in ("famous", "famous", "novel")],
        }
    )
    rows = contamination_rows(
        df, {"run_id": "r", "model": "m", "task": "contamination"}, {"group_by": ["kind"]}
    )
    get = {(r["metric"], tuple(r["group"].items())): r for r in rows}
    assert get[("flagged_rate", ())]["value"] == pytest.approx(1 / 3)
    assert get[("min_k_prob", (("kind", "famous"),))]["value"] == pytest.approx(-3.0)
    from scipy import stats

    half = stats.t.ppf(0.975, 1) * stats.tstd([-2.0, -4.0]) / math.sqrt(2)
    # a mean log-probability is at most 0: the interval is clipped there (-3 + half = 9.7)
    assert get[("min_k_prob", (("kind", "famous"),))]["ci95"] == pytest.approx([-3.0 - half, 0.0])
    assert get[("ngram_overlap", (("kind", "novel"),))]["value"] == 0.0
