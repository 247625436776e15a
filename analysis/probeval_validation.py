"""Checking ProbEval's automatic matching against gold cluster labels and held-out people.

``mixture_validation`` is the paper's Table 2 protocol (Cheng et al. 2024, section 5.3: KL of
mixtures of human and gold answer sets, automatic against gold cluster labels, Spearman over
questions); ``held_out_validation`` an earlier, simpler check (half the human answers scored
against the other half) kept under its own name."""

from __future__ import annotations

import json
import math
import os
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from .probeval import (
    PAPER,
    WRONG,
    Embedder,
    ProbEvalSettings,
    Question,
    _distributions,
    kl_divergence,
    match_weights,
    score_question,
    smoothed_distribution,
)


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
    return kl_divergence(
        smoothed_distribution(question.cluster_counts(), buckets),
        smoothed_distribution(counts, buckets),
    )


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
    settings: ProbEvalSettings | None = None,
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
        auto[qid] = score_question(
            ref, held, embed, threshold=threshold, matcher=matcher, settings=settings
        ).kl
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
        if not isinstance(pairs, list) or not all(
            isinstance(x, list | tuple) and len(x) == 2 for x in pairs
        ):
            raise ValueError(
                f"{path}: question {qid!r}: expected a list of [answer, cluster] pairs"
            )
        out[str(qid)] = [(str(a), str(c)) for a, c in pairs]
    return out


def question_set(qid: str) -> str:
    """The question set of a CFC/ProtoQA id: its round prefix ("r1q7" -> "r1")."""
    m = re.match(r"^(r\d+)q", qid)
    return m.group(1) if m else "all"


SAMPLINGS = ("centered", "diverse")


@dataclass
class MixtureValidation:
    """The paper's Table 2 figure: Spearman rho between automatic and gold KL over answer sets
    sampled per question, averaged over questions (``rho``: then over runs). ``per_question``
    has one row per (run, qid) with its rho (NaN when a side's 50 KLs are all equal)."""

    rho: float
    rho_per_run: list[float]
    per_question: pd.DataFrame
    n_questions: int
    n_sets: int
    sampling: str
    settings: ProbEvalSettings


def reference_pool(question: Question) -> list[tuple[str, str, int]]:
    """The labelled answers the reference samples "model" answers from on CFC dev:
    its ``all_dev_annotated_predictions.json`` holds, per question, every clustered human
    answer with its cluster and count, plus one answer "wrong" labelled wrong (checked
    equal, question by question, to what this builds from the targets file)."""
    member = {a: k for k, v in question.clusters.items() for a in v}
    pool = [(a, member[a], int(c)) for a, c in question.raw.items() if a in member and c > 0]
    return [*pool, (WRONG, WRONG, 1)]


def _sample_sets(
    question: Question,
    pool: Sequence[tuple[str, str, int]],
    p_g: np.ndarray,
    names: Sequence[str],
    n_sets: int,
    sampling: str,
    rng: np.random.Generator,
) -> list[list[tuple[str, str]]]:
    """``n_sets`` answer sets (answer, true cluster) drawn as the reference's
    ``KLDivergence.sample_evaluation_answers`` does (see ``mixture_validation``)."""
    k = len(names)
    # 50 human answers, ceil(share * 50) per cluster, join the labelled pool
    # (create_annotated_prediction_answers)
    counts = question.cluster_counts()
    total = sum(counts.values())
    by_cluster: dict[str, dict[str, int]] = {n: {} for n in names}
    for a, c, n in pool:
        d = by_cluster.setdefault(c, {})
        d[a] = d.get(a, 0) + n
    for name, members in question.clusters.items():
        expanded = sorted(
            a for a in dict.fromkeys(members) for _ in range(int(question.raw.get(a, 0)))
        )
        take = min(len(expanded), math.ceil(counts[name] / total * 50)) if total else 0
        for i in rng.choice(len(expanded), size=take, replace=False) if take else ():
            d = by_cluster[name]
            d[expanded[i]] = d.get(expanded[i], 0) + 1
    expanded_pool = {
        n: [a for a, c in by_cluster.get(n, {}).items() for _ in range(c)] for n in names
    }
    # every cluster's pool size carries one more, empty slot ("+1 is for smoothing")
    size = np.array([len(expanded_pool[n]) + 1 for n in names], dtype=float)
    n_pool = sum(len(v) for v in expanded_pool.values())
    p_pool = (size) / (n_pool + k)  # human_assignment_probability: (count + 1) / (N + K)
    uniform = np.full(k, 1.0 / k)
    sets = []
    for _ in range(n_sets):
        if sampling == "centered":  # centered_sampling: mostly the labelled pool's distribution
            z = rng.uniform(0.5, 1.0)
            w1, w2 = rng.uniform(0.0, 1.0, size=2)
            p = z * p_pool + (1 - z) * (w1 / (w1 + w2)) * p_g + (1 - z) * (w2 / (w1 + w2)) * uniform
        else:  # alpha_sampling
            w = rng.uniform(0.0, 1.0)
            p = w * p_g + (1 - w) * uniform
        want = size.sum() * p
        over = want > size
        ratio = min(1.0, float(np.min(size[over] / want[over]))) if over.any() else 1.0
        drawn: list[tuple[str, str]] = []
        for j, name in enumerate(names):
            n_j = int(round(ratio * want[j]))  # Python's round, as the reference
            # indices into the pool plus its empty slot; drawing the empty slot adds nothing
            for i in rng.choice(int(size[j]), size=min(n_j, int(size[j])), replace=False):
                if i < len(expanded_pool[name]):
                    drawn.append((expanded_pool[name][i], name))
        sets.append(drawn)
    return sets


