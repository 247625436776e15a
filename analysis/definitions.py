"""What each metric means: its definition, interval method and tasks (`METRICS`), the one
bootstrap configuration and tie rule, how a value is printed, and docs/METRICS.md made from them.

The metrics pipeline (`analysis/metrics.py`) computes the values; this module only says what
they are, so the TUI and `report --explain` can read it without the pipeline's numerics.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from llmscope.analysis.numbers import fmt_num

__all__ = [
    "BootstrapConfig",
    "BOOTSTRAP",
    "TIE_RULE",
    "MetricDef",
    "METRICS",
    "RATE_CI",
    "MEAN_CI",
    "BOOT_CI",
    "define_metric",
    "display",
    "metrics_markdown",
    "definitions",
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
# analysis/calibration_bootstrap.py: above EXACT_MAX_CLUSTERS clusters the exact bootstrap (~1 s per
# 10,000 clusters, 2,000 resamples) gives way to drawn bin totals, whose ends differ from the exact
# ones by Monte Carlo noise there (tests/analysis/test_calibration_bootstrap.py); a bin with fewer
# than THIN_BIN_CLUSTERS clusters has its clusters drawn exactly.
EXACT_MAX_CLUSTERS = 10_000
THIN_BIN_CLUSTERS = 1_000
# ECE/MCE: the exact bootstrap costs clusters x resamples draws; above a stated size the bin
# totals are drawn instead, named in the interval method (analysis/calibration_bootstrap.py)
CAL_BOOT_CI = (
    f"{BOOT_CI}; above {EXACT_MAX_CLUSTERS:,} clusters each resample's bin totals are drawn "
    f"(clusters of bins with fewer than {THIN_BIN_CLUSTERS:,} clusters exactly, the others' sum "
    "from its normal distribution), interval method `cluster-bootstrap (normal bin totals)`; "
    "its ends agree with the exact bootstrap's within Monte Carlo error (docs/PERFORMANCE.md)"
)

_DEFS: list[MetricDef] = [
    MetricDef(
        "accuracy",
        "share of scored items whose prediction is correct (mean of per-item "
        "`correct`; generation: exact match of the first sample); per method for choice tasks",
        RATE_CI,
    ),
    MetricDef(
        "item_accuracy",
        "WorldSense runs only: the plain share of trials answered in the gold "
        "answer class, unweighted and not rebalanced; NOT the published metric (see "
        "worldsense_accuracy)",
        RATE_CI,
        "constrained (WorldSense)",
    ),
    MetricDef(
        "expected_accuracy",
        "mean over items of the softmax probability (alpha) of the gold "
        "option under a scoring method",
        MEAN_CI,
        "choice, constrained",
    ),
    MetricDef("variant_acc_range", "max minus min of the per-variant accuracies", "none"),
    MetricDef(
        "variant_acc_sd", "sample standard deviation (ddof=1) of the per-variant accuracies", "none"
    ),
    MetricDef(
        "chosen_rate",
        "share of items whose prediction is the option at this position (first / last listed)",
        RATE_CI,
        "choice, constrained",
    ),
    MetricDef(
        "gold_rate",
        "share of items whose gold answer is the option at this position",
        "none",
        "choice, constrained",
    ),
    MetricDef(
        "mean_p_yes", "mean over items of P(yes) at the first answer position", MEAN_CI, "yesno"
    ),
    MetricDef("mean_p_no", "mean over items of P(no)", MEAN_CI, "yesno"),
    MetricDef("mean_p_other", "mean over items of P(other) = 1 - P(yes) - P(no)", MEAN_CI, "yesno"),
    MetricDef(
        "pred_yes_rate",
        "share of items predicted yes (P(yes) > P(no); a tie is not yes)",
        RATE_CI,
        "yesno",
    ),
    MetricDef(
        "gold_yes_rate", "share of items (with a yes/no gold) whose gold is yes", "none", "yesno"
    ),
    MetricDef(
        "yes_bias",
        "mean over items with a yes/no gold of 1[predicted yes] - 1[gold yes] "
        "(= pred_yes_rate - gold_yes_rate on those items; > 0 leans yes)",
        MEAN_CI,
        "yesno",
    ),
    MetricDef(
        "off_format_rate", "share of items where P(other) > P(yes) + P(no)", RATE_CI, "yesno"
    ),
    MetricDef(
        "ece",
        "expected calibration error: count-weighted mean over 10 equal-width bins "
        "[i/10, (i+1)/10) (last closed) of |accuracy - mean confidence|; confidence = the row's "
        "`confidence`, the probability of the predicted answer RENORMALISED over the listed "
        "answers (yes/no: P(pred) / (P(yes) + P(no)), mass on other tokens left out; choice: "
        "the softmax over the options; rating: the label probabilities renormalised)",
        CAL_BOOT_CI,
        "yesno, choice, rating, constrained",
    ),
    MetricDef(
        "mce",
        "maximum calibration error: the largest |accuracy - mean confidence| over non-empty "
        "bins (the same renormalised confidence as `ece`)",
        CAL_BOOT_CI,
        "yesno, choice, rating, constrained",
    ),
    MetricDef(
        "ece_raw",
        "ECE with confidence = the raw probability of the predicted answer, not "
        "renormalised (yes/no: P(pred), P(other) counted against it); the same bins; reported "
        "only where it differs from `ece`'s confidence (answers with probability mass outside "
        "them: yes/no, choice by labels)",
        CAL_BOOT_CI,
        "yesno, choice (labels)",
    ),
    MetricDef(
        "mce_raw", "MCE with the raw confidence of `ece_raw`", CAL_BOOT_CI, "yesno, choice (labels)"
    ),
    MetricDef(
        "human_distance",
        "per statement, not a run metric: |m-h| = |P(yes) / (P(yes) + P(no)) - "
        "human_q1|, the model's yes probability renormalised over yes/no (as `ece`'s confidence) "
        "against the share of people who agree; shown in the TUI item list and human panel "
        "(`analysis.yesno.human_distance`); missing where P(yes) + P(no) = 0",
        "none",
        "yesno (commonsense)",
    ),
    MetricDef(
        "bin_accuracy",
        "reliability diagram: accuracy of the scored items whose confidence "
        "falls in this bin (the 10 equal-width bins of `ece`; non-empty bins only; n = the bin's "
        "count)",
        "none",
        "yesno, choice, rating, constrained",
    ),
    MetricDef(
        "bin_confidence",
        "reliability diagram: mean confidence (`ece`'s renormalised "
        "confidence) of the items in this bin; |bin_accuracy - bin_confidence| weighted by n is `ece`",
        "none",
        "yesno, choice, rating, constrained",
    ),
    MetricDef(
        "brier",
        "multi-class Brier score: mean over items of sum_k (p_k - 1[k = gold])^2 over "
        "the listed answers (mass outside them is not renormalised; a gold not listed adds 1)",
        MEAN_CI,
        "yesno, choice, rating, constrained",
    ),
    MetricDef(
        "brier_yes",
        "binary Brier score: mean over items of (P(yes) - 1[gold = yes])^2 "
        "(half the two-class `brier` when P(other) = 0)",
        MEAN_CI,
        "yesno",
    ),
    MetricDef(
        "tie_rate",
        "share of scored items whose two best answers have exactly equal "
        "probability (ties are never credited, see the tie rule)",
        "none",
    ),
    MetricDef(
        "token_f1",
        "mean over items of SQuAD token F1 (max over golds) of the first sample, "
        "after the answer normalisation of Conventions (numbers)",
        MEAN_CI,
        "generation",
    ),
    MetricDef(
        "em_majority",
        "mean over items of exact match of the majority normalised sample",
        RATE_CI,
        "generation",
    ),
    MetricDef(
        "em_mean",
        "mean over items of the per-item mean exact match over samples",
        MEAN_CI,
        "generation",
    ),
    MetricDef(
        "token_f1_mean",
        "mean over items of the per-item mean token F1 over samples",
        MEAN_CI,
        "generation",
    ),
    MetricDef(
        "consensus",
        "share of statements whose model answer (q1) agrees with the human "
        "majority (Whiting & Watts 2024)",
        "Wilson over statements (no clustering)",
        "yesno (commonsense)",
    ),
    MetricDef(
        "awareness",
        "share of statements where the model's q2 (do most people agree?) "
        "matches the human majority",
        "Wilson over statements (no clustering)",
        "yesno (commonsense)",
    ),
    MetricDef(
        "commonsensicality",
        "geometric mean sqrt(consensus x awareness)",
        "percentile bootstrap over statements (BOOTSTRAP resamples and seed)",
        "yesno (commonsense)",
    ),
    MetricDef(
        "human_pearson",
        "Pearson correlation over statements of P(yes) (variant q1) with the "
        "human agreement rate `human_q1`",
        "none",
        "yesno (commonsense)",
    ),
    MetricDef(
        "human_spearman",
        "Spearman rank correlation of the same pairs",
        "none",
        "yesno (commonsense)",
    ),
    MetricDef(
        "probeval_kl",
        "mean over questions of KL(P_human || P_model) over answer clusters "
        "(ProbEval, Cheng et al. 2024)",
        "percentile bootstrap over questions (BOOTSTRAP)",
        "generation (CFC)",
    ),
    MetricDef(
        "probeval_wrong_share",
        "share of model samples matched to no human answer cluster",
        "none",
        "generation (CFC)",
    ),
    MetricDef(
        "worldsense_accuracy",
        "the WorldSense authors' accuracy: tuple-weighted, rebalanced, "
        "answer classes (1 and 2 are KNOW); the published metric, a fraction here (the authors' "
        "tables, printed after the report, show it x100: 0.556 is their 55.6)",
        "the authors' conf95 (mean +/- 1.96 sd / sqrt(n tuples))",
        "constrained (WorldSense)",
    ),
    MetricDef(
        "worldsense_bias",
        "the WorldSense authors' bias per problem (+1 = always TRUE/POSSIBLE/KNOW)",
        "the authors' conf95",
        "constrained (WorldSense)",
    ),
    MetricDef("errors", "number of items whose scoring raised an error (n = all items)", "none"),
    MetricDef(
        "acc_stderr",
        "lm-eval's standard error of `accuracy`: sample sd (ddof=1) of per-row "
        "`correct` / sqrt(n), rows treated as independent; only in `llmscope export --format "
        "lm-eval` (the report's intervals cluster)",
        "none",
        "export (lm-eval)",
    ),
]
METRICS: dict[str, MetricDef] = {d.name: d for d in _DEFS}


def define_metric(d: MetricDef) -> MetricDef:
    """Register another metric's definition (producers added by other modules call this)."""
    METRICS[d.name] = d
    return d


# -- display ---------------------------------------------------------------------------------
def display(name: str, value: float | None) -> str:
    """A metric value at the precision every surface prints it (report text, TUI): the one
    number format of `analysis/numbers.py`."""
    return fmt_num(value, name)


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
