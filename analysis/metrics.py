"""One metrics pipeline: a run's stored per-item rows (plus its suite spec) → :class:`RunMetrics`.

Every number `llmscope report` (text, ``--json``, ``--explain``), `llmscope compare` and the TUI
dashboard and compare screen show comes from :func:`compute_metrics`. Nothing else computes a
metric.

* Each metric is a :class:`Metric`: name, one-line definition, value, 95% interval, interval
  method, n (trials) and n_clusters (independent units), per group.
* Definitions live in one registry, :data:`METRICS`; docs/METRICS.md and ``report --explain``
  are generated from it (a test keeps the file in step).
* Producers are registered in :data:`PRODUCERS`. A producer is ``f(ctx) -> list[Metric]``;
  a function shaped ``f(df, run, spec) -> list[metric_row dicts]`` (the shape other modules
  use) plugs in through :func:`register_row_producer`. The pipeline's own producers live in
  ``analysis/producers/``, one module per family; this module registers every family, in
  report order, when it is imported.
* Dependence: every interval is computed over the suite's clusters (:func:`cluster_key`):
  the suite's ``cluster_field`` when it has one (WorldSense: the tuple), otherwise the item,
  so an item's prompt variants and option permutations are one unit (ProbEval: the question).
* One bootstrap configuration (:data:`BOOTSTRAP`) for the whole program, recorded in the
  report.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from llmscope.engine.tasks.registry import task_producers

from . import frame_codes
from .definitions import (
    BOOT_CI,
    BOOTSTRAP,
    MEAN_CI,
    METRICS,
    RATE_CI,
    TIE_RULE,
    BootstrapConfig,
    MetricDef,
    define_metric,
    definitions,
    display,
    metrics_markdown,
)
from .fields import decode_cell, expand_fields
from .intervals import accuracy_ci, bootstrap_ratio, cluster_codes, resample_index
from .queries import (
    EXTRA_KEYS,
    RESULT_COLUMNS,
    ResultProfile,
    metric_frame,
    result_profile,
    rows_signature,
)
from .rows import metric_row

__all__ = [
    "BootstrapConfig",
    "BOOTSTRAP",
    "MetricDef",
    "METRICS",
    "Metric",
    "RunMetrics",
    "MetricContext",
    "PRODUCERS",
    "register_producer",
    "register_row_producer",
    "compute_metrics",
    "run_metrics",
    "results_with_fields",
    "cluster_key",
    "mean_ci",
    "cluster_bootstrap_stat",
    "Ratio",
    "cluster_bootstrap_mean",
    "metrics_markdown",
    "definitions",
    "define_metric",
    "RATE_CI",
    "MEAN_CI",
    "BOOT_CI",
    "display",
    "TIE_RULE",
]


# -- values ----------------------------------------------------------------------------------
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


# -- inputs ----------------------------------------------------------------------------------
def results_with_fields(store: Any, run_id: str) -> pd.DataFrame:
    """A run's results with each item's fields expanded into ``f.<name>`` columns."""
    df = store.results_frame(run_id)
    return expand_fields(df)


def row_extras(df: pd.DataFrame) -> pd.Series:
    """Each row's `extra` as a dict (empty when missing or not a JSON object)."""
    if "extra" not in df:
        return pd.Series([{}] * len(df), index=df.index, dtype=object)
    return df["extra"].map(lambda s: decode_cell(s) or {}).map(lambda d: d if isinstance(d, dict) else {})


# Prefix of the unit of a row whose item has no cluster label: its item, apart from every label.
NO_CLUSTER_LABEL = "\x00item:"


def cluster_key(df: pd.DataFrame, cluster_field: str | None) -> np.ndarray:
    """The independent unit of each row: the suite's cluster field, else the item (also for a
    row whose item lacks the field), as strings."""
    items = df["item_id"].astype(str).to_numpy(dtype=object)
    if not (cluster_field and f"f.{cluster_field}" in df):
        return items
    col = df[f"f.{cluster_field}"]
    # `astype(str)` keeps a missing label missing (pandas' string dtype: NaN, which factorize
    # codes -1 and bincount refuses), so those rows are labelled by their item here
    labels = col.astype(str).to_numpy(dtype=object)
    missing = col.isna().to_numpy()
    if missing.any():
        labels[missing] = NO_CLUSTER_LABEL + items[missing].astype(str)
    return labels


