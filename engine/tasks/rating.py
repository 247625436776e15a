"""k-point ratings from next-token label probabilities (`task: rating`).

The labels are the suite's `answers` (task option `answers`, passed by the
runner; falling back to the work's options, then "1".."5"). P(label) is the
summed probability of the label's token variants at the first generated
position (`backend.next_token`, the shared variant rule of `engine.answers`),
renormalised over the labels.

Stored: `probs` = renormalised distribution, `other` = 1 − label mass,
`extra["label_mass"]` = unnormalised Σ P(label), `extra["raw_probs"]` =
unnormalised per-label probabilities, `extra["expected"]` = Σ n · P(label_n)
where n is the label's number for numeric labels and its 1-based position for
word labels, `prediction` = argmax label (first on ties), `confidence` = its
renormalised probability. No mass on any label is an abstention (`engine.abstain`).

Gold: when it equals a label (or a numeric label by value, so "4.0" matches
"4"), correct = 1.0/0.0 and its number is the gold value; a numeric gold that
is no label (e.g. a mean human rating 3.4) leaves correct None. In both cases
`extra["abs_error"]` = |expected − gold value|.
"""

from __future__ import annotations

import math
from typing import Any

from llmscope.engine.abstain import abstain
from llmscope.engine.backend import Backend
from llmscope.engine.choice_math import strict_win
from llmscope.engine.tasks.base import (
    COMMON_ITEM_FIELDS,
    ItemField,
    SuiteLike,
    Task,
    chat_option,
    register,
)
from llmscope.engine.tasks.options import FEWSHOT_OPTION, OptionSpec
from llmscope.engine.types import Result, Work


def _num(s: Any) -> float | None:
    try:
        v = float(str(s).strip())
    except ValueError:
        return None
    return v if v == v else None  # NaN is no number


def label_values(labels: list[str]) -> list[float]:
    """The number each label stands for: its value when all labels are numeric, else 1..k."""
    nums = [_num(x) for x in labels]
    if all(n is not None for n in nums):
        return [float(n) for n in nums]  # type: ignore[arg-type]
    return [float(i + 1) for i in range(len(labels))]


@register
class RatingTask(Task):
    """Distribution over scale labels, expected rating and argmax label."""

    name = "rating"
    summary = "distribution over scale labels; expected rating"
    needs_answers = "a rating suite needs its scale labels"
    design_options = frozenset({"reverse_templates"})
    needs = frozenset({"next_token"})
    predicts_option = True
    default_method = "next-token"
    metric_producers = ("calibration", "abstention", "fewshot_bias", "human_rating")
    traits = frozenset({"human_ratings"})
    result_fields = ("expected", "gold_value", "abs_error", "label_mass", "raw_probs")
    item_fields = (
        *COMMON_ITEM_FIELDS,
        ItemField("extra.expected", "expected", "number"),
        ItemField("extra.abs_error", "|error|", "number"),
        ItemField("probs", "label probabilities", "json", column=False),
    )
    option_specs = (
        chat_option(True),
        OptionSpec("top_k", "int", 20, "top tokens read at the answer position", min=1),
        OptionSpec(
            "reverse_templates",
            "any",
            None,
            "{variant: template} asking the scale the other way round (@rev), mapped back",
        ),
        FEWSHOT_OPTION,
    )

    @classmethod
    def gold_problem(cls, gold: str, options: list[str] | None, suite: SuiteLike) -> str | None:
        if not suite.answers or gold in suite.answers:
            return None
        try:
            v = float(gold.strip())
        except ValueError:
            return f"gold {gold!r} is neither a scale label {suite.answers} nor a number"
        if not math.isfinite(v):
            return f"gold {gold!r} is not a finite number"
        values = label_values(suite.answers)
        if not min(values) <= v <= max(values):
            return f"gold {gold!r} is outside the scale {min(values):g}..{max(values):g}"
        return None

    def labels(self, work: Work) -> list[str]:
        labels = self.options.get("answers") or work.options or [str(i) for i in range(1, 6)]
        return [str(x) for x in labels]

    async def score(self, work: Work, backend: Backend) -> Result:
        chat = bool(self.options.get("chat", True))
        labels = self.labels(work)
        values = label_values(labels)
        reversed_scale = bool(work.design and work.design.get("scale") == "reversed")
        if (
            reversed_scale
        ):  # the scale was asked the other way round (data/design.py): map n -> min + max - n
            values = [min(values) + max(values) - v for v in values]
        out = await backend.next_token(
            work.prompt, labels, chat=chat, top_k=int(self.options.get("top_k", 20))
        )
        raw = [float(out.probs.get(lab, 0.0)) for lab in labels]
        mass = sum(raw)
        res = Result(
            item_id=work.item.item_id,
            variant=work.variant,
            prompt=out.prompt or backend.render(work.prompt, chat=chat),
            other=float(out.other),
            top_tokens=[{"token": t.token, "id": t.id, "prob": t.prob} for t in out.top],
            gold=work.gold,
            n_tokens=out.n_tokens,
        )
        res.extra.update(
            label_mass=mass,
            raw_probs=dict(zip(labels, raw, strict=True)),
            label_values=values,
            meta=out.meta,
        )
        if not mass > 0:
            # The model answered, but with no label: an abstention, not a fault to retry.
            return abstain(res, "no probability mass on any label")
        probs = [p / mass for p in raw]
        pred = max(range(len(labels)), key=lambda i: (probs[i], -i))
        expected = sum(v * p for v, p in zip(values, probs, strict=True))
        res.probs = dict(zip(labels, probs, strict=True))
        res.prediction = labels[pred]
        res.confidence = probs[pred]
        res.extra["expected"] = expected
        if work.gold is not None:
            gold_label = None
            if work.gold in labels:
                # on a reversed scale the gold answer is the mirrored label (same canonical value)
                gold_label = (
                    labels[len(labels) - 1 - labels.index(work.gold)]
                    if reversed_scale
                    else work.gold
                )
            else:
                gv = _num(work.gold)
                if gv is not None and all(_num(x) is not None for x in labels):
                    gold_label = next(
                        (lab for lab, v in zip(labels, values, strict=True) if v == gv), None
                    )
            gold_value: float | None
            if gold_label is not None:
                # Tie rule (docs/METRICS.md): a tie is never credited.
                res.correct = strict_win(probs, labels.index(gold_label))
                gold_value = values[labels.index(gold_label)]
            else:
                gold_value = _num(work.gold)
            if gold_value is not None:
                res.extra["gold_value"] = gold_value
                res.extra["abs_error"] = abs(expected - gold_value)
        return res
