"""One metrics pipeline: a run's stored per-item rows (plus its suite spec) → :class:`RunMetrics`.

Every number `llmscope report` (text, ``--json``, ``--explain``), `llmscope compare` and the TUI
dashboard and compare screen show comes from :func:`compute_metrics`. Nothing else computes a
metric.

* Each metric is a :class:`Metric` (analysis/metric_values.py): name, one-line definition,
  value, 95% interval, interval method, n (trials) and n_clusters (independent units), per
  group; its interval comes from analysis/metric_stats.py; a run's full computation is kept
  in the database's sidecar cache (analysis/metric_cache.py).
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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
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
from .metric_cache import cache_config, load_cached, save_cached
from .metric_values import Metric, RunMetrics
from .queries import (
    EXTRA_KEYS,
    RESULT_COLUMNS,
    ResultProfile,
    metric_frame,
    result_profile,
    rows_signature,
)

__all__ = [
    "BootstrapConfig",
    "BOOTSTRAP",
    "MetricDef",
    "METRICS",
    "MetricContext",
    "PRODUCERS",
    "register_producer",
    "register_row_producer",
    "compute_metrics",
    "run_metrics",
    "results_with_fields",
    "cluster_key",
    "metrics_markdown",
    "definitions",
    "define_metric",
    "RATE_CI",
    "MEAN_CI",
    "BOOT_CI",
    "display",
    "TIE_RULE",
]


# -- inputs ----------------------------------------------------------------------------------
def results_with_fields(store: Any, run_id: str) -> pd.DataFrame:
    """A run's results with each item's fields expanded into ``f.<name>`` columns."""
    df = store.results_frame(run_id)
    return expand_fields(df)


def row_extras(df: pd.DataFrame) -> pd.Series:
    """Each row's `extra` as a dict (empty when missing or not a JSON object)."""
    if "extra" not in df:
        return pd.Series([{}] * len(df), index=df.index, dtype=object)
    return (
        df["extra"]
        .map(lambda s: decode_cell(s) or {})
        .map(lambda d: d if isinstance(d, dict) else {})
    )


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
    if (
        not (cluster_field and f"f.{cluster_field}" in df)
        and isinstance(items.array, pd.arrays.ArrowStringArray)
        and not items.hasnans
    ):
        return frame_codes.factorize(items)[0].copy()  # shared codes: the caller's own copy
    return np.asarray(
        pd.factorize(pd.Series(cluster_key(df, cluster_field), dtype=object), sort=False)[0]
    )


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
    artifacts: dict[str, Any] = field(
        default_factory=dict, repr=False
    )  # tables other reports reuse

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
        if sub.index is self.df.index or (
            len(sub) == len(self.df) and sub.index.equals(self.df.index)
        ):
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
        text = (
            ex
            if ex.map(lambda v: isinstance(v, str)).all()
            else ex.map(lambda v: json.dumps(v, default=str))
        )
        for k in EXTRA_KEYS:
            if text.str.contains(f'"{k}"', regex=False).any():
                keys.add(k)
    derived = bool(
        "variant" in df and df["variant"].astype(str).str.contains("@", regex=False).any()
    )
    return ResultProfile(len(df), nonnull, frozenset(keys), derived)


# -- the producer registry -------------------------------------------------------------------
Producer = Callable[[MetricContext], list[Metric]]


Needs = Callable[[MetricContext], bool]


@dataclass
class _Registered:
    name: str
    fn: Producer
    every_task: (
        bool  # run for every task; otherwise only for tasks listing it (Task.metric_producers)
    )
    needs: Needs | None = None  # a cheap test that the rows hold what the producer reads
    whole_items: bool = False  # reads the items' raw `fields` JSON and text (row producers)
    reads: tuple[str, ...] | None = (
        None  # result columns read (None: any); see queries.BASE_COLUMNS
    )
    # item fields of PIPELINE_FIELDS read besides the grouping and cluster fields (None: any)
    fields: tuple[str, ...] | None = None

    def active(self, ctx: MetricContext) -> bool:
        if not self.every_task and self.name not in task_producers(ctx.task):
            return False
        return self.needs is None or bool(self.needs(ctx))


