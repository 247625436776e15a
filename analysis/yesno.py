"""Yes/no answer bias and off-format answers ("refusal") from first-token probabilities.

For each item the model gives P(yes), P(no) and P(other) = 1 - P(yes) - P(no) at the first
generated position. Per group we compare the mean P(yes) and the rate of yes predictions
(P(yes) > P(no)) with the gold yes rate (acquiescence / "yes-bias", cf. Dentella et al.
2023), and we describe the distribution of P(other): a histogram and the share of items
where P(other) > P(yes) + P(no), i.e. the model mostly does not answer in the expected form.
Rates carry Wilson 95% intervals ``[lo, hi]``; mean probabilities a normal interval
``mean ± 1.96·sd/√n``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from .intervals import wilson_interval

__all__ = [
    "yesno_frame",
    "yesno_summary",
    "other_histogram",
    "human_distance",
    "HUMAN_DISTANCE_SQL",
]

# |m-h| in SQL, for the paged item list (Store.failing_page fills {p_yes}, {p_no}, {human}):
# the same definition as `human_distance`, NULL where P(yes) + P(no) = 0 or a value is missing.
HUMAN_DISTANCE_SQL = "abs({p_yes} / nullif({p_yes} + {p_no}, 0) - {human})"


def human_distance(p_yes: Any, p_no: Any, human: Any) -> np.ndarray:
    """|m-h|, a yes/no statement's distance to humans: |P(yes) / (P(yes) + P(no)) - human|.

    ``human`` is the share of people who agree (the commonsense corpus' ``human_q1``). P(yes) is
    renormalised over the two answers, as `ece`'s confidence is, so mass on other tokens does
    not count as agreeing with "no". NaN where P(yes) + P(no) = 0 or a value is missing. The TUI's
    item list and human panel show this value (docs/METRICS.md, `human_distance`)."""

    def col(x: Any) -> np.ndarray:
        return pd.to_numeric(
            pd.Series(np.asarray(x, dtype=object).ravel()), errors="coerce"
        ).to_numpy(float)

    y, n, h = col(p_yes), col(p_no), col(human)
    s = y + n
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(s > 0, np.abs(y / np.where(s > 0, s, 1.0) - h), np.nan)


Z95 = 1.959963984540054


def _get_prob(probs: Mapping[str, Any] | None, name: str) -> float:
    if not probs:
        return np.nan
    for k, v in probs.items():
        if str(k).strip().lower() == name:
            return float(v) if v is not None else np.nan
    return np.nan


def yesno_frame(records: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Flatten result records (``probs`` dict, optional ``other``, ``gold``, extra keys kept)
    into columns ``p_yes, p_no, p_other, gold`` (+ the other scalar keys).

    Answer keys are matched case-insensitively; P(other) defaults to 1 - P(yes) - P(no).
    """
    rows = []
    for r in records:
        probs = r.get("probs") or r.get("response")
        row = {k: v for k, v in r.items() if not isinstance(v, (dict, list))}
        row["p_yes"] = _get_prob(probs, "yes")
        row["p_no"] = _get_prob(probs, "no")
        other = r.get("other")
        if other is None and probs:
            other = _get_prob(probs, "other")
        if other is None or (isinstance(other, float) and np.isnan(other)):
            other = 1.0 - row["p_yes"] - row["p_no"]
        row["p_other"] = float(other)
        rows.append(row)
    return pd.DataFrame(rows)


def _gold_yes(g: pd.Series) -> np.ndarray:
    def f(v: Any) -> float:
        if v is None or (isinstance(v, float) and np.isnan(v)):
            return np.nan
        if isinstance(v, str):
            return {"yes": 1.0, "no": 0.0, "true": 1.0, "false": 0.0}.get(v.strip().lower(), np.nan)
        return float(bool(v))

    return g.map(f).to_numpy(dtype=float)


def _mean_ci(x: np.ndarray) -> tuple[float, float, float]:
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return (np.nan, np.nan, np.nan)
    m = float(x.mean())
    if len(x) < 2:
        return (m, np.nan, np.nan)
    h = Z95 * float(x.std(ddof=1)) / np.sqrt(len(x))
    return (m, m - h, m + h)


def other_histogram(
    p_other: Sequence[float] | np.ndarray | pd.Series, bins: int = 10
) -> pd.DataFrame:
    """Histogram of P(other) on [0, 1]: columns ``lo, hi, count, share`` (last bin closed)."""
    x = pd.to_numeric(pd.Series(p_other), errors="coerce").to_numpy(dtype=float)
    x = np.clip(x[np.isfinite(x)], 0.0, 1.0)
    from .calibration import uniform_bin

    edges = np.arange(bins + 1) / bins
    count = np.bincount(uniform_bin(x, bins), minlength=bins)
    share = count / len(x) if len(x) else np.full(bins, np.nan)
    return pd.DataFrame({"lo": edges[:-1], "hi": edges[1:], "count": count, "share": share})


def yesno_summary(
    df: pd.DataFrame,
    by: Sequence[str] = (),
    *,
    yes_col: str = "p_yes",
    no_col: str = "p_no",
    other_col: str | None = "p_other",
    gold_col: str | None = "gold",
) -> pd.DataFrame:
    """Per-group yes/no bias and off-format share.

    Columns: ``n``; ``p_yes, p_no, p_other`` (means) with ``*_lo/*_hi``; ``gold_yes_rate``
    (over items with a yes/no gold, ``n_gold``); ``pred_yes_rate`` (P(yes) > P(no)) with
    Wilson ``pred_yes_lo/hi``; ``yes_bias = pred_yes_rate - gold_yes_rate``; ``p_yes_norm``
    (mean P(yes)/(P(yes)+P(no))); ``off_format_rate`` (P(other) > P(yes)+P(no)) with Wilson
    ``off_format_lo/hi``.
    """
    by = list(by)
    rows = []
    parts = df.groupby(by, sort=True, dropna=False) if by else [((), df)]
    for key, part in parts:
        key = key if isinstance(key, tuple) else (key,)
        y = pd.to_numeric(part[yes_col], errors="coerce").to_numpy(dtype=float)
        n_ = pd.to_numeric(part[no_col], errors="coerce").to_numpy(dtype=float)
        if other_col and other_col in part:
            o = pd.to_numeric(part[other_col], errors="coerce").to_numpy(dtype=float)
            o = np.where(np.isfinite(o), o, 1.0 - y - n_)
        else:
            o = 1.0 - y - n_
        ok = np.isfinite(y) & np.isfinite(n_)
        y, n_, o = y[ok], n_[ok], o[ok]
        n = len(y)
        row: dict[str, Any] = dict(zip(by, key, strict=True))
        row["n"] = n
        for name, arr in (("p_yes", y), ("p_no", n_), ("p_other", o)):
            m, lo, hi = _mean_ci(arr)
            row[name], row[f"{name}_lo"], row[f"{name}_hi"] = m, lo, hi
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = y / (y + n_)
        # np.nanmean warns "Mean of empty slice" when no item has any yes/no mass.
        row["p_yes_norm"] = (
            float(np.mean(ratio[np.isfinite(ratio)])) if np.isfinite(ratio).any() else np.nan
        )
        k_yes = int(np.sum(y > n_))
        row["pred_yes_rate"] = k_yes / n if n else np.nan
        row["pred_yes_lo"], row["pred_yes_hi"] = wilson_interval(k_yes, n)
        if gold_col and gold_col in part:
            g = _gold_yes(part[gold_col])[ok]
            gk = np.isfinite(g)
            row["n_gold"] = int(gk.sum())
            row["gold_yes_rate"] = float(g[gk].mean()) if gk.any() else np.nan
        else:
            row["n_gold"] = 0
            row["gold_yes_rate"] = np.nan
        row["yes_bias"] = row["pred_yes_rate"] - row["gold_yes_rate"]
        k_off = int(np.sum(o > y + n_))
        row["off_format_rate"] = k_off / n if n else np.nan
        row["off_format_lo"], row["off_format_hi"] = wilson_interval(k_off, n)
        rows.append(row)
    return pd.DataFrame(rows)
