"""Human vs model numbers of the pipeline: choice distributions and rating histograms.

The TUI's human panel (tui/panels/human.py) draws these; it computes none of them.

* Choice items with human choice counts (the spec's ``human_counts_field``): per (item,
  variant) the human choice shares beside the model's option probabilities (renormalised
  over the listed options), their total-variation distance and whether the model's argmax
  is the human majority choice (:func:`choice_frame`). Metrics ``human_tv_distance`` (mean)
  and ``human_majority_agreement`` (share), clustered like every interval. A row whose model
  probabilities hold no mass on any listed option (an abstention) has no distribution to
  compare: it is left out (not a zero vector at TV 0.5) and counted in
  ``left_out_no_distribution`` (group ``of``: ``human_choice``).
* Rating items whose gold is a human rating: the share of items per rating label for the
  humans (gold rounded to the nearest label, one per item) and for the model (predicted
  label, every scored row): ``human_rating_share`` and ``model_rating_share`` grouped by
  ``rating`` (:func:`rating_frame`).
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from llmscope.store.db import decode_json

from .metric_stats import mean_metric, rate
from .metric_values import Metric
from .metrics import MetricContext, MetricDef, define_metric, register_producer

__all__ = [
    "field_value",
    "human_counts",
    "choice_frame",
    "rating_labels",
    "rating_frame",
    "CHOICE_COLUMNS",
]

_RATE_CI = "cluster-t (CR1 sandwich, t with G-1 df) over clusters; Wilson without clustering"
_MEAN_CI = "cluster-t (CR1 sandwich, t with G-1 df) on the per-item values, over clusters"

for _d in (
    MetricDef(
        "human_tv_distance",
        "mean over (item, variant) rows of the total-variation distance "
        "1/2 sum_k |h_k - m_k| between the human choice shares h (choice counts / total) and the "
        "model's option probabilities m renormalised over the listed options",
        _MEAN_CI,
        "choice with human choice counts",
    ),
    MetricDef(
        "human_majority_agreement",
        "share of (item, variant) rows whose model argmax option is "
        "the human majority choice (first listed wins a tie on either side)",
        _RATE_CI,
        "choice with human choice counts",
    ),
    MetricDef(
        "human_rating_share",
        "share of items whose human rating (gold, rounded to the nearest "
        "rating label; one per item) is this label (group `rating`)",
        "none",
        "rating",
    ),
    MetricDef(
        "model_rating_share",
        "share of scored rows whose predicted rating is this label (group `rating`)",
        _RATE_CI,
        "rating",
    ),
):
    define_metric(_d)


def field_value(v: Any) -> Any:
    """A field value as stored: JSON, or the Python literal some CSV sources hold, or itself."""
    if isinstance(v, str):
        missing = object()
        out = decode_json(v, missing)
        if out is not missing:
            return out
        try:
            return ast.literal_eval(v)
        except (ValueError, SyntaxError):
            pass
    return v


def finite_float(v: Any) -> float | None:
    """`v` as a finite float, or None (missing, not a number, NaN or infinite)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def human_counts(fields: Mapping[str, Any], spec: Mapping[str, Any]) -> list[float] | None:
    """The item's human choice counts (the spec's ``human_counts_field``), or None."""
    hc = spec.get("human_counts_field")
    v = field_value(fields.get(hc)) if isinstance(hc, str) else None
    if not isinstance(v, list):
        return None
    try:
        return [float(x) for x in v]
    except (TypeError, ValueError):
        return None


CHOICE_COLUMNS = ["item_id", "variant", "options", "human", "model", "n_human", "tv", "agree"]


def choice_frame(df: pd.DataFrame, spec: Mapping[str, Any]) -> pd.DataFrame:
    """Per (item, variant) row: human choice shares, model option probabilities, TV, agreement.

    ``df`` holds result rows with ``probs`` and the item's ``fields`` and ``options`` (as the
    pipeline's whole-item frame has them). Rows without counts, options or probabilities
    (or with counts and options of different lengths) are left out. The index of the result
    is the index of the rows in ``df`` they come from. Rows without model probability mass on
    any listed option (an abstention) are left out too.
    """
    return _choice_frame(df, spec)[0]


