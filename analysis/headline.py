"""A stored run's headline metric alone, through the metrics pipeline.

The headline is the first of :data:`analysis.metric_values.HEADLINE` a run has (overall group), the
metric the report puts first. A study's matrix shows only that metric for every cell, so it
runs only the producers that emit a headline metric: a yes/no run then needs accuracy alone
(one SQL group-by, `analysis/sqlmetrics.py`) instead of its calibration bootstrap and
per-row scores. The numbers are the full computation's: the same producers on the same rows,
and the same `finish_metrics` (a WorldSense run's published metric first).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .metric_values import Metric, headline
from .metrics import run_metrics

__all__ = ["HEADLINE_PRODUCERS", "run_headline"]

# The producers that emit a metric named in HEADLINE, in its order: worldsense_accuracy,
# sg_score, accuracy, token_f1, probeval_kl, flagged_rate. tests/analysis/test_headline.py
# checks over every kind of run the tests build that no other producer emits one.
HEADLINE_PRODUCERS = (
    "worldsense",
    "syntaxgym",
    "accuracy",
    "generation",
    "probeval",
    "contamination",
)


def run_headline(
    store: Any, run: Mapping[str, Any], items: Iterable[str] | None = None
) -> Metric | None:
    """The headline metric of a stored run, as `headline(run_metrics(store, run))` gives it.

    A full computation in the metrics cache beside the file is read where present; otherwise
    only :data:`HEADLINE_PRODUCERS` run (nothing is written to the cache, which holds full
    computations only). ``items``: on these item ids only (a study cell whose run holds more
    items than the study asks for)."""
    return headline(run_metrics(store, run, producers=HEADLINE_PRODUCERS, items=items))
