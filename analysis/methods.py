"""Method sensitivity and human-vs-model fit, from a run's stored per-item rows.

Producers follow the metrics pipeline's signature
`f(df, run, spec) -> list[metric_row]` (df = `report.results_with_fields`).

Method sensitivity ("researcher degrees of freedom", Tsvilodub et al. 2024): for
every (item, variant) row of a choice run, the option each scoring scheme chooses
(`extra.methods`). Rows: `scheme_disagreement_rate` (share of rows on which not
all schemes choose the same option), `scheme_flip_rate` (share of scored rows on
which some scheme is right and another wrong), `scheme_acc_range` (max − min
accuracy over schemes). Intervals are cluster-aware (clusters = items).

Human fit (analysis/choicefit.py): for suites whose items carry human choice
counts (`human_counts_field` in the spec, one count per option aligned with the
item's options, or a mapping option -> count) and for yes/no suites with the
human majority `human_q1` (the commonsense corpus: one "choice" per statement),
α is fitted per scheme; with `condition_fields`, also per aggregation rule.

Rows without a choice distribution under a scheme (no option with a finite score, or a NaN
score: an abstention, whose label probabilities are all 0 and log scores all -inf) are left out
of the softmax-based statistics (the fit, its baselines and bootstrap, softmax_accuracy): softmax
of them is undefined, and neither a uniform distribution nor NaN stands for "no evidence". Each
statistic that left rows out says how many in a `left_out_no_distribution` row (group `of`:
`human_fit`, `softmax_accuracy`; n = the rows it considered).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from llmscope.analysis.choicefit import (
    AGGREGATIONS,
    AlphaFit,
    condition_dists,
    condition_table,
    fit_alpha,
    fit_condition,
    has_distribution,
    softmax_accuracy,
)
from llmscope.analysis.intervals import accuracy_ci
from llmscope.analysis.rows import run_metric_row
from llmscope.engine.choice_math import softmax
from llmscope.engine.tasks.registry import task_producers
from llmscope.store.codec import decode_json_cell

# scheme -> (option_scores key, transform to a log-space-or-plain score)
SCHEME_SCORES: dict[str, tuple[str, Callable[[np.ndarray], np.ndarray] | None]] = {
    "raw": ("logprob", None),
    "mean_token": ("mean_token", None),
    "per_char": ("per_char", None),
    "per_byte": ("per_byte", None),
    "calibrated": ("calibrated", np.log),
    "pmi": ("pmi", None),
    "mean_token_prob": ("mean_token_prob", None),
    "surprisal_ratio": ("surprisal_ratio", None),
    "labels": ("label_prob", np.log),
    "rating": ("rating_expected", None),
    "embedding": ("embedding_sim", None),
    "acc_norm": ("acc_norm", None),
    "acc_mutual_info": ("mutual_info", None),
}


def scheme_vectors(os_: dict[str, Any], options: Sequence[str]) -> dict[str, np.ndarray | None]:
    """Per scheme stored on every option, its scores (:data:`SCHEME_SCORES`' transform applied),
    or None where they define no distribution: every option's value null (the store writes -inf
    and NaN as null: a log-likelihood abstention) or no finite score (label probabilities all 0).
    A scheme with some options null and others not is left out, as it always was (null is
    ambiguous there)."""
    out: dict[str, np.ndarray | None] = {}
    for scheme, (key, tf) in SCHEME_SCORES.items():
        if not all(isinstance(os_[o], dict) and key in os_[o] for o in options):
            continue
        raw = [os_[o][key] for o in options]
        if all(x is not None for x in raw):
            v = np.array([float(x) for x in raw])
            with np.errstate(divide="ignore"):
                sv = tf(v) if tf else v
            out[scheme] = sv if has_distribution(sv) else None
        elif all(x is None for x in raw):
            out[scheme] = None
    return out


def _ci(iv: Any) -> list[float] | None:
    return None if math.isnan(iv.lo) else [iv.lo, iv.hi]


def base_variant(v: str) -> str:
    """The template a derived variant comes from ("q1@p2" -> "q1")."""
    return str(v).split("@", 1)[0]


# -- method sensitivity ----------------------------------------------------------------------
def scheme_predictions(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (item, variant): each scheme's chosen option and correctness, and the gold."""
    recs = []
    ok = df[df["error"].isna() & df["extra"].notna()]
    for r in ok.to_dict("records"):
        m = (decode_json_cell(r["extra"]) or {}).get("methods") or {}
        if not m:
            continue
        rec: dict[str, Any] = {
            "item_id": r["item_id"],
            "variant": r["variant"],
            "gold": r.get("gold"),
        }
        for name, v in m.items():
            rec[f"pred:{name}"] = v.get("prediction")
            rec[f"correct:{name}"] = v.get("correct")
        recs.append(rec)
    return pd.DataFrame(recs)


