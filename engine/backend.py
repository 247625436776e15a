"""The backend protocol: what a model must answer for the tasks to score items.

Backends are asynchronous: the local backend resolves futures from one batching
thread; API backends await HTTP requests under a concurrency limit. Tasks
(`engine/tasks.py`) turn items into these primitive calls and compute results.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

from llmscope.engine.types import GenerateOut, LogLikOut, NextTokenOut


class BackendError(Exception):
    """A request failed for a reason worth storing with the item (not retried further)."""


class BackendConfigError(BackendError):
    """The backend cannot run at all (unreachable server, key rejected, model missing, a method
    the task needs is unavailable): found before anything is stored; the CLI prints one line."""


class BackendUnavailable(BackendError):
    """The server stopped answering mid-run (circuit breaker open): the run pauses as
    `interrupted` instead of storing an error row for every remaining item."""


@dataclass
class AnswerSet:
    """Named answers to sum over at the next-token position, e.g. {"yes", "no"}.

    Each answer's token variants are found by `engine.answers.normalise_token`.
    """

    answers: list[str]


@dataclass
class GenParams:
    max_new_tokens: int = 32
    temperature: float = 0.0
    top_p: float = 1.0
    n: int = 1
    seed: int | None = 0
    stop: list[str] = field(default_factory=lambda: ["\n"])


class Backend(abc.ABC):
    """A model that can be asked for next-token answer masses, log-likelihoods and text."""

    kind: str = "abstract"

    @abc.abstractmethod
    def describe(self) -> dict[str, Any]:
        """Metadata recorded with the run (model id, revision/hash, dtype, device, versions...)."""

    @abc.abstractmethod
    async def next_token(
        self, prompt: str, answers: list[str], *, chat: bool = True, top_k: int = 20
    ) -> NextTokenOut:
        """Probabilities of each answer (token variants summed) as the first generated token."""

    @abc.abstractmethod
    async def loglik(self, requests: list[tuple[str, str]], *, chat: bool = False) -> list[LogLikOut]:
        """log P(continuation | context) for (context, continuation) pairs.

        With `chat=True` the context is the user message and the continuation the
        start of the assistant's reply.
        """

    async def generate(self, prompt: str, params: GenParams, *, chat: bool = True) -> GenerateOut:
        """Generate text; backends that cannot generate raise BackendError."""
        raise BackendError(f"{self.kind} backend cannot generate text")

    def render(self, prompt: str, *, chat: bool = True) -> str:
        """The exact text the model will see for a user prompt."""
        return prompt

    def stats(self) -> dict[str, Any]:
        """Counters for progress reporting (retries, rate limits, tokens)."""
        return {}

    async def aclose(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Release threads, connections and device memory."""