def cluster_codes_of(df: pd.DataFrame, cluster_field: str | None) -> np.ndarray:
    """``pd.factorize(cluster_key(df, cluster_field), sort=False)[0]``: each row's unit as an
    integer, units numbered in order of first appearance. Units that are the items of a stored
    text column are encoded by Arrow (the same codes; no Python string per row)."""
    items = df["item_id"]
    if (not (cluster_field and f"f.{cluster_field}" in df)
            and isinstance(items.array, pd.arrays.ArrowStringArray) and not items.hasnans):
        return frame_codes.factorize(items)[0].copy()  # shared codes: the caller's own copy
    return np.asarray(pd.factorize(pd.Series(cluster_key(df, cluster_field), dtype=object), sort=False)[0])


@dataclass
class MetricContext:
    """What a producer sees: the rows, the run, the suite spec, grouping and configuration."""

    df: pd.DataFrame
    run: dict[str, Any]
    spec: dict[str, Any]
    by: list[str]
    bootstrap: BootstrapConfig
    store: Any = None
    profile: ResultProfile | None = None
    field_hint: frozenset[str] | None = None  # item field names, when deciding before loading rows
    _codes: np.ndarray | None = field(default=None, repr=False)
    artifacts: dict[str, Any] = field(default_factory=dict, repr=False)  # tables other reports reuse

    @property
    def task(self) -> str | None:
        return self.run.get("task") or self.spec.get("task")

    @property
    def cluster_field(self) -> str | None:
        cf = self.spec.get("cluster_field")
        return cf if isinstance(cf, str) else None

    def ok(self) -> pd.DataFrame:
        """Rows without an error (a shallow copy when no row has one: pandas' copy-on-write
        keeps `df` unchanged, and no column is copied; a filter copied the 1M-row frame per
        producer)."""
        if "error" not in self.df:
            return self.df
        err = self.df["error"].notna()
        if not err.any():
            return self.df.copy(deep=False)
        return self.df[~err]

    def clusters(self, sub: pd.DataFrame) -> np.ndarray:
        """Cluster labels of ``sub`` (rows of ``df``): integer codes of :func:`cluster_key`,
        computed once for the whole frame (the same partition, far cheaper per group)."""
        if not self.df.index.is_unique:
            return cluster_key(sub, self.cluster_field)
        if self._codes is None or len(self._codes) != len(self.df):
            self._codes = cluster_codes_of(self.df, self.cluster_field)
        if sub.index is self.df.index or (len(sub) == len(self.df) and sub.index.equals(self.df.index)):
            return self._codes.copy()  # every row, in order (ctx.ok() without an error row)
        pos = self.df.index.get_indexer(sub.index)
        if (pos < 0).any():  # a frame derived from df with new rows: label it directly
            return cluster_key(sub, self.cluster_field)
        return self._codes[pos]

    def prof(self) -> ResultProfile:
        """What the rows hold (from SQL for a stored run, else from the frame), computed once."""
        if self.profile is None:
            self.profile = profile_frame(self.df)
        return self.profile

    def has(self, column: str) -> bool:
        """True when some row has a value in ``column`` (``f.<name>`` for item fields)."""
        if column.startswith("f."):
            if self.field_hint is not None:
                return column[2:] in self.field_hint
            return column in self.df and bool(self.df[column].notna().any())
        return self.prof().has(column)

    def extra_has(self, key: str) -> bool:
        """True when some row's `extra` may hold the top-level key ``key`` (a cheap gate)."""
        return key in self.prof().extra_keys


