"""WorldSense accuracy and bias, computed exactly as the benchmark's authors do.

Benchekroun et al. 2023, "WorldSense: A Synthetic Benchmark for Grounded Reasoning in Large
Language Models" (arXiv:2311.15930); the reference implementation is
``worldsense/analysis.py`` (``compute_acc_table``, ``accuracy_by_group``, ``regroup``) in
github.com/facebookresearch/worldsense. This module re-implements those steps:

1. per trial: responses and golds are mapped ``1, 2 -> KNOW`` and ``3 -> UNKNOWN`` (the
   other answers map to themselves) and compared for accuracy; bias is +1 for TRUE,
   POSSIBLE, 1, 2 and -1 for FALSE, IMPOSSIBLE, 3. An empty/invalid response is wrong and
   contributes 0 bias, its weight staying in the denominator.
2. per tuple (``tuple_ID``): weighted means of acc and bias, weight 0.5 for TRUE, FALSE,
   POSSIBLE, IMPOSSIBLE, 0.25 for 1 and 2, 0.5 for 3 (by the gold answer). A tuple is
   complete when its number of trials equals ``len(expectedresp)``; incomplete tuples are
   dropped with a warning.
3. per group: mean and sample variance (ddof=1) of tuple values at the finest level
   (group keys + problemsize + problemname), then aggregated over problemsize and then over
   problemname, each time setting every subgroup's count to the minimum count within its
   parent group (equal rebalancing) and carrying the variance of the lowest-level points
   through the mean of squares; ``sem = std / sqrt(count)``, ``conf95 = 1.96 * sem``.

Difference from the reference code: it groups tuples by ``(modelname, tuple_ID)`` only, so
one model run under two promptings would merge (and, failing the completeness test, drop)
its tuples; here tuples are keyed by ``(modelname, prompting, tuple_ID)``. With one
prompting per model (as in all published results) the numbers are identical.

``ci95`` in metric rows is ``[mean - conf95, mean + conf95]``.
"""

from __future__ import annotations

import bz2
import gzip
import json
import os
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from llmscope.data.worldsense import DEOBFUSCATE

from .rows import metric_row

__all__ = [
    "GOLD_DEOBFUSCATION",
    "RESP_MAP",
    "BIAS_MAP",
    "WEIGHT_MAP",
    "load_trials",
    "load_results",
    "load_testset_dir",
    "worldsense_frame",
    "tuple_table",
    "group_stats",
    "regroup",
    "WorldSenseReport",
    "analyse",
    "format_cell",
    "report_rows",
]

GOLD_DEOBFUSCATION = DEOBFUSCATE  # the published files obfuscate the gold answer as the suite's do
RESP_MAP = {
    "TRUE": "TRUE",
    "FALSE": "FALSE",
    "POSSIBLE": "POSSIBLE",
    "IMPOSSIBLE": "IMPOSSIBLE",
    "1": "KNOW",
    "2": "KNOW",
    "3": "UNKNOWN",
}
BIAS_MAP = {
    "TRUE": 1.0,
    "FALSE": -1.0,
    "POSSIBLE": 1.0,
    "IMPOSSIBLE": -1.0,
    "1": 1.0,
    "2": 1.0,
    "3": -1.0,
}
WEIGHT_MAP = {
    "TRUE": 0.5,
    "FALSE": 0.5,
    "POSSIBLE": 0.5,
    "IMPOSSIBLE": 0.5,
    "1": 0.25,
    "2": 0.25,
    "3": 0.5,
}
REBALANCE_FIELDS = ("problemsize", "problemname")


def _open_text(path: str | os.PathLike[str]):
    p = str(path)
    if p.endswith(".bz2"):
        return bz2.open(p, "rt", encoding="utf-8")
    if p.endswith(".gz"):
        return gzip.open(p, "rt", encoding="utf-8")
    return open(p, encoding="utf-8")


def _read_jsonl(path: str | os.PathLike[str]) -> pd.DataFrame:
    with _open_text(path) as f:
        return pd.DataFrame([json.loads(line) for line in f if line.strip()])


