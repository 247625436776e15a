"""SG score, word-level surprisal tables and the reading-time model for `syntaxgym` runs.

SG score (Hu et al. 2020): the share of a suite's items whose predictions all hold.
Per suite it comes with a Wilson 95% interval (items are independent within a
suite); the overall score `sg_score` is the mean of the per-suite scores (macro), as the
paper averages over suites, with a stratified bootstrap interval (items resampled within
each suite, 2000 replicates, seed 0), or the Wilson interval when there is one suite;
`sg_score_micro` is the pooled share of items (Wilson). Where the suites name their
circuit (`meta.circuit`), `sg_score` per circuit is the mean over its suites and
`sg_score_circuits` the mean over circuits.

Word table: one row per (item, condition, word) in the long format reading-time
researchers join on (`item_id`, `condition`, `word_index`), with surprisal in bits.

RT model: ``rt ~ surprisal + length (+ log_freq)`` by ordinary least squares
(numpy.linalg.lstsq) with the fit reported on held-out words (k-fold over
(item, condition) groups, so words of one sentence never straddle train and test):
held-out R², and the log-likelihood gain per word over the same model without
surprisal (ΔLL, Goodkind & Bicknell 2018; Wilcox et al. 2020).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from llmscope.analysis.intervals import wilson_interval
from llmscope.analysis.rows import metric_row
from llmscope.engine.tasks.registry import task_has
from llmscope.store.codec import decode_json_cell

WORD_COLUMNS = [
    "run_id",
    "model",
    "item_id",
    "condition",
    "word_index",
    "word",
    "region",
    "region_name",
    "start",
    "end",
    "length",
    "n_tokens",
    "surprisal_bits",
    "sentence",
]


def _suite_of(fields: Any, spec: dict[str, Any]) -> str:
    f = decode_json_cell(fields) or {}
    if "suite" in f:
        return str(f["suite"])
    by = spec.get("group_by") or []
    if by and by[0] in f:
        return str(f[by[0]])
    return str(spec.get("name") or "suite")


def sg_scores(df: pd.DataFrame, spec: dict[str, Any] | None = None) -> pd.DataFrame:
    """Per-suite SG score table: suite, n, k (items meeting all predictions), score, lo, hi."""
    spec = spec or {}
    ok = df[df["error"].isna() & df["correct"].notna()]
    if ok.empty:
        return pd.DataFrame(columns=["suite", "n", "k", "score", "lo", "hi"])
    suites = (
        ok["fields"].map(lambda f: _suite_of(f, spec))
        if "fields" in ok
        else pd.Series("suite", ok.index)
    )
    rows = []
    for name, sub in ok.groupby(suites, sort=True):
        k, n = float(sub["correct"].sum()), len(sub)
        lo, hi = wilson_interval(k, n)
        rows.append({"suite": name, "n": n, "k": k, "score": k / n, "lo": lo, "hi": hi})
    return pd.DataFrame(rows)


def overall_sg(
    per_item: dict[str, np.ndarray], n_boot: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """Mean of per-suite scores and its stratified-bootstrap 95% interval."""
    if not per_item:
        return (math.nan, math.nan, math.nan)
    est = float(np.mean([v.mean() for v in per_item.values()]))
    rng = np.random.default_rng(seed)
    boots = np.zeros(n_boot)
    for v in per_item.values():
        boots += v[rng.integers(0, len(v), size=(n_boot, len(v)))].mean(axis=1)
    boots /= len(per_item)
    lo, hi = np.quantile(boots, [0.025, 0.975])
    return est, float(lo), float(hi)


def sg_rows(df: pd.DataFrame, run: dict[str, Any], spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Metric rows: `sg_score` per suite (Wilson CI), overall (mean over suites), prediction hit rates."""
    if not task_has(run.get("task"), "regions") or df.empty:
        return []
    table = sg_scores(df, spec)
    if table.empty:
        return []
    model, rid = str(run.get("model")), run["run_id"]
    out = []

    def row(
        metric: str, value: float, ci: list[float] | None, n: int, group: dict[str, Any]
    ) -> None:
        r = metric_row(rid, model, metric, value, ci, n, group)
        r["suite"] = run.get("suite_name")
        out.append(r)

    ok = df[df["error"].isna() & df["correct"].notna()]
    suites = ok["fields"].map(lambda f: _suite_of(f, spec))
    per_item = {s: ok.loc[suites == s, "correct"].to_numpy(float) for s in table["suite"]}
    key = (
        "suite"
        if ok["fields"].map(lambda f: "suite" in (decode_json_cell(f) or {})).any()
        else ((spec.get("group_by") or ["suite"])[0])
    )
    if len(per_item) == 1:  # one suite: its own (Wilson) interval
        rec0 = table.iloc[0]
        est, lo, hi = float(rec0["score"]), float(rec0["lo"]), float(rec0["hi"])
    else:
        est, lo, hi = overall_sg(per_item)
    row("sg_score", est, [lo, hi], len(ok), {})
    if len(table) > 1:
        # the pooled share of items (micro), beside the paper's mean over suites (macro)
        k_all, n_all = float(ok["correct"].astype(float).sum()), len(ok)
        mlo, mhi = wilson_interval(k_all, n_all)
        row("sg_score_micro", k_all / n_all, [mlo, mhi], n_all, {})
        for rec in table.to_dict("records"):
            row("sg_score", rec["score"], [rec["lo"], rec["hi"]], rec["n"], {key: rec["suite"]})
    # per circuit (Hu et al. 2020's groups of suites), where the suites name theirs
    circ_of = {
        s: c
        for s, c in zip(
            suites,
            ok["fields"].map(lambda f: (decode_json_cell(f) or {}).get("circuit")),
            strict=True,
        )
        if isinstance(c, str)
    }
    if circ_of:
        circuits: dict[str, dict[str, np.ndarray]] = {}
        for s_, v in per_item.items():
            if s_ in circ_of:
                circuits.setdefault(circ_of[s_], {})[s_] = v
        scores = []
        for c, sub in sorted(circuits.items()):
            c_est, c_lo, c_hi = overall_sg(sub)
            scores.append(c_est)
            row(
                "sg_score",
                c_est,
                [c_lo, c_hi],
                int(sum(len(v) for v in sub.values())),
                {"circuit": c, "suites": len(sub)},
            )
        row("sg_score_circuits", float(np.mean(scores)), None, len(scores), {})
    # each prediction's hit rate, so a conjunction's failing part is visible
    hits: dict[tuple[str, int, str], list[float]] = {}
    for s, extra in zip(suites, ok["extra"], strict=True):
        for i, p in enumerate((decode_json_cell(extra) or {}).get("predictions") or []):
            hits.setdefault((s, i, p["formula"]), []).append(1.0 if p["met"] else 0.0)
    if any(i > 0 for _, i, _ in hits) or len(table) == 1:
        for (s, i, formula), v in sorted(hits.items()):
            k, n = sum(v), len(v)
            lo_, hi_ = wilson_interval(k, n)
            row(
                "prediction_met",
                k / n,
                [lo_, hi_],
                n,
                {key: s, "prediction": i + 1, "formula": formula},
            )
    return out


