"""Plain data types shared by suites, tasks, backends and the store.

Nothing here imports torch, transformers, openai or textual.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Item:
    """One suite item, as stored in the `items` table."""

    item_id: str
    fields: dict[str, Any]
    gold: str | None = None
    options: list[str] | None = None
    text: str = ""  # the main human-readable text (statement, question, sentence)
    line: int = 0  # 1-based line of the source file, for error messages


@dataclass
class Work:
    """One unit of work: an item under one prompt variant."""

    item: Item
    variant: str
    prompt: str  # the user-facing prompt after the suite template, before any chat template
    gold: str | None
    options: list[str] | None = None
    design: dict[str, Any] | None = None  # counterbalancing / few-shot levels (data/design.py)


@dataclass
class TopToken:
    token: str
    id: int | None
    prob: float


@dataclass
class NextTokenOut:
    """Answer probabilities at the first generated position."""

    prompt: str  # exact text fed to the model (after chat template); for APIs the sent message
    probs: dict[str, float]  # answer -> summed probability of its token variants
    other: float  # 1 - sum(probs)
    top: list[TopToken]
    n_tokens: int
    meta: dict[str, Any] = field(default_factory=dict)  # e.g. API rule applied, fingerprint


@dataclass
class LogLikOut:
    """log P(continuation | context), scoring only continuation tokens."""

    logprob: float
    n_tokens: int
    token_logprobs: list[float]
    tokens: list[str]
    n_context_tokens: int = 0
    # every continuation token is the argmax at its position (lm-eval's `is_greedy`); None: not known
    greedy: bool | None = None


@dataclass
class GenerateOut:
    texts: list[str]
    prompt: str
    n_tokens: int = 0
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class Result:
    """One stored row of the `results` table."""

    item_id: str
    variant: str
    prompt: str = ""
    probs: dict[str, float] | None = None
    other: float | None = None
    top_tokens: list[dict[str, Any]] | None = None
    option_scores: dict[str, dict[str, float]] | None = None
    prediction: str | None = None
    gold: str | None = None
    correct: float | None = None
    confidence: float | None = None
    n_tokens: int = 0
    latency_ms: float = 0.0
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ItemDetail:
    """One item of a run as the store returns it: the item's own values and every stored
    variant's row, JSON columns decoded (`Store.item_detail`)."""

    item_id: str
    text: str
    fields: dict[str, Any]
    options: list[str] | None
    variants: list[dict[str, Any]]  # `results` columns by name, in variant order
