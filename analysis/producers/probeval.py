"""ProbEval producer: mean KL(P_human || P_model) over questions and the unmatched share."""

from __future__ import annotations

import numpy as np

from ..metric_stats import cluster_bootstrap_mean
from ..metric_values import Metric
from ..metrics import MetricContext, register_producer

__all__ = ["probeval_metrics", "register"]


def probeval_metrics(ctx: MetricContext) -> list[Metric]:
    """Mean ProbEval KL(P_human || P_model) with a bootstrap interval over questions."""
    if ctx.store is None or "f.clusters" not in ctx.df:
        return []
    from ..probeval_run import probeval_for_run

    res = probeval_for_run(ctx.store, ctx.run)
    if res is None or res.per_question.empty:
        return []
    kl = res.per_question["kl"].to_numpy(float)
    est, lo, hi, G = cluster_bootstrap_mean(kl, np.arange(len(kl)), ctx.bootstrap)
    n_model = int(res.per_question["n_model"].sum())
    return [
        Metric("probeval_kl", est, lo, hi, "bootstrap over questions", len(kl), G, {}, "probeval"),
        Metric(
            "probeval_wrong_share",
            float(res.per_question["n_wrong"].sum() / max(1, n_model)),
            n=n_model,
            producer="probeval",
        ),
    ]


def register() -> None:
    """Add this family's producer to the pipeline (analysis/metrics.py calls it)."""
    register_producer(
        "probeval", needs=lambda c: c.store is not None and c.has("f.clusters"), reads=()
    )(probeval_metrics)