def load_trials(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Read a WorldSense ``trials.jsonl[.bz2]``; adds a de-obfuscated ``goldresp`` column."""
    df = _read_jsonl(path)
    if "goldresp" not in df and "goldresp_obfusc" in df:
        df["goldresp"] = df["goldresp_obfusc"].map(lambda v: GOLD_DEOBFUSCATION.get(v, v))
    return df


def load_results(
    path: str | os.PathLike[str], model: str | None = None, prompting: str | None = None
) -> pd.DataFrame:
    """Read a ``<prompting>___<model>___results.jsonl`` file into ``Key, resp, modelname,
    prompting`` (names taken from the file name unless given)."""
    df = _read_jsonl(path)
    name = Path(path).name
    if name.endswith("___results.jsonl") and (model is None or prompting is None):
        p, m, _ = name.split("___")
        model = model or m
        prompting = prompting or p
    df["modelname"] = model or "model"
    df["prompting"] = prompting or "basic"
    return df


def load_testset_dir(testset_dir: str | os.PathLike[str]) -> pd.DataFrame:
    """Trials joined with every ``results/*___results.jsonl`` of a test-set directory."""
    d = Path(testset_dir)
    trials = load_trials(d / "trials.jsonl.bz2")
    files = sorted((d / "results").glob("*___results.jsonl"))
    return worldsense_frame(trials, pd.concat([load_results(f) for f in files]))


def _norm_resp(v: Any) -> str:
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return ""
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    return str(v).strip()


def _norm_resp_series(s: pd.Series) -> pd.Series:
    """:func:`_norm_resp` of every value, computed once per distinct value (87k trials, a few answers)."""
    codes, uniques = pd.factorize(s.astype(object), use_na_sentinel=True)
    table = np.array([_norm_resp(u) for u in uniques] + [""], dtype=object)
    return pd.Series(table[codes], index=s.index, dtype=object)


def worldsense_frame(trials_df: pd.DataFrame, responses_df: pd.DataFrame) -> pd.DataFrame:
    """Inner-join trials and responses on ``Key`` (one row per model x trial).

    ``responses_df`` needs ``Key`` and ``resp``; ``modelname`` and ``prompting`` default to
    "model" and "basic". Missing/None responses become "" (invalid). Trials need
    ``goldresp`` (or ``goldresp_obfusc``), ``tuple_ID``, ``expectedresp``, ``problemname``,
    ``problemsize``.
    """
    t = trials_df
    if "goldresp" not in t and "goldresp_obfusc" in t:
        t = t.copy()
        t["goldresp"] = t["goldresp_obfusc"].map(lambda v: GOLD_DEOBFUSCATION.get(v, v))
    r = responses_df.copy()
    if "modelname" not in r:
        r["modelname"] = "model"
    if "prompting" not in r:
        r["prompting"] = "basic"
    r = r[["Key", "resp", "modelname", "prompting"]]
    r["resp"] = _norm_resp_series(r["resp"])
    t = t.drop(columns=[c for c in ("resp", "modelname", "prompting") if c in t])
    return t.merge(r, on="Key", how="inner")


def tuple_table(df: pd.DataFrame, *, filter_incomplete: bool = True) -> pd.DataFrame:
    """Reduce trials to one row per (modelname, prompting, tuple_ID) with weighted ``acc``
    and ``bias`` (the reference ``compute_acc_table``).

    Other columns keep the tuple's first row; ``resp``, ``goldresp``, ``text`` are dropped.
    """
    # Vectorised (group codes + bincount) rather than pandas group-bys over every trial: the
    # same sums in the same group order (first appearance), at a fraction of the cost.
    if "prompting" not in df:
        df = df.assign(prompting="basic")
    keys = ["modelname", "prompting", "tuple_ID"]
    ng = df.groupby(keys, sort=False).ngroup().to_numpy()  # NaN (-1) where a key is missing
    valid = ng >= 0
    codes = np.where(valid, ng, 0).astype(np.int64)
    keep = valid
    if filter_incomplete:
        size = np.where(
            valid,
            np.bincount(codes[valid], minlength=int(codes.max()) + 1 if len(codes) else 0)[codes],
            -1,
        )
        # A trial whose item is not stored has no expected responses: its tuple cannot be
        # shown complete, so it is excluded with the others (-2 never equals a size).
        exp_len = (
            df["expectedresp"]
            .map(lambda v: len(v) if isinstance(v, (list, tuple)) else -2)
            .to_numpy()
        )
        keep = size == exp_len
        # a tuple is kept whole or not at all (in the authors' files every trial of a tuple
        # has the same expected responses, so this only matters for a trial without its item)
        keep &= ~np.isin(codes, codes[valid & ~keep])
        if not keep.all():
            n_bad = df.loc[~keep, keys].drop_duplicates().shape[0]
            warnings.warn(
                f"WorldSense: {n_bad} incomplete tuple(s) ({int((~keep).sum())} trials) excluded",
                stacklevel=2,
            )
    if not keep.all():
        df = df[keep]
        codes = pd.factorize(codes[keep], sort=False)[0]
    gold = df["goldresp"].astype(str)
    resp = _norm_resp_series(df["resp"])
    w = gold.map(WEIGHT_MAP).astype(float).to_numpy()
    # invalid responses map to NaN: acc 0, bias contributes 0 (NaN skipped in the sum)
    acc = (resp.map(RESP_MAP) == gold.map(RESP_MAP)).astype(float).to_numpy()
    bias = resp.map(BIAS_MAP).astype(float).to_numpy()
    G = int(codes.max()) + 1 if len(codes) else 0

    def nansum(x: np.ndarray) -> np.ndarray:
        return np.bincount(codes, weights=np.where(np.isnan(x), 0.0, x), minlength=G)

    sw, sacc, sbias = nansum(w), nansum(acc * w), nansum(bias * w)
    _, first_pos = np.unique(codes, return_index=True)
    drop = [c for c in ("resp", "goldresp", "text") if c in df]
    out = df.iloc[first_pos].drop(columns=drop)
    out = out[keys + [c for c in out.columns if c not in keys]].reset_index(drop=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        out["acc"] = sacc / sw
        out["bias"] = sbias / sw
    out["n_trials"] = np.bincount(codes, minlength=G)
    return out


def regroup(by: Sequence[str], stats: pd.DataFrame, rebalance: bool = True) -> pd.DataFrame:
    """Coarsen ``stats`` (columns mean, var, count; finer keys in the index or columns) to the
    keys ``by`` (the reference ``regroup``).

    With ``rebalance`` every subgroup's count becomes the minimum count in its parent group;
    variance comes from the pooled mean of squares of the lowest-level points.
    """
    st = stats.reset_index() if stats.index.names != [None] else stats.copy()
    st["mean_sq"] = st["var"] + st["mean"] ** 2
    if rebalance:
        # the built-in "min" (not a Python function per group): the same values, a third faster
        st["count"] = st.groupby(list(by))["count"].transform("min").astype(float)
    st["sum"] = st["mean"] * st["count"]
    st["sum_sq"] = st["mean_sq"] * st["count"]
    new = st.groupby(list(by))[["count", "sum", "sum_sq"]].sum()
    counts = new["count"].astype(float)
    new["mean"] = new["sum"] / counts
    new["mean_sq"] = new["sum_sq"] / counts
    new["var"] = new["mean_sq"] - new["mean"] ** 2
    new["std"] = new["var"] ** 0.5
    new["sem"] = new["std"] / counts**0.5
    return new


def group_stats(
    tuples: pd.DataFrame,
    by: Sequence[str],
    value: str = "acc",
    *,
    rebalance: bool = True,
) -> pd.DataFrame:
    """Mean, var, std, sem, count and conf95 (= 1.96·sem) of ``value`` per group ``by``
    (the reference ``accuracy_by_group`` / ``bias_by_group``).

    With ``rebalance`` the statistics are first taken at ``by + [problemsize, problemname]``
    (those not already in ``by``) and then coarsened with :func:`regroup`, problemsize first.
    Returns a frame indexed by ``by``.
    """
    by = list(by)
    if not rebalance:
        st = tuples.groupby(by)[value].aggregate(["mean", "sem", "count", "var", "std"])
    else:
        extra = [f for f in REBALANCE_FIELDS if f not in by and f in tuples.columns]
        newby = by + extra
        st = tuples.groupby(newby)[value].aggregate(["mean", "sem", "count", "var", "std"])
        for f in extra:
            newby = [k for k in newby if k != f]
            st = regroup(newby, st)
    st = st.copy()
    st["conf95"] = 1.96 * st["sem"]
    return st


def format_cell(mean: float, conf95: float, scale: float = 100.0) -> str:
    """``"mean (conf95)"`` as printed by the reference script (x100 with 1 decimal, or x1
    with 2 decimals)."""
    v, c = scale * mean, scale * conf95
    if scale == 100:
        return f"{v:.1f} ({c:.1f})"
    return f"{v:.2f} ({c:.2f})"


@dataclass
class WorldSenseReport:
    """WorldSense result tables.

    ``accuracy``: per (prompting, modelname) average accuracy over all problems;
    ``problem_accuracy`` / ``problem_bias``: per (prompting, modelname, problemname). Each
    has columns ``mean, conf95, sem, std, var, count`` and the group keys as columns.
    ``tuples`` is the per-tuple table they were computed from.
    """

    tuples: pd.DataFrame
    accuracy: pd.DataFrame
    problem_accuracy: pd.DataFrame
    problem_bias: pd.DataFrame
    n_incomplete_trials: int = 0

    def pivot(self, table: str = "problem_accuracy") -> pd.DataFrame:
        """Display table of ``"mean (ci95)"`` strings: models in rows, problems in columns."""
        t = getattr(self, table)
        scale = 1.0 if table == "problem_bias" else 100.0
        cells = t.assign(
            value=[format_cell(m, c, scale) for m, c in zip(t["mean"], t["conf95"], strict=True)]
        )
        if "problemname" in t:
            order = [p for p in PROBLEM_ORDER if p in set(t["problemname"])]
            order += sorted(set(t["problemname"]) - set(order))
            piv = cells.pivot_table(
                values="value",
                index=["prompting", "modelname"],
                columns="problemname",
                aggfunc="first",
            )
            return piv[order]
        return cells.pivot_table(
            values="value", index="modelname", columns="prompting", aggfunc="first"
        )


PROBLEM_ORDER = [
    "Infer.trivial",
    "Infer.normal",
    "Consist.trivial",
    "Consist.normal",
    "Compl.trivial",
    "Compl.normal",
    "Infer.extrema",
    "Infer.parallel",
]


def analyse(df: pd.DataFrame) -> WorldSenseReport:
    """Full WorldSense analysis of a joined trials x responses frame (see
    :func:`worldsense_frame`)."""
    n0 = len(df)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tuples = tuple_table(df)
    for w in caught:
        warnings.warn(w.message, stacklevel=2)
    return analyse_tuples(tuples, n0 - int(tuples["n_trials"].sum()))


def analyse_tuples(tuples: pd.DataFrame, n_incomplete: int = 0) -> WorldSenseReport:
    """:func:`analyse` from per-tuple tables already built (:func:`tuple_table`; the report
    reuses each run's table from the metrics pipeline instead of rebuilding it)."""
    acc = group_stats(tuples, ["prompting", "modelname"]).reset_index()
    pacc = group_stats(tuples, ["prompting", "modelname", "problemname"]).reset_index()
    pbias = group_stats(tuples, ["prompting", "problemname", "modelname"], "bias").reset_index()
    pbias = pbias[
        ["prompting", "modelname", "problemname"]
        + [c for c in pbias.columns if c not in ("prompting", "modelname", "problemname")]
    ]
    return WorldSenseReport(tuples, acc, pacc, pbias, n_incomplete)


def report_rows(report: WorldSenseReport, run: str) -> list[dict[str, Any]]:
    """Metric rows: ``worldsense_accuracy`` per model (group: prompting) and
    ``worldsense_accuracy`` / ``worldsense_bias`` per problemname; ``ci95 = [mean ± conf95]``
    and ``n`` = the (rebalanced) tuple count."""
    rows: list[dict[str, Any]] = []

    def emit(t: pd.DataFrame, metric: str, gcols: Iterable[str]) -> None:
        for r in t.to_dict("records"):
            rows.append(
                metric_row(
                    run,
                    str(r["modelname"]),
                    metric,
                    r["mean"],
                    [r["mean"] - r["conf95"], r["mean"] + r["conf95"]],
                    r["count"],
                    {k: r[k] for k in gcols},
                )
            )

    emit(report.accuracy, "worldsense_accuracy", ["prompting"])
    emit(report.problem_accuracy, "worldsense_accuracy", ["prompting", "problemname"])
    emit(report.problem_bias, "worldsense_bias", ["prompting", "problemname"])
    return rows
