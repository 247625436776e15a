"""`yesno`: first-token probabilities of the answers (token variants summed)."""

from __future__ import annotations

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


@register
class YesNoTask(Task):
    """P(yes), P(no), P(other) at the first generated position.

    Options: `chat` (apply the chat template, default true), `top_k` (top tokens stored,
    default 20), `answers` (default ["yes", "no"]), `content_free` (default none: strings
    for contextual calibration, e.g. ["N/A", "", "[MASK]"]; see engine/schemes.py).
    """

    name = "yesno"
    summary = "first-token probabilities of yes/no answers"
    default_answers = ("yes", "no")
    design_options = frozenset({"answer_orders"})
    needs = frozenset({"next_token"})
    predicts_option = True
    default_method = "next-token"
    metric_producers = (
        "yesno",
        "calibration",
        "commonsense",
        "human_correlation",
        "abstention",
        "fewshot_bias",
    )
    item_fields = (
        *COMMON_ITEM_FIELDS,
        ItemField("probs", "answer probabilities", "json", column=False),
        ItemField("other", "other mass", "prob"),
    )
    option_specs = (
        chat_option(True),
        OptionSpec("top_k", "int", 20, "top tokens read at the answer position", min=1),
        OptionSpec(
            "content_free",
            "list[str]",
            None,
            "content-free inputs for contextual calibration, averaged (engine/schemes.py)",
        ),
        OptionSpec(
            "answer_orders",
            "bool",
            False,
            "also ask every prompt with the two answers swapped (@swap)",
        ),
        FEWSHOT_OPTION,
    )

    @classmethod
    def gold_problem(cls, gold: str, options: list[str] | None, suite: SuiteLike) -> str | None:
        labels = suite.answers or list(cls.default_answers or ())
        if gold.strip().lower() not in labels:
            return f"gold {gold!r} is not one of the answers {labels} (compared lower-cased)"
        return None

    @property
    def answers(self) -> list[str]:
        return list(self.options.get("answers") or ["yes", "no"])

    async def score(self, work: Work, backend: Backend) -> Result:
        out = await backend.next_token(
            work.prompt,
            self.answers,
            chat=bool(self.options.get("chat", True)),
            top_k=int(self.options.get("top_k", 20)),
        )
        # The prediction is the likelier answer; "other" mass never wins (it is not an answer).
        pred = max(self.answers, key=lambda a: out.probs.get(a, 0.0))
        mass = sum(v for v in out.probs.values() if v == v)
        # Tie rule (docs/METRICS.md): the first listed answer is shown, a tie is never credited.
        scores = [out.probs.get(a, 0.0) for a in self.answers]
        g = work.gold.strip().lower() if work.gold is not None else None
        correct = (
            None
            if g is None
            else (strict_win(scores, self.answers.index(g)) if g in self.answers else 0.0)
        )
        extra = dict(out.meta)
        res = Result(
            item_id=work.item.item_id,
            variant=work.variant,
            prompt=out.prompt,
            probs=out.probs,
            other=out.other,
            top_tokens=[{"token": t.token, "id": t.id, "prob": t.prob} for t in out.top],
            prediction=pred,
            gold=work.gold,
            correct=correct,
            # Confidence among the answers, so calibration is not dominated by "other" mass.
            confidence=(out.probs[pred] / mass) if mass > 0 else None,
            n_tokens=out.n_tokens,
            extra=extra,
        )
        if not mass > 0:
            # No mass on any answer is no evidence: abstain rather than default to the first answer.
            return abstain(res, "no probability mass on any answer")
        if self.options.get("content_free"):  # contextual calibration (engine/schemes.py)
            from llmscope.engine.schemes import yesno_calibration

            await yesno_calibration(
                res, work, backend, self.options, self.answers, self.__dict__.setdefault("_cf", {})
            )
        return res