PRODUCERS: list[_Registered] = []


def register_producer(
    name: str,
    *,
    every_task: bool = False,
    needs: Needs | None = None,
    whole_items: bool = False,
    reads: Iterable[str] | None = None,
    fields: Iterable[str] | None = None,
) -> Callable[[Producer], Producer]:
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
        PRODUCERS.append(
            _Registered(
                name,
                fn,
                every_task,
                needs,
                whole_items,
                tuple(reads) if reads is not None else None,
                tuple(fields) if fields is not None else None,
            )
        )
        return fn

    return deco


RowProducer = Callable[[pd.DataFrame, dict[str, Any], dict[str, Any]], list[dict[str, Any]]]


def rows_to_metrics(rows: Iterable[Mapping[str, Any]], producer: str = "") -> list[Metric]:
    """Metric rows (``metric_row`` dicts) as Metrics."""
    out = []
    for r in rows:
        ci = r.get("ci95")
        lo, hi = (ci[0], ci[1]) if ci else (None, None)
        out.append(
            Metric(
                str(r["metric"]),
                r.get("value"),
                lo,
                hi,
                r.get("interval_method") or ("given by producer" if ci else None),
                r.get("n"),
                r.get("n_clusters"),
                dict(r.get("group") or {}),
                producer,
            )
        )
    return out


def register_row_producer(
    name: str,
    fn: RowProducer,
    *,
    every_task: bool = False,
    needs: Needs | None = None,
    whole_items: bool = True,
    reads: Iterable[str] | None = None,
    fields: Iterable[str] | None = None,
) -> None:
    """Adapter: plug in ``fn(df, run, spec) -> list[metric_row dicts]`` as a producer.

    With ``whole_items`` the rows carry each item's raw `fields` JSON and text; ``reads`` and
    ``fields`` as for :func:`register_producer` (default: any column, any field).
    """

    def adapted(ctx: MetricContext) -> list[Metric]:
        return rows_to_metrics(fn(ctx.df, ctx.run, ctx.spec), name)

    register_producer(
        name,
        every_task=every_task,
        needs=needs,
        whole_items=whole_items,
        reads=reads,
        fields=fields,
    )(adapted)


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
    rm = RunMetrics(
        str(run.get("run_id")),
        str(run.get("model")),
        run.get("suite_name"),
        ctx.task,
        f"suite field {cf!r}" if cf else "item (prompt variants and permutations together)",
        bootstrap,
    )
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
PIPELINE_FIELDS = (
    "human_q1",
    "category",
    "tuple_ID",
    "expectedresp",
    "problemname",
    "problemsize",
    "options",
    "clusters",
)

# Runs whose producers all have a SQL form (analysis.sqlmetrics) skip the per-row frame; the
# tests turn it off to compare both ways of computing the same run.
SQL_METRICS = True
_CACHE: dict[tuple[Any, ...], RunMetrics] = {}
_CACHE_MAX = 32


def stored_frame(
    store: Any,
    run: Mapping[str, Any],
    spec: Mapping[str, Any],
    by: Sequence[str],
    profile: ResultProfile,
    producers: Sequence[str] | None = None,
) -> pd.DataFrame:
    """The rows :func:`compute_metrics` needs for a stored run, and no more.

    Only the item fields the active producers read are extracted (in SQL); the items' raw
    JSON and text are added only when a row producer that reads whole items is active.
    """
    cf = spec.get("cluster_field")
    grouping = [
        *by,
        *(g for g in spec.get("group_by") or [] if isinstance(g, str)),
        *([cf] if isinstance(cf, str) else []),
    ]
    names = [*grouping, *PIPELINE_FIELDS]
    # Before the rows are read, take the wanted fields some item of the suite has (a superset
    # of the frame's columns); compute_metrics tests the gates again on the rows themselves.
    # Assuming every wanted field instead read every item's JSON and text for the human-choice
    # fit of a run without human answers (1M-row yes/no run: ~1.5 s and ~0.3 GB).
    hint = frozenset(names)
    if run.get("suite_id") and hasattr(store, "execute"):
        from .queries import field_names

        hint = hint & frozenset(field_names(store, str(run["suite_id"])))
    probe = MetricContext(
        pd.DataFrame(), dict(run), dict(spec), list(by), BOOTSTRAP, store, profile, hint
    )
    active = [
        p for p in PRODUCERS if (producers is None or p.name in producers) and p.active(probe)
    ]
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
    return metric_frame(store, dict(run), names, columns=columns, raw_fields=whole, item_text=whole)


