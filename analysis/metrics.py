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
  use) plugs in through :func:`register_row_producer`.
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

# scipy.special, not scipy.stats: the same quantile functions (stats.t.ppf and stats.norm.ppf
# call these) without importing scipy.stats (most of `llmscope report`'s start-up time).
from scipy import special

from llmscope.data.registry import suite_producers
from llmscope.engine.tasks.registry import task_producers
from llmscope.store.db import decode_json, decode_json_many

from .calibration_bootstrap import EXACT_MAX_CLUSTERS, THIN_BIN_CLUSTERS
from .intervals import accuracy_ci, bootstrap_ratio, resample_index
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
    "paired_comparison",
    "PairedComparison",
    "metrics_markdown",
    "display",
    "TIE_RULE",
]


# -- configuration ---------------------------------------------------------------------------
@dataclass(frozen=True)
class BootstrapConfig:
    """Resamples, seed and level of every bootstrap interval the program prints."""

    resamples: int = 2000
    seed: int = 0
    level: float = 0.95

    def describe(self) -> str:
        return f"{self.level:.0%} intervals; cluster bootstrap {self.resamples} resamples, seed {self.seed}"


BOOTSTRAP = BootstrapConfig()

TIE_RULE = (
    "A tie is never credited: the prediction shown is the first listed of the tied answers "
    "(yes before no, options and sentences in item order), but an item counts as correct only "
    "when the gold answer scores strictly above every other answer, and as a yes prediction "
    "only when P(yes) > P(no). Exception, named so: the choice schemes `acc_norm` and "
    "`acc_mutual_info` follow lm-evaluation-harness's rule (`numpy.argmax(score) == gold`: a tie "
    "at the top credits the first listed option), so they equal lm-eval's numbers."
)


# -- definitions -----------------------------------------------------------------------------
@dataclass(frozen=True)
class MetricDef:
    """A metric's one name, its definition and how its interval is computed."""

    name: str
    definition: str
    interval: str
    tasks: str = "all"


_RATE_CI = "cluster-t (CR1 sandwich, t with G-1 df) over clusters; Wilson without clustering"
_MEAN_CI = "cluster-t (CR1 sandwich, t with G-1 df) on the per-item values, over clusters"
_BOOT_CI = "percentile cluster bootstrap (BOOTSTRAP resamples and seed), clusters resampled"
# ECE/MCE: the exact bootstrap costs clusters x resamples draws; above a stated size the bin
# totals are drawn instead, named in the interval method (analysis/calibration_bootstrap.py)
_CAL_BOOT_CI = (f"{_BOOT_CI}; above {EXACT_MAX_CLUSTERS:,} clusters each resample's bin totals are drawn "
                f"(clusters of bins with fewer than {THIN_BIN_CLUSTERS:,} clusters exactly, the others' sum "
                "from its normal distribution), interval method `cluster-bootstrap (normal bin totals)`; "
                "its ends agree with the exact bootstrap's within Monte Carlo error (docs/PERFORMANCE.md)")
# contamination and reference-based generation scores: one row per item, rows not clustered
_ITEM_T_CI = "Student t interval over result rows (sd ddof=1, n-1 df; rows not clustered)"

_DEFS: list[MetricDef] = [
    MetricDef("accuracy", "share of scored items whose prediction is correct (mean of per-item "
              "`correct`; generation: exact match of the first sample); per method for choice tasks",
              _RATE_CI),
    MetricDef("item_accuracy", "WorldSense runs only: the plain share of trials answered in the gold "
              "answer class, unweighted and not rebalanced; NOT the published metric (see "
              "worldsense_accuracy)", _RATE_CI, "constrained (WorldSense)"),
    MetricDef("expected_accuracy", "mean over items of the softmax probability (alpha) of the gold "
              "option under a scoring method", _MEAN_CI, "choice, constrained"),
    MetricDef("variant_acc_range", "max minus min of the per-variant accuracies", "none"),
    MetricDef("variant_acc_sd", "sample standard deviation (ddof=1) of the per-variant accuracies",
              "none"),
    MetricDef("chosen_rate", "share of items whose prediction is the option at this position "
              "(first / last listed)", _RATE_CI, "choice, constrained"),
    MetricDef("gold_rate", "share of items whose gold answer is the option at this position",
              "none", "choice, constrained"),
    MetricDef("mean_p_yes", "mean over items of P(yes) at the first answer position", _MEAN_CI, "yesno"),
    MetricDef("mean_p_no", "mean over items of P(no)", _MEAN_CI, "yesno"),
    MetricDef("mean_p_other", "mean over items of P(other) = 1 - P(yes) - P(no)", _MEAN_CI, "yesno"),
    MetricDef("pred_yes_rate", "share of items predicted yes (P(yes) > P(no); a tie is not yes)",
              _RATE_CI, "yesno"),
    MetricDef("gold_yes_rate", "share of items (with a yes/no gold) whose gold is yes", "none", "yesno"),
    MetricDef("yes_bias", "mean over items with a yes/no gold of 1[predicted yes] - 1[gold yes] "
              "(= pred_yes_rate - gold_yes_rate on those items; > 0 leans yes)", _MEAN_CI, "yesno"),
    MetricDef("off_format_rate", "share of items where P(other) > P(yes) + P(no)", _RATE_CI, "yesno"),
    MetricDef("ece", "expected calibration error: count-weighted mean over 10 equal-width bins "
              "[i/10, (i+1)/10) (last closed) of |accuracy - mean confidence|; confidence = the row's "
              "`confidence`, the probability of the predicted answer RENORMALISED over the listed "
              "answers (yes/no: P(pred) / (P(yes) + P(no)), mass on other tokens left out; choice: "
              "the softmax over the options; rating: the label probabilities renormalised)",
              _CAL_BOOT_CI, "yesno, choice, rating, constrained"),
    MetricDef("mce", "maximum calibration error: the largest |accuracy - mean confidence| over non-empty "
              "bins (the same renormalised confidence as `ece`)",
              _CAL_BOOT_CI, "yesno, choice, rating, constrained"),
    MetricDef("ece_raw", "ECE with confidence = the raw probability of the predicted answer, not "
              "renormalised (yes/no: P(pred), P(other) counted against it); the same bins; reported "
              "only where it differs from `ece`'s confidence (answers with probability mass outside "
              "them: yes/no, choice by labels)", _CAL_BOOT_CI, "yesno, choice (labels)"),
    MetricDef("mce_raw", "MCE with the raw confidence of `ece_raw`", _CAL_BOOT_CI, "yesno, choice (labels)"),
    MetricDef("human_distance", "per statement, not a run metric: |m-h| = |P(yes) / (P(yes) + P(no)) - "
              "human_q1|, the model's yes probability renormalised over yes/no (as `ece`'s confidence) "
              "against the share of people who agree; shown in the TUI item list and human panel "
              "(`analysis.yesno.human_distance`); missing where P(yes) + P(no) = 0", "none",
              "yesno (commonsense)"),
    MetricDef("bin_accuracy", "reliability diagram: accuracy of the scored items whose confidence "
              "falls in this bin (the 10 equal-width bins of `ece`; non-empty bins only; n = the bin's "
              "count)", "none", "yesno, choice, rating, constrained"),
    MetricDef("bin_confidence", "reliability diagram: mean confidence (`ece`'s renormalised "
              "confidence) of the items in this bin; |bin_accuracy - bin_confidence| weighted by n is `ece`",
              "none", "yesno, choice, rating, constrained"),
    MetricDef("brier", "multi-class Brier score: mean over items of sum_k (p_k - 1[k = gold])^2 over "
              "the listed answers (mass outside them is not renormalised; a gold not listed adds 1)",
              _MEAN_CI, "yesno, choice, rating, constrained"),
    MetricDef("brier_yes", "binary Brier score: mean over items of (P(yes) - 1[gold = yes])^2 "
              "(half the two-class `brier` when P(other) = 0)", _MEAN_CI, "yesno"),
    MetricDef("tie_rate", "share of scored items whose two best answers have exactly equal "
              "probability (ties are never credited, see the tie rule)", "none"),
    MetricDef("token_f1", "mean over items of SQuAD token F1 (max over golds) of the first sample, "
              "after the answer normalisation of Conventions (numbers)",
              _MEAN_CI, "generation"),
    MetricDef("em_majority", "mean over items of exact match of the majority normalised sample",
              _RATE_CI, "generation"),
    MetricDef("em_mean", "mean over items of the per-item mean exact match over samples", _MEAN_CI,
              "generation"),
    MetricDef("token_f1_mean", "mean over items of the per-item mean token F1 over samples", _MEAN_CI,
              "generation"),
    MetricDef("consensus", "share of statements whose model answer (q1) agrees with the human "
              "majority (Whiting & Watts 2024)", "Wilson over statements (no clustering)",
              "yesno (commonsense)"),
    MetricDef("awareness", "share of statements where the model's q2 (do most people agree?) "
              "matches the human majority", "Wilson over statements (no clustering)",
              "yesno (commonsense)"),
    MetricDef("commonsensicality", "geometric mean sqrt(consensus x awareness)",
              "percentile bootstrap over statements (BOOTSTRAP resamples and seed)",
              "yesno (commonsense)"),
    MetricDef("human_pearson", "Pearson correlation over statements of P(yes) (variant q1) with the "
              "human agreement rate `human_q1`", "none", "yesno (commonsense)"),
    MetricDef("human_spearman", "Spearman rank correlation of the same pairs", "none", "yesno (commonsense)"),
    MetricDef("probeval_kl", "mean over questions of KL(P_human || P_model) over answer clusters "
              "(ProbEval, Cheng et al. 2024)", "percentile bootstrap over questions (BOOTSTRAP)",
              "generation (CFC)"),
    MetricDef("probeval_wrong_share", "share of model samples matched to no human answer cluster",
              "none", "generation (CFC)"),
    MetricDef("worldsense_accuracy", "the WorldSense authors' accuracy: tuple-weighted, rebalanced, "
              "answer classes (1 and 2 are KNOW); the published metric, a fraction here (the authors' "
              "tables, printed after the report, show it x100: 0.556 is their 55.6)",
              "the authors' conf95 (mean +/- 1.96 sd / sqrt(n tuples))", "constrained (WorldSense)"),
    MetricDef("worldsense_bias", "the WorldSense authors' bias per problem (+1 = always "
              "TRUE/POSSIBLE/KNOW)", "the authors' conf95", "constrained (WorldSense)"),
    MetricDef("errors", "number of items whose scoring raised an error (n = all items)", "none"),
    MetricDef("acc_stderr", "lm-eval's standard error of `accuracy`: sample sd (ddof=1) of per-row "
              "`correct` / sqrt(n), rows treated as independent; only in `llmscope export --format "
              "lm-eval` (the report's intervals cluster)", "none", "export (lm-eval)"),
]
METRICS: dict[str, MetricDef] = {d.name: d for d in _DEFS}


