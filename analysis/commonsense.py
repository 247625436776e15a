"""Human vs model commonsensicality (Whiting & Watts 2024; Nguyen, Watts & Whiting 2025).

For each statement humans give a majority answer to q1 ("Do you agree with this
statement?"). A model answers q1 (does it agree) and q2 ("Do you think most people would
agree?"); a probabilistic answer is binarised as yes when P(yes) > P(no) (this rule
reproduces the published ``all_models_binarythresh.csv`` columns exactly; P(yes) > 0.5 does
not). Then

* consensus = share of statements where the model's q1 answer equals the human majority,
* awareness = share where the model's q2 answer equals the human majority,
* commonsensicality = sqrt(consensus x awareness) (geometric mean, as in Whiting & Watts).

Consensus and awareness carry Wilson 95% intervals; commonsensicality a percentile
bootstrap interval over statements (statements resampled jointly for both rates). All
intervals are ``[lo, hi]``. Correlations of model P(yes) with a human agreement rate use
Pearson's r and Spearman's rho (SciPy).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from .intervals import resample_index, wilson_interval
from .rows import metric_row

__all__ = [
    "binarize",
    "load_raw_results",
    "load_human_table",
    "commonsense_frame",
    "commonsensicality",
    "correlation",
    "commonsense_rows",
]


def binarize(p_yes: Any, p_no: Any) -> np.ndarray:
    """1.0 where P(yes) > P(no), 0.0 otherwise (ties are "no"), NaN where either is missing."""
    y = pd.to_numeric(pd.Series(np.asarray(p_yes, dtype=object)), errors="coerce").to_numpy(
        dtype=float
    )
    n = pd.to_numeric(pd.Series(np.asarray(p_no, dtype=object)), errors="coerce").to_numpy(
        dtype=float
    )
    out = (y > n).astype(float)
    out[~(np.isfinite(y) & np.isfinite(n))] = np.nan
    return out


def load_raw_results(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Read ``results_raw_q*.jsonl`` records ``{"id", "prompt", "response": {"yes","no",
    "other"}}`` into columns ``id, p_yes, p_no, p_other``."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            resp = r.get("response") or {}
            rows.append(
                {
                    "id": r["id"],
                    "p_yes": resp.get("yes", np.nan),
                    "p_no": resp.get("no", np.nan),
                    "p_other": resp.get("other", np.nan),
                }
            )
    return pd.DataFrame(rows)


def load_human_table(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Read ``all_models_binarythresh.csv`` (index column = statement id) with the id as a
    column ``id``."""
    df = pd.read_csv(path, index_col=0)
    df.index.name = "id"
    return df.reset_index()


def commonsense_frame(
    human: pd.DataFrame,
    q1: pd.DataFrame,
    q2: pd.DataFrame | None = None,
    *,
    human_col: str = "human_q1",
    id_col: str = "id",
    keep: Sequence[str] = ("category",),
) -> pd.DataFrame:
    """Join human majorities with model answers into ``id, human, model_q1, model_q2,
    p_yes_q1, p_no_q1, p_yes_q2, p_no_q2`` (+ ``keep`` columns).

    ``q1``/``q2`` need ``id, p_yes, p_no``; model answers are :func:`binarize` d. Only
    statements present in ``human`` and ``q1`` are kept.
    """
    h = human[[id_col, human_col, *[k for k in keep if k in human]]].rename(
        columns={id_col: "id", human_col: "human"}
    )
    a = q1[[id_col, "p_yes", "p_no"]].rename(
        columns={id_col: "id", "p_yes": "p_yes_q1", "p_no": "p_no_q1"}
    )
    df = h.merge(a, on="id", how="inner")
    df["model_q1"] = binarize(df["p_yes_q1"], df["p_no_q1"])
    if q2 is not None:
        b = q2[[id_col, "p_yes", "p_no"]].rename(
            columns={id_col: "id", "p_yes": "p_yes_q2", "p_no": "p_no_q2"}
        )
        df = df.merge(b, on="id", how="left")
        df["model_q2"] = binarize(df["p_yes_q2"], df["p_no_q2"])
    else:
        df["model_q2"] = np.nan
    return df


def _boot_cs(c: np.ndarray, a: np.ndarray, n_boot: int, seed: int) -> tuple[float, float]:
    n = len(c)
    reps = np.empty(n_boot)
    done = 0
    for idx in resample_index(n, n_boot, seed):
        b = idx.shape[0]
        reps[done : done + b] = np.sqrt(c[idx].mean(axis=1) * a[idx].mean(axis=1))
        done += b
    lo, hi = np.quantile(reps, [0.025, 0.975])
    return float(lo), float(hi)


