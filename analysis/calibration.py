"""Calibration of answer probabilities: reliability diagrams, ECE/MCE and Brier scores.

For yes/no, choice, rating and constrained tasks the confidence of an item is the
probability the model gives to its predicted (arg-max) answer. Items are binned by
confidence; per bin we report mean confidence and accuracy (DeGroot & Fienberg 1983;
Niculescu-Mizil & Caruana 2005). The expected calibration error is the count-weighted mean
of ``|accuracy - confidence|`` over non-empty bins and the maximum calibration error its
maximum (Naeini et al. 2015; Guo et al. 2017). The Brier score is the multi-class form of
Brier (1950): mean over items of ``sum_k (p_k - 1[k = gold])^2``; its binary helper uses the
usual single-probability form ``mean((p_yes - y)^2)``, which is half the two-class sum.

Bins are half-open ``[lo, hi)`` except the last, which is closed ``[lo, hi]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "Reliability",
    "predicted_confidence",
    "reliability",
    "uniform_bin",
    "ece",
    "brier",
    "brier_binary",
    "calibration_table",
]


@dataclass
class Reliability:
    """Reliability-diagram bins plus ECE/MCE.

    ``bins`` columns: ``lo, hi, count, confidence, accuracy, gap`` (NaN in empty bins).
    """

    bins: pd.DataFrame
    ece: float
    mce: float
    n: int
    n_missing: int


def _num(x: Any) -> np.ndarray:
    if isinstance(x, np.ndarray) and x.dtype.kind == "f":
        return x.astype(float)  # already numbers (the pipeline's arrays): no per-value pass
    arr = np.asarray(x if isinstance(x, (np.ndarray, pd.Series)) else list(x), dtype=object)
    return pd.to_numeric(pd.Series(arr, dtype="object"), errors="coerce").to_numpy(dtype=float)


def predicted_confidence(
    prob_matrix: np.ndarray | Sequence[Sequence[float]], *, normalize: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Arg-max answer index and its probability for each row of an items x answers matrix.

    With ``normalize=True`` each row is divided by its sum first (probability mass outside
    the answer set, e.g. P(other), is then ignored). Rows with no finite mass give index -1
    and confidence NaN.
    """
    p = np.asarray(prob_matrix, dtype=float)
    if normalize:
        s = np.nansum(p, axis=1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            p = np.where(s > 0, p / s, np.nan)
    valid = np.isfinite(p).any(axis=1)
    filled = np.where(np.isfinite(p), p, -np.inf)
    idx = np.where(valid, np.argmax(filled, axis=1), -1)
    conf = np.where(valid, filled[np.arange(len(p)), np.maximum(idx, 0)], np.nan)
    return idx, conf


def _edges(conf: np.ndarray, n_bins: int, strategy: str) -> np.ndarray:
    if strategy == "uniform":
        # i / n is the correctly rounded edge (0.3, not linspace's 0.30000000000000004).
        return np.arange(n_bins + 1) / n_bins
    if strategy == "quantile":
        e = np.unique(np.quantile(conf, np.linspace(0.0, 1.0, n_bins + 1)))
        if len(e) == 1:
            e = np.array([e[0], e[0]])
        return e
    raise ValueError(f"unknown strategy {strategy!r}")


def uniform_bin(conf: np.ndarray, n_bins: int) -> np.ndarray:
    """Bin index of each confidence among ``n_bins`` equal-width bins ``[i/n, (i+1)/n)``.

    Computed as ``floor(conf * n)`` after rounding the product to 9 decimals, so a
    confidence that sits on an edge (0.3 with ten bins, whose float product is
    2.9999999999999996 for some edges) lands in the bin that starts there; 1.0 goes in
    the last bin.
    """
    x = np.round(np.asarray(conf, dtype=float) * n_bins, 9)
    return np.clip(np.floor(x).astype(int), 0, n_bins - 1)


def reliability(
    confidence: Sequence[float] | np.ndarray | pd.Series,
    correct: Sequence[Any] | np.ndarray | pd.Series,
    n_bins: int = 10,
    strategy: str = "uniform",
) -> Reliability:
    """Bin items by confidence and compute per-bin confidence/accuracy, ECE and MCE.

    ``strategy="uniform"`` uses equal-width bins on [0, 1]; ``"quantile"`` uses bins with
    (roughly) equal counts (duplicate edges merged). Items whose confidence or correctness is
    NaN/None are dropped and counted in ``n_missing``.
    """
    c = _num(confidence)
    y = _num(correct)
    if len(c) != len(y):
        raise ValueError("confidence and correct differ in length")
    keep = np.isfinite(c) & np.isfinite(y)
    c, y = c[keep], y[keep]
    n = len(c)
    if n == 0:
        return Reliability(
            pd.DataFrame(columns=["lo", "hi", "count", "confidence", "accuracy", "gap"]),
            float("nan"),
            float("nan"),
            0,
            int((~keep).sum()),
        )
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    edges = _edges(c, n_bins, strategy)
    nb = len(edges) - 1
    # right-open bins, the last one closed so conf == hi lands in it
    if strategy == "uniform":
        b = uniform_bin(c, nb)
    else:
        b = np.clip(np.searchsorted(edges, c, side="right") - 1, 0, nb - 1)
    count = np.bincount(b, minlength=nb)
    sum_c = np.bincount(b, weights=c, minlength=nb)
    sum_y = np.bincount(b, weights=y, minlength=nb)
    with np.errstate(invalid="ignore", divide="ignore"):
        conf_b = np.where(count > 0, sum_c / count, np.nan)
        acc_b = np.where(count > 0, sum_y / count, np.nan)
    gap = np.abs(acc_b - conf_b)
    bins = pd.DataFrame(
        {
            "lo": edges[:-1],
            "hi": edges[1:],
            "count": count,
            "confidence": conf_b,
            "accuracy": acc_b,
            "gap": gap,
        }
    )
    nz = count > 0
    e = float(np.sum(count[nz] * gap[nz]) / n)
    m = float(np.max(gap[nz]))
    return Reliability(bins, e, m, n, int((~keep).sum()))


def ece(confidence: Any, correct: Any, n_bins: int = 10, strategy: str = "uniform") -> float:
    """Expected calibration error (count-weighted mean |acc - conf| over bins)."""
    return reliability(confidence, correct, n_bins, strategy).ece


def brier(
    prob_matrix: np.ndarray | Sequence[Sequence[float]],
    gold_index: Sequence[Any] | np.ndarray | pd.Series,
) -> float:
    """Multi-class Brier score: mean_i sum_k (p_ik - 1[k = gold_i])^2.

    Rows whose gold index is missing (NaN/None/negative) are skipped. Probabilities are used
    as given: mass outside the listed answers (P(other)) is not renormalised away, so a model
    that answers off-format is penalised.
    """
    p = np.asarray(prob_matrix, dtype=float)
    g = _num(gold_index)
    keep = np.isfinite(g) & (g >= 0)
    p, g = p[keep], g[keep].astype(int)
    if len(p) == 0:
        return float("nan")
    onehot = np.zeros_like(p)
    onehot[np.arange(len(p)), g] = 1.0
    return float(np.mean(np.sum((np.nan_to_num(p) - onehot) ** 2, axis=1)))


def brier_binary(
    p_yes: Sequence[float] | np.ndarray | pd.Series,
    gold_yes: Sequence[Any] | np.ndarray | pd.Series,
) -> float:
    """Binary Brier score mean((P(yes) - 1[gold = yes])^2); NaN golds skipped.

    ``gold_yes`` may be 0/1/bool or the strings "yes"/"no" (case-insensitive).
    """
    p = _num(p_yes)
    raw = pd.Series(
        np.asarray(gold_yes if isinstance(gold_yes, (np.ndarray, pd.Series)) else list(gold_yes)),
        dtype="object",
    )
    mapped = raw.map(lambda v: {"yes": 1.0, "no": 0.0}.get(v.lower()) if isinstance(v, str) else v)
    y = _num(mapped)
    keep = np.isfinite(p) & np.isfinite(y)
    if not keep.any():
        return float("nan")
    return float(np.mean((p[keep] - y[keep]) ** 2))


def calibration_table(
    df: pd.DataFrame,
    by: Sequence[str] = (),
    *,
    confidence_col: str = "confidence",
    correct_col: str = "correct",
    n_bins: int = 10,
    strategy: str = "uniform",
) -> pd.DataFrame:
    """Per-group ``n, confidence (mean), accuracy, ece, mce``."""
    by = list(by)
    rows = []
    parts = df.groupby(by, sort=True, dropna=False) if by else [((), df)]
    for key, part in parts:
        key = key if isinstance(key, tuple) else (key,)
        r = reliability(part[confidence_col], part[correct_col], n_bins, strategy)
        c = _num(part[confidence_col])
        y = _num(part[correct_col])
        k = np.isfinite(c) & np.isfinite(y)
        rows.append(
            {
                **dict(zip(by, key, strict=True)),
                "n": r.n,
                "confidence": float(c[k].mean()) if k.any() else np.nan,
                "accuracy": float(y[k].mean()) if k.any() else np.nan,
                "ece": r.ece,
                "mce": r.mce,
            }
        )
    return pd.DataFrame(rows)