def define_metric(d: MetricDef) -> MetricDef:
    """Register another metric's definition (producers added by other modules call this)."""
    METRICS[d.name] = d
    return d


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
def _json(v: Any) -> Any:
    if isinstance(v, str):
        try:
            return decode_json(v)
        except ValueError:
            return None
    return v


def results_with_fields(store: Any, run_id: str) -> pd.DataFrame:
    """A run's results with each item's fields expanded into ``f.<name>`` columns."""
    df = store.results_frame(run_id)
    return expand_fields(df)


def expand_fields(df: pd.DataFrame) -> pd.DataFrame:
    """Add ``f.<name>`` columns from the ``fields`` JSON column (when present)."""
    if df.empty or "fields" not in df:
        return df
    fields = df["fields"].map(lambda s: _json(s) if s is not None else {}).map(lambda d: d if isinstance(d, dict) else {})
    flat = pd.DataFrame(list(fields), index=df.index).add_prefix("f.")
    flat = flat[[c for c in flat.columns if c not in df.columns]]
    return pd.concat([df, flat], axis=1)


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
            self._codes = pd.factorize(pd.Series(cluster_key(self.df, self.cluster_field), dtype=object),
                                       sort=False)[0]
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
    """Values as floats, anything not numeric as NaN (numeric arrays without a per-value pass)."""
    arr = np.asarray(values)
    if arr.dtype.kind in "fiub":
        return arr.astype(float)
    return pd.to_numeric(pd.Series(np.asarray(values, dtype=object)), errors="coerce").to_numpy(float)


def rate(name: str, values: Any, clusters: np.ndarray, group: dict[str, Any] | None = None,
         producer: str = "") -> Metric | None:
    """A share or mean of per-item scores in [0, 1], with the clustered accuracy interval."""
    v = _floats(values)
    keep = np.isfinite(v)
    if not keep.any():
        return None
    iv = accuracy_ci(v[keep], np.asarray(clusters)[keep])
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
    v, g = v[keep], g[keep]
    n = len(v)
    if n == 0:
        return (math.nan, math.nan, math.nan, 0, 0, "empty")
    codes, _ = pd.factorize(g if g.dtype.kind in "iu" else pd.Series(g, dtype="object"), sort=False)
    y = np.bincount(codes, weights=v)
    m = np.bincount(codes).astype(float)
    G = len(y)
    p = float(y.sum() / m.sum())
    if G < 2:
        return (p, math.nan, math.nan, n, G, "cluster-t")
    var = G / (G - 1) * float(np.sum((y - p * m) ** 2)) / float(m.sum()) ** 2
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


# -- producers -------------------------------------------------------------------------------
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

    def active(self, ctx: MetricContext) -> bool:
        if not self.every_task and self.name not in task_producers(ctx.task):
            return False
        return self.needs is None or bool(self.needs(ctx))


PRODUCERS: list[_Registered] = []


