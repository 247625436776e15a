"""Position-bias producer: how often the first / last listed option is predicted vs is gold."""

from __future__ import annotations

import numpy as np

from ..metric_stats import rate
from ..metric_values import Metric
from ..metrics import MetricContext, decode_cell, register_producer

__all__ = ["position_metrics", "register"]


def position_metrics(ctx: MetricContext) -> list[Metric]:
    """Position bias: how often the first / last listed option is predicted vs is gold."""
    ok = ctx.ok()
    if ok.empty or "option_scores" not in ok:
        return []
    ok = ok[ok["option_scores"].notna() & ok["prediction"].notna()]
    if ok.empty:
        return []
    orders = ok["option_scores"].map(lambda s: list(decode_cell(s) or {}))
    cl = ctx.clusters(ok)
    out: list[Metric] = []
    for name, pos in (("first", 0), ("last", -1)):
        pred = [
            float(o[pos] == p) if o else np.nan
            for o, p in zip(orders, ok["prediction"], strict=True)
        ]
        # `notna`: a missing gold is NaN, not None, beside rows with gold (pandas' string dtype)
        gold = np.array(
            [
                float(o[pos] == g) if o and has else np.nan
                for o, g, has in zip(orders, ok["gold"], ok["gold"].notna(), strict=True)
            ]
        )
        r = rate("chosen_rate", pred, cl, {"position": name}, "position")
        if r is not None:
            out.append(r)
        if np.isfinite(gold).any():
            out.append(
                Metric(
                    "gold_rate",
                    float(np.nanmean(gold)),
                    n=int(np.isfinite(gold).sum()),
                    group={"position": name},
                    producer="position",
                )
            )
    return out


def register() -> None:
    """Add this family's producer to the pipeline (analysis/metrics.py calls it)."""
    register_producer("position", needs=lambda c: c.has("option_scores"), reads=("option_scores",))(
        position_metrics
    )