def profile_frame(df: pd.DataFrame) -> ResultProfile:
    """:class:`ResultProfile` of a frame built in memory (tests, the live dashboard)."""
    nonnull = {c: int(df[c].notna().sum()) for c in df.columns if c in RESULT_COLUMNS}
    keys: set[str] = set()
    if "extra" in df and nonnull.get("extra"):
        ex = df["extra"].dropna()
        text = ex if ex.map(lambda v: isinstance(v, str)).all() else ex.map(lambda v: json.dumps(v, default=str))
        for k in EXTRA_KEYS:
            if text.str.contains(f'"{k}"', regex=False).any():
                keys.add(k)
    derived = bool("variant" in df and df["variant"].astype(str).str.contains("@", regex=False).any())
    return ResultProfile(len(df), nonnull, frozenset(keys), derived)


# -- interval helpers ------------------------------------------------------------------------
def _floats(values: Any) -> np.ndarray:
    """Values as floats, anything not numeric as NaN (a float array as it is: callers read it)."""
    arr = np.asarray(values)
    if arr.dtype.kind in "fiub":
        return arr.astype(float, copy=False)
    return pd.to_numeric(pd.Series(np.asarray(values, dtype=object)), errors="coerce").to_numpy(float)


def rate(name: str, values: Any, clusters: np.ndarray, group: dict[str, Any] | None = None,
         producer: str = "") -> Metric | None:
    """A share or mean of per-item scores in [0, 1], with the clustered accuracy interval."""
    v = _floats(values)
    keep = np.isfinite(v)
    if not keep.any():
        return None
    every = bool(keep.all())  # no copy of the columns when every value is finite
    iv = accuracy_ci(v if every else v[keep], np.asarray(clusters)[slice(None) if every else keep])
    lo, hi = (None, None) if math.isnan(iv.lo) else (iv.lo, iv.hi)
    return Metric(name, iv.mean, lo, hi, iv.method, iv.n, iv.n_clusters, dict(group or {}), producer)


def mean_ci(values: Any, clusters: Any, level: float = 0.95) -> tuple[float, float, float, int, int, str]:
    """Mean of per-item values with a cluster-robust (CR1) t interval over clusters.

    Not clipped (differences and scores may leave [0, 1]). Returns
    ``(mean, lo, hi, n, n_clusters, method)``; with one cluster the interval is NaN.
    """
    v = _floats(values)
    g = np.asarray(clusters)
    keep = np.isfinite(v)
    v, g = (v, g) if keep.all() else (v[keep], g[keep])  # all finite (usual): no copies
    n = len(v)
    if n == 0:
        return (math.nan, math.nan, math.nan, 0, 0, "empty")
    codes = cluster_codes(g)
    y = np.bincount(codes, weights=v)
    m = np.bincount(codes).astype(float)
    G = len(y)
    p = float(y.sum() / m.sum())
    if G < 2:
        return (p, math.nan, math.nan, n, G, "cluster-t")
    var = G / (G - 1) * float(np.sum((y - p * m) ** 2)) / float(m.sum()) ** 2
    from scipy import special  # loaded by the one metric that needs it, not by every importer

    t = float(special.stdtrit(G - 1, 0.5 + level / 2))
    half = t * math.sqrt(var)
    return (p, p - half, p + half, n, G, "cluster-t")


# The range each mean-type metric can take; its interval is clipped to it (a probability's
# mean cannot leave [0, 1]).
SUPPORT: dict[str, tuple[float, float]] = {"brier": (0.0, 2.0), "yes_bias": (-1.0, 1.0)}


def mean_metric(name: str, values: Any, clusters: Any, group: dict[str, Any] | None = None,
                producer: str = "") -> Metric | None:
    """:func:`mean_ci` as a Metric (None when there is no finite value), the interval clipped
    to the metric's range (:data:`SUPPORT`, default [0, 1])."""
    p, lo, hi, n, G, how = mean_ci(values, clusters)
    if n == 0:
        return None
    a, b = SUPPORT.get(name, (0.0, 1.0))
    lo, hi = max(a, lo), min(b, hi)
    return Metric(name, p, None if math.isnan(lo) else lo, None if math.isnan(hi) else hi, how, n, G,
                  dict(group or {}), producer)


@dataclass(frozen=True)
class Ratio:
    """A statistic ``sum(num) / sum(den)`` over the resampled rows (a mean: ``den`` all ones;
    a rate; a ratio of per-cluster sums). :func:`cluster_bootstrap_stat` bootstraps it with one
    matrix of resample weights instead of a call per resample."""

    num: Any
    den: Any = None  # None: ones (the mean of ``num``)