def run_metrics(
    store: Any,
    run: Mapping[str, Any],
    by: Sequence[str] | None = None,
    *,
    bootstrap: BootstrapConfig = BOOTSTRAP,
    producers: Sequence[str] | None = None,
    cache: bool = True,
    items: Iterable[str] | None = None,
) -> RunMetrics:
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

    def from_rows(wanted: frozenset[str] | None = None, profile: Any = None) -> RunMetrics:
        profile = result_profile(store, rid) if profile is None else profile
        df = stored_frame(store, run, spec, by_l, profile, producers)
        if wanted is not None:
            df = df[df["item_id"].astype(str).isin(wanted)].reset_index(drop=True)
        return compute_metrics(
            df,
            run,
            spec,
            by_l,
            store=store,
            bootstrap=bootstrap,
            producers=producers,
            profile=profile,
        )

    wanted = None if items is None else frozenset(str(i) for i in items)
    key = (
        str(getattr(store, "path", id(store))),
        rid,
        sig,
        tuple(by_l),
        bootstrap,
        tuple(producers) if producers is not None else None,
        *(() if wanted is None else (wanted,)),
        json.dumps(dict(run), sort_keys=True, default=str),
    )
    if cache and key in _CACHE:
        return _CACHE[key]
    if wanted is not None:  # a subset of the run's items: kept in memory only
        sub = from_rows(wanted)
        if cache:
            _remember(key, sub)
        return sub
    side = getattr(store, "metrics_cache", None) if cache else None
    stored = side is not None
    persist = stored and producers is None
    config = cache_config(run, by_l, bootstrap, [p.name for p in PRODUCERS]) if stored else ""
    fp = str(sig[0]) if sig else ""
    rm = load_cached(side, rid, config, fp, bootstrap) if stored else None
    if rm is not None and producers is not None:
        # A full computation of these rows is stored: the producers asked for are a subset
        # of it (the dashboard and compare of a finished run read the report's numbers).
        keep = {*producers, "errors"}
        rm = RunMetrics(
            rm.run_id,
            rm.model,
            rm.suite,
            rm.task,
            rm.cluster_unit,
            rm.bootstrap,
            [m for m in rm.metrics if m.producer in keep],
            rm.artifacts,
        )
    if rm is None:
        profile = result_profile(store, rid)
        if SQL_METRICS:
            from .sqlmetrics import sql_run_metrics

            rm = sql_run_metrics(store, run, spec, by_l, bootstrap, producers, profile)
        if rm is None:
            rm = from_rows(profile=profile)
        if persist:
            save_cached(side, rm, config, fp)
    if cache:
        _remember(key, rm)
    return rm


def _remember(key: tuple[Any, ...], rm: RunMetrics) -> None:
    """Keep a computation in memory, the oldest of _CACHE_MAX entries making room."""
    if len(_CACHE) >= _CACHE_MAX:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[key] = rm


# -- the producers, in report order ---------------------------------------------------------
def _register_producers() -> None:
    """Every family's producers, once, in report order (the order of :data:`PRODUCERS`)."""
    for family in (
        accuracy,
        position,
        yesno,
        calibration,
        generation,
        commonsense,
        probeval,
        worldsense,
        feature_rows,
    ):
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
