"""Pure-numpy scoring rules for multiple-choice items.

Inputs per option: the raw log-likelihood Σ log P(option tokens | prompt) and the
option's length in tokens, characters and UTF-8 bytes; optionally the option
probabilities under content-free inputs (contextual calibration) and the
log-likelihood under a domain prompt (PMI).

Methods (each gives one score per option; higher is better):

- ``raw``: Σ log P(option | prompt).
- ``mean_token``: raw / n_tokens.
- ``per_char``: raw / n_chars (characters of the continuation as scored).
- ``per_byte``: raw / n_bytes (UTF-8 bytes of the continuation).
- ``calibrated``: contextual calibration (Zhao et al. 2021). p = softmax(raw);
  p_cf = mean over content-free inputs of softmax(raw under that input);
  calibrated = normalise(p / p_cf) (W = diag(p_cf)^-1, b = 0). The *score* is
  log(calibrated) so that softmax(1 · score) reproduces the calibrated
  distribution; `option_values` reports the calibrated probability itself.
- ``pmi``: domain-conditional PMI (Holtzman et al. 2021):
  log P(option | prompt) − log P(option | domain prompt). This is the log of the
  prior-corrected probability P(o|I)/P(o|I0) with I0 the domain (answer-only) prompt.
- ``mean_token_prob``: mean over the option's tokens of P(token | prefix)
  (Tsvilodub et al. 2024), present when per-token log-probs are given.
- ``surprisal_ratio``: surprisal-reduction factor log P(o|I0) / log P(o|I)
  (Tsvilodub et al. 2024; I0 = the domain prompt): how many times smaller the
  option's surprisal is with the item's context than without it. An option with
  log P(o|I) = 0 scores +inf (softmax gives the +inf options all the mass).

Prediction rule: argmax of the score; ties go to the first maximum (lowest
option index), which is what `numpy.argmax` does.

Expected accuracy: the model is taken to choose option i with probability
softmax(α · score)_i; expected accuracy = P(choose gold). α (inverse
temperature) defaults to 1. For ``raw`` with α = 1 this is the softmax
probability of the gold option.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import permutations as _all_perms
from math import factorial

import numpy as np

METHODS = (
    "raw",
    "mean_token",
    "per_char",
    "per_byte",
    "calibrated",
    "pmi",
    "mean_token_prob",
    "surprisal_ratio",
)


def softmax(x: Sequence[float] | np.ndarray, alpha: float = 1.0) -> np.ndarray:
    """softmax(α·x), stable; -inf entries get probability 0."""
    z = alpha * np.asarray(x, dtype=np.float64)
    m = np.max(z)
    if m == np.inf:
        top = (z == np.inf).astype(np.float64)
        return top / top.sum()
    if not np.isfinite(m):
        raise ValueError("softmax of scores with no finite maximum")
    e = np.exp(z - m)
    return e / e.sum()


def argmax_first(x: Sequence[float] | np.ndarray) -> int:
    """Index of the first maximum (the documented tie rule: the prediction shown)."""
    return int(np.argmax(np.asarray(x, dtype=np.float64)))


def strict_win(x: Sequence[float] | np.ndarray, gold: int) -> float:
    """1.0 when option ``gold`` scores strictly above every other option, else 0.0.

    The tie rule (docs/METRICS.md): a tie is never credited; the prediction shown is the
    first listed of the tied answers (:func:`argmax_first`).
    """
    a = np.asarray(x, dtype=np.float64)
    others = np.delete(a, gold)
    return 1.0 if others.size == 0 or bool(np.all(a[gold] > others)) else 0.0


def content_free_probs(cf_logprobs: Sequence[Sequence[float]]) -> np.ndarray:
    """p_cf: each content-free input's option log-probs softmaxed, then averaged over inputs."""
    rows = np.asarray(cf_logprobs, dtype=np.float64)
    if rows.ndim != 2 or rows.shape[0] == 0:
        raise ValueError("content-free log-probs must be a non-empty 2-D table (inputs × options)")
    return np.mean([softmax(r) for r in rows], axis=0)


def calibrate(raw: Sequence[float] | np.ndarray, p_cf: Sequence[float] | np.ndarray) -> np.ndarray:
    """Contextual calibration: normalise(diag(p_cf)^-1 · softmax(raw))."""
    p = softmax(raw)
    q = np.asarray(p_cf, dtype=np.float64)
    if q.shape != p.shape:
        raise ValueError(f"p_cf has {q.shape[0]} options, expected {p.shape[0]}")
    if np.any(q <= 0):
        raise ValueError("content-free probabilities must be positive")
    w = p / q
    return w / w.sum()


@dataclass
class ChoiceScores:
    """Per-method scores, option-level values, predictions and expected accuracies."""

    options: list[str]
    scores: dict[str, np.ndarray]  # method -> score per option (log space)
    values: dict[str, np.ndarray]  # method -> value to store per option (calibrated: probability)
    predictions: dict[str, int]
    expected_acc: dict[str, float | None] = field(default_factory=dict)
    correct: dict[str, float | None] = field(default_factory=dict)

    def method_summary(self) -> dict[str, dict[str, object]]:
        """{method: {"prediction": option, "correct": 1.0/0.0/None, "expected_acc": float/None}}."""
        return {
            m: {
                "prediction": self.options[self.predictions[m]],
                "correct": self.correct.get(m),
                "expected_acc": self.expected_acc.get(m),
            }
            for m in self.scores
        }


