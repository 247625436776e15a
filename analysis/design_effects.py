"""Order effects, order-robust scores and few-shot biases from a run's stored rows.

Producers follow the metrics pipeline's signature `f(df, run, spec) -> list[metric_row]`.
The design of each row is `extra.design` (data/design.py) plus the variant name.

Order effects (counterbalancing): for a two-level factor (answer order
as_written/swapped, rating scale as_written/reversed) every item is seen at both
levels with everything else equal (a "cell"); the effect is the mean within-cell
difference (second level − first) of accuracy, normalised P(first answer) (yes/no)
or expected rating (rating, on the suite's own scale), averaged per cluster
(item, or the suite's cluster field) and given a t interval over clusters
(G − 1 degrees of freedom; a paired test with clusters as units). Factors with
more levels (option orders "@p<j>", demo orders "@o<j>") get per-level accuracy
and `order_consistency`: the share of cells whose prediction is the same at every
level (cluster-aware interval).

Order-robust score: per item and template, the answer distributions of all its
counterbalanced variants are averaged (rating distributions mapped back to the
suite's scale first), and the argmax of the average is scored:
`order_robust_accuracy`. An abstaining variant (no mass on any answer) is left out of the
average; an item whose every variant abstained is scored 0, as `accuracy` scores an abstention.

Few-shot biases (Zhao et al. 2021), yes/no and rating runs with demos:
`recency_effect` = P(pred = ℓ | last demo label = ℓ) − P(pred = ℓ | last ≠ ℓ) and
`majority_effect` = P(pred = ℓ | ℓ is the majority demo label) − P(pred = ℓ |
another label is the majority), per label ℓ, with a cluster-bootstrap interval
(2000 resamples of items, seed 0). Ties in the demo labels are left out of the
majority contrast.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from llmscope.analysis.intervals import accuracy_ci
from llmscope.analysis.rows import run_metric_row
from llmscope.engine.tasks.registry import task_producers
from llmscope.store.codec import decode_json_cell

BINARY_FACTORS = {"answer_order": ("as_written", "swapped"), "scale": ("as_written", "reversed")}
MULTI_FACTORS = ("option_order", "demo_order")


def design_frame(df: pd.DataFrame, spec: dict[str, Any]) -> pd.DataFrame:
    """One row per stored result with its design levels, cluster, measures and canonical distribution."""
    ok = df[df["error"].isna()]
    cf = spec.get("cluster_field")
    recs = []
    for r in ok.to_dict("records"):
        extra = decode_json_cell(r.get("extra")) or {}
        design = dict(extra.get("design") or {})
        variant = str(r["variant"])
        if "@p" in variant and "option_order" not in design:
            design["option_order"] = int(variant.rsplit("@p", 1)[1].split("@")[0])
        fields = decode_json_cell(r.get("fields")) or {}
        probs = decode_json_cell(r.get("probs")) or {}
        canon = dict(probs)
        if design.get("scale") == "reversed" and probs:
            labels = list(probs)
            canon = {labels[len(labels) - 1 - i]: probs[lab] for i, lab in enumerate(labels)}
            pred = r.get("prediction")
            pred = labels[len(labels) - 1 - labels.index(pred)] if pred in labels else pred
        else:
            pred = r.get("prediction")
        keys = list(probs)
        p_first = None
        if len(keys) == 2 and sum(probs.values()) > 0:
            p_first = float(probs[keys[0]]) / float(sum(probs.values()))
        recs.append(
            {
                "item_id": str(r["item_id"]),
                "cluster": str(fields.get(cf)) if cf and cf in fields else str(r["item_id"]),
                "base": variant.split("@", 1)[0],
                "variant": variant,
                "correct": r.get("correct"),
                "p_first": p_first,
                "expected": extra.get("expected"),
                "prediction": pred,
                "canon": canon,
                "gold": r.get("gold"),
                **{
                    f: design.get(f, 0 if f == "option_order" else None)
                    for f in (*BINARY_FACTORS, *MULTI_FACTORS)
                },
                "demo_labels": design.get("demo_labels"),
            }
        )
    return pd.DataFrame(recs)


def paired_cluster_diff(
    diff: np.ndarray, clusters: np.ndarray, level: float = 0.95
) -> tuple[float, float, float, int]:
    """Mean of per-cluster mean differences with a t interval over clusters: (mean, lo, hi, G)."""
    d = pd.Series(diff).groupby(pd.Series(clusters)).mean().to_numpy(float)
    g = len(d)
    m = float(d.mean())
    if g < 2:
        return m, math.nan, math.nan, g
    se = float(d.std(ddof=1)) / math.sqrt(g)
    t = float(stats.t.ppf(0.5 + level / 2, g - 1))
    return m, m - t * se, m + t * se, g


def _cells(fr: pd.DataFrame, factor: str) -> tuple[pd.DataFrame, list[str]]:
    """The frame with the other factors' missing levels filled (so they group), and the cell keys."""
    others = [f for f in (*BINARY_FACTORS, *MULTI_FACTORS) if f != factor]
    out = fr.copy()
    for f in others:
        out[f] = out[f].astype(object).where(out[f].notna(), "-").astype(str)
    return out, ["item_id", "base", *others]