def register_producer(name: str, *, every_task: bool = False, needs: Needs | None = None,
                      whole_items: bool = False, reads: Iterable[str] | None = None
                      ) -> Callable[[Producer], Producer]:
    """Decorator: add a producer, in registration order.

    A producer runs for every task with ``every_task``; otherwise only for the tasks that
    list it in their ``metric_producers`` (the task registry is the single source: no task
    names here). ``needs(ctx)`` is a cheap test on what the rows hold (``ctx.has(column)``,
    ``ctx.extra_has(key)``); a producer whose test fails is skipped, so a big run never pays
    for analyses it has no data for. It must never be stricter than the producer itself.
    ``reads`` names the result columns it reads beyond the base ones (None: it may read any);
    a stored run's frame carries only the columns its active producers read.
    """

    def deco(fn: Producer) -> Producer:
        PRODUCERS.append(_Registered(name, fn, every_task, needs, whole_items,
                                     tuple(reads) if reads is not None else None))
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
                          needs: Needs | None = None, whole_items: bool = True) -> None:
    """Adapter: plug in ``fn(df, run, spec) -> list[metric_row dicts]`` as a producer.

    With ``whole_items`` the rows carry each item's raw `fields` JSON and text.
    """

    def adapted(ctx: MetricContext) -> list[Metric]:
        return rows_to_metrics(fn(ctx.df, ctx.run, ctx.spec), name)

    register_producer(name, every_task=every_task, needs=needs, whole_items=whole_items)(adapted)


def _group_col(df: pd.DataFrame, fieldname: str) -> str | None:
    if fieldname in df:
        return fieldname
    return f"f.{fieldname}" if f"f.{fieldname}" in df else None


@register_producer("accuracy", every_task=True, reads=())
def accuracy_metrics(ctx: MetricContext) -> list[Metric]:
    """Accuracy overall, per prompt variant, per ``by`` field."""
    if "correct" not in ctx.df:
        return []
    ok = ctx.ok()
    # only the columns read below: the per-group frames then copy two columns, not every one
    ok = ok[[c for c in dict.fromkeys(["correct", "variant", *(_group_col(ok, f) for f in ctx.by)]) if c]]
    scored = pd.to_numeric(ok["correct"], errors="coerce").notna()
    ok = ok if scored.all() else ok[scored]
    if ok.empty:
        return []
    out: list[Metric] = []

    def add(sub: pd.DataFrame, group: dict[str, Any]) -> None:
        m = rate("accuracy", sub["correct"], ctx.clusters(sub), group, "accuracy")
        if m is not None:
            out.append(m)

    add(ok, {})
    if ok["variant"].nunique() > 1:
        for v, sub in ok.groupby(ok["variant"].astype(str), sort=True):
            add(sub, {"variant": v})
    for f in ctx.by:
        col = _group_col(ok, f)
        if col is None:
            continue
        for key, sub in ok.groupby(ok[col].astype(str), sort=True):
            add(sub, {f: key})
    return out + variant_spread(out)


def variant_spread(accuracy: list[Metric]) -> list[Metric]:
    """Range and SD of the per-variant accuracies (prompt sensitivity), from the row or SQL form."""
    accs = [m.value for m in accuracy if set(m.group) == {"variant"} and m.value is not None]
    if len(accs) < 2:
        return []
    a = np.asarray(accs, dtype=float)
    return [Metric("variant_acc_range", float(a.max() - a.min()), n=len(a), producer="accuracy"),
            Metric("variant_acc_sd", float(a.std(ddof=1)), n=len(a), producer="accuracy")]


def _extras(df: pd.DataFrame) -> pd.Series:
    if "extra" not in df:
        return pd.Series([{}] * len(df), index=df.index, dtype=object)
    return df["extra"].map(lambda s: _json(s) or {}).map(lambda d: d if isinstance(d, dict) else {})


@register_producer("methods", needs=lambda c: c.extra_has("methods"),
                   reads=("extra",))
def method_metrics(ctx: MetricContext) -> list[Metric]:
    """Choice tasks: accuracy and expected accuracy for each scoring method."""
    ok = ctx.ok()
    if ok.empty or "extra" not in ok:
        return []
    methods = [e.get("methods") if isinstance(e.get("methods"), dict) else None for e in _extras(ok)]
    if not any(methods):
        return []
    names: list[str] = []
    for m in methods:
        for k in m or {}:
            if k not in names:
                names.append(k)
    cl = ctx.clusters(ok)
    out: list[Metric] = []
    for name in names:
        for key, metric in (("correct", "accuracy"), ("expected_acc", "expected_accuracy")):
            vals = [float(m[name][key]) if m and name in m and m[name].get(key) is not None else np.nan
                    for m in methods]
            r = (rate if metric == "accuracy" else mean_metric)(metric, vals, cl, {"method": name}, "methods")
            if r is not None:
                out.append(r)
    return out


@register_producer("position", needs=lambda c: c.has("option_scores"),
                   reads=("option_scores",))
def position_metrics(ctx: MetricContext) -> list[Metric]:
    """Position bias: how often the first / last listed option is predicted vs is gold."""
    ok = ctx.ok()
    if ok.empty or "option_scores" not in ok:
        return []
    ok = ok[ok["option_scores"].notna() & ok["prediction"].notna()]
    if ok.empty:
        return []
    orders = ok["option_scores"].map(lambda s: list(_json(s) or {}))
    cl = ctx.clusters(ok)
    out: list[Metric] = []
    for name, pos in (("first", 0), ("last", -1)):
        pred = [float(o[pos] == p) if o else np.nan for o, p in zip(orders, ok["prediction"], strict=True)]
        # `notna`: a missing gold is NaN, not None, beside rows with gold (pandas' string dtype)
        gold = np.array([float(o[pos] == g) if o and has else np.nan
                         for o, g, has in zip(orders, ok["gold"], ok["gold"].notna(), strict=True)])
        r = rate("chosen_rate", pred, cl, {"position": name}, "position")
        if r is not None:
            out.append(r)
        if np.isfinite(gold).any():
            out.append(Metric("gold_rate", float(np.nanmean(gold)), n=int(np.isfinite(gold).sum()),
                              group={"position": name}, producer="position"))
    return out


def _gold_yes(g: Any) -> float:
    if g is None or (isinstance(g, float) and math.isnan(g)):
        return math.nan
    if isinstance(g, str):
        return {"yes": 1.0, "no": 0.0, "true": 1.0, "false": 0.0}.get(g.strip().lower(), math.nan)
    return float(bool(g))


def _gold_yes_column(gold: pd.Series) -> np.ndarray:
    """`_gold_yes` of each row, called once per distinct gold (a column holds a few values;
    per row it was 0.3 s of a 100k-row report)."""
    codes, uniques = pd.factorize(gold, use_na_sentinel=True)
    missing = codes < 0
    na = _gold_yes(gold[missing].iloc[0]) if missing.any() else math.nan
    table = np.array([*(_gold_yes(u) for u in uniques), na], dtype=float)
    return table[codes]  # code -1 (missing) takes the last entry


def _yesno_frame(ok: pd.DataFrame) -> pd.DataFrame:
    y = pd.to_numeric(ok["p_yes"], errors="coerce")
    n = pd.to_numeric(ok["p_no"], errors="coerce")
    o = pd.to_numeric(ok["other"], errors="coerce") if "other" in ok else pd.Series(np.nan, index=ok.index)
    o = o.where(o.notna(), 1.0 - y - n)
    f = pd.DataFrame({"p_yes": y, "p_no": n, "p_other": o}, index=ok.index)
    f["pred_yes"] = (y > n).astype(float)
    f["gold_yes"] = _gold_yes_column(ok["gold"])
    f["off_format"] = (o > y + n).astype(float)
    return f[np.isfinite(y) & np.isfinite(n)]