def _one(part: pd.DataFrame, human_col: str, q1_col: str, q2_col: str, n_boot: int, seed: int):
    h = pd.to_numeric(part[human_col], errors="coerce").to_numpy(dtype=float)
    m1 = pd.to_numeric(part[q1_col], errors="coerce").to_numpy(dtype=float)
    m2 = (
        pd.to_numeric(part[q2_col], errors="coerce").to_numpy(dtype=float)
        if q2_col in part
        else np.full(len(part), np.nan)
    )
    row: dict[str, Any] = {}
    ok1 = np.isfinite(h) & np.isfinite(m1)
    c = (m1[ok1] == h[ok1]).astype(float)
    row["n"] = int(ok1.sum())
    row["consensus"] = float(c.mean()) if len(c) else np.nan
    row["consensus_lo"], row["consensus_hi"] = wilson_interval(c.sum(), len(c))
    ok2 = np.isfinite(h) & np.isfinite(m2)
    a = (m2[ok2] == h[ok2]).astype(float)
    row["n_q2"] = int(ok2.sum())
    row["awareness"] = float(a.mean()) if len(a) else np.nan
    row["awareness_lo"], row["awareness_hi"] = wilson_interval(a.sum(), len(a))
    row["commonsensicality"] = float(np.sqrt(row["consensus"] * row["awareness"]))
    both = ok1 & ok2
    if both.sum() >= 2:
        cb = (m1[both] == h[both]).astype(float)
        ab = (m2[both] == h[both]).astype(float)
        row["commonsensicality_lo"], row["commonsensicality_hi"] = _boot_cs(cb, ab, n_boot, seed)
    else:
        row["commonsensicality_lo"] = row["commonsensicality_hi"] = np.nan
    return row


def commonsensicality(
    df: pd.DataFrame,
    by: Sequence[str] = (),
    *,
    human_col: str = "human",
    q1_col: str = "model_q1",
    q2_col: str = "model_q2",
    overall: bool = True,
    n_boot: int = 2000,
    seed: int = 0,
) -> pd.DataFrame:
    """Consensus, awareness and commonsensicality with 95% intervals, per group ``by`` and
    (with ``overall``) an overall row whose group columns are ``"(all)"``.

    Columns: group keys, ``n, consensus(_lo/_hi), n_q2, awareness(_lo/_hi),
    commonsensicality(_lo/_hi)``. Rows with missing human or model answers are skipped for the
    rate they affect.
    """
    by = list(by)
    rows = []
    if overall:
        rows.append(
            {**{k: "(all)" for k in by}, **_one(df, human_col, q1_col, q2_col, n_boot, seed)}
        )
    if by:
        for key, part in df.groupby(by, sort=True, dropna=False):
            key = key if isinstance(key, tuple) else (key,)
            rows.append(
                {
                    **dict(zip(by, key, strict=True)),
                    **_one(part, human_col, q1_col, q2_col, n_boot, seed),
                }
            )
    return pd.DataFrame(rows)


def correlation(model_p: Any, human_rate: Any) -> dict[str, float]:
    """Pearson and Spearman correlation (with p-values) between model P(yes) and a human
    agreement rate; pairs with a missing value are dropped."""
    x = pd.to_numeric(pd.Series(np.asarray(model_p, dtype=object)), errors="coerce").to_numpy(
        dtype=float
    )
    y = pd.to_numeric(pd.Series(np.asarray(human_rate, dtype=object)), errors="coerce").to_numpy(
        dtype=float
    )
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    out = {"n": int(ok.sum())}
    # constant as scipy judges it (every value equal): a std of equal floats such as 0.1 can
    # be 1e-17 rather than 0, and scipy then warns on stderr (into `llmscope report`)
    if len(x) < 3 or bool(np.all(x == x[0])) or bool(np.all(y == y[0])):
        return {
            **out,
            "pearson": np.nan,
            "pearson_p": np.nan,
            "spearman": np.nan,
            "spearman_p": np.nan,
        }
    pr = stats.pearsonr(x, y)
    sr = stats.spearmanr(x, y)
    return {
        **out,
        "pearson": float(pr.statistic),
        "pearson_p": float(pr.pvalue),
        "spearman": float(sr.statistic),
        "spearman_p": float(sr.pvalue),
    }


def commonsense_rows(
    table: pd.DataFrame, *, run: str, model: str, by: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """Metric rows (consensus, awareness, commonsensicality) from :func:`commonsensicality`."""
    rows = []
    for r in table.to_dict("records"):
        group = {k: r[k] for k in by}
        for m, ncol in (("consensus", "n"), ("awareness", "n_q2"), ("commonsensicality", "n")):
            rows.append(
                metric_row(run, model, m, r[m], [r[f"{m}_lo"], r[f"{m}_hi"]], r[ncol], group)
            )
    return rows