def order_effect_rows(
    df: pd.DataFrame, run: dict[str, Any], spec: dict[str, Any]
) -> list[dict[str, Any]]:
    """Order effects per counterbalanced factor, and the order-robust accuracy."""
    fr = design_frame(df, spec)
    if fr.empty:
        return []
    rows: list[dict[str, Any]] = []
    for factor, (a, b) in BINARY_FACTORS.items():
        sub = fr[fr[factor].isin([a, b])]
        if sub.empty or sub[factor].nunique() < 2:
            continue
        sub, keys = _cells(sub, factor)
        for measure in ("correct", "p_first", "expected"):
            vals = sub.dropna(subset=[measure]).copy()
            if vals.empty:
                continue
            vals[measure] = vals[measure].astype(float)
            wide = vals.pivot_table(
                index=[*keys, "cluster"],
                columns=factor,
                values=measure,
                aggfunc="mean",
                dropna=False,
            )
            if a not in wide or b not in wide:
                continue
            wide = wide.dropna(subset=[a, b])
            if wide.empty:
                continue
            diff = (wide[b] - wide[a]).to_numpy(float)
            clusters = wide.index.get_level_values("cluster").to_numpy()
            m, lo, hi, g = paired_cluster_diff(diff, clusters)
            name = {
                "correct": "accuracy",
                "p_first": "p_first_answer",
                "expected": "expected_rating",
            }[measure]
            if measure in ("correct", "p_first") and not math.isnan(lo):
                lo, hi = max(lo, -1.0), min(hi, 1.0)  # a difference of proportions lies in [-1, 1]
            ci = None if math.isnan(lo) else [lo, hi]
            rows.append(
                run_metric_row(
                    run,
                    {"factor": factor, "contrast": f"{b}-{a}"},
                    f"order_effect_{name}",
                    m,
                    ci,
                    g,
                )
            )
    for factor in MULTI_FACTORS:
        col = fr[factor]
        if col.isna().all() or col.dropna().nunique() < 2:
            continue
        sub = fr[col.notna()]
        for level, part in sub.groupby(factor, sort=True):
            scored = part[part["correct"].notna()]
            if not scored.empty:
                iv = accuracy_ci(scored["correct"].to_numpy(float), scored["cluster"].to_numpy())
                rows.append(
                    run_metric_row(
                        run,
                        {"factor": factor, "level": int(str(level))},
                        "accuracy",
                        iv.mean,
                        None if math.isnan(iv.lo) else [iv.lo, iv.hi],
                        iv.n,
                    )
                )
        sub, keys = _cells(sub, factor)
        same = sub.groupby(keys, dropna=False).agg(
            consistent=("prediction", lambda s: float(s.nunique(dropna=False) == 1)),
            n_levels=("prediction", "size"),
            cluster=("cluster", "first"),
        )
        same = same[same["n_levels"] > 1]
        if not same.empty:
            iv = accuracy_ci(same["consistent"].to_numpy(float), same["cluster"].to_numpy())
            rows.append(
                run_metric_row(
                    run,
                    {"factor": factor},
                    "order_consistency",
                    iv.mean,
                    None if math.isnan(iv.lo) else [iv.lo, iv.hi],
                    iv.n,
                )
            )
    rows += _robust_rows(fr, run)
    return rows