@register_producer("yesno", needs=lambda c: c.has("p_yes"), reads=("p_yes", "p_no", "other"))
def yesno_metrics(ctx: MetricContext) -> list[Metric]:
    """Mean P(yes)/P(no)/P(other), yes rate vs gold, yes bias and off-format rate."""
    ok = ctx.ok()
    if ok.empty or "p_yes" not in ok:
        return []
    ok = ok[[c for c in ("variant", "p_yes", "p_no", "other", "gold") if c in ok]]  # what is read below
    out: list[Metric] = []
    groups: list[tuple[dict[str, Any], pd.DataFrame]] = [({}, ok)]
    if ok["variant"].nunique() > 1:
        groups += [({"variant": v}, s) for v, s in ok.groupby(ok["variant"].astype(str), sort=True)]
    for group, sub in groups:
        f = _yesno_frame(sub)
        if f.empty:
            continue
        cl = ctx.clusters(sub.loc[f.index])
        for m in ("p_yes", "p_no", "p_other"):
            r = mean_metric(f"mean_{m}", f[m], cl, group, "yesno")
            if r is not None:
                out.append(r)
        for name, col in (("pred_yes_rate", "pred_yes"),):
            r = rate(name, f[col], cl, group, "yesno")
            if r is not None:
                out.append(r)
        gk = np.isfinite(f["gold_yes"].to_numpy(float))
        if gk.any():
            out.append(Metric("gold_yes_rate", float(f["gold_yes"][gk].mean()), n=int(gk.sum()),
                              group=dict(group), producer="yesno"))
            r = mean_metric("yes_bias", (f["pred_yes"] - f["gold_yes"])[gk], cl[gk], group, "yesno")
            if r is not None:
                out.append(r)
        r = rate("off_format_rate", f["off_format"], cl, group, "yesno")
        if r is not None:
            out.append(r)
    return out


def _prob_rows(ok: pd.DataFrame) -> list[dict[str, float] | None]:
    return [p if isinstance(p, dict) and p else None for p in decode_json_many(ok["probs"].tolist())]


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


@register_producer("calibration",
                   needs=lambda c: c.has("confidence") or c.has("probs"), reads=("confidence", "probs", "p_yes"))
def calibration_metrics(ctx: MetricContext) -> list[Metric]:
    """ECE and MCE (10 equal-width bins), Brier (multi-class; `brier_yes` for yes/no), ties."""
    from .calibration import reliability

    ok = ctx.ok()
    if ok.empty or "confidence" not in ok:
        return []
    corr = pd.to_numeric(ok["correct"], errors="coerce").to_numpy(float)
    conf = pd.to_numeric(ok["confidence"], errors="coerce").to_numpy(float)
    keep = np.isfinite(corr) & np.isfinite(conf)
    out: list[Metric] = []
    if keep.any():
        c, y = conf[keep], corr[keep]
        cl = ctx.clusters(ok)[keep]
        rel = reliability(c, y, n_bins=10)
        iv = _calibration_interval(c, y, cl, 10, ctx.bootstrap)
        (elo, ehi), (mlo, mhi), G = iv.ece, iv.mce, iv.n_clusters
        for name, est, lo, hi in (("ece", rel.ece, elo, ehi), ("mce", rel.mce, mlo, mhi)):
            out.append(Metric(name, est, None if math.isnan(lo) else lo, None if math.isnan(hi) else hi,
                              iv.method, int(keep.sum()), G, {}, "calibration"))
        out += reliability_bin_metrics(rel.bins)
    if "probs" in ok:
        from .prob_rows import brier_items, flatten, tie_flags

        probs = _prob_rows(ok)
        flat = flatten(probs)  # the rows' dicts as arrays: per-row scores in numpy (prob_rows.py)
        out += _raw_calibration(ctx, ok, probs, conf, corr, flat)
        scored = np.isfinite(corr)
        b = brier_items(flat, ok["gold"].tolist(), scored, brier_item, probs)
        r = mean_metric("brier", b, ctx.clusters(ok), {}, "calibration")
        if r is not None:
            out.append(r)
        if "p_yes" in ok and ok["p_yes"].notna().any():
            py = pd.to_numeric(ok["p_yes"], errors="coerce").to_numpy(float)
            gy = _gold_yes_column(ok["gold"])
            r = mean_metric("brier_yes", (py - gy) ** 2, ctx.clusters(ok), {}, "calibration")
            if r is not None:
                out.append(r)
        tv = tie_flags(flat, scored, _is_tie, probs)
        if np.isfinite(tv).any():
            out.append(Metric("tie_rate", float(np.nanmean(tv)), n=int(np.isfinite(tv).sum()),
                              producer="calibration"))
    return out


def raw_confidence(probs: Mapping[str, Any] | None, prediction: Any) -> float:
    """The stored probability of the predicted answer, not renormalised over the answers
    (yes/no: P(pred) with P(other) left out of the denominator); NaN without one."""
    if not probs or prediction is None or (isinstance(prediction, float) and math.isnan(prediction)):
        return math.nan
    v = probs.get(str(prediction))
    try:
        return float(v) if v is not None else math.nan
    except (TypeError, ValueError):
        return math.nan


def _raw_calibration(ctx: MetricContext, ok: pd.DataFrame, probs: list[dict[str, float] | None],
                     conf: np.ndarray, corr: np.ndarray, flat: Any = None) -> list[Metric]:
    """`ece_raw` / `mce_raw`: ECE and MCE with the raw P(predicted answer) as the confidence,
    reported where it differs from the renormalised `confidence` (answers with mass outside them)."""
    from .calibration import reliability
    from .prob_rows import flatten, raw_confidences

    raw = raw_confidences(flatten(probs) if flat is None else flat, ok["prediction"].tolist(), raw_confidence,
                          probs)
    keep = np.isfinite(corr) & np.isfinite(raw) & np.isfinite(conf)
    if not keep.any() or np.allclose(raw[keep], conf[keep], rtol=0.0, atol=1e-9):
        return []
    c, y = raw[keep], corr[keep]
    cl = ctx.clusters(ok)[keep]
    rel = reliability(c, y, n_bins=10)
    iv = _calibration_interval(c, y, cl, 10, ctx.bootstrap)
    (elo, ehi), (mlo, mhi), G = iv.ece, iv.mce, iv.n_clusters
    return [Metric(name, est, None if math.isnan(lo) else lo, None if math.isnan(hi) else hi,
                   iv.method, int(keep.sum()), G, {}, "calibration")
            for name, est, lo, hi in (("ece_raw", rel.ece, elo, ehi), ("mce_raw", rel.mce, mlo, mhi))]
def reliability_bin_metrics(bins: pd.DataFrame) -> list[Metric]:
    """The reliability diagram ECE is computed from: per non-empty bin its accuracy and mean
    confidence, n = the bin's count (figures and `report --json` read these rows)."""
    out: list[Metric] = []
    for b in bins.to_dict("records"):
        if not b["count"]:
            continue
        group = {"bin": bin_label(float(b["lo"]), float(b["hi"]))}
        for name, key in (("bin_accuracy", "accuracy"), ("bin_confidence", "confidence")):
            out.append(Metric(name, float(b[key]), n=int(b["count"]), group=dict(group), producer="calibration"))
    return out


