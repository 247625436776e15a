"""WorldSense producer: the authors' accuracy and bias of a run, and their tables."""

from __future__ import annotations

import math

import pandas as pd

from llmscope.data.registry import suite_producers

from ..metric_values import Metric
from ..metrics import MetricContext, register_producer

__all__ = ["worldsense_metrics", "worldsense_from_tuples", "register"]


def worldsense_metrics(ctx: MetricContext) -> list[Metric]:
    """The authors' WorldSense accuracy (%) of this run, first in the report."""
    # The authors' metrics belong to their suite (data/registry.py: SuiteEntry.producers).
    if "worldsense" not in suite_producers(ctx.run.get("suite_name")) or "f.tuple_ID" not in ctx.df:
        return []
    import warnings

    from ..worldsense import tuple_table

    df = ctx.df
    exp = df["f.expectedresp"] if "f.expectedresp" in df else df.get("f.options")
    t = pd.DataFrame(
        {
            "Key": df["item_id"],
            "resp": df["prediction"].where(df["error"].isna(), "").fillna(""),
            "modelname": str(ctx.run.get("model")),
            "prompting": "run",
            "tuple_ID": df["f.tuple_ID"],
            "expectedresp": exp,
            "goldresp": df["gold"],
            "problemname": df.get("f.problemname"),
            "problemsize": df.get("f.problemsize"),
        }
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # incomplete tuples (a run still streaming) are excluded
        tuples = tuple_table(t)
    return worldsense_from_tuples(ctx, tuples, len(t))


def worldsense_from_tuples(ctx: MetricContext, tuples: pd.DataFrame, n_trials: int) -> list[Metric]:
    """The authors' metrics and tables of a run from its per-tuple table (``tuple_table``'s
    shape, from the rows or from SQL: analysis.sqlmetrics); ``n_trials`` counts every row."""
    import warnings

    from ..worldsense import group_stats

    if tuples.empty:
        return []
    ctx.artifacts["worldsense_tuples"] = tuples
    ctx.artifacts["worldsense_incomplete"] = n_trials - int(tuples["n_trials"].sum())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        acc = group_stats(tuples, ["prompting", "modelname"]).reset_index()
        pacc = group_stats(tuples, ["prompting", "modelname", "problemname"]).reset_index()
        pbias = group_stats(tuples, ["prompting", "modelname", "problemname"], "bias").reset_index()
    # The authors' tables of this run alone (prompting "run"): `llmscope report` assembles the
    # tables over several runs from these when no two runs share a (model, prompting) group.
    ctx.artifacts["worldsense_accuracy_table"] = acc
    ctx.artifacts["worldsense_problem_accuracy_table"] = pacc
    ctx.artifacts["worldsense_problem_bias_table"] = pbias
    out: list[Metric] = []
    for name, table, gcols in (
        ("worldsense_accuracy", acc, []),
        ("worldsense_accuracy", pacc, ["problemname"]),
        ("worldsense_bias", pbias, ["problemname"]),
    ):
        for rec in table.to_dict("records"):
            m, c = float(rec["mean"]), float(rec["conf95"])
            lo, hi = (None, None) if math.isnan(c) else (m - c, m + c)
            out.append(
                Metric(
                    name,
                    m,
                    lo,
                    hi,
                    "authors' conf95 over tuples",
                    int(rec["count"]),
                    int(rec["count"]),
                    {k: rec[k] for k in gcols},
                    "worldsense",
                )
            )
    return out


def register() -> None:
    """Add this family's producer to the pipeline (analysis/metrics.py calls it)."""
    register_producer("worldsense", needs=lambda c: c.has("f.tuple_ID"), reads=())(
        worldsense_metrics
    )