def _robust_rows(fr: pd.DataFrame, run: dict[str, Any]) -> list[dict[str, Any]]:
    design_cols = [*BINARY_FACTORS, "demo_order"]
    counterbalanced = fr["variant"].str.contains("@").any() or any(
        fr[c].notna().any() for c in design_cols
    )
    if not counterbalanced:
        return []
    out = []
    for (_item, _base), part in fr.groupby(["item_id", "base"], sort=False):
        if len(part) < 2 or pd.isna(part["gold"].iloc[0]):
            continue
        keys: list[str] = []
        for c in part["canon"]:
            for k in c:
                if k not in keys:
                    keys.append(k)
        if not keys:
            continue
        dists = [
            d for d in ([float(c.get(k, 0.0)) for k in keys] for c in part["canon"]) if sum(d) > 0
        ]
        gold = str(part["gold"].iloc[0])
        if not dists:
            # every order abstained (no mass on any answer): no prediction, scored 0 as the
            # headline accuracy scores an abstention; argmax of the zeros "predicted" the first
            # answer and could score it right
            out.append((0.0, part["cluster"].iloc[0]))
            continue
        # an abstaining order carries no distribution and is left out of the average (its zeros
        # only rescaled it: the argmax is the same)
        avg = np.mean(dists, axis=0)
        pred = keys[int(np.argmax(avg))]
        correct = float(pred.strip().casefold() == gold.strip().casefold())
        out.append((correct, part["cluster"].iloc[0]))
    if not out:
        return []
    iv = accuracy_ci(np.array([c for c, _ in out]), np.array([g for _, g in out]))
    return [
        run_metric_row(
            run,
            {},
            "order_robust_accuracy",
            iv.mean,
            None if math.isnan(iv.lo) else [iv.lo, iv.hi],
            iv.n,
        )
    ]


def fewshot_rows(
    df: pd.DataFrame, run: dict[str, Any], spec: dict[str, Any]
) -> list[dict[str, Any]]:
    """Recency and majority-label effects of few-shot demos (Zhao et al. 2021)."""
    if "fewshot_bias" not in task_producers(run.get("task")):  # the task lists it
        return []
    fr = design_frame(df, spec)
    if fr.empty or fr["demo_labels"].isna().all():
        return []
    fr = fr[fr["demo_labels"].notna() & fr["prediction"].notna()].copy()
    fr["last"] = fr["demo_labels"].map(lambda x: str(x[-1]))

    def majority(labels: list[str]) -> str | None:
        vc = pd.Series([str(x) for x in labels]).value_counts()
        return str(vc.index[0]) if len(vc) == 1 or vc.iloc[0] > vc.iloc[1] else None

    fr["majority"] = fr["demo_labels"].map(majority)
    rows = []
    agree = (fr["prediction"].astype(str) == fr["last"]).astype(float).to_numpy()
    iv = accuracy_ci(agree, fr["cluster"].to_numpy())
    rows.append(
        run_metric_row(
            run,
            {},
            "pred_equals_last_demo",
            iv.mean,
            None if math.isnan(iv.lo) else [iv.lo, iv.hi],
            iv.n,
        )
    )
    labels = sorted({str(x) for ls in fr["demo_labels"] for x in ls})
    for lab in labels:
        for metric, col in (("recency_effect", "last"), ("majority_effect", "majority")):
            sub = fr[fr[col].notna()]
            hit = (sub["prediction"].astype(str) == lab).to_numpy(float)
            on = (sub[col] == lab).to_numpy(bool)
            est, lo, hi = contrast_boot(hit, on, sub["cluster"].to_numpy())
            if math.isnan(est):
                continue
            ci = None if math.isnan(lo) else [lo, hi]
            rows.append(run_metric_row(run, {"label": lab}, metric, est, ci, len(sub)))
    return rows


def contrast_boot(
    hit: np.ndarray, on: np.ndarray, clusters: np.ndarray, n_boot: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """mean(hit | on) − mean(hit | not on), with a cluster-bootstrap percentile interval.

    Clusters are resampled with replacement (`cluster_bootstrap`'s scheme, vectorised:
    each replicate weights every cluster by how often it was drawn); replicates in which
    one side is empty are dropped.
    """
    if not on.any() or on.all():
        return math.nan, math.nan, math.nan
    est = float(hit[on].mean() - hit[~on].mean())
    codes, _ = pd.factorize(pd.Series(clusters), sort=False)
    g = int(codes.max()) + 1
    sums = np.zeros((4, g))
    np.add.at(sums[0], codes, on.astype(float))
    np.add.at(sums[1], codes, hit * on)
    np.add.at(sums[2], codes, (~on).astype(float))
    np.add.at(sums[3], codes, hit * ~on)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, g, size=(n_boot, g))
    w = np.zeros((n_boot, g))
    np.add.at(w, (np.repeat(np.arange(n_boot), g), draws.ravel()), 1.0)
    n_on, h_on, n_off, h_off = (w @ sums[i] for i in range(4))
    ok = (n_on > 0) & (n_off > 0)
    if not ok.any():
        return est, math.nan, math.nan
    reps = h_on[ok] / n_on[ok] - h_off[ok] / n_off[ok]
    lo, hi = np.quantile(reps, [0.025, 0.975])
    return est, float(lo), float(hi)