def flipping_items(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows on which schemes disagree: item, variant, gold and {scheme: (prediction, correct)}."""
    sp = scheme_predictions(df)
    out: list[dict[str, Any]] = []
    if sp.empty:
        return out
    schemes = [c[5:] for c in sp.columns if c.startswith("pred:")]
    # None where a value is missing: the frame holds NaN there (pandas' string dtype for a text
    # column with some values; a scheme absent from a row), which the panel would print as "nan"
    for r in sp.astype(object).where(sp.notna(), None).to_dict("records"):
        preds = {s: r.get(f"pred:{s}") for s in schemes if f"pred:{s}" in r}
        if len({json.dumps(p) for p in preds.values()}) > 1:
            out.append(
                {
                    "item_id": r["item_id"],
                    "variant": r["variant"],
                    "gold": r["gold"],
                    "schemes": {
                        s: {"prediction": preds[s], "correct": r.get(f"correct:{s}")} for s in preds
                    },
                }
            )
    return out


def sensitivity_rows(
    df: pd.DataFrame, run: dict[str, Any], spec: dict[str, Any]
) -> list[dict[str, Any]]:
    """Scheme disagreement, flip rate and accuracy range across scoring schemes."""
    sp = scheme_predictions(df)
    if sp.empty:
        return []
    schemes = [c[5:] for c in sp.columns if c.startswith("pred:")]
    if len(schemes) < 2:
        return []
    preds = sp[[f"pred:{s}" for s in schemes]]
    clusters = sp["item_id"].astype(str).to_numpy()
    disagree = np.array(
        [float(len({json.dumps(v) for v in row}) > 1) for row in preds.itertuples(index=False)]
    )
    rows = []
    iv = accuracy_ci(disagree, clusters)
    rows.append(
        run_metric_row(
            run, {"schemes": len(schemes)}, "scheme_disagreement_rate", iv.mean, _ci(iv), iv.n
        )
    )
    corr = (
        sp[[f"correct:{s}" for s in schemes]].apply(pd.to_numeric, errors="coerce").to_numpy(float)
    )
    scored = np.all(np.isfinite(corr), axis=1)
    if scored.any():
        # over the rows every scheme scored (all finite): rows without a score printed numpy's
        # "All-NaN slice" warning into `llmscope report`
        ok = corr[scored]
        flip = (ok.max(axis=1) != ok.min(axis=1)).astype(float)
        iv = accuracy_ci(flip, clusters[scored])
        rows.append(
            run_metric_row(
                run, {"schemes": len(schemes)}, "scheme_flip_rate", iv.mean, _ci(iv), iv.n
            )
        )
        accs = np.nanmean(corr[scored], axis=0)
        rows.append(
            run_metric_row(
                run,
                {"schemes": len(schemes)},
                "scheme_acc_range",
                float(accs.max() - accs.min()),
                None,
                int(scored.sum()),
            )
        )
    return rows


# -- human fit --------------------------------------------------------------------------------
@dataclass
class HumanChoiceData:
    """Per (item, variant) option scores under each scheme, aligned with human counts."""

    item_ids: list[str] = field(default_factory=list)
    variants: list[str] = field(default_factory=list)
    options: list[list[str]] = field(default_factory=list)
    counts: list[np.ndarray] = field(default_factory=list)
    gold: list[int | None] = field(default_factory=list)
    conditions: list[str] = field(default_factory=list)
    types: list[list[str]] | None = None
    scores: dict[str, list[np.ndarray]] = field(default_factory=dict)  # scheme -> per row
    # variants of the rows with human counts left out: no scheme gives them a distribution
    left_out: list[str] = field(default_factory=list)


def _records(df: pd.DataFrame, columns: Sequence[str]) -> Iterator[dict[str, Any]]:
    """``df.to_dict("records")`` restricted to ``columns`` (those present), the same values:
    the full records of a 100k-row frame (~25 columns) took 1.2 s of a report."""
    cols = [c for c in columns if c in df.columns]
    for vals in zip(*(df[c].tolist() for c in cols), strict=True):
        yield dict(zip(cols, vals, strict=True))


def _counts_for(
    fields: dict[str, Any], options: list[str], spec: dict[str, Any]
) -> np.ndarray | None:
    name = spec.get("human_counts_field")
    raw = fields.get(name) if name else None
    if raw is None:
        return None
    if isinstance(raw, dict):
        return np.array([float(raw.get(o, 0) or 0) for o in options])
    item_opts = fields.get(spec.get("options_field") or "options")
    if isinstance(raw, list) and isinstance(item_opts, list) and len(raw) == len(item_opts):
        by = {str(o): float(c) for o, c in zip(item_opts, raw, strict=True)}
        return np.array([by.get(o, np.nan) for o in options])
    return None


def _types_for(
    fields: dict[str, Any], options: list[str], spec: dict[str, Any]
) -> list[str] | None:
    name = spec.get("option_types_field")
    raw = fields.get(name) if name else None
    item_opts = fields.get(spec.get("options_field") or "options")
    if isinstance(raw, list) and isinstance(item_opts, list) and len(raw) == len(item_opts):
        by = {str(o): str(t) for o, t in zip(item_opts, raw, strict=True)}
        return [by.get(o, o) for o in options]
    return None


def human_choice_data(df: pd.DataFrame, spec: dict[str, Any]) -> HumanChoiceData | None:
    """Gather scores and human counts from choice rows (option_scores) or yes/no rows (probs)."""
    ok = df[df["error"].isna()]
    if ok.empty:
        return None
    cond_fields = list(spec.get("condition_fields") or [])
    data = HumanChoiceData()
    types: list[list[str]] = []
    for r in _records(
        ok, ("item_id", "variant", "fields", "option_scores", "probs", "gold", "extra")
    ):
        fields = decode_json_cell(r.get("fields")) or {}
        os_ = decode_json_cell(r.get("option_scores"))
        if isinstance(os_, dict) and os_:
            options = list(os_)
            counts = _counts_for(fields, options, spec)
            vecs = scheme_vectors(os_, options)
        else:
            probs = decode_json_cell(r.get("probs"))
            h = fields.get("human_q1")
            if not isinstance(probs, dict) or h not in (0, 1, "0", "1") or pd.isna(r.get("gold")):
                continue
            options = list(probs)
            if not {"yes", "no"} <= set(options):
                continue
            counts = np.array([float(int(h) == (1 if o == "yes" else 0)) for o in options])
            with np.errstate(divide="ignore"):
                logs = {"raw": np.log(np.array([float(probs[o]) for o in options]))}
            cal = ((decode_json_cell(r.get("extra")) or {}).get("calibration") or {}).get(
                "calibrated"
            )
            if isinstance(cal, dict) and all(o in cal for o in options):
                with np.errstate(divide="ignore"):
                    logs["calibrated"] = np.log(np.array([float(cal[o]) for o in options]))
            vecs = {k: v if has_distribution(v) else None for k, v in logs.items()}
        per = {k: v for k, v in vecs.items() if v is not None}
        if counts is None or not np.all(np.isfinite(counts)) or counts.sum() <= 0 or not vecs:
            continue
        if not per:  # an abstention: human counts, but no distribution of the model's to fit them
            data.left_out.append(str(r["variant"]))
            continue
        data.item_ids.append(str(r["item_id"]))
        data.variants.append(str(r["variant"]))
        data.options.append(options)
        data.counts.append(counts)
        g = r.get("gold")
        data.gold.append(options.index(g) if isinstance(g, str) and g in options else None)
        data.conditions.append("|".join(str(fields.get(c)) for c in cond_fields))
        t = _types_for(fields, options, spec)
        types.append(t if t is not None else [str(j) for j in range(len(options))])
        for scheme, v in per.items():
            data.scores.setdefault(scheme, []).append(v)
    if not data.item_ids and not data.left_out:
        return None
    # a scheme must cover every row to be compared on the same human data
    data.scores = {s: v for s, v in data.scores.items() if len(v) == len(data.item_ids)}
    data.types = types if spec.get("option_types_field") else None
    return data


def _average_by_item(
    data: HumanChoiceData, scheme: str, rows: list[int]
) -> tuple[
    list[np.ndarray], list[np.ndarray], list[int | None], list[str], list[list[str]], list[str]
]:
    """Average each item's scores over its variants (option-order permutations), by option text."""
    by_item: dict[str, list[int]] = {}
    for i in rows:
        by_item.setdefault(data.item_ids[i], []).append(i)
    s_out, c_out, g_out, cond, typ, ids = [], [], [], [], [], []
    for item, idx in by_item.items():
        opts = data.options[idx[0]]
        mats = []
        for i in idx:
            pos = {o: j for j, o in enumerate(data.options[i])}
            mats.append(data.scores[scheme][i][[pos[o] for o in opts]])
        s_out.append(np.mean(mats, axis=0))
        c_out.append(data.counts[idx[0]])
        g_out.append(data.gold[idx[0]])
        cond.append(data.conditions[idx[0]])
        typ.append(data.types[idx[0]] if data.types else [str(j) for j in range(len(opts))])
        ids.append(item)
    return s_out, c_out, g_out, cond, typ, ids


def fit_rows(df: pd.DataFrame, run: dict[str, Any], spec: dict[str, Any]) -> list[dict[str, Any]]:
    """α fitted to human choices per scheme (per template when a run has several), with baselines."""
    data = human_choice_data(df, spec)
    if data is None:
        return []
    rows: list[dict[str, Any]] = []
    bases = sorted({base_variant(v) for v in [*data.variants, *data.left_out]})
    for base in bases:
        sel = [i for i, v in enumerate(data.variants) if base_variant(v) == base]
        g0: dict[str, Any] = {"variant": base} if len(bases) > 1 else {}
        first = True
        for scheme in data.scores:
            s, c, gold, cond, typ, _ = _with_distribution(*_average_by_item(data, scheme, sel))
            try:
                fit = fit_alpha(s, c)
            except ValueError:
                continue
            g = {**g0, "scheme": scheme}
            if first:
                rows.append(
                    run_metric_row(run, g0, "human_ll_uniform", fit.ll_uniform, None, fit.n_choices)
                )
                rows.append(
                    run_metric_row(
                        run, g0, "human_ll_empirical", fit.ll_empirical, None, fit.n_choices
                    )
                )
                first = False
            rows += _fit_metric_rows(run, g, fit)
            rows.append(
                run_metric_row(
                    run,
                    g,
                    "human_ll_per_choice",
                    fit.loglik / max(fit.n_choices, 1),
                    _ll_boot(s, c, float(fit.alpha or 0.0)),
                    fit.n_choices,
                )
            )
            scored = [(x, y) for x, y in zip(s, gold, strict=True) if y is not None]
            if scored and fit.alpha is not None:
                rows.append(
                    run_metric_row(
                        run,
                        g,
                        "softmax_accuracy_fitted",
                        softmax_accuracy(fit.alpha, [x for x, _ in scored], [y for _, y in scored]),
                        None,
                        len(scored),
                    )
                )
            if spec.get("condition_fields"):
                try:
                    table = condition_table(s, c, cond, typ)
                except ValueError:
                    continue
                for how in AGGREGATIONS:
                    cf = fit_condition(table, how)
                    rows += _fit_metric_rows(
                        run, {**g, "aggregation": how}, cf, prefix="condition_"
                    )
        left = sum(1 for v in data.left_out if base_variant(v) == base)
        if left:
            rows.append(
                run_metric_row(
                    run,
                    {**g0, "of": "human_fit"},
                    "left_out_no_distribution",
                    left,
                    None,
                    left + len(sel),
                )
            )
    return rows


_Averaged = tuple[
    list[np.ndarray], list[np.ndarray], list[int | None], list[str], list[list[str]], list[str]
]


def _with_distribution(*cols: Any) -> _Averaged:
    """The items of :func:`_average_by_item`'s columns whose averaged scores define a distribution
    (those :func:`fit_alpha` fits): an option -inf on one permutation and another on the next
    average to none. The fit, its bootstrap and softmax_accuracy_fitted use the same items."""
    keep = [i for i, x in enumerate(cols[0]) if has_distribution(x)]
    if len(keep) == len(cols[0]):
        return cols  # type: ignore[return-value]
    return tuple([col[i] for i in keep] for col in cols)  # type: ignore[return-value]


def _fit_metric_rows(
    run: dict[str, Any], g: dict[str, Any], fit: AlphaFit, prefix: str = ""
) -> list[dict[str, Any]]:
    rows = []
    if fit.at_bound:
        # the likelihood still rises at the search bound (separable data): α is not identified
        g = {**g, "alpha_at_bound": True}
    if fit.alpha is not None:
        rows.append(run_metric_row(run, g, f"{prefix}fit_alpha", fit.alpha, fit.ci95, fit.n_items))
    rows.append(run_metric_row(run, g, f"{prefix}human_loglik", fit.loglik, None, fit.n_choices))
    return rows


def _ll_boot(
    s: list[np.ndarray], c: list[np.ndarray], alpha: float, n_boot: int = 1000
) -> list[float] | None:
    """Percentile interval of the per-choice log-likelihood at a fixed α, resampling items."""
    if len(s) < 2:
        return None
    per = np.array(
        [
            float(np.sum(ci[ci > 0] * np.log(softmax(si, alpha)[ci > 0])))
            for si, ci in zip(s, c, strict=True)
        ]
    )
    n = np.array([float(ci.sum()) for ci in c])
    rng = np.random.default_rng(0)
    idx = rng.integers(0, len(s), size=(n_boot, len(s)))
    reps = per[idx].sum(axis=1) / n[idx].sum(axis=1)
    lo, hi = np.quantile(reps, [0.025, 0.975])
    return [float(lo), float(hi)]


def human_vs_model(
    df: pd.DataFrame,
    spec: dict[str, Any],
    scheme: str = "raw",
    alphas: dict[str, float] | None = None,
) -> dict[str, Any] | None:
    """Per template (variant), each item's human distribution beside the model's (for the TUI
    methods panel): ``model_p`` = softmax(s), the scheme's scores normalised over the options
    (for the log-probability schemes, the model's probabilities normalised), and ``fitted`` =
    softmax(α·s), the choice model at the fitted α.

    ``alphas`` maps a template (base variant; "" for a run with one template) to the α the
    pipeline fitted for it (``fit_alpha`` rows of :func:`fit_rows`, as ``llmscope report``
    gives them); templates without one are left out. Without ``alphas``, α is fitted here per
    template on the same rows as :func:`fit_rows` does, so the two agree."""
    data = human_choice_data(df, spec)
    if data is None or scheme not in data.scores:
        return None
    # the templates as fit_rows counts them (those with only abstentions too), so "" means what
    # a fit row without a variant group means
    bases = sorted({base_variant(v) for v in [*data.variants, *data.left_out]})
    out_variants: list[dict[str, Any]] = []
    for base in bases:
        key = base if len(bases) > 1 else ""
        sel = [i for i, v in enumerate(data.variants) if base_variant(v) == base]
        if not sel:
            continue
        s, c, _gold, cond, typ, ids = _with_distribution(*_average_by_item(data, scheme, sel))
        if alphas is not None:
            if alphas.get(key) is None:
                continue
            alpha = float(alphas[key])
        else:
            try:
                alpha = float(fit_alpha(s, c).alpha or 0.0)
            except ValueError:
                continue
        by_item = {data.item_ids[i]: data.options[i] for i in sel}
        items = [
            {
                "item_id": iid,
                "options": by_item[iid],
                "human": (ci / ci.sum()).tolist(),
                "model_p": softmax(si, 1.0).tolist(),
                "fitted": softmax(si, alpha).tolist(),
            }
            for iid, si, ci in zip(ids, s, c, strict=True)
        ]
        entry: dict[str, Any] = {"variant": key, "alpha": alpha, "items": items}
        if spec.get("condition_fields"):
            try:
                table = condition_table(s, c, cond, typ)
                entry["conditions"] = {
                    "types": table.types,
                    "rows": [
                        {"condition": k, "human": (h / h.sum()).tolist(), "model": d.tolist()}
                        for k, h, d in zip(
                            table.conditions,
                            table.counts,
                            condition_dists(table, "scores", alpha),
                            strict=True,
                        )
                    ],
                }
            except ValueError:
                pass
        out_variants.append(entry)
    return {"scheme": scheme, "variants": out_variants}


SOFTMAX_ALPHAS = (0.5, 1.0, 2.0, 4.0)


def softmax_curve_rows(
    df: pd.DataFrame, run: dict[str, Any], spec: dict[str, Any]
) -> list[dict[str, Any]]:
    """Softmax accuracy E[softmax(α·s)[gold]] per scheme at α = 0.5, 1, 2, 4 (argmax accuracy is the α → ∞ limit).

    Cluster-t intervals of the mean (CR1, clusters = items), clipped to [0, 1].
    """
    if "softmax_accuracy_curve" not in task_producers(run.get("task")):  # the task lists it
        return []
    from llmscope.analysis.metric_stats import mean_ci

    ok = df[df["error"].isna() & df["gold"].notna()]
    per: dict[str, list[tuple[np.ndarray, int, str]]] = {}
    left: dict[str, int] = {}  # scheme -> rows without a distribution (abstentions), left out
    for r in ok.to_dict("records"):
        os_ = decode_json_cell(r.get("option_scores"))
        if not isinstance(os_, dict) or r["gold"] not in os_:
            continue
        options = list(os_)
        g = options.index(r["gold"])
        for scheme, sv in scheme_vectors(os_, options).items():
            data = per.setdefault(scheme, [])
            if sv is not None:
                data.append((sv, g, str(r["item_id"])))
            else:
                left[scheme] = left.get(scheme, 0) + 1
    rows = []
    for scheme, data in per.items():
        if data:
            clusters = np.array([c for _, _, c in data])
            for a in SOFTMAX_ALPHAS:
                vals = np.array([float(softmax(s, a)[g]) for s, g, _ in data])
                # a mean of probabilities, not a share: cluster-t, never Wilson (docs/METRICS.md)
                m, lo, hi, n, _, _ = mean_ci(vals, clusters)
                ci = None if math.isnan(lo) else [max(0.0, lo), min(1.0, hi)]
                rows.append(
                    run_metric_row(
                        run, {"scheme": scheme, "alpha": a}, "softmax_accuracy", m, ci, n
                    )
                )
        if left.get(scheme):
            rows.append(
                run_metric_row(
                    run,
                    {"of": "softmax_accuracy", "scheme": scheme},
                    "left_out_no_distribution",
                    left[scheme],
                    None,
                    left[scheme] + len(data),
                )
            )
    return rows
