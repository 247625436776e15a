"""Calibration producer: ECE / MCE with reliability bins, Brier scores and ties."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from llmscope.store.db import decode_json_many

from ..metric_stats import mean_metric
from ..metric_values import Metric
from ..metrics import BootstrapConfig, MetricContext, register_producer
from .yesno import gold_yes_column

__all__ = [
    "brier_item",
    "calibration_metrics",
    "raw_confidence",
    "reliability_bin_metrics",
    "bin_label",
    "register",
]


def _prob_rows(ok: pd.DataFrame) -> list[dict[str, float] | None]:
    return _decoded_prob_rows(ok["probs"].tolist())


def _decoded_prob_rows(values: list[Any]) -> list[dict[str, float] | None]:
    return [p if isinstance(p, dict) and p else None for p in decode_json_many(values)]


def brier_item(probs: Mapping[str, Any] | None, gold: Any) -> float:
    """Multi-class Brier of one item over its listed answers (gold not listed adds 1)."""
    if not probs or gold is None or (isinstance(gold, float) and math.isnan(gold)):
        return math.nan
    g = str(gold).strip().lower()
    s = 0.0
    for k, p in probs.items():
        if p is None:
            return math.nan
        s += (float(p) - (1.0 if str(k).strip().lower() == g else 0.0)) ** 2
    if g not in {str(k).strip().lower() for k in probs}:
        s += 1.0
    return s


def calibration_metrics(ctx: MetricContext) -> list[Metric]:
    """ECE and MCE (10 equal-width bins), Brier (multi-class; `brier_yes` for yes/no), ties."""
    from ..calibration import reliability

    ok = ctx.ok()
    if ok.empty or "confidence" not in ok:
        return []
    corr = pd.to_numeric(ok["correct"], errors="coerce").to_numpy(float)
    conf = pd.to_numeric(ok["confidence"], errors="coerce").to_numpy(float)
    keep = np.isfinite(corr) & np.isfinite(conf)
    out: list[Metric] = []
    if keep.any():
        every = bool(keep.all())  # no masked copies of the 1M-row columns when nothing is missing
        c, y = (conf, corr) if every else (conf[keep], corr[keep])
        cl = ctx.clusters(ok) if every else ctx.clusters(ok)[keep]
        rel = reliability(c, y, n_bins=10)
        out += _ece_mce(ctx, rel, c, y, cl, "")
        out += reliability_bin_metrics(rel.bins)
    if "probs" in ok:
        from ..prob_rows import brier_items, flatten_column, tie_flags

        # the rows' answer probabilities as flat arrays: per-row scores in numpy (prob_rows.py);
        # `probs` holds the decoded dicts of the rows the per-row functions still score
        probs, flat = flatten_column(ok["probs"], _decoded_prob_rows)
        out += _raw_calibration(ctx, ok, probs, conf, corr, flat)
        scored = np.isfinite(corr)
        b = brier_items(flat, ok["gold"], scored, brier_item, probs)
        r = mean_metric("brier", b, ctx.clusters(ok), {}, "calibration")
        if r is not None:
            out.append(r)
        if "p_yes" in ok and ok["p_yes"].notna().any():
            py = pd.to_numeric(ok["p_yes"], errors="coerce").to_numpy(float)
            gy = gold_yes_column(ok["gold"])
            r = mean_metric("brier_yes", (py - gy) ** 2, ctx.clusters(ok), {}, "calibration")
            if r is not None:
                out.append(r)
        tv = tie_flags(flat, scored, _is_tie, probs)
        if np.isfinite(tv).any():
            out.append(
                Metric(
                    "tie_rate",
                    float(np.nanmean(tv)),
                    n=int(np.isfinite(tv).sum()),
                    producer="calibration",
                )
            )
    return out


def raw_confidence(probs: Mapping[str, Any] | None, prediction: Any) -> float:
    """The stored probability of the predicted answer, not renormalised over the answers
    (yes/no: P(pred) with P(other) left out of the denominator); NaN without one."""
    if (
        not probs
        or prediction is None
        or (isinstance(prediction, float) and math.isnan(prediction))
    ):
        return math.nan
    v = probs.get(str(prediction))
    try:
        return float(v) if v is not None else math.nan
    except (TypeError, ValueError):
        return math.nan


def _raw_calibration(
    ctx: MetricContext,
    ok: pd.DataFrame,
    probs: list[dict[str, float] | None],
    conf: np.ndarray,
    corr: np.ndarray,
    flat: Any = None,
) -> list[Metric]:
    """`ece_raw` / `mce_raw`: ECE and MCE with the raw P(predicted answer) as the confidence,
    reported where it differs from the renormalised `confidence` (answers with mass outside them)."""
    from ..calibration import reliability
    from ..prob_rows import flatten, raw_confidences

    raw = raw_confidences(
        flatten(probs) if flat is None else flat, ok["prediction"], raw_confidence, probs
    )
    keep = np.isfinite(corr) & np.isfinite(raw) & np.isfinite(conf)
    if not keep.any() or np.allclose(raw[keep], conf[keep], rtol=0.0, atol=1e-9):
        return []
    c, y = raw[keep], corr[keep]
    cl = ctx.clusters(ok)[keep]
    return _ece_mce(ctx, reliability(c, y, n_bins=10), c, y, cl, "_raw")


def _ece_mce(
    ctx: MetricContext, rel: Any, c: np.ndarray, y: np.ndarray, cl: np.ndarray, suffix: str
) -> list[Metric]:
    """`ece{suffix}` and `mce{suffix}` of a reliability table with their cluster-bootstrap
    intervals: exact up to EXACT_MAX_CLUSTERS clusters, drawn bin totals above (named in the
    method), as the definitions state (analysis/definitions.py CAL_BOOT_CI)."""
    iv = _calibration_interval(c, y, cl, 10, ctx.bootstrap)
    (elo, ehi), (mlo, mhi) = iv.ece, iv.mce
    return [
        Metric(
            name + suffix,
            est,
            None if math.isnan(lo) else lo,
            None if math.isnan(hi) else hi,
            iv.method,
            len(c),
            iv.n_clusters,
            {},
            "calibration",
        )
        for name, est, lo, hi in (("ece", rel.ece, elo, ehi), ("mce", rel.mce, mlo, mhi))
    ]


def reliability_bin_metrics(bins: pd.DataFrame) -> list[Metric]:
    """The reliability diagram ECE is computed from: per non-empty bin its accuracy and mean
    confidence, n = the bin's count (figures and `report --json` read these rows)."""
    out: list[Metric] = []
    for b in bins.to_dict("records"):
        if not b["count"]:
            continue
        group = {"bin": bin_label(float(b["lo"]), float(b["hi"]))}
        for name, key in (("bin_accuracy", "accuracy"), ("bin_confidence", "confidence")):
            out.append(
                Metric(
                    name,
                    float(b[key]),
                    n=int(b["count"]),
                    group=dict(group),
                    producer="calibration",
                )
            )
    return out