def cluster_bootstrap_stat(
    stat: Callable[[np.ndarray], float] | Ratio, n_rows: int, clusters: Any, cfg: BootstrapConfig
) -> tuple[float, float, float, int]:
    """Percentile interval of a statistic of the rows, resampling whole clusters.

    ``stat`` is a :class:`Ratio` (means, rates, ratios of per-cluster sums: vectorised, one
    weight matrix per chunk of resamples) or any function of an integer index array into the
    rows (clusters drawn twice repeat their rows; one call per resample). Both draw the same
    resamples for the same seed (:func:`intervals.resample_index`), so they give the same
    interval. Returns ``(estimate, lo, hi, n_clusters)``; NaN replicates are dropped.
    """
    codes, _ = pd.factorize(pd.Series(np.asarray(clusters, dtype=object), dtype="object"), sort=False)
    G = int(codes.max()) + 1 if len(codes) else 0
    if isinstance(stat, Ratio):
        num = _floats(stat.num)
        den = np.ones(len(num)) if stat.den is None else _floats(stat.den)
        with np.errstate(invalid="ignore", divide="ignore"):
            est = float(num.sum() / den.sum()) if len(num) else math.nan
        if G < 2:
            return est, math.nan, math.nan, G
        reps = bootstrap_ratio(np.bincount(codes, weights=num, minlength=G),
                               np.bincount(codes, weights=den, minlength=G), cfg.resamples, cfg.seed)
    else:
        est = float(stat(np.arange(n_rows)))
        if G < 2:
            return est, math.nan, math.nan, G
        order = np.argsort(codes, kind="stable")
        groups = np.split(order, np.flatnonzero(np.diff(codes[order])) + 1)
        reps = np.empty(cfg.resamples)
        done = 0
        for idx in resample_index(G, cfg.resamples, cfg.seed):
            for pick in idx:
                reps[done] = stat(np.concatenate([groups[i] for i in pick]))
                done += 1
    reps = reps[np.isfinite(reps)]
    if not len(reps):
        return est, math.nan, math.nan, G
    a = (1 - cfg.level) / 2
    lo, hi = np.quantile(reps, [a, 1 - a])
    return est, float(lo), float(hi), G


def cluster_bootstrap_mean(values: Any, clusters: Any, cfg: BootstrapConfig) -> tuple[float, float, float, int]:
    """:func:`cluster_bootstrap_stat` of the mean of per-row values (vectorised).
    Returns ``(mean, lo, hi, n_clusters)``."""
    v = _floats(values)
    return cluster_bootstrap_stat(Ratio(v), len(v), clusters, cfg)


# -- the producer registry -------------------------------------------------------------------
Producer = Callable[[MetricContext], list[Metric]]


Needs = Callable[[MetricContext], bool]


@dataclass
class _Registered:
    name: str
    fn: Producer
    every_task: bool  # run for every task; otherwise only for tasks listing it (Task.metric_producers)
    needs: Needs | None = None  # a cheap test that the rows hold what the producer reads
    whole_items: bool = False  # reads the items' raw `fields` JSON and text (row producers)
    reads: tuple[str, ...] | None = None  # result columns read (None: any); see queries.BASE_COLUMNS
    # item fields of PIPELINE_FIELDS read besides the grouping and cluster fields (None: any)
    fields: tuple[str, ...] | None = None

    def active(self, ctx: MetricContext) -> bool:
        if not self.every_task and self.name not in task_producers(ctx.task):
            return False
        return self.needs is None or bool(self.needs(ctx))


PRODUCERS: list[_Registered] = []