def _positive(name: str, a: np.ndarray) -> None:
    if np.any(a <= 0):
        raise ValueError(f"{name} must be positive for every option (got {a.tolist()})")


def score_options(
    options: Sequence[str],
    logprobs: Sequence[float],
    n_tokens: Sequence[int],
    n_chars: Sequence[int] | None = None,
    n_bytes: Sequence[int] | None = None,
    *,
    p_cf: Sequence[float] | None = None,
    domain_logprobs: Sequence[float] | None = None,
    gold: int | None = None,
    alpha: float = 1.0,
    token_logprobs: Sequence[Sequence[float]] | None = None,
) -> ChoiceScores:
    """Score every option under every available method.

    `n_chars`/`n_bytes` default to the lengths of the option strings themselves.
    `calibrated` is present only with `p_cf`, `pmi` and `surprisal_ratio` only with
    `domain_logprobs`, `mean_token_prob` only with `token_logprobs` (one list per option).
    `gold` is an option index (or None for unscored items).
    """
    opts = list(options)
    k = len(opts)
    if k == 0:
        raise ValueError("no options")
    raw = np.asarray(logprobs, dtype=np.float64)
    nt = np.asarray(n_tokens, dtype=np.float64)
    nc = np.asarray([len(o) for o in opts] if n_chars is None else n_chars, dtype=np.float64)
    nb = np.asarray(
        [len(o.encode("utf-8")) for o in opts] if n_bytes is None else n_bytes, dtype=np.float64
    )
    for name, a in (("logprobs", raw), ("n_tokens", nt), ("n_chars", nc), ("n_bytes", nb)):
        if a.shape != (k,):
            raise ValueError(f"{name} has shape {a.shape}, expected ({k},)")
    _positive("n_tokens", nt)
    _positive("n_chars", nc)
    _positive("n_bytes", nb)

    scores: dict[str, np.ndarray] = {
        "raw": raw,
        "mean_token": raw / nt,
        "per_char": raw / nc,
        "per_byte": raw / nb,
    }
    values = dict(scores)
    if p_cf is not None:
        cal = calibrate(raw, p_cf)
        values["calibrated"] = cal
        with np.errstate(divide="ignore"):
            scores["calibrated"] = np.log(cal)
    if domain_logprobs is not None:
        dom = np.asarray(domain_logprobs, dtype=np.float64)
        if dom.shape != (k,):
            raise ValueError(f"domain_logprobs has shape {dom.shape}, expected ({k},)")
        scores["pmi"] = raw - dom
        values["pmi"] = scores["pmi"]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(raw < 0, dom / np.where(raw < 0, raw, -1.0), np.inf)
        scores["surprisal_ratio"] = ratio
        values["surprisal_ratio"] = ratio
    if token_logprobs is not None:
        if len(token_logprobs) != k:
            raise ValueError(f"token_logprobs has {len(token_logprobs)} options, expected {k}")
        mtp = np.array(
            [
                float(np.mean(np.exp(np.asarray(t, dtype=np.float64)))) if len(t) else np.nan
                for t in token_logprobs
            ]
        )
        if np.all(np.isfinite(mtp)):
            scores["mean_token_prob"] = mtp
            values["mean_token_prob"] = mtp

    out = ChoiceScores(opts, scores, values, {m: argmax_first(s) for m, s in scores.items()})
    for m, s in scores.items():
        if gold is None:
            out.expected_acc[m] = None
            out.correct[m] = None
        else:
            out.expected_acc[m] = float(softmax(s, alpha)[gold])
            out.correct[m] = strict_win(s, gold)
    return out


def permute_options(options: Sequence[str], k: int, seed: int = 0) -> list[list[str]]:
    """Up to `k` re-orderings of `options`, never the original order, deterministic.

    Rule: first the cyclic shifts by 1, 2, ..., n−1 (shift s puts option s first:
    options[s:] + options[:s]); then seeded shuffles
    until `k` orders exist or all n! − 1 non-identity orders are used. For n ≤ 7
    the remaining orders (lexicographic `itertools.permutations` of the indices,
    minus those already produced) are shuffled once with `random.Random(seed)`
    and taken from the front; for n > 7 index lists are shuffled repeatedly with
    `random.Random(seed)`, skipping repeats. Orders are compared as index
    tuples, so duplicate option strings are still permuted.
    """
    n = len(options)
    if k <= 0 or n < 2:
        return []
    limit = min(k, factorial(n) - 1)
    seen: set[tuple[int, ...]] = {tuple(range(n))}
    orders: list[tuple[int, ...]] = []
    for s in range(1, n):
        if len(orders) >= limit:
            break
        o = tuple(list(range(s, n)) + list(range(s)))
        seen.add(o)
        orders.append(o)
    if len(orders) < limit:
        if factorial(n) <= 5040:
            # Small n: shuffle the remaining permutations so the loop always terminates quickly.
            rest = [p for p in _all_perms(range(n)) if p not in seen]
            random.Random(seed).shuffle(rest)
            orders.extend(rest[: limit - len(orders)])
        else:
            rng = random.Random(seed)
            idx = list(range(n))
            while len(orders) < limit:
                rng.shuffle(idx)
                t = tuple(idx)
                if t not in seen:
                    seen.add(t)
                    orders.append(t)
    return [[options[i] for i in o] for o in orders]