def published_sg_scores(path: str | Path) -> pd.DataFrame:
    """Per-suite SG score from a published per-item file (columns model, suite, item, correct)."""
    d = pd.read_csv(path)
    missing = {"model", "suite", "item", "correct"} - set(d.columns)
    if missing:
        raise ValueError(f"{path}: missing column(s) {', '.join(sorted(missing))}")
    d["correct"] = (
        d["correct"]
        .astype(str)
        .str.strip()
        .str.lower()
        .map({"true": 1.0, "false": 0.0, "1": 1.0, "0": 0.0, "1.0": 1.0, "0.0": 0.0})
    )
    if d["correct"].isna().any():
        raise ValueError(f"{path}: column 'correct' must be True/False")
    g = d.groupby(["model", "suite"])["correct"].agg(["sum", "count"]).reset_index()
    g["score"] = g["sum"] / g["count"]
    return g.rename(columns={"sum": "k", "count": "n"})


# -- word-level surprisal ----------------------------------------------------------------------
def word_frame(df: pd.DataFrame, run: dict[str, Any] | None = None) -> pd.DataFrame:
    """Long table of word surprisals (WORD_COLUMNS) from a syntaxgym run's stored rows."""
    run = run or {}
    rows = []
    for rec in df[df["error"].isna()].to_dict("records"):
        extra = decode_json_cell(rec.get("extra")) or {}
        fields = decode_json_cell(rec.get("fields")) or {}
        names = fields.get("region_names")
        if isinstance(names, list):
            name_of = {str(i + 1): n for i, n in enumerate(names)}
        elif isinstance(names, dict):
            name_of = {str(k): v for k, v in names.items()}
        else:
            name_of = {}
        for cond, c in (extra.get("conditions") or {}).items():
            for i, w in enumerate(c.get("words") or []):
                reg = w.get("region")
                rows.append(
                    {
                        "run_id": rec.get("run_id", run.get("run_id")),
                        "model": run.get("model"),
                        "item_id": rec["item_id"],
                        "condition": cond,
                        "word_index": i,
                        "word": w["word"],
                        "region": reg,
                        "region_name": name_of.get(str(reg)),
                        "start": w["start"],
                        "end": w["end"],
                        "length": len(w["word"].strip(".,;:!?\"'()")) or len(w["word"]),
                        "n_tokens": w.get("n_tokens"),
                        "surprisal_bits": w.get("surprisal_bits"),
                        "sentence": c.get("sentence"),
                    }
                )
    return pd.DataFrame(rows, columns=WORD_COLUMNS)