def bin_label(lo: float, hi: float) -> str:
    """A reliability bin's label, ``"0.3-0.4"`` (``[lo, hi)``, the last bin closed)."""
    return f"{lo:.1f}-{hi:.1f}"


def _calibration_bootstrap(
    conf: np.ndarray, correct: np.ndarray, clusters: np.ndarray, n_bins: int, cfg: BootstrapConfig,
    method: str = "exact",
) -> tuple[tuple[float, float], tuple[float, float], int]:
    """Cluster-bootstrap percentile intervals of ECE and MCE (the exact bootstrap unless
    ``method`` says otherwise; :func:`_calibration_interval` is the producers' choice)."""
    iv = _calibration_interval(conf, correct, clusters, n_bins, cfg, method)
    return iv.ece, iv.mce, iv.n_clusters


def _calibration_interval(conf: np.ndarray, correct: np.ndarray, clusters: np.ndarray, n_bins: int,
                          cfg: BootstrapConfig, method: str = "auto") -> Any:
    """ECE/MCE intervals with the method that drew them (analysis/calibration_bootstrap.py:
    exact up to EXACT_MAX_CLUSTERS clusters, bin totals drawn above, named so)."""
    from .calibration_bootstrap import calibration_bootstrap

    return calibration_bootstrap(conf, correct, clusters, n_bins, cfg.resamples, cfg.seed, cfg.level,
                                 method=method)


def _is_tie(p: Mapping[str, Any]) -> bool:
    v = sorted((float(x) for x in p.values() if x is not None), reverse=True)
    return len(v) >= 2 and v[0] == v[1]


@register_producer("generation", needs=lambda c: c.has("extra"), reads=("extra",))
def generation_metrics(ctx: MetricContext) -> list[Metric]:
    """Token F1 of the first sample; with several samples majority / mean exact match and F1."""
    ok = ctx.ok()
    if ok.empty or "extra" not in ok:
        return []
    ex = list(_extras(ok))
    cl = ctx.clusters(ok)
    sampled = any(len(e.get("samples") or []) > 1 for e in ex)
    out: list[Metric] = []
    for key, metric in (("f1", "token_f1"), ("em_majority", "em_majority"), ("em_mean", "em_mean"),
                        ("f1_mean", "token_f1_mean")):
        if key != "f1" and not sampled:
            continue
        vals = [float(e[key]) if e.get(key) is not None else np.nan for e in ex]
        # F1 and means of sample scores are means, not proportions: no Wilson interval.
        r = (rate if metric == "em_majority" else mean_metric)(metric, vals, cl, {}, "generation")
        if r is not None:
            out.append(r)
    return out


@register_producer("commonsense", needs=lambda c: c.has("f.human_q1"), reads=("p_yes", "p_no"))
def commonsense_metrics(ctx: MetricContext) -> list[Metric]:
    """Consensus, awareness and commonsensicality against the human majority (`human_q1`)."""
    df = ctx.df
    if "f.human_q1" not in df or not {"q1", "q2"} <= set(df["variant"].astype(str)):
        return []
    from .commonsense import commonsense_frame, commonsense_rows, commonsensicality

    ok = ctx.ok()
    ok = ok[pd.to_numeric(ok["p_yes"], errors="coerce").notna()]
    cat = ok["f.category"] if "f.category" in ok else pd.Series([None] * len(ok), index=ok.index)
    human = pd.DataFrame({"id": ok["item_id"], "human_q1": ok["f.human_q1"], "category": cat})
    human = human.drop_duplicates("id")
    human = human[human["human_q1"].notna()]
    q = {v: ok[ok["variant"].astype(str) == v][["item_id", "p_yes", "p_no"]].rename(columns={"item_id": "id"})
         for v in ("q1", "q2")}
    frame = commonsense_frame(human, q["q1"], q["q2"])
    if frame.empty:
        return []
    out: list[Metric] = []
    for by in ([], ["category"]):
        if by and frame["category"].isna().all():
            continue
        table = commonsensicality(frame, by, n_boot=ctx.bootstrap.resamples, seed=ctx.bootstrap.seed)
        rows = commonsense_rows(table, run=str(ctx.run.get("run_id")), model=str(ctx.run.get("model")), by=by)
        for m in rows_to_metrics(rows, "commonsense"):
            if by and m.group.get("category") == "(all)":
                continue
            # consensus and awareness carry Wilson intervals (analysis/commonsense.py), only
            # commonsensicality a bootstrap over statements
            m.interval_method = ("bootstrap over statements" if m.name == "commonsensicality"
                                 else "wilson (statements)")
            out.append(m)
    return out


@register_producer("human_correlation", needs=lambda c: c.has("f.human_q1"), reads=("p_yes",))
def human_correlation_metrics(ctx: MetricContext) -> list[Metric]:
    """Pearson and Spearman correlation of P(yes) (variant q1 when present) with `human_q1`."""
    if "f.human_q1" not in ctx.df:
        return []
    from .commonsense import correlation

    pairs = human_agreement_pairs(ctx.ok())
    c = correlation(pairs["p_yes"], pairs["human"])
    return [Metric(f"human_{k}", c.get(k), n=int(c["n"]), producer="human_correlation")
            for k in ("pearson", "spearman")]


def human_agreement_pairs(ok: pd.DataFrame) -> pd.DataFrame:
    """The (statement, P(yes), human agreement) pairs `human_pearson` / `human_spearman` are
    computed over: rows of variant q1 when present, one per item; columns item_id, p_yes, human
    (the figures plot these same pairs)."""
    if "error" in ok:
        ok = ok[ok["error"].isna()]
    if "q1" in set(ok["variant"].astype(str)):
        ok = ok[ok["variant"].astype(str) == "q1"]
    ok = ok.drop_duplicates("item_id")
    return pd.DataFrame({"item_id": ok["item_id"], "p_yes": ok["p_yes"], "human": ok["f.human_q1"]})


@register_producer("probeval",
                   needs=lambda c: c.store is not None and c.has("f.clusters"), reads=())
def probeval_metrics(ctx: MetricContext) -> list[Metric]:
    """Mean ProbEval KL(P_human || P_model) with a bootstrap interval over questions."""
    if ctx.store is None or "f.clusters" not in ctx.df:
        return []
    from .probeval_run import probeval_for_run

    res = probeval_for_run(ctx.store, ctx.run)
    if res is None or res.per_question.empty:
        return []
    kl = res.per_question["kl"].to_numpy(float)
    est, lo, hi, G = cluster_bootstrap_mean(kl, np.arange(len(kl)), ctx.bootstrap)
    n_model = int(res.per_question["n_model"].sum())
    return [
        Metric("probeval_kl", est, lo, hi, "bootstrap over questions", len(kl), G, {}, "probeval"),
        Metric("probeval_wrong_share", float(res.per_question["n_wrong"].sum() / max(1, n_model)),
               n=n_model, producer="probeval"),
    ]