def register_producer(name: str, *, every_task: bool = False, needs: Needs | None = None,
                      whole_items: bool = False, reads: Iterable[str] | None = None,
                      fields: Iterable[str] | None = None) -> Callable[[Producer], Producer]:
    """Decorator: add a producer, in registration order.

    A producer runs for every task with ``every_task``; otherwise only for the tasks that
    list it in their ``metric_producers`` (the task registry is the single source: no task
    names here). ``needs(ctx)`` is a cheap test on what the rows hold (``ctx.has(column)``,
    ``ctx.extra_has(key)``); a producer whose test fails is skipped, so a big run never pays
    for analyses it has no data for. It must never be stricter than the producer itself.
    ``reads`` names the result columns it reads beyond the base ones (None: it may read any);
    a stored run's frame carries only the columns its active producers read. ``fields`` names
    the item fields of :data:`PIPELINE_FIELDS` it reads besides the grouping and cluster fields
    (None: any of them); a stored run's frame extracts only the fields its active producers read.
    """

    def deco(fn: Producer) -> Producer:
        PRODUCERS.append(_Registered(name, fn, every_task, needs, whole_items,
                                     tuple(reads) if reads is not None else None,
                                     tuple(fields) if fields is not None else None))
        return fn

    return deco


RowProducer = Callable[[pd.DataFrame, dict[str, Any], dict[str, Any]], list[dict[str, Any]]]


def rows_to_metrics(rows: Iterable[Mapping[str, Any]], producer: str = "") -> list[Metric]:
    """Metric rows (``metric_row`` dicts) as Metrics."""
    out = []
    for r in rows:
        ci = r.get("ci95")
        lo, hi = (ci[0], ci[1]) if ci else (None, None)
        out.append(Metric(str(r["metric"]), r.get("value"), lo, hi,
                          r.get("interval_method") or ("given by producer" if ci else None),
                          r.get("n"), r.get("n_clusters"), dict(r.get("group") or {}), producer))
    return out


def register_row_producer(name: str, fn: RowProducer, *, every_task: bool = False,
                          needs: Needs | None = None, whole_items: bool = True,
                          reads: Iterable[str] | None = None, fields: Iterable[str] | None = None) -> None:
    """Adapter: plug in ``fn(df, run, spec) -> list[metric_row dicts]`` as a producer.

    With ``whole_items`` the rows carry each item's raw `fields` JSON and text; ``reads`` and
    ``fields`` as for :func:`register_producer` (default: any column, any field).
    """

    def adapted(ctx: MetricContext) -> list[Metric]:
        return rows_to_metrics(fn(ctx.df, ctx.run, ctx.spec), name)

    register_producer(name, every_task=every_task, needs=needs, whole_items=whole_items, reads=reads,
                      fields=fields)(adapted)


# -- the pipeline ----------------------------------------------------------------------------
def compute_metrics(
    df: pd.DataFrame,
    run: Mapping[str, Any],
    spec: Mapping[str, Any] | None = None,
    by: Sequence[str] | None = None,
    *,
    store: Any = None,
    bootstrap: BootstrapConfig = BOOTSTRAP,
    producers: Sequence[str] | None = None,
    profile: ResultProfile | None = None,
) -> RunMetrics:
    """Every registered metric of a run from its rows (``results_with_fields`` shape).

    ``by`` defaults to the suite's ``group_by``; ``producers`` restricts which producers run
    (the live dashboard skips the expensive ones); ``profile`` is what the rows hold when the
    caller already knows it (:func:`run_metrics` asks the store).
    """
    spec = dict(spec or {})
    run = dict(run)
    by_l = list(by) if by else [g for g in (spec.get("group_by") or []) if isinstance(g, str)]
    ctx = MetricContext(df, run, spec, by_l, bootstrap, store, profile)
    cf = ctx.cluster_field
    rm = RunMetrics(str(run.get("run_id")), str(run.get("model")), run.get("suite_name"), ctx.task,
                    f"suite field {cf!r}" if cf else "item (prompt variants and permutations together)",
                    bootstrap)
    if df.empty:
        return rm
    for col in ("extra", "error", "correct", "prediction", "gold"):
        if col not in df:  # frames built by hand (tests, imports) may lack a stored column
            df = df.assign(**{col: None})
            ctx.df = df
    for p in PRODUCERS:
        if producers is not None and p.name not in producers:
            continue
        if not p.active(ctx):
            continue
        rm.metrics.extend(p.fn(ctx))
    rm.artifacts = ctx.artifacts
    n_err = int(df["error"].notna().sum()) if "error" in df else 0
    return finish_metrics(rm, n_err, len(df))


