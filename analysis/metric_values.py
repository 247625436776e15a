"""What the metrics pipeline returns: one number with its interval (:class:`Metric`), every
metric of a run (:class:`RunMetrics`) and the metric a run is summed up by (:func:`headline`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .definitions import METRICS, BootstrapConfig
from .rows import metric_row


@dataclass
class Metric:
    """One number with its interval, for the whole run or one group."""

    name: str
    value: float | None
    lo: float | None = None
    hi: float | None = None
    interval_method: str | None = None
    n: int | None = None
    n_clusters: int | None = None
    group: dict[str, Any] = field(default_factory=dict)
    producer: str = ""

    @property
    def definition(self) -> str:
        d = METRICS.get(self.name)
        return d.definition if d else "(no definition registered)"

    @property
    def ci95(self) -> list[float] | None:
        if self.lo is None or self.hi is None or _nan(self.lo) or _nan(self.hi):
            return None
        return [float(self.lo), float(self.hi)]


def _nan(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


@dataclass
class RunMetrics:
    """Every metric of one run, in report order."""

    run_id: str
    model: str
    suite: str | None
    task: str | None
    cluster_unit: str
    bootstrap: BootstrapConfig
    metrics: list[Metric] = field(default_factory=list)
    # Intermediate tables other analyses of the same rows reuse (WorldSense: the per-tuple
    # table); not part of the metric values.
    artifacts: dict[str, Any] = field(default_factory=dict, repr=False)

    def get(self, name: str, group: Mapping[str, Any] | None = None) -> Metric | None:
        """The metric ``name`` for exactly ``group`` (None/{} = overall), or None."""
        g = {str(k): v for k, v in (group or {}).items()}
        for m in self.metrics:
            if m.name == name and m.group == g:
                return m
        return None

    def by_group(self, name: str, key: str) -> list[Metric]:
        """The metric ``name`` for every group that has exactly the one key ``key``."""
        return [m for m in self.metrics if m.name == name and set(m.group) == {key}]

    def rows(self) -> list[dict[str, Any]]:
        """Metric rows (the `report --json` shape) with interval method and cluster count."""
        out = []
        for m in self.metrics:
            r = metric_row(self.run_id, self.model, m.name, m.value, m.ci95, m.n, m.group)
            r["suite"] = self.suite
            r["interval_method"] = m.interval_method if m.ci95 is not None else None
            r["n_clusters"] = m.n_clusters
            out.append(r)
        return out


# The metric a run is summed up by (runs list, first in the report): the published metric first.
HEADLINE = (
    "worldsense_accuracy",
    "sg_score",
    "accuracy",
    "token_f1",
    "probeval_kl",
    "flagged_rate",
)


def headline(rm: RunMetrics) -> Metric | None:
    """The run's headline metric (:data:`HEADLINE` order, overall group), or None."""
    for name in HEADLINE:
        m = rm.get(name)
        if m is not None and m.value is not None:
            return m
    return None