@dataclass
class RTFit:
    """Held-out fit of rt ~ surprisal + length (+ log_freq)."""

    n_words: int
    n_folds: int
    predictors: list[str]
    coef: dict[str, float]  # fitted on all words
    r2_heldout: float
    r2_heldout_baseline: float  # without surprisal
    delta_ll_per_word: float  # held-out log-likelihood gain per word from adding surprisal (nats)


def _ols(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    beta, *_ = np.linalg.lstsq(x, y, rcond=None)
    return np.asarray(beta)


def _design(d: pd.DataFrame, cols: list[str]) -> np.ndarray:
    return np.column_stack([np.ones(len(d))] + [d[c].to_numpy(float) for c in cols])


def rt_fit(words: pd.DataFrame, rts: pd.DataFrame, *, folds: int = 10, seed: int = 0) -> RTFit:
    """Join reading times (item_id, condition, word_index, rt[, frequency]) and fit held-out OLS.

    ValueError (a one-line message) when columns are missing or too few words join.
    """
    need = {"item_id", "condition", "word_index", "rt"}
    missing = need - set(rts.columns)
    if missing:
        raise ValueError(
            f"reading-time file lacks column(s): {', '.join(sorted(missing))} "
            "(needs item_id, condition, word_index, rt; optional frequency)"
        )
    r = rts.copy()
    r["item_id"] = r["item_id"].astype(str)
    r["condition"] = r["condition"].astype(str)
    r["word_index"] = pd.to_numeric(r["word_index"], errors="coerce")
    r["rt"] = pd.to_numeric(r["rt"], errors="coerce")
    w = words.copy()
    w["item_id"] = w["item_id"].astype(str)
    d = w.merge(r, on=["item_id", "condition", "word_index"], how="inner")
    preds = ["surprisal_bits", "length"]
    if "frequency" in d:
        freq = pd.to_numeric(d["frequency"], errors="coerce")
        if (freq <= 0).any():
            raise ValueError("frequency must be positive (its log is a predictor)")
        d["log_freq"] = np.log(freq)
        preds.append("log_freq")
    d = d.dropna(subset=["rt", *preds])
    groups = d["item_id"].astype(str) + "\x1f" + d["condition"].astype(str)
    uniq = groups.unique()
    k = min(folds, len(uniq))
    if len(d) < len(preds) + 3 or k < 2:
        raise ValueError(
            f"only {len(d)} words with reading times joined the surprisal table "
            f"({len(uniq)} sentences); need more to fit on held-out words"
        )
    rng = np.random.default_rng(seed)
    fold_of = dict(zip(uniq, rng.permutation(len(uniq)) % k, strict=True))
    fold = groups.map(fold_of).to_numpy()
    y = d["rt"].to_numpy(float)
    base_cols = [p for p in preds if p != "surprisal_bits"]
    pred_full = np.zeros(len(d))
    pred_base = np.zeros(len(d))
    for j in range(k):
        tr, te = fold != j, fold == j
        pred_full[te] = _design(d[te], preds) @ _ols(_design(d[tr], preds), y[tr])
        pred_base[te] = _design(d[te], base_cols) @ _ols(_design(d[tr], base_cols), y[tr])
    ss_tot = float(((y - y.mean()) ** 2).sum())

    def r2(p: np.ndarray) -> float:
        return 1.0 - float(((y - p) ** 2).sum()) / ss_tot if ss_tot > 0 else math.nan

    def ll(p: np.ndarray) -> float:
        # Gaussian log-likelihood of held-out residuals with their ML variance
        s2 = float(((y - p) ** 2).mean())
        return -0.5 * len(y) * (math.log(2 * math.pi * s2) + 1.0)

    beta = _ols(_design(d, preds), y)
    return RTFit(
        n_words=len(d),
        n_folds=k,
        predictors=preds,
        coef={
            "intercept": float(beta[0]),
            **{p: float(b) for p, b in zip(preds, beta[1:], strict=True)},
        },
        r2_heldout=r2(pred_full),
        r2_heldout_baseline=r2(pred_base),
        delta_ll_per_word=(ll(pred_full) - ll(pred_base)) / len(y),
    )