def finish_metrics(rm: RunMetrics, n_err: int, n: int) -> RunMetrics:
    """The error count last and the published metric first (both ways of computing a run)."""
    rm.metrics.append(Metric("errors", float(n_err), n=n, producer="errors"))
    # The published metric first: a WorldSense run leads with the authors' accuracy, and its
    # plain per-trial share is renamed so the two cannot be confused.
    if any(m.name.startswith("worldsense_") for m in rm.metrics):
        for m in rm.metrics:
            if m.name == "accuracy":
                m.name = "item_accuracy"
        rm.metrics.sort(key=lambda m: 0 if m.name.startswith("worldsense_") else 1)
    return rm


# Item fields the pipeline's own producers read (besides the suite's group_by, cluster field
# and the report's --by); row producers get the whole item instead.
PIPELINE_FIELDS = ("human_q1", "category", "tuple_ID", "expectedresp", "problemname", "problemsize",
                   "options", "clusters")

# Runs whose producers all have a SQL form (analysis.sqlmetrics) skip the per-row frame; the
# tests turn it off to compare both ways of computing the same run.
SQL_METRICS = True
_CACHE: dict[tuple[Any, ...], RunMetrics] = {}
_CACHE_MAX = 32


def stored_frame(store: Any, run: Mapping[str, Any], spec: Mapping[str, Any], by: Sequence[str],
                 profile: ResultProfile, producers: Sequence[str] | None = None) -> pd.DataFrame:
    """The rows :func:`compute_metrics` needs for a stored run, and no more.

    Only the item fields the active producers read are extracted (in SQL); the items' raw
    JSON and text are added only when a row producer that reads whole items is active.
    """
    cf = spec.get("cluster_field")
    grouping = [*by, *(g for g in spec.get("group_by") or [] if isinstance(g, str)),
                *([cf] if isinstance(cf, str) else [])]
    names = [*grouping, *PIPELINE_FIELDS]
    # Before the rows are read, take the wanted fields some item of the suite has (a superset
    # of the frame's columns); compute_metrics tests the gates again on the rows themselves.
    # Assuming every wanted field instead read every item's JSON and text for the human-choice
    # fit of a run without human answers (1M-row yes/no run: ~1.5 s and ~0.3 GB).
    hint = frozenset(names)
    if run.get("suite_id") and hasattr(store, "execute"):
        from .queries import field_names

        hint = hint & frozenset(field_names(store, str(run["suite_id"])))
    probe = MetricContext(pd.DataFrame(), dict(run), dict(spec), list(by), BOOTSTRAP, store, profile, hint)
    active = [p for p in PRODUCERS if (producers is None or p.name in producers) and p.active(probe)]
    whole = any(p.whole_items for p in active)
    columns: set[str] | None = set()
    for p in active:
        if p.reads is None:
            columns = None
            break
        columns |= set(p.reads)  # type: ignore[operator]
    # only the pipeline fields the active producers read (a yes/no run's `category` was ~0.5 s
    # of a 1M-row report: extracted, decoded and attached to every row, read by none)
    if all(p.fields is not None for p in active):
        read = {f for p in active for f in p.fields or ()}
        names = [*grouping, *(f for f in PIPELINE_FIELDS if f in read)]
    return metric_frame(store, dict(run), names, columns=columns,
                        raw_fields=whole, item_text=whole)


