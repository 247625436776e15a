"""The backend protocol: what a model must answer for the tasks to score items.

Backends are asynchronous: the local backend resolves futures from one batching
thread; API backends await HTTP requests under a concurrency limit. Tasks
(`engine/tasks/`) turn items into these primitive calls and compute results; they ask a
backend's `capabilities` what it can answer instead of probing its attributes.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any

from llmscope.engine.start_tokens import StartTokens, from_tokenizer
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


@dataclass(frozen=True)
class Capabilities:
    """What a backend can answer; a task lists the names it needs (`Task.needs`).

    True: offered; False: not offered; None: not known until the backend's `probe`
    (API servers differ). A task stops before the run when a capability it needs is False.
    """

    next_token: bool | None = True  # answer probabilities at the first generated position
    exact_next_token: bool | None = False  # the full next-token distribution (not top-k or sampled)
    loglik: bool | None = True  # log P(continuation | context) of given text
    local_loglik: bool = False  # log-likelihoods computed in-process: exact and cheap
    batched_prompts: bool | None = False  # several prompts answered in one request
    generate: bool | None = False  # free text generation
    chat: bool | None = True  # a chat template to pass prompts through
    reasoning: bool = False  # a reasoning model (hidden thinking before the answer)
    prompt_logprobs: bool | None = False  # per-token log-probs of the prompt (vLLM)
    tokenizer: bool = False  # the backend's tokenizer is at hand (`backend.tok`)
    label_choice: bool = False  # `choice_by_labels`: options as letters under the top-k rule

    def missing(self, names: Iterable[str]) -> list[str]:
        """The ``names`` this backend does not offer (unknown ones count as offered)."""
        known = {f.name for f in fields(self)}
        bad = [n for n in names if n not in known]
        if bad:
            raise ValueError(f"unknown capability {bad[0]!r}; known: {', '.join(sorted(known))}")
        return [n for n in names if getattr(self, n) is False]

    def to_dict(self) -> dict[str, Any]:
        """The capabilities as recorded with a run."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


class Backend(abc.ABC):
    """A model that can be asked for next-token answer masses, log-likelihoods and text."""

    kind: str = "abstract"
    # Local models: the tokenizer and whether it starts a text with BOS (capability `tokenizer`).
    tok: Any = None
    add_bos: bool = False

    @property
    def capabilities(self) -> Capabilities:
        """What this backend can answer. The default, for backends that declare nothing:
        next-token answers and log-likelihoods, generation when the subclass implements
        `generate`, in-process log-likelihoods for the local kind ("hf"), and a tokenizer
        when `tok` is set."""
        return Capabilities(
            generate=type(self).generate is not Backend.generate,
            local_loglik=self.kind == "hf",
            tokenizer=self.tok is not None,
        )

    def start_tokens(self) -> StartTokens | None:
        """What an empty context and the document separator are, as text (engine/start_tokens.py);
        from the local tokenizer here, from the server for API backends; None when unknown."""
        return from_tokenizer(self.tok, self.add_bos) if self.tok is not None else None

    async def probe(
        self, task: Any = None, options: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Check the configuration before a run stores anything (API backends ask the
        server here and learn its capabilities); returns `describe()`. `task` is the
        task's name (API backends probe what it needs). Raises BackendConfigError."""
        return self.describe()

    @abc.abstractmethod
    def describe(self) -> dict[str, Any]:
        """Metadata recorded with the run (model id, revision/hash, dtype, device, versions...)."""

    @abc.abstractmethod
    async def next_token(
        self, prompt: str, answers: list[str], *, chat: bool = True, top_k: int = 20
    ) -> NextTokenOut:
        """Probabilities of each answer (token variants summed) as the first generated token."""

    @abc.abstractmethod
    async def loglik(
        self, requests: list[tuple[str, str]], *, chat: bool = False
    ) -> list[LogLikOut]:
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
