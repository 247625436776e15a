"""Softmax choice fitted to human choice counts, and condition-level aggregation.

Model: a respondent chooses option j of item i with probability
softmax(α · s_i)_j, where s_i are a scoring scheme's option scores (Luce 1959's
choice rule with inverse temperature α; used to link LM scores to human choice
proportions by Tsvilodub et al. 2024 and Hu et al. 2023). α is fitted by maximum
likelihood to the human counts c_ij:

    LL(α) = Σ_i Σ_j c_ij · log softmax(α s_i)_j

which is concave in α (a one-parameter multinomial logit), so a bounded scalar
search (`scipy.optimize.minimize_scalar`) finds the maximum. The 95% interval is
the profile-likelihood interval {α : 2(LL(α̂) − LL(α)) ≤ χ²₁(0.95) = 3.841}, which
treats every human choice as independent. Baselines: the uniform model
(LL = Σ c_ij log 1/k_i) and the per-item empirical distribution (the saturated
model, LL = Σ c_ij log(c_ij / n_i); the upper bound any model can reach).

Condition-level aggregation (factorial designs): items sharing the condition
fields are pooled; options are aligned by their type (`option_types`) or, without
types, by position. Human counts are summed per type. The model's condition-level
distribution is one of

- ``scores``: softmax(α · mean over items of the scores),
- ``probs``: mean over items of softmax(α · s_i),
- ``wta``: winner-take-all, the share of items on which each type has the top
  score, add-one (Laplace) smoothed so that every type keeps some probability;
  it has no α.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special, stats

from llmscope.engine.choice_math import softmax

ALPHA_BOUNDS = (-200.0, 200.0)
AGGREGATIONS = ("scores", "probs", "wta")
_CHI2_HALF = float(stats.chi2.ppf(0.95, 1)) / 2.0


@dataclass
class AlphaFit:
    """A fitted softmax-choice model and its baselines (log-likelihoods in nats)."""

    alpha: float | None  # None for models without α (winner-take-all)
    lo: float | None
    hi: float | None
    loglik: float
    ll_uniform: float
    ll_empirical: float
    n_items: int
    n_choices: int
    at_bound: bool = False

    @property
    def ci95(self) -> list[float] | None:
        return None if self.lo is None or self.hi is None else [self.lo, self.hi]


def _ll_logs(logps: Sequence[np.ndarray], counts: Sequence[np.ndarray]) -> float:
    total = 0.0
    for lp, c0 in zip(logps, counts, strict=True):
        c = np.asarray(c0, dtype=np.float64)
        mask = c > 0
        total += float(np.sum(c[mask] * lp[mask]))
    return total


def _ll_dists(dists: Sequence[np.ndarray], counts: Sequence[np.ndarray]) -> float:
    with np.errstate(divide="ignore"):
        return _ll_logs([np.log(p) for p in dists], counts)


def log_softmax(s: np.ndarray, alpha: float) -> np.ndarray:
    """log softmax(α·s) in log space, so large α·s differences do not underflow to log 0."""
    z = alpha * np.asarray(s, dtype=np.float64)
    if alpha == 0:
        z = np.where(np.isfinite(s), 0.0, z)
    return np.asarray(special.log_softmax(z))


def loglik(
    alpha: float, scores: Sequence[Sequence[float]], counts: Sequence[Sequence[float]]
) -> float:
    """Σ_i Σ_j c_ij log softmax(α s_i)_j."""
    return _ll_logs(
        [log_softmax(np.asarray(s, dtype=np.float64), alpha) for s in scores],
        [np.asarray(c, dtype=np.float64) for c in counts],
    )


def baselines(counts: Sequence[np.ndarray]) -> tuple[float, float]:
    """(uniform LL, empirical/saturated LL) of the counts."""
    uni = sum(float(c.sum()) * math.log(1.0 / len(c)) for c in counts)
    emp = 0.0
    for c in counts:
        n = float(c.sum())
        m = c > 0
        emp += float(np.sum(c[m] * np.log(c[m] / n)))
    return uni, emp


def has_distribution(s: Sequence[float] | np.ndarray) -> bool:
    """Whether option scores define a choice distribution softmax(α·s): some option finite and
    none NaN. An abstention (every label probability 0: every log score -inf) has none; it is no
    uniform distribution, and softmax of it is undefined."""
    a = np.asarray(s, dtype=np.float64)
    return bool(np.any(np.isfinite(a)) and not np.any(np.isnan(a)))


def _clean(
    scores: Sequence[Sequence[float]], counts: Sequence[Sequence[float]]
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    s_out, c_out = [], []
    for s, c in zip(scores, counts, strict=True):
        sa, ca = np.asarray(s, dtype=np.float64), np.asarray(c, dtype=np.float64)
        if sa.shape != ca.shape:
            raise ValueError(f"an item has {len(sa)} option scores but {len(ca)} human counts")
        if np.any(ca < 0) or not np.all(np.isfinite(ca)):
            raise ValueError("human counts must be finite and non-negative")
        if ca.sum() <= 0 or not has_distribution(sa):
            continue
        s_out.append(sa)
        c_out.append(ca)
    return s_out, c_out


def fit_dists(
    predict: Callable[[float], list[np.ndarray]],
    counts: Sequence[np.ndarray],
    bounds: tuple[float, float] = ALPHA_BOUNDS,
    *,
    log_space: bool = False,
    loglik_of: Callable[[float], float] | None = None,
) -> AlphaFit:
    """Maximum-likelihood α for a model `predict(α) -> one distribution (or log-distribution) per unit`.

    ``loglik_of(α)``, when given, computes the same log-likelihood faster (``predict`` unused).
    """
    uni, emp = baselines(counts)
    n_choices = int(round(sum(float(c.sum()) for c in counts)))
    ll_of = _ll_logs if log_space else _ll_dists

    def nll(a: float) -> float:
        v = -(loglik_of(a) if loglik_of is not None else ll_of(predict(a), counts))
        return v if math.isfinite(v) else 1e300

    res = optimize.minimize_scalar(nll, bounds=bounds, method="bounded", options={"xatol": 1e-7})
    a_hat = float(res.x)
    width = bounds[1] - bounds[0]
    at_bound = min(a_hat - bounds[0], bounds[1] - a_hat) < 1e-4 * width
    for edge in bounds:
        # separable data: the likelihood keeps rising (or is flat at its maximum) towards a bound,
        # where the bounded search may stop anywhere on the plateau; report the bound itself
        if nll(edge) <= nll(a_hat) + 1e-9:
            a_hat, at_bound = float(edge), True
    ll_hat = -nll(a_hat)
    target = ll_hat - _CHI2_HALF

    def side(edge: float) -> float:
        if -nll(edge) >= target:
            return edge  # the interval reaches the search bound
        return float(
            optimize.brentq(
                lambda a: -nll(a) - target, min(a_hat, edge), max(a_hat, edge), xtol=1e-9
            )
        )

    return AlphaFit(
        a_hat, side(bounds[0]), side(bounds[1]), ll_hat, uni, emp, len(counts), n_choices, at_bound
    )


def fit_alpha(
    scores: Sequence[Sequence[float]],
    counts: Sequence[Sequence[float]],
    bounds: tuple[float, float] = ALPHA_BOUNDS,
) -> AlphaFit:
    """Item-level fit: P(choice j of item i) = softmax(α s_i)_j. Items without counts are skipped."""
    s, c = _clean(scores, counts)
    if not s:
        raise ValueError("no item has both finite scores and human counts")
    return fit_dists(
        lambda a: [log_softmax(x, a) for x in s],
        c,
        bounds,
        log_space=True,
        loglik_of=_item_loglik(s, c),
    )


def _item_loglik(s: list[np.ndarray], c: list[np.ndarray]) -> Callable[[float], float]:
    """Σ_i Σ_j c_ij log softmax(α s_i)_j with one log-softmax per option count and α (items of
    equal length stacked into a matrix) instead of one call per item: the optimiser evaluates it
    ~140 times, and per-item calls cost minutes on a 13k-item run. Per-item sums are added in
    item order, as :func:`_ll_logs` does."""
    by_len: dict[int, list[int]] = {}
    for i, x in enumerate(s):
        by_len.setdefault(len(x), []).append(i)
    blocks = [
        (np.asarray(ix), np.stack([s[i] for i in ix]), np.stack([c[i] for i in ix]))
        for ix in by_len.values()
    ]

    def ll(alpha: float) -> float:
        per_item = np.empty(len(s))
        for ix, S, C in blocks:
            z = alpha * S
            if alpha == 0:
                z = np.where(np.isfinite(S), 0.0, z)
            lp = special.log_softmax(z, axis=1)
            mask = C > 0
            with np.errstate(invalid="ignore"):
                per_item[ix] = np.where(mask, C * lp, 0.0).sum(axis=1)
        total = 0.0
        for v in per_item.tolist():
            total += v
        return total

    return ll


def softmax_accuracy(alpha: float, scores: Sequence[Sequence[float]], gold: Sequence[int]) -> float:
    """Mean over items of softmax(α s_i)[gold_i] (the expected accuracy of a softmax chooser)."""
    vals = [
        float(softmax(np.asarray(s, dtype=np.float64), alpha)[g])
        for s, g in zip(scores, gold, strict=True)
    ]
    return float(np.mean(vals)) if vals else float("nan")


@dataclass
class ConditionTable:
    """Items pooled by condition, options aligned by type."""

    conditions: list[str]
    types: list[str]
    scores: list[list[np.ndarray]]  # per condition: per item, scores in `types` order
    counts: list[np.ndarray]  # per condition: summed human counts in `types` order


def condition_table(
    scores: Sequence[Sequence[float]],
    counts: Sequence[Sequence[float]],
    conditions: Sequence[str],
    option_types: Sequence[Sequence[str]] | None = None,
) -> ConditionTable:
    """Pool items by condition; options are aligned by `option_types` (else by position)."""
    if option_types is None:
        option_types = [[str(j) for j in range(len(s))] for s in scores]
    conds = sorted(set(conditions), key=str)
    all_types: list[str] = []
    for t in option_types:
        for x in t:
            if x not in all_types:
                all_types.append(x)
    per_s: dict[str, list[np.ndarray]] = {c: [] for c in conds}
    per_c: dict[str, np.ndarray] = {c: np.zeros(len(all_types)) for c in conds}
    for s, c, cond, t in zip(scores, counts, conditions, option_types, strict=True):
        if sorted(t) != sorted(all_types) or len(set(t)) != len(t):
            raise ValueError(f"every item needs one option of each type {all_types}, got {list(t)}")
        idx = [list(t).index(x) for x in all_types]
        sa = np.asarray(s, dtype=np.float64)[idx]
        if not np.all(np.isfinite(sa)):
            continue
        per_s[cond].append(sa)
        per_c[cond] += np.asarray(c, dtype=np.float64)[idx]
    keep = [c for c in conds if per_s[c]]
    return ConditionTable(keep, all_types, [per_s[c] for c in keep], [per_c[c] for c in keep])


def condition_logdists(table: ConditionTable, how: str, alpha: float) -> list[np.ndarray]:
    """log of the model's distribution over types per condition under an aggregation rule."""
    out = []
    for items in table.scores:
        if how == "scores":
            out.append(log_softmax(np.mean(items, axis=0), alpha))
        elif how == "probs":
            logs = np.array([log_softmax(s, alpha) for s in items])
            out.append(special.logsumexp(logs, axis=0) - math.log(len(items)))
        elif how == "wta":
            wins = np.zeros(len(table.types))
            for s in items:
                wins[int(np.argmax(s))] += 1
            out.append(np.log((wins + 1.0) / (wins.sum() + len(wins))))
        else:
            raise ValueError(f"unknown aggregation {how!r}; allowed: {', '.join(AGGREGATIONS)}")
    return out


def condition_dists(table: ConditionTable, how: str, alpha: float) -> list[np.ndarray]:
    """The model's distribution over types per condition under an aggregation rule."""
    return [np.exp(x) for x in condition_logdists(table, how, alpha)]


def fit_condition(
    table: ConditionTable, how: str, bounds: tuple[float, float] = ALPHA_BOUNDS
) -> AlphaFit:
    """Fit α at the condition level under one aggregation rule (wta: no α, LL only)."""
    if not table.conditions:
        raise ValueError("no condition has items with finite scores")
    if how == "wta":
        uni, emp = baselines(table.counts)
        ll = _ll_logs(condition_logdists(table, "wta", 1.0), table.counts)
        n = int(round(sum(float(c.sum()) for c in table.counts)))
        return AlphaFit(None, None, None, ll, uni, emp, len(table.conditions), n)
    return fit_dists(
        lambda a: condition_logdists(table, how, a), table.counts, bounds, log_space=True
    )