@register_producer("worldsense", needs=lambda c: c.has("f.tuple_ID"), reads=())
def worldsense_metrics(ctx: MetricContext) -> list[Metric]:
    """The authors' WorldSense accuracy (%) of this run, first in the report."""
    # The authors' metrics belong to their suite (data/registry.py: SuiteEntry.producers).
    if "worldsense" not in suite_producers(ctx.run.get("suite_name")) or "f.tuple_ID" not in ctx.df:
        return []
    import warnings

    from .worldsense import tuple_table

    df = ctx.df
    exp = df["f.expectedresp"] if "f.expectedresp" in df else df.get("f.options")
    t = pd.DataFrame({
        "Key": df["item_id"], "resp": df["prediction"].where(df["error"].isna(), "").fillna(""),
        "modelname": str(ctx.run.get("model")), "prompting": "run",
        "tuple_ID": df["f.tuple_ID"], "expectedresp": exp, "goldresp": df["gold"],
        "problemname": df.get("f.problemname"), "problemsize": df.get("f.problemsize"),
    })
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # incomplete tuples (a run still streaming) are excluded
        tuples = tuple_table(t)
    return worldsense_from_tuples(ctx, tuples, len(t))


def worldsense_from_tuples(ctx: MetricContext, tuples: pd.DataFrame, n_trials: int) -> list[Metric]:
    """The authors' metrics and tables of a run from its per-tuple table (``tuple_table``'s
    shape, from the rows or from SQL: analysis.sqlmetrics); ``n_trials`` counts every row."""
    import warnings

    from .worldsense import group_stats

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
    for name, table, gcols in (("worldsense_accuracy", acc, []),
                               ("worldsense_accuracy", pacc, ["problemname"]),
                               ("worldsense_bias", pbias, ["problemname"])):
        for rec in table.to_dict("records"):
            m, c = float(rec["mean"]), float(rec["conf95"])
            lo, hi = (None, None) if math.isnan(c) else (m - c, m + c)
            out.append(Metric(name, m, lo, hi, "authors' conf95 over tuples", int(rec["count"]),
                              int(rec["count"]), {k: rec[k] for k in gcols}, "worldsense"))
    return out


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
    names = [*by, *(g for g in spec.get("group_by") or [] if isinstance(g, str)),
             *([cf] if isinstance(cf, str) else []), *PIPELINE_FIELDS]
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
    return metric_frame(store, dict(run), names, columns=columns,
                        raw_fields=whole, item_text=whole)


def run_metrics(store: Any, run: Mapping[str, Any], by: Sequence[str] | None = None,
                *, bootstrap: BootstrapConfig = BOOTSTRAP, producers: Sequence[str] | None = None,
                cache: bool = True) -> RunMetrics:
    """:func:`compute_metrics` for a stored run, reading only what its producers need.

    Results are cached per (database, run, rows fingerprint, grouping, configuration): in
    memory, and for a full computation (``producers`` None) in the database's sidecar cache
    (`store/metrics_cache.py`, `<db>.metrics.sqlite`), so another process (the next
    `llmscope report`, the TUI, the runs list) reads them instead of recomputing. The
    DuckDB file itself is never written here: a read-only store stays read-only. Any added,
    replaced or deleted row changes the fingerprint, so a stale entry is never read.
    """
    rid = str(run["run_id"])
    spec = store.suite_spec(run["suite_id"]) if run.get("suite_id") else {}
    by_l = list(by) if by else [g for g in (spec.get("group_by") or []) if isinstance(g, str)]
    sig = rows_signature(store, rid)
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
        for f in sorted(Path(__file__).parent.glob("*.py")):
            h.update(f.name.encode())
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


# -- comparisons -----------------------------------------------------------------------------
@dataclass
class PairedComparison:
    """Run B against run A on their common (item, variant) rows: ``diff = acc_b - acc_a``."""

    n: int
    n_clusters: int
    acc_a: float
    acc_b: float
    diff: float
    lo: float
    hi: float
    p_value: float
    interval_method: str
    paired: pd.DataFrame = field(repr=False)
    disagreements: pd.DataFrame = field(repr=False)


def paired_comparison(a: pd.DataFrame, b: pd.DataFrame, cluster_field: str | None = None,
                      cfg: BootstrapConfig = BOOTSTRAP) -> PairedComparison:
    """Paired cluster bootstrap of the accuracy difference on per-item differences.

    Rows are matched on (item_id, variant); whole clusters (``cluster_key``) are resampled
    for both runs jointly. The p-value is two-sided from the bootstrap distribution of the
    centred difference: ``(1 + #|d* - d| >= |d|) / (1 + B)``.
    """
    from .compare import paired_frame

    a = a[a["error"].isna()] if "error" in a else a
    b = b[b["error"].isna()] if "error" in b else b
    extra_a = [c for c in a.columns if c.startswith("f.")]
    p = paired_frame(a, b, extra=("prediction", "gold", *extra_a))
    p = p.rename(columns={f"{c}_a": c for c in extra_a})
    n = len(p)
    if n == 0:
        e = p.iloc[0:0]
        return PairedComparison(0, 0, math.nan, math.nan, math.nan, math.nan, math.nan, math.nan, "empty", p, e)
    cl = cluster_key(p, cluster_field)
    d = p["d"].to_numpy(float)
    codes, _ = pd.factorize(pd.Series(cl, dtype="object"), sort=False)
    ds = np.bincount(codes, weights=d)
    m = np.bincount(codes).astype(float)
    G = len(m)
    diff = float(d.mean())
    reps = np.empty(cfg.resamples)
    start = 0
    for idx in resample_index(G, cfg.resamples, cfg.seed):
        k = idx.shape[0]
        reps[start:start + k] = ds[idx].sum(axis=1) / m[idx].sum(axis=1)
        start += k
    al = (1 - cfg.level) / 2
    lo, hi = (float(x) for x in np.quantile(reps, [al, 1 - al]))
    pval = float((1 + np.sum(np.abs(reps - diff) >= abs(diff) - 1e-12)) / (1 + cfg.resamples))
    ca, cb = p["correct_a"].to_numpy(float), p["correct_b"].to_numpy(float)
    dis = p[(ca >= 0.5) != (cb >= 0.5)].reset_index(drop=True)
    return PairedComparison(n, G, float(ca.mean()), float(cb.mean()), diff, lo, hi, min(1.0, pval),
                            "paired cluster bootstrap", p, dis)


def iid_stderr(values: Sequence[float]) -> float | None:
    """lm-eval's standard error of a mean: sample sd (ddof=1) / sqrt(n), rows independent
    (`acc_stderr` in `llmscope export --format lm-eval`); None below two values."""
    n = len(values)
    if n < 2:
        return None
    return float(np.std(np.asarray(values, dtype=float), ddof=1) / math.sqrt(n))