def bin_label(lo: float, hi: float) -> str:
    """A reliability bin's label, ``"0.3-0.4"`` (``[lo, hi)``, the last bin closed)."""
    return f"{lo:.1f}-{hi:.1f}"


def _calibration_bootstrap(
    conf: np.ndarray,
    correct: np.ndarray,
    clusters: np.ndarray,
    n_bins: int,
    cfg: BootstrapConfig,
    method: str = "exact",
) -> tuple[tuple[float, float], tuple[float, float], int]:
    """Cluster-bootstrap percentile intervals of ECE and MCE (the exact bootstrap unless
    ``method`` says otherwise; :func:`_calibration_interval` is the producers' choice)."""
    iv = _calibration_interval(conf, correct, clusters, n_bins, cfg, method)
    return iv.ece, iv.mce, iv.n_clusters


def _calibration_interval(
    conf: np.ndarray,
    correct: np.ndarray,
    clusters: np.ndarray,
    n_bins: int,
    cfg: BootstrapConfig,
    method: str = "auto",
) -> Any:
    """ECE/MCE intervals with the method that drew them (analysis/calibration_bootstrap.py:
    exact up to EXACT_MAX_CLUSTERS clusters, bin totals drawn above, named so)."""
    from ..calibration_bootstrap import calibration_bootstrap

    return calibration_bootstrap(
        conf, correct, clusters, n_bins, cfg.resamples, cfg.seed, cfg.level, method=method
    )


def _is_tie(p: Mapping[str, Any]) -> bool:
    v = sorted((float(x) for x in p.values() if x is not None), reverse=True)
    return len(v) >= 2 and v[0] == v[1]


def register() -> None:
    """Add this family's producer to the pipeline (analysis/metrics.py calls it)."""
    register_producer(
        "calibration",
        needs=lambda c: c.has("confidence") or c.has("probs"),
        reads=("confidence", "probs", "p_yes"),
        fields=(),
    )(calibration_metrics)