def run_metrics(store: Any, run: Mapping[str, Any], by: Sequence[str] | None = None,
                *, bootstrap: BootstrapConfig = BOOTSTRAP, producers: Sequence[str] | None = None,
                cache: bool = True, items: Iterable[str] | None = None) -> RunMetrics:
    """:func:`compute_metrics` for a stored run, reading only what its producers need.

    Results are cached per (database, run, rows fingerprint, grouping, configuration): in
    memory, and for a full computation (``producers`` None) in the database's sidecar cache
    (`store/metrics_cache.py`, `<db>.metrics.sqlite`), so another process (the next
    `llmscope report`, the TUI, the runs list) reads them instead of recomputing. The
    DuckDB file itself is never written here: a read-only store stays read-only. Any added,
    replaced or deleted row changes the fingerprint, so a stale entry is never read.

    ``items``: read the run on these item ids only (every row of each: all its prompt
    variants and units), as a study or `compare` reads a run that holds more items than the
    comparison (kept in memory only: the sidecar cache holds whole runs).
    """
    rid = str(run["run_id"])
    spec = store.suite_spec(run["suite_id"]) if run.get("suite_id") else {}
    by_l = list(by) if by else [g for g in (spec.get("group_by") or []) if isinstance(g, str)]
    sig = rows_signature(store, rid)
    if items is not None:
        wanted = frozenset(str(i) for i in items)
        key_s = (str(getattr(store, "path", id(store))), rid, sig, tuple(by_l), bootstrap,
                 tuple(producers) if producers is not None else None, wanted,
                 json.dumps(dict(run), sort_keys=True, default=str))
        if cache and key_s in _CACHE:
            return _CACHE[key_s]
        profile = result_profile(store, rid)
        df = stored_frame(store, run, spec, by_l, profile, producers)
        df = df[df["item_id"].astype(str).isin(wanted)].reset_index(drop=True)
        sub = compute_metrics(df, run, spec, by_l, store=store, bootstrap=bootstrap, producers=producers,
                             profile=profile)
        if cache:
            if len(_CACHE) >= _CACHE_MAX:
                _CACHE.pop(next(iter(_CACHE)))
            _CACHE[key_s] = sub
        return sub
    key = (str(getattr(store, "path", id(store))), rid, sig, tuple(by_l), bootstrap,
           tuple(producers) if producers is not None else None, json.dumps(dict(run), sort_keys=True, default=str))
    if cache and key in _CACHE:
        return _CACHE[key]
    side = getattr(store, "metrics_cache", None) if cache else None
    stored = side is not None
    persist = stored and producers is None
    config = _cache_config(run, by_l, bootstrap) if stored else ""
    fp = str(sig[0]) if sig else ""
    rm = _load_cached(side, rid, config, fp, bootstrap) if stored else None
    if rm is not None and producers is not None:
        # A full computation of these rows is stored: the producers asked for are a subset
        # of it (the dashboard and compare of a finished run read the report's numbers).
        keep = {*producers, "errors"}
        rm = RunMetrics(rm.run_id, rm.model, rm.suite, rm.task, rm.cluster_unit, rm.bootstrap,
                        [m for m in rm.metrics if m.producer in keep], rm.artifacts)
    if rm is None:
        profile = result_profile(store, rid)
        if SQL_METRICS:
            from .sqlmetrics import sql_run_metrics

            rm = sql_run_metrics(store, run, spec, by_l, bootstrap, producers, profile)
        if rm is None:
            df = stored_frame(store, run, spec, by_l, profile, producers)
            rm = compute_metrics(df, run, spec, by_l, store=store, bootstrap=bootstrap, producers=producers,
                                 profile=profile)
        if persist:
            _save_cached(side, rm, config, fp)
    if cache:
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = rm
    return rm


# -- the persistent cache ----------------------------------------------------------------------
CACHE_VERSION = 1  # bump when a producer's numbers change, so old entries are not read
# The metric a run is summed up by (runs list, first in the report): the published metric first.
HEADLINE = ("worldsense_accuracy", "sg_score", "accuracy", "token_f1", "probeval_kl", "flagged_rate")
# Artifacts kept in memory only: the per-tuple WorldSense table (40k rows a run) is needed only
# when two runs share a model and prompting; the report then rebuilds it from the rows.
UNCACHED_ARTIFACTS = frozenset({"worldsense_tuples"})
def headline(rm: RunMetrics) -> Metric | None:
    """The run's headline metric (:data:`HEADLINE` order, overall group), or None."""
    for name in HEADLINE:
        m = rm.get(name)
        if m is not None and m.value is not None:
            return m
    return None


