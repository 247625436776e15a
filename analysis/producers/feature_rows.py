"""Row producers written beside their features: their definitions and gates, in report order.

The features (abstention, API method, SyntaxGym, contamination, generation libraries, scoring
methods, design effects) compute metric rows in their own modules; this adapts them into the
registry.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from ..metrics import MEAN_CI, RATE_CI, MetricDef, RowProducer, define_metric, register_row_producer

__all__ = ["register"]

# contamination and reference-based generation scores: one row per item, rows not clustered
_ITEM_T_CI = "Student t interval over result rows (sd ddof=1, n-1 df; rows not clustered)"


def register() -> None:
    """Add the feature modules' definitions and row producers, in report order (analysis/metrics.py
    calls it once)."""
    from llmscope.analysis.abstention import abstention_rows
    from llmscope.analysis.api_method import api_method_rows
    from llmscope.analysis.syntaxgym import sg_rows

    for d in (
        MetricDef(
            "abstain_rate",
            "share of scored items that abstained: no evidence for any answer "
            "(no probability mass on any answer, or no option with a finite log-likelihood); "
            "an abstention is counted wrong in `accuracy`",
            RATE_CI,
            "yesno, rating, choice",
        ),
        MetricDef(
            "accuracy_answered",
            "accuracy over the items with gold that did not abstain (shown "
            "only when some item abstained)",
            RATE_CI,
            "yesno, rating, choice",
        ),
        MetricDef(
            "method_share",
            "share of scored rows produced by this scoring method (API runs: "
            "log-probs, sampled estimate, labels...)",
            "none",
        ),
        MetricDef(
            "topk_seen_mass",
            "mean over rows scored from API log-probs of the top-k probability "
            "mass the top-k rule saw (1 minus it is the mass the rule assumed)",
            MEAN_CI,
            "yesno, rating",
        ),
        MetricDef(
            "sg_score",
            "SyntaxGym score: share of items meeting all their predictions (Hu et al. "
            "2020); per suite (group `suite`) the share of its items; overall (no group) the MACRO "
            "average, the mean of the per-suite scores, as the paper reports it; per circuit "
            "(group `circuit`, where the suites name one in `meta.circuit`) the mean over the "
            "circuit's suites",
            "Wilson per suite; stratified bootstrap (items resampled within suites) overall and "
            "per circuit",
            "syntaxgym",
        ),
        MetricDef(
            "sg_score_micro",
            "SyntaxGym MICRO average: items meeting all predictions / all items, "
            "pooled over suites (GPT-2 XL's published file: 718 / 842 = 0.853, macro 0.831); "
            "reported with two or more suites",
            "Wilson",
            "syntaxgym",
        ),
        MetricDef(
            "sg_score_circuits",
            "mean over circuits of the per-circuit `sg_score` (only where the "
            "suites name their circuit)",
            "none",
            "syntaxgym",
        ),
        MetricDef(
            "prediction_met",
            "share of items meeting one prediction (one conjunct) of a suite",
            "Wilson",
            "syntaxgym",
        ),
        MetricDef(
            "flagged_rate",
            "share of items flagged as possibly seen in training (Min-K% or the "
            "completion probe over its threshold)",
            "Wilson",
            "contamination",
        ),
        MetricDef(
            "min_k_prob",
            "mean over items of Min-K% probability: mean log-probability (nats) of "
            "the k% least likely tokens, max(1, floor(n k / 100)) of them (Shi et al. 2023)",
            _ITEM_T_CI + " (at most 0)",
            "contamination",
        ),
        MetricDef(
            "ngram_overlap",
            "mean over items of the n-gram recall of the greedy continuation of "
            "an item's first half against its second half",
            _ITEM_T_CI + " (clipped to [0, 1])",
            "contamination",
        ),
        MetricDef(
            "bleu_mean",
            "mean over items of sentence BLEU (sacrebleu, 0-100) of the first sample "
            "against all the gold answers",
            _ITEM_T_CI + " (clipped to [0, 100]); none when every item scores the same",
            "generation",
        ),
        MetricDef(
            "chrf_mean",
            "mean over items of sentence chrF (sacrebleu, 0-100) of the first sample "
            "against all the gold answers",
            _ITEM_T_CI + " (clipped to [0, 100]); none when every item scores the same",
            "generation",
        ),
        MetricDef(
            "rougeL_mean",
            "mean over items of ROUGE-L F (rouge-score, Porter stemming, 0-1), the "
            "best over the gold answers",
            _ITEM_T_CI + " (clipped to [0, 1]); none when every item scores the same",
            "generation",
        ),
        MetricDef(
            "embed_cos_mean",
            "mean over items of the cosine similarity of MiniLM sentence "
            "embeddings of answer and gold, the best over the gold answers",
            _ITEM_T_CI + " (clipped to [-1, 1]); none when every item scores the same",
            "generation",
        ),
        MetricDef(
            "corpus_bleu",
            "corpus BLEU (sacrebleu, 0-100) over all items, each item's first gold "
            "answer the reference",
            "none",
            "generation",
        ),
        MetricDef(
            "corpus_chrf",
            "corpus chrF (sacrebleu, 0-100) over all items, each item's first gold "
            "answer the reference",
            "none",
            "generation",
        ),
    ):
        define_metric(d)
    _T1 = "choice, yesno, rating (machine-psychology toolkit I, docs/METHODS.md)"
    for d in (
        MetricDef(
            "scheme_acc_range",
            "max minus min accuracy over the scoring schemes computed for the "
            "same items (researcher degrees of freedom)",
            "none",
            _T1,
        ),
        MetricDef(
            "scheme_disagreement_rate",
            "share of items on which at least two scoring schemes choose different options",
            RATE_CI,
            _T1,
        ),
        MetricDef(
            "scheme_flip_rate",
            "share of items whose correctness differs between at least two scoring schemes",
            RATE_CI,
            _T1,
        ),
        MetricDef(
            "fit_alpha",
            "softmax inverse temperature alpha fitted by maximum likelihood to human "
            "choice counts, P(c=j) proportional to exp(alpha * s_j)",
            "profile-likelihood interval",
            _T1,
        ),
        MetricDef(
            "condition_fit_alpha",
            "fit_alpha after aggregating items to conditions (mean scores, "
            "mean probabilities or winner-take-all, in the group)",
            "profile-likelihood interval",
            _T1,
        ),
        MetricDef(
            "human_loglik",
            "log-likelihood of the human choices under the fitted softmax",
            "none",
            _T1,
        ),
        MetricDef("condition_human_loglik", "human_loglik at the condition level", "none", _T1),
        MetricDef(
            "human_ll_uniform",
            "log-likelihood of the human choices under a uniform choice (lower baseline)",
            "none",
            _T1,
        ),
        MetricDef(
            "human_ll_empirical",
            "log-likelihood of the human choices under each item's own "
            "empirical distribution (upper bound)",
            "none",
            _T1,
        ),
        MetricDef(
            "human_ll_per_choice",
            "human_loglik divided by the number of human choices",
            "percentile cluster bootstrap over items",
            _T1,
        ),
        MetricDef(
            "softmax_accuracy",
            "mean over items of the softmax probability of the gold option at "
            "the alpha in the group, softmax(alpha * s) over the scheme's option scores s (`raw`: "
            "the log-likelihood; `calibrated` and `labels`: the log of their probabilities)",
            MEAN_CI,
            _T1,
        ),
        MetricDef("softmax_accuracy_fitted", "softmax_accuracy at the fitted alpha", "none", _T1),
        MetricDef(
            "left_out_no_distribution",
            "result rows the statistic in group `of` (human_fit, "
            "softmax_accuracy, human_choice) left out because the model gave them no choice "
            "distribution: no option with a finite score (an abstention: every label probability 0), "
            "or no probability mass on any option; n = the rows it considered",
            "none",
            _T1,
        ),
        MetricDef(
            "order_consistency",
            "share of items whose prediction is the same under every counterbalanced order",
            RATE_CI,
            _T1,
        ),
        MetricDef(
            "order_robust_accuracy",
            "accuracy after averaging each item's answer probabilities "
            "over its counterbalanced orders",
            RATE_CI,
            _T1,
        ),
        MetricDef(
            "recency_effect",
            "few-shot recency bias (Zhao et al. 2021): change in the rate of "
            "predicting a label when the last demo has that label",
            "paired t over clusters",
            _T1,
        ),
        MetricDef(
            "majority_effect",
            "few-shot majority-label bias (Zhao et al. 2021): change in the rate "
            "of predicting a label when most demos have it",
            "paired t over clusters",
            _T1,
        ),
        MetricDef(
            "pred_equals_last_demo",
            "share of few-shot items predicted as the last demo's label",
            RATE_CI,
            _T1,
        ),
    ):
        define_metric(d)

    def lazy(module: str, fn: str) -> RowProducer:
        """A row producer imported on first use (these modules pull in scipy.stats/optimize)."""

        def call(
            df: pd.DataFrame, run: dict[str, Any], spec: dict[str, Any]
        ) -> list[dict[str, Any]]:
            import importlib

            return list(getattr(importlib.import_module(module), fn)(df, run, spec))

        return call

    # Each gate is what the producer reads: skipping it when absent changes no number.
    register_row_producer(
        "method_sensitivity",
        lazy("llmscope.analysis.methods", "sensitivity_rows"),
        every_task=True,
        needs=lambda c: c.extra_has("methods"),
    )
    # Rows count only with human answers: per-option counts named by the spec (choice rows)
    # or the item's `human_q1` (yes/no rows; analysis.methods.human_choice_data).
    register_row_producer(
        "human_choice_fit",
        lazy("llmscope.analysis.methods", "fit_rows"),
        every_task=True,
        needs=lambda c: (
            (c.has("option_scores") and bool(c.spec.get("human_counts_field")))
            or (c.has("probs") and c.has("f.human_q1"))
        ),
    )
    register_row_producer(
        "softmax_accuracy_curve",
        lazy("llmscope.analysis.methods", "softmax_curve_rows"),
        needs=lambda c: c.has("option_scores"),
    )
    register_row_producer(
        "order_effects",
        lazy("llmscope.analysis.design_effects", "order_effect_rows"),
        every_task=True,
        needs=lambda c: c.extra_has("design") or c.prof().derived_variants,
    )
    register_row_producer(
        "fewshot_bias",
        lazy("llmscope.analysis.design_effects", "fewshot_rows"),
        needs=lambda c: c.extra_has("design"),
    )
    # abstention_rows reads `extra` and the base columns (analysis/abstention.py)
    register_row_producer(
        "abstention", abstention_rows, whole_items=False, reads=("extra",), fields=()
    )
    register_row_producer(
        "api_method",
        api_method_rows,
        every_task=True,
        needs=lambda c: c.run.get("backend") == "openai",
        whole_items=False,
    )
    register_row_producer("syntaxgym", sg_rows)
    register_row_producer(
        "contamination", lazy("llmscope.analysis.contamination", "contamination_rows")
    )
    register_row_producer(
        "genmetrics",
        lazy("llmscope.analysis.genmetrics", "generation_library_rows"),
        needs=lambda c: c.has("extra"),
        whole_items=False,
    )
