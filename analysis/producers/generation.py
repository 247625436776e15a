"""Generation producer: token F1 of the first sample; exact match and F1 over samples."""

from __future__ import annotations

import numpy as np

from ..metric_stats import mean_metric, rate
from ..metric_values import Metric
from ..metrics import MetricContext, register_producer, row_extras

__all__ = ["generation_metrics", "register"]


def generation_metrics(ctx: MetricContext) -> list[Metric]:
    """Token F1 of the first sample; with several samples majority / mean exact match and F1."""
    ok = ctx.ok()
    if ok.empty or "extra" not in ok:
        return []
    ex = list(row_extras(ok))
    cl = ctx.clusters(ok)
    sampled = any(len(e.get("samples") or []) > 1 for e in ex)
    out: list[Metric] = []
    for key, metric in (
        ("f1", "token_f1"),
        ("em_majority", "em_majority"),
        ("em_mean", "em_mean"),
        ("f1_mean", "token_f1_mean"),
    ):
        if key != "f1" and not sampled:
            continue
        vals = [float(e[key]) if e.get(key) is not None else np.nan for e in ex]
        # F1 and means of sample scores are means, not proportions: no Wilson interval.
        r = (rate if metric == "em_majority" else mean_metric)(metric, vals, cl, {}, "generation")
        if r is not None:
            out.append(r)
    return out


def register() -> None:
    """Add this family's producer to the pipeline (analysis/metrics.py calls it)."""
    register_producer("generation", needs=lambda c: c.has("extra"), reads=("extra",))(
        generation_metrics
    )
