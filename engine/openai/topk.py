"""Answer probabilities from a top-k log-prob list (three rules) or from sampled first words."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from llmscope.engine.answers import match_answer


def apply_topk_rule(
    top: Sequence[tuple[str, float]], answers: Sequence[str]
) -> tuple[dict[str, float], float, str, dict[str, Any]]:
    """Answer probabilities from the top-k (token, logprob) list of one position.

    Token variants are summed per answer with `match_answer`. With S the top-k mass
    and m_a the top-k mass of answer a:

    - every answer present ("all-present"): P(a) = m_a / S, P(other) = (S - sum m) / S;
    - some present, some missing ("some-missing"): present answers keep m_a, the
      mass outside the top-k, 1 - S, is shared equally by the missing answers,
      P(other) = S - sum m (the top-k mass of other tokens);
    - none present ("none-present"): 1 - S is shared equally by all answers,
      P(other) = S.

    For yes/no these are exactly "both present / only one present / neither present".
    Returns (probs, other, rule, details).
    """
    mass = {a: 0.0 for a in answers}
    total = 0.0
    for tok, lp in top:
        p = math.exp(lp)
        total += p
        a = match_answer(tok, answers)
        if a is not None:
            mass[a] += p
    outside = max(0.0, 1.0 - total)
    present = [a for a in answers if mass[a] > 0.0]
    missing = [a for a in answers if mass[a] <= 0.0]
    answer_mass = sum(mass.values())
    if not missing:
        rule = "all-present"
        probs = {a: mass[a] / total for a in answers}
        other = max(0.0, (total - answer_mass) / total)
    elif present:
        rule = "some-missing"
        share = outside / len(missing)
        probs = {a: (mass[a] if a in present else share) for a in answers}
        other = max(0.0, total - answer_mass)
    else:
        rule = "none-present"
        share = outside / len(answers)
        probs = {a: share for a in answers}
        other = min(1.0, total)
    # The raw top-k numbers beside the rule's result: how much mass the rule saw and the
    # bounds it implies (an answer has at least its seen mass, at most that plus all unseen mass).
    details = {
        "topk_mass": total,
        "outside_mass": outside,
        "missing": missing,
        "raw_probs": dict(mass),
        "prob_bounds": {a: [mass[a], min(1.0, mass[a] + outside)] for a in answers},
    }
    return probs, other, rule, details


def first_word(text: str | None) -> str:
    """The first whitespace-separated word of a reply ("" when empty)."""
    words = (text or "").split()
    return words[0] if words else ""
