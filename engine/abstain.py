"""Abstention: what a task records when the model gave no evidence for any answer.

A task abstains when nothing it received can rank the answers: no probability mass on any
answer (an API that ignored `logprobs` and whose samples were all off-format), or no option
with a finite log-likelihood. Guessing would turn "no evidence" into a score (a yes/no task
that defaulted to "yes" reached 0.667 accuracy from nothing), so the item gets no prediction.

Recorded: `prediction` None, `confidence` None, `extra["abstained"] = True` and
`extra["abstain_reason"]`. `correct` is 0.0 when the item has gold (an abstention is not a
right answer, so the headline accuracy over all items cannot rise by abstaining) and None
without gold. The metrics report the abstention rate and accuracy over answered items beside it.
"""

from __future__ import annotations

from llmscope.engine.types import Result


def abstain(res: Result, reason: str) -> Result:
    """Mark `res` as an abstention (see the module docstring); returns `res`."""
    res.prediction = None
    res.confidence = None
    res.correct = None if res.gold is None else 0.0
    res.extra["abstained"] = True
    res.extra["abstain_reason"] = reason
    return res


def is_abstention(extra: dict[str, object] | None) -> bool:
    """Whether a stored result's `extra` marks an abstention."""
    return bool(extra and extra.get("abstained"))