def _cache_config(run: Mapping[str, Any], by: Sequence[str], bootstrap: BootstrapConfig) -> str:
    """What besides the rows decides the numbers: code version, run identity, grouping, bootstrap."""
    import hashlib

    ident = {k: run.get(k) for k in ("run_id", "model", "task", "suite_name", "suite_id", "backend", "options",
                                     "meta")}
    text = json.dumps([CACHE_VERSION, _code_fingerprint(), ident, list(by), asdict(bootstrap),
                       [p.name for p in PRODUCERS], task_producers(run.get("task"))], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


_CODE_FP: list[str] = []


def _code_fingerprint() -> str:
    """A hash of the metrics code (every module of this package): a stored entry computed by
    other code is never read, so a fixed producer cannot leave its old numbers behind."""
    if not _CODE_FP:
        import hashlib
        from pathlib import Path

        h = hashlib.sha256()
        here = Path(__file__).parent
        for f in sorted(here.rglob("*.py")):  # the producers package too
            h.update(f.relative_to(here).as_posix().encode())
            h.update(f.read_bytes())
        _CODE_FP.append(h.hexdigest()[:16])
    return _CODE_FP[0]


def _load_cached(side: Any, rid: str, config: str, fp: str, bootstrap: BootstrapConfig) -> RunMetrics | None:
    """The sidecar's entry for exactly these rows and this configuration, or None."""
    got = side.get(rid, config, fp)
    if got is None:
        return None
    p, frames = got
    r = p["run"]
    rm = RunMetrics(r["run_id"], r["model"], r.get("suite"), r.get("task"), r["cluster_unit"], bootstrap,
                    [Metric(**m) for m in p["metrics"]])
    rm.artifacts = dict(p.get("artifacts") or {})
    for name in p.get("frames") or []:
        rm.artifacts[str(name)] = _frame_from_bytes(frames[name])
    return rm


def _frame_to_bytes(df: pd.DataFrame) -> bytes:
    """A frame as Arrow IPC (zstd): reads back ~50x faster than the same 40k WorldSense
    tuples as JSON records."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    table = pa.Table.from_pandas(df, preserve_index=False)
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as w:
        w.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def _frame_from_bytes(data: bytes) -> pd.DataFrame:
    import pyarrow as pa

    with pa.ipc.open_stream(pa.py_buffer(data)) as r:
        out: pd.DataFrame = r.read_all().to_pandas()
    return out


def _save_cached(side: Any, rm: RunMetrics, config: str, fp: str) -> None:
    """Store a full computation in the sidecar (skipped, never waited for, when it is busy)."""
    h = headline(rm)
    scalars = {k: v for k, v in rm.artifacts.items() if not isinstance(v, pd.DataFrame)}
    frames = {k: _frame_to_bytes(v) for k, v in rm.artifacts.items()
              if isinstance(v, pd.DataFrame) and k not in UNCACHED_ARTIFACTS}
    payload = {
        "version": CACHE_VERSION, "config": config, "fingerprint": fp,
        "headline": None if h is None else {"name": h.name, "value": h.value, "lo": h.lo, "hi": h.hi},
        "run": {"run_id": rm.run_id, "model": rm.model, "suite": rm.suite, "task": rm.task,
                "cluster_unit": rm.cluster_unit},
        "metrics": [asdict(m) for m in rm.metrics], "artifacts": scalars, "frames": sorted(frames),
    }
    side.put(rm.run_id, config, fp, payload, frames)


# -- the producers, in report order ---------------------------------------------------------
def _register_producers() -> None:
    """Every family's producers, once, in report order (the order of :data:`PRODUCERS`)."""
    for family in (accuracy, position, yesno, calibration, generation, commonsense, probeval, worldsense,
                   feature_rows):
        family.register()
    # Last: analysis/human.py registers its definitions and producers on import, and imports this
    # module; importing it here, after everything else, gives one order whichever is imported first.
    from . import human  # noqa: F401


# After everything the families use is defined (they import it from here).
from .producers import (  # noqa: E402
    accuracy,
    calibration,
    commonsense,
    feature_rows,
    generation,
    position,
    probeval,
    worldsense,
    yesno,
)

_register_producers()