def _choice_frame(df: pd.DataFrame, spec: Mapping[str, Any]) -> tuple[pd.DataFrame, int]:
    """:func:`choice_frame` and the number of rows with human counts left out for want of a
    model distribution."""
    recs: list[dict[str, Any]] = []
    n_left = 0
    index: list[Any] = []
    fields_col = df["fields"] if "fields" in df else pd.Series([None] * len(df), index=df.index)
    opts_col = df["options"] if "options" in df else pd.Series([None] * len(df), index=df.index)
    of = spec.get("options_field") or "options"
    for ix, iid, var, probs_s, fields_s, opts_s in zip(
        df.index, df["item_id"], df["variant"], df["probs"], fields_col, opts_col, strict=True
    ):
        fields = field_value(fields_s) if fields_s is not None else {}
        fields = fields if isinstance(fields, dict) else {}
        counts = human_counts(fields, spec)
        opts = field_value(opts_s) if opts_s is not None else None
        if not isinstance(opts, list):
            opts = field_value(fields.get(of))
        probs = field_value(probs_s) if probs_s is not None else None
        if (
            not counts
            or not isinstance(opts, list)
            or not isinstance(probs, dict)
            or len(opts) != len(counts)
        ):
            continue
        tot = sum(counts)
        if tot <= 0:
            continue
        h = np.asarray(counts, float) / tot
        m = np.asarray([finite_float(probs.get(str(o))) or 0.0 for o in opts], float)
        if not m.sum() > 0:
            n_left += 1
            continue
        m = m / m.sum()
        recs.append(
            {
                "item_id": str(iid),
                "variant": str(var),
                "options": [str(o) for o in opts],
                "human": h.tolist(),
                "model": m.tolist(),
                "n_human": int(tot),
                "tv": float(0.5 * np.abs(h - m).sum()),
                "agree": bool(int(np.argmax(h)) == int(np.argmax(m))),
            }
        )
        index.append(ix)
    return pd.DataFrame(recs, index=pd.Index(index), columns=CHOICE_COLUMNS), n_left


def _has_counts(ctx: MetricContext) -> bool:
    return isinstance(ctx.spec.get("human_counts_field"), str)


@register_producer(
    "human_choice", every_task=True, needs=_has_counts, whole_items=True, reads=("probs",)
)
def human_choice_metrics(ctx: MetricContext) -> list[Metric]:
    """``human_tv_distance`` and ``human_majority_agreement`` over rows with human counts."""
    ok = ctx.ok()
    if ok.empty or "probs" not in ok:
        return []
    c, n_left = _choice_frame(ok, ctx.spec)
    out: list[Metric | None] = []
    if not c.empty:
        cl = ctx.clusters(ok.loc[c.index])
        out += [
            mean_metric("human_tv_distance", c["tv"].to_numpy(float), cl, {}, "human_choice"),
            rate("human_majority_agreement", c["agree"].to_numpy(float), cl, {}, "human_choice"),
        ]
    if n_left:
        out.append(
            Metric(
                "left_out_no_distribution",
                float(n_left),
                n=n_left + len(c),
                group={"of": "human_choice"},
                producer="human_choice",
            )
        )
    return [m for m in out if m is not None]


def rating_labels(spec: Mapping[str, Any]) -> list[str]:
    """The rating labels of a rating suite (its ``answers``; 1-5 by default)."""
    return [str(a) for a in (spec.get("answers") or ["1", "2", "3", "4", "5"])]


def rating_frame(df: pd.DataFrame, labels: list[str]) -> pd.DataFrame:
    """Counts per label: human ratings (gold rounded to the nearest label, one per item) and
    model predictions (every row); columns ``label``, ``human``, ``model``."""
    nums = [finite_float(x) for x in labels]
    numeric = all(n is not None for n in nums)
    human = np.zeros(len(labels), int)
    model = np.zeros(len(labels), int)
    for g in df.drop_duplicates("item_id")["gold"]:
        v = finite_float(g)
        if v is not None and numeric:
            human[int(np.argmin([abs(v - float(n)) for n in nums if n is not None]))] += 1
        elif str(g) in labels:
            human[labels.index(str(g))] += 1
    for p in df["prediction"]:
        if str(p) in labels:
            model[labels.index(str(p))] += 1
    return pd.DataFrame({"label": labels, "human": human, "model": model})


@register_producer("human_rating", reads=())  # listed by the rating task
def human_rating_metrics(ctx: MetricContext) -> list[Metric]:
    """``human_rating_share`` and ``model_rating_share`` per rating label."""
    ok = ctx.ok()
    if ok.empty:
        return []
    labels = rating_labels(ctx.spec)
    items = ok.drop_duplicates("item_id")
    n_items = int(
        items["gold"].map(lambda g: finite_float(g) is not None or str(g) in labels).sum()
    )
    if n_items == 0:
        return []
    hist = rating_frame(ok, labels)
    cl = ctx.clusters(ok)
    pred = ok["prediction"].astype(str).to_numpy()
    out: list[Metric] = []
    for lab, h in zip(hist["label"], hist["human"], strict=True):
        out.append(
            Metric(
                "human_rating_share",
                float(h) / n_items,
                n=n_items,
                group={"rating": lab},
                producer="human_rating",
            )
        )
        m = rate(
            "model_rating_share", (pred == lab).astype(float), cl, {"rating": lab}, "human_rating"
        )
        if m is not None:
            out.append(m)
    return out