# -- display ---------------------------------------------------------------------------------
def display(name: str, value: float | None) -> str:
    """A metric value at the precision every surface prints it (report text, TUI)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if name in ("errors", "left_out_no_distribution"):  # counts
        return f"{value:.0f}"
    return f"{value:.3f}"


# -- documentation ---------------------------------------------------------------------------
def metrics_markdown() -> str:
    """docs/METRICS.md, generated from :data:`METRICS` (tests keep the file in step)."""
    lines = [
        "# Metrics",
        "",
        "Generated from `analysis/metrics.py` (`llmscope.analysis.metrics.METRICS`); `llmscope report",
        "--explain` prints the same text. Every number `llmscope report` (text and `--json`), the TUI",
        "dashboard and compare screen and `llmscope compare` show is computed by `compute_metrics`",
        "from a run's stored per-item rows.",
        "",
        "## Conventions",
        "",
        f"- Intervals: {BOOTSTRAP.describe()} (one configuration for the whole program).",
        "- Clusters: the suite's `cluster_field` when it has one (WorldSense: `tuple_ID`), otherwise the",
        "  item, so an item's prompt variants and option permutations count as one independent unit",
        "  (ProbEval: the question).",
        "- Automatic interval for shares: Wilson without clustering; cluster-t (CR1 sandwich variance,",
        "  Student t with G-1 df) with clusters; Wilson counting each cluster once when the sandwich",
        "  variance is zero (all clusters alike, accuracy 0 or 1, a single cluster).",
        "- Means of per-item values that are not proportions (F1, Brier, probabilities, yes bias):",
        "  cluster-t interval, never Wilson; clipped to the metric's range ([0, 1]; `brier` [0, 2];",
        "  `yes_bias` [-1, 1]).",
        "- Comparisons (`llmscope compare`, TUI compare): paired cluster bootstrap of per-item",
        "  differences matched on (item, variant): difference, interval and a two-sided bootstrap",
        "  p-value; McNemar's test only when every cluster is a single pair.",
        f"- Ties: {TIE_RULE}",
        "- Reliability bins: `[i/n, (i+1)/n)`, the last closed; a confidence on an edge (0.3 with",
        "  ten bins) belongs to the bin that starts there.",
        "- Numbers in generated answers (exact match, token F1): a decimal point (a `.` with a digit",
        "  on both sides) is kept, so `3.5` is one token (`engine/normalize.py`); only a thousands",
        "  separator merges digits (`1,000` -> `1000`); any other mark between two digits separates",
        "  numbers (`3,4` -> `3 4`); numbers are written canonically (`10.00` -> `10`, `.5` -> `0.5`).",
        "- Computation: for a stored run, one SQL pass (`analysis/queries.py`) profiles what the rows",
        "  hold; producers with nothing to read are skipped, and only the result columns and item",
        "  fields the others read are fetched (item fields extracted by DuckDB once per suite). Results",
        "  are cached per run, configuration (grouping, bootstrap, run options, a hash of the metrics",
        "  code) and rows fingerprint (count, last seq, last write, errors, sum of `correct`), in",
        "  memory and in a cache file beside the database (`<db>.metrics.sqlite`; reading a run never",
        "  writes the database itself), so any added, replaced or",
        "  deleted row recomputes them. The runs list shows each run's headline metric from this cache",
        "  (`worldsense_accuracy` for WorldSense, `sg_score` for SyntaxGym, else `accuracy`), and plain",
        "  `accuracy` (mean of `correct`, named so) for a run not computed since its rows changed.",
        "  Bootstrap intervals of means and ratios are one matrix product per chunk of resamples",
        "  (cluster multiplicities), with the same draws as a loop over resamples for the same seed.",
        "  A run whose active producers are only `accuracy` and `worldsense` (a WorldSense import) is",
        "  computed without a per-row frame (`analysis/sqlmetrics.py`): DuckDB returns the per-(variant,",
        "  cluster, group) counts and sums of 0/1 scores and the per-tuple weighted sums, and numpy",
        "  the intervals from those; the numbers are the row pipeline's to the last bit (clusters and",
        "  tuples in order of first appearance, sums that are exact in any order), and anything it",
        "  does not cover exactly (other producers, fractional scores, boolean or float group values,",
        "  rows without their item) goes through the rows as before (`tests/analysis/test_sqlmetrics.py`).",
        "  The live dashboard runs the same producers on the rows received so far, at most every two",
        "  refreshes.",
        "- Producers: each task type lists the task-specific producers that report on it",
        "  (`metric_producers` in `engine/tasks/<task>.py`); the rest run for every task.",
        "- `llmscope export --format lm-eval` copies `accuracy` from this pipeline; its `acc_stderr`",
        "  is lm-eval's IID standard error (defined below), not an interval of this program.",
        "",
        "## Metrics",
        "",
        "| metric | definition | interval | tasks |",
        "|---|---|---|---|",
    ]
    for d in METRICS.values():
        lines.append(f"| `{d.name}` | {d.definition} | {d.interval} | {d.tasks} |")
    lines.append("")
    return "\n".join(lines)


def definitions() -> list[dict[str, Any]]:
    """The registry as plain dicts (for `report --explain --json`)."""
    return [asdict(d) for d in METRICS.values()]


# -- producers written beside their features (row-shaped; adapted into the registry) ----------
def _register_feature_producers() -> None:
    """Producers that live in feature modules, registered once with their definitions."""
    from llmscope.analysis.abstention import abstention_rows
    from llmscope.analysis.api_method import api_method_rows
    from llmscope.analysis.syntaxgym import sg_rows

    for d in (
        MetricDef("abstain_rate", "share of scored items that abstained: no evidence for any answer "
                  "(no probability mass on any answer, or no option with a finite log-likelihood); "
                  "an abstention is counted wrong in `accuracy`", _RATE_CI, "yesno, rating, choice"),
        MetricDef("accuracy_answered", "accuracy over the items with gold that did not abstain (shown "
                  "only when some item abstained)", _RATE_CI, "yesno, rating, choice"),
        MetricDef("method_share", "share of scored rows produced by this scoring method (API runs: "
                  "log-probs, sampled estimate, labels...)", "none"),
        MetricDef("topk_seen_mass", "mean over rows scored from API log-probs of the top-k probability "
                  "mass the top-k rule saw (1 minus it is the mass the rule assumed)", _MEAN_CI, "yesno, rating"),
        MetricDef("sg_score", "SyntaxGym score: share of items meeting all their predictions (Hu et al. "
                  "2020); per suite (group `suite`) the share of its items; overall (no group) the MACRO "
                  "average, the mean of the per-suite scores, as the paper reports it; per circuit "
                  "(group `circuit`, where the suites name one in `meta.circuit`) the mean over the "
                  "circuit's suites",
                  "Wilson per suite; stratified bootstrap (items resampled within suites) overall and "
                  "per circuit", "syntaxgym"),
        MetricDef("sg_score_micro", "SyntaxGym MICRO average: items meeting all predictions / all items, "
                  "pooled over suites (GPT-2 XL's published file: 718 / 842 = 0.853, macro 0.831); "
                  "reported with two or more suites", "Wilson", "syntaxgym"),
        MetricDef("sg_score_circuits", "mean over circuits of the per-circuit `sg_score` (only where the "
                  "suites name their circuit)", "none", "syntaxgym"),
        MetricDef("prediction_met", "share of items meeting one prediction (one conjunct) of a suite",
                  "Wilson", "syntaxgym"),
        MetricDef("flagged_rate", "share of items flagged as possibly seen in training (Min-K% or the "
                  "completion probe over its threshold)", "Wilson", "contamination"),
        MetricDef("min_k_prob", "mean over items of Min-K% probability: mean log-probability (nats) of "
                  "the k% least likely tokens, max(1, floor(n k / 100)) of them (Shi et al. 2023)",
                  _ITEM_T_CI + " (at most 0)", "contamination"),
        MetricDef("ngram_overlap", "mean over items of the n-gram recall of the greedy continuation of "
                  "an item's first half against its second half", _ITEM_T_CI + " (clipped to [0, 1])",
                  "contamination"),
        MetricDef("bleu_mean", "mean over items of sentence BLEU (sacrebleu, 0-100) of the first sample "
                  "against all the gold answers", _ITEM_T_CI + " (clipped to [0, 100]); none when every "
                  "item scores the same", "generation"),
        MetricDef("chrf_mean", "mean over items of sentence chrF (sacrebleu, 0-100) of the first sample "
                  "against all the gold answers", _ITEM_T_CI + " (clipped to [0, 100]); none when every "
                  "item scores the same", "generation"),
        MetricDef("rougeL_mean", "mean over items of ROUGE-L F (rouge-score, Porter stemming, 0-1), the "
                  "best over the gold answers", _ITEM_T_CI + " (clipped to [0, 1]); none when every item "
                  "scores the same", "generation"),
        MetricDef("embed_cos_mean", "mean over items of the cosine similarity of MiniLM sentence "
                  "embeddings of answer and gold, the best over the gold answers", _ITEM_T_CI +
                  " (clipped to [-1, 1]); none when every item scores the same", "generation"),
        MetricDef("corpus_bleu", "corpus BLEU (sacrebleu, 0-100) over all items, each item's first gold "
                  "answer the reference", "none", "generation"),
        MetricDef("corpus_chrf", "corpus chrF (sacrebleu, 0-100) over all items, each item's first gold "
                  "answer the reference", "none", "generation"),
    ):
        define_metric(d)
    _T1 = "choice, yesno, rating (machine-psychology toolkit I, docs/METHODS.md)"
    for d in (
        MetricDef("scheme_acc_range", "max minus min accuracy over the scoring schemes computed for the "
                  "same items (researcher degrees of freedom)", "none", _T1),
        MetricDef("scheme_disagreement_rate", "share of items on which at least two scoring schemes choose "
                  "different options", _RATE_CI, _T1),
        MetricDef("scheme_flip_rate", "share of items whose correctness differs between at least two "
                  "scoring schemes", _RATE_CI, _T1),
        MetricDef("fit_alpha", "softmax inverse temperature alpha fitted by maximum likelihood to human "
                  "choice counts, P(c=j) proportional to exp(alpha * s_j)", "profile-likelihood interval", _T1),
        MetricDef("condition_fit_alpha", "fit_alpha after aggregating items to conditions (mean scores, "
                  "mean probabilities or winner-take-all, in the group)", "profile-likelihood interval", _T1),
        MetricDef("human_loglik", "log-likelihood of the human choices under the fitted softmax", "none", _T1),
        MetricDef("condition_human_loglik", "human_loglik at the condition level", "none", _T1),
        MetricDef("human_ll_uniform", "log-likelihood of the human choices under a uniform choice "
                  "(lower baseline)", "none", _T1),
        MetricDef("human_ll_empirical", "log-likelihood of the human choices under each item's own "
                  "empirical distribution (upper bound)", "none", _T1),
        MetricDef("human_ll_per_choice", "human_loglik divided by the number of human choices",
                  "percentile cluster bootstrap over items", _T1),
        MetricDef("softmax_accuracy", "mean over items of the softmax probability of the gold option at "
                  "the alpha in the group, softmax(alpha * s) over the scheme's option scores s (`raw`: "
                  "the log-likelihood; `calibrated` and `labels`: the log of their probabilities)",
                  _MEAN_CI, _T1),
        MetricDef("softmax_accuracy_fitted", "softmax_accuracy at the fitted alpha", "none", _T1),
        MetricDef("left_out_no_distribution", "result rows the statistic in group `of` (human_fit, "
                  "softmax_accuracy, human_choice) left out because the model gave them no choice "
                  "distribution: no option with a finite score (an abstention: every label probability 0), "
                  "or no probability mass on any option; n = the rows it considered", "none", _T1),
        MetricDef("order_consistency", "share of items whose prediction is the same under every "
                  "counterbalanced order", _RATE_CI, _T1),
        MetricDef("order_robust_accuracy", "accuracy after averaging each item's answer probabilities "
                  "over its counterbalanced orders", _RATE_CI, _T1),
        MetricDef("recency_effect", "few-shot recency bias (Zhao et al. 2021): change in the rate of "
                  "predicting a label when the last demo has that label", "paired t over clusters", _T1),
        MetricDef("majority_effect", "few-shot majority-label bias (Zhao et al. 2021): change in the rate "
                  "of predicting a label when most demos have it", "paired t over clusters", _T1),
        MetricDef("pred_equals_last_demo", "share of few-shot items predicted as the last demo's label",
                  _RATE_CI, _T1),
    ):
        define_metric(d)
    def lazy(module: str, fn: str) -> RowProducer:
        """A row producer imported on first use (these modules pull in scipy.stats/optimize)."""

        def call(df: pd.DataFrame, run: dict[str, Any], spec: dict[str, Any]) -> list[dict[str, Any]]:
            import importlib

            return list(getattr(importlib.import_module(module), fn)(df, run, spec))

        return call

    # Each gate is what the producer reads: skipping it when absent changes no number.
    register_row_producer("method_sensitivity", lazy("llmscope.analysis.methods", "sensitivity_rows"),
                          every_task=True, needs=lambda c: c.extra_has("methods"))
    # Rows count only with human answers: per-option counts named by the spec (choice rows)
    # or the item's `human_q1` (yes/no rows; analysis.methods.human_choice_data).
    register_row_producer("human_choice_fit", lazy("llmscope.analysis.methods", "fit_rows"),
                          every_task=True,
                          needs=lambda c: (c.has("option_scores") and bool(c.spec.get("human_counts_field")))
                          or (c.has("probs") and c.has("f.human_q1")))
    register_row_producer("softmax_accuracy_curve", lazy("llmscope.analysis.methods", "softmax_curve_rows"),
                          needs=lambda c: c.has("option_scores"))
    register_row_producer("order_effects", lazy("llmscope.analysis.design_effects", "order_effect_rows"),
                          every_task=True, needs=lambda c: c.extra_has("design") or c.prof().derived_variants)
    register_row_producer("fewshot_bias", lazy("llmscope.analysis.design_effects", "fewshot_rows"),
                          needs=lambda c: c.extra_has("design"))
    register_row_producer("abstention", abstention_rows, whole_items=False)
    register_row_producer("api_method", api_method_rows, every_task=True, needs=lambda c: c.run.get("backend") == "openai",
                          whole_items=False)
    register_row_producer("syntaxgym", sg_rows)
    register_row_producer("contamination", lazy("llmscope.analysis.contamination", "contamination_rows"))
    register_row_producer("genmetrics", lazy("llmscope.analysis.genmetrics", "generation_library_rows"),
                          needs=lambda c: c.has("extra"),
                          whole_items=False)
    # Last: analysis/human.py registers its definitions and producers on import, and imports this
    # module; importing it here, after everything else, gives one order whichever is imported first.
    from . import human  # noqa: F401


_register_feature_producers()
