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

# scipy.special, not scipy.stats: the same quantile functions (stats.t.ppf and stats.norm.ppf
# call these) without importing scipy.stats (most of `llmscope report`'s start-up time).
from scipy import special

from llmscope.engine.tasks.registry import task_producers
from llmscope.store.db import decode_json

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
    # the producers, defined in analysis/producers/ (importable from here as before)
    "accuracy_metrics",
    "variant_spread",
    "method_metrics",
    "position_metrics",
    "yesno_metrics",
    "gold_yes_column",
    "brier_item",
    "calibration_metrics",
    "raw_confidence",
    "reliability_bin_metrics",
    "bin_label",
    "generation_metrics",
    "commonsense_metrics",
    "human_correlation_metrics",
    "human_agreement_pairs",
    "probeval_metrics",
    "worldsense_metrics",
    "worldsense_from_tuples",
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


RATE_CI = "cluster-t (CR1 sandwich, t with G-1 df) over clusters; Wilson without clustering"
MEAN_CI = "cluster-t (CR1 sandwich, t with G-1 df) on the per-item values, over clusters"
BOOT_CI = "percentile cluster bootstrap (BOOTSTRAP resamples and seed), clusters resampled"

_DEFS: list[MetricDef] = [
    MetricDef("accuracy", "share of scored items whose prediction is correct (mean of per-item "
              "`correct`; generation: exact match of the first sample); per method for choice tasks",
              RATE_CI),
    MetricDef("item_accuracy", "WorldSense runs only: the plain share of trials answered in the gold "
              "answer class, unweighted and not rebalanced; NOT the published metric (see "
              "worldsense_accuracy)", RATE_CI, "constrained (WorldSense)"),
    MetricDef("expected_accuracy", "mean over items of the softmax probability (alpha) of the gold "
              "option under a scoring method", MEAN_CI, "choice, constrained"),
    MetricDef("variant_acc_range", "max minus min of the per-variant accuracies", "none"),
    MetricDef("variant_acc_sd", "sample standard deviation (ddof=1) of the per-variant accuracies",
              "none"),
    MetricDef("chosen_rate", "share of items whose prediction is the option at this position "
              "(first / last listed)", RATE_CI, "choice, constrained"),
    MetricDef("gold_rate", "share of items whose gold answer is the option at this position",
              "none", "choice, constrained"),
    MetricDef("mean_p_yes", "mean over items of P(yes) at the first answer position", MEAN_CI, "yesno"),
    MetricDef("mean_p_no", "mean over items of P(no)", MEAN_CI, "yesno"),
    MetricDef("mean_p_other", "mean over items of P(other) = 1 - P(yes) - P(no)", MEAN_CI, "yesno"),
    MetricDef("pred_yes_rate", "share of items predicted yes (P(yes) > P(no); a tie is not yes)",
              RATE_CI, "yesno"),
    MetricDef("gold_yes_rate", "share of items (with a yes/no gold) whose gold is yes", "none", "yesno"),
    MetricDef("yes_bias", "mean over items with a yes/no gold of 1[predicted yes] - 1[gold yes] "
              "(= pred_yes_rate - gold_yes_rate on those items; > 0 leans yes)", MEAN_CI, "yesno"),
    MetricDef("off_format_rate", "share of items where P(other) > P(yes) + P(no)", RATE_CI, "yesno"),
    MetricDef("ece", "expected calibration error: count-weighted mean over 10 equal-width bins "
              "[i/10, (i+1)/10) (last closed) of |accuracy - mean confidence|; confidence = the row's "
              "`confidence`, the probability of the predicted answer RENORMALISED over the listed "
              "answers (yes/no: P(pred) / (P(yes) + P(no)), mass on other tokens left out; choice: "
              "the softmax over the options; rating: the label probabilities renormalised)",
              BOOT_CI, "yesno, choice, rating, constrained"),
    MetricDef("mce", "maximum calibration error: the largest |accuracy - mean confidence| over non-empty "
              "bins (the same renormalised confidence as `ece`)",
              BOOT_CI, "yesno, choice, rating, constrained"),
    MetricDef("ece_raw", "ECE with confidence = the raw probability of the predicted answer, not "
              "renormalised (yes/no: P(pred), P(other) counted against it); the same bins; reported "
              "only where it differs from `ece`'s confidence (answers with probability mass outside "
              "them: yes/no, choice by labels)", BOOT_CI, "yesno, choice (labels)"),
    MetricDef("mce_raw", "MCE with the raw confidence of `ece_raw`", BOOT_CI, "yesno, choice (labels)"),
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
              MEAN_CI, "yesno, choice, rating, constrained"),
    MetricDef("brier_yes", "binary Brier score: mean over items of (P(yes) - 1[gold = yes])^2 "
              "(half the two-class `brier` when P(other) = 0)", MEAN_CI, "yesno"),
    MetricDef("tie_rate", "share of scored items whose two best answers have exactly equal "
              "probability (ties are never credited, see the tie rule)", "none"),
    MetricDef("token_f1", "mean over items of SQuAD token F1 (max over golds) of the first sample, "
              "after the answer normalisation of Conventions (numbers)",
              MEAN_CI, "generation"),
    MetricDef("em_majority", "mean over items of exact match of the majority normalised sample",
              RATE_CI, "generation"),
    MetricDef("em_mean", "mean over items of the per-item mean exact match over samples", MEAN_CI,
              "generation"),
    MetricDef("token_f1_mean", "mean over items of the per-item mean token F1 over samples", MEAN_CI,
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
def decode_cell(v: Any) -> Any:
    """A JSON column's value decoded (None when it is not valid JSON); other values as they are."""
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
    fields = df["fields"].map(lambda s: decode_cell(s) if s is not None else {}).map(lambda d: d if isinstance(d, dict) else {})
    flat = pd.DataFrame(list(fields), index=df.index).add_prefix("f.")
    flat = flat[[c for c in flat.columns if c not in df.columns]]
    return pd.concat([df, flat], axis=1)


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
        """Rows without an error."""
        if "error" not in self.df:
            return self.df
        return self.df[self.df["error"].isna()]

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
from .producers.accuracy import accuracy_metrics, method_metrics, variant_spread  # noqa: E402
from .producers.calibration import (  # noqa: E402
    bin_label,
    brier_item,
    calibration_metrics,
    raw_confidence,
    reliability_bin_metrics,
)
from .producers.commonsense import (  # noqa: E402
    commonsense_metrics,
    human_agreement_pairs,
    human_correlation_metrics,
)
from .producers.generation import generation_metrics  # noqa: E402
from .producers.position import position_metrics  # noqa: E402
from .producers.probeval import probeval_metrics  # noqa: E402
from .producers.worldsense import worldsense_from_tuples, worldsense_metrics  # noqa: E402
from .producers.yesno import gold_yes_column, yesno_metrics  # noqa: E402

_register_producers()
