"""Reference-based generation metrics from the standard libraries (no hand-written versions).

Per item, the first sample's text (after stop cutting, as stored in ``extra.samples``)
against every gold answer (``extra.golds``):

* ``bleu``: sacrebleu ``sentence_bleu`` (Post 2018; default 13a tokenisation and
  exponential smoothing) with all golds as references, 0-100;
* ``chrf``: sacrebleu ``sentence_chrf`` (Popović 2015; chrF2, character 6-grams), 0-100;
* ``rougeL``: rouge-score's ROUGE-L F-measure (Lin 2004; Porter stemming), best over golds, 0-1;
* ``embed_cos``: cosine similarity of all-MiniLM-L6-v2 sentence embeddings (the bundled
  embedder also used by ProbEval), best over golds; only when the embedder is installed.

Run-level rows are item means with t 95% intervals (rows as independent units, clipped to
the score's range); `corpus_bleu` / `corpus_chrf` are the
corpus-level statistics with each item's first gold as the reference.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from llmscope.analysis.rows import metric_row
from llmscope.engine.tasks.registry import task_producers
from llmscope.store.db import decode_json


def item_metrics(pred: str, refs: list[str], embed: Any = None) -> dict[str, float]:
    """BLEU, chrF, ROUGE-L F (and embedding cosine) of one prediction against its references."""
    import sacrebleu
    from rouge_score import rouge_scorer

    if not refs:
        return {}
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    out = {
        "bleu": float(sacrebleu.sentence_bleu(pred, refs).score),
        "chrf": float(sacrebleu.sentence_chrf(pred, refs).score),
        "rougeL": max(float(scorer.score(r, pred)["rougeL"].fmeasure) for r in refs),
    }
    if embed is not None:
        v = embed([pred, *refs])
        out["embed_cos"] = float(max(v[0] @ v[i] for i in range(1, len(v))))
    return out


def _pairs(df: pd.DataFrame) -> list[tuple[str, list[str]]]:
    out = []
    for e in df["extra"]:
        e = decode_json(e) or {}
        samples = e.get("samples") or []
        golds = [g["text"] if isinstance(g, dict) else str(g) for g in e.get("golds") or []]
        if samples and golds:
            s0 = samples[0]
            out.append((s0["text"] if isinstance(s0, dict) else str(s0), golds))
    return out


def generation_library_rows(
    df: pd.DataFrame, run: dict[str, Any], spec: dict[str, Any], embed: Any = "auto"
) -> list[dict[str, Any]]:
    """Metric rows for a generation run with gold answers (empty otherwise)."""
    import sacrebleu

    if (
        "genmetrics" not in task_producers(run.get("task")) or df.empty or "extra" not in df
    ):  # the task lists it
        return []
    ok = df[df["error"].isna() & df["extra"].notna()]
    pairs = _pairs(ok)
    if not pairs:
        return []
    if embed == "auto":
        try:
            from llmscope.analysis.probeval import minilm_embedder

            embed = minilm_embedder()
        except ImportError:
            embed = None
    per = [item_metrics(p, refs, embed) for p, refs in pairs]
    rows = []

    def add(metric: str, value: float, ci: list[float] | None, n: int) -> None:
        r = metric_row(run["run_id"], str(run.get("model")), metric, value, ci, n)
        r["suite"] = run.get("suite_name")
        rows.append(r)

    # the interval is clipped to the score's range, as every mean's interval (docs/METRICS.md)
    for key, lo, hi in (
        ("bleu", 0.0, 100.0),
        ("chrf", 0.0, 100.0),
        ("rougeL", 0.0, 1.0),
        ("embed_cos", -1.0, 1.0),
    ):
        v = np.array([m[key] for m in per if key in m], dtype=float)
        if len(v) == 0:
            continue
        ci = None
        if len(v) > 1 and v.std(ddof=1) > 0:
            half = float(stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v)))
            ci = [max(lo, float(v.mean()) - half), min(hi, float(v.mean()) + half)]
        add(f"{key}_mean", float(v.mean()), ci, len(v))
    hyps = [p for p, _ in pairs]
    refs = [[r[0] for _, r in pairs]]
    add("corpus_bleu", float(sacrebleu.corpus_bleu(hyps, refs).score), None, len(pairs))
    add("corpus_chrf", float(sacrebleu.corpus_chrf(hyps, refs).score), None, len(pairs))
    return rows