def mixture_validation(
    questions: Mapping[str, Question],
    *,
    settings: ProbEvalSettings = PAPER,
    matcher: Any = None,
    embed: Embedder | None = None,
    pools: Mapping[str, Sequence[tuple[str, str, int]]] | None = None,
    n_sets: int = 50,
    runs: int = 10,
    sampling: str = "centered",
    seed: int = 0,
    threshold: float = 0.67,
) -> MixtureValidation:
    """Table 2 of the paper (section 5.3), as the reference code runs it (``evaluation.general_eval``
    with ``run_sampling``): for each question with human clusters, ``n_sets`` answer sets are
    drawn from p = z * P_pool + w1 * P_G + w2 * P_uniform (``sampling="centered"``: z ~ U(0.5, 1),
    w1, w2 ~ U(0, 1) scaled to 1 - z) or w * P_G + (1 - w) * P_uniform (``"diverse"``), where
    P_pool is the distribution of labelled "model" answers (``pools``; default
    ``reference_pool``: the reference's CFC data) joined with 50 human answers. Cluster counts
    are ``round(ratio * N * p_k)``, with ratio shrunk so that no cluster asks for more than its
    pool holds, and the answers of each cluster are drawn without replacement. Each set is scored
    twice against the human clusters: the gold KL with the answers' own labels and the automatic
    KL with ``settings``' matching (the same unmatched-answer and smoothing rules on both). Rho
    is Spearman's between the two over a question's sets, averaged over questions (NaN rhos,
    where a side is constant, are left out and counted in ``per_question``), then over ``runs``
    runs. Seeded by ``seed``; deterministic.
    """
    from scipy.stats import spearmanr

    if sampling not in SAMPLINGS:
        raise ValueError(f"sampling must be one of {', '.join(SAMPLINGS)}, got {sampling!r}")
    if n_sets < 3 or runs < 1:
        raise ValueError("mixture validation needs at least 3 answer sets and 1 run")
    qids = [q for q in questions if questions[q].clusters and (pools is None or q in pools)]
    if not qids:
        raise ValueError("no question has human clusters (and a labelled pool)")
    memos: dict[str, dict[str, list[float]]] = {q: {} for q in qids}
    memo_weights: dict[str, dict[str, dict[str, float]]] = {}
    rows = []
    for run in range(runs):
        rng = np.random.default_rng([seed, run])
        for qid in qids:
            q = questions[qid]
            names = [*q.clusters, WRONG]
            counts = q.cluster_counts()
            # the sampling mixes the human distribution as the reference's (add-one, with "wrong")
            p_g = smoothed_distribution(counts, names)
            pool = pools[qid] if pools is not None else reference_pool(q)
            if settings.matcher != "wordnet" and not memo_weights.get(qid):
                # the embedding and exact rules match each answer on its own: match every
                # answer that can be drawn once
                every = list(dict.fromkeys([*(a for a, _, _ in pool), *q.raw]))
                memo_weights[qid] = dict(
                    zip(
                        every,
                        match_weights(
                            q, every, settings=settings, embed=embed, threshold=threshold
                        ),
                        strict=True,
                    )
                )
            auto, gold = [], []
            for drawn in _sample_sets(q, pool, p_g, names, n_sets, sampling, rng):
                answers = [a for a, _ in drawn]
                labels: dict[str, float] = {}
                for _, c in drawn:
                    key = c if c in q.clusters else WRONG
                    labels[key] = labels.get(key, 0.0) + 1.0
                _, ph, pm = _distributions(counts, labels, list(q.clusters), settings)
                gold.append(kl_divergence(ph, pm))
                model_counts: dict[str, float] = {}
                weights = (
                    match_weights(q, answers, settings=settings, matcher=matcher, memo=memos[qid])
                    if settings.matcher == "wordnet"
                    else [memo_weights[qid][a] for a in answers]
                )
                for w in weights:
                    for k, x in w.items():
                        model_counts[k] = model_counts.get(k, 0.0) + x
                _, ph, pm = _distributions(counts, model_counts, list(q.clusters), settings)
                auto.append(kl_divergence(ph, pm))
            if len(set(auto)) < 2 or len(set(gold)) < 2:
                rho = math.nan
            else:
                rho = float(spearmanr(auto, gold).statistic)
            rows.append({"run": run, "qid": qid, "rho": rho})
    per = pd.DataFrame(rows, columns=["run", "qid", "rho"])
    per_run = [float(g["rho"].mean()) for _, g in per.groupby("run")]
    return MixtureValidation(
        float(np.mean(per_run)), per_run, per, len(qids), n_sets, sampling, settings
    )
