"""`yesno`: first-token probabilities of the answers (token variants summed)."""

from __future__ import annotations

from llmscope.engine.backend import Backend
from llmscope.engine.tasks.base import Task, register
from llmscope.engine.types import Result, Work


@register
class YesNoTask(Task):
    """P(yes), P(no), P(other) at the first generated position.

    Options: `chat` (apply the chat template, default true), `top_k` (top tokens stored,
    default 20), `answers` (default ["yes", "no"]), `content_free` (default none: strings
    for contextual calibration, e.g. ["N/A", "", "[MASK]"]; see engine/schemes.py).
    """

    name = "yesno"

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
        mass = sum(out.probs.values())
        correct = None if work.gold is None else float(pred == work.gold.strip().lower())
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
        if self.options.get("content_free"):  # contextual calibration (engine/schemes.py)
            from llmscope.engine.schemes import yesno_calibration

            await yesno_calibration(res, work, backend, self.options, self.answers, self.__dict__.setdefault("_cf", {}))
        return res
