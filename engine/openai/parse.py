"""Reading replies: checked log-probabilities, the first position's top-k, texts, token usage."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

# log-probs a hair above 0 are float noise from servers (exp() rounding), not invalid
LOGPROB_SLACK = 1e-6


class InvalidResponse(ValueError):
    """A 200 response whose numbers cannot be right (NaN/inf or positive log-probs, no
    log-probs where the server had them): retried like a transient fault."""


def valid_logprob(value: Any, where: str) -> float:
    """`value` as a log-probability: finite and <= 0 (tiny float noise above 0 clamps to 0)."""
    try:
        lp = float(value)
    except (TypeError, ValueError):
        raise InvalidResponse(f"{where}: log-probability {value!r} is not a number") from None
    if not math.isfinite(lp):
        raise InvalidResponse(f"{where}: log-probability {lp} is not finite")
    if lp > LOGPROB_SLACK:
        raise InvalidResponse(f"{where}: log-probability {lp:g} is above 0")
    return min(lp, 0.0)


def first_top(choice: dict[str, Any], chat: bool) -> list[tuple[str, float]] | None:
    """The (token, logprob) list at the first generated position, best first; None when
    the response has none. Non-finite or positive log-probs, and top-k probabilities
    summing above 1, raise InvalidResponse."""
    lp = choice.get("logprobs")
    if not isinstance(lp, dict):
        return None
    try:
        if chat:
            content = lp.get("content") or []
            if not content or not content[0].get("top_logprobs"):
                return None
            raw = [(str(t["token"]), t["logprob"]) for t in content[0]["top_logprobs"]]
        else:
            tops = lp.get("top_logprobs") or []
            if not tops or not tops[0]:
                return None
            raw = [(str(t), v) for t, v in tops[0].items()]
    except (KeyError, TypeError, AttributeError) as e:
        raise InvalidResponse(f"top_logprobs malformed ({type(e).__name__}: {e})") from None
    entries = [(t, valid_logprob(v, f"top_logprobs[{t!r}]")) for t, v in raw]
    total = sum(math.exp(v) for _, v in entries)
    if total > 1.0 + 1e-3:
        raise InvalidResponse(f"top-k probabilities sum to {total:.4f} > 1")
    entries.sort(key=lambda e: -e[1])
    return entries


def choice_text(choice: dict[str, Any], endpoint: str) -> tuple[str, str | None]:
    """(text, finish_reason) of one choice of a chat or completions reply."""
    if endpoint == "chat":
        text = (choice.get("message") or {}).get("content")
    else:
        text = choice.get("text")
    return (text or "", choice.get("finish_reason"))


def token_usage(datas: Sequence[dict[str, Any]]) -> dict[str, int]:
    """Prompt and completion tokens summed over replies (an odd usage block counts 0)."""
    out = {"prompt_tokens": 0, "completion_tokens": 0}
    for d in datas:
        u = d.get("usage")
        if not isinstance(u, dict):
            continue
        for k in out:
            try:
                out[k] += int(u.get(k) or 0)
            except (TypeError, ValueError):
                pass  # a server's odd usage block must not fail an item
    return out
