"""Work between callers and the model: calls, their jobs and encodings, and how futures are settled."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from typing import Any

from llmscope.engine.backend import BackendError
from llmscope.engine.types import LogLikOut


@dataclass
class Call:
    """One API call: its future resolves once every part has a result, or at the first error.

    Only the worker (or, for encoding errors, the tokenising thread before any part is
    queued) touches `results`/`remaining`, so no lock is needed.
    """

    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop
    n: int
    single: bool  # resolve to the one result instead of a list
    results: list[Any] = field(default_factory=list)
    remaining: int = 0
    done: bool = False

    def __post_init__(self) -> None:
        self.results = [None] * self.n
        self.remaining = self.n

    def dead(self) -> bool:
        return self.done or self.future.cancelled()


@dataclass
class Job:
    """One part of a call, as the model thread batches it."""

    kind: str  # "next" | "loglik" | "gen"
    payload: Any
    call: Call
    slot: int = 0
    length: int = 0
    ctx: tuple[int, ...] = ()  # loglik: the context's token ids (jobs sharing it share its KV)


@dataclass
class Encoded:
    """A tokenised prompt, or a context with its continuation."""

    ids: list[int]
    n_cont: int  # number of scored (continuation) tokens at the end; 0 for next-token jobs
    text: str
    cont_tokens: list[str] = field(default_factory=list)


def loglik_out(e: Encoded, token_logprobs: Any, greedy: Any) -> LogLikOut:
    """The continuation's log-likelihood of an encoded (context, continuation) pair."""
    return LogLikOut(
        logprob=float(math.fsum(token_logprobs)),
        n_tokens=e.n_cont,
        token_logprobs=token_logprobs,
        tokens=e.cont_tokens,
        n_context_tokens=len(e.ids) - e.n_cont,
        greedy=greedy,
    )


def as_backend_error(e: BaseException) -> BackendError:
    """An unexpected exception as a BackendError naming its type."""
    return BackendError(f"{type(e).__name__}: {e}")


def settle(call: Call, value: Any = None, exc: BaseException | None = None) -> None:
    """Settle the call's future from any thread (nothing once it is done or its loop is gone)."""

    def apply() -> None:
        if call.future.done():
            return
        if exc is not None:
            call.future.set_exception(exc)
        else:
            call.future.set_result(value)

    try:
        call.loop.call_soon_threadsafe(apply)
    except RuntimeError:  # the caller's event loop is gone; nobody is waiting
        pass


def resolve(job: Job, value: Any) -> None:
    """Record one job's result; the call's future resolves when its last part is in."""
    call = job.call
    if call.done:
        return
    call.results[job.slot] = value
    call.remaining -= 1
    if call.remaining == 0:
        call.done = True
        settle(call, call.results[0] if call.single else call.results)


def fail(job: Job, exc: BaseException) -> None:
    """Fail the job's call with `exc` (once: the call's other parts are dropped)."""
    call = job.call
    if not call.done:
        call.done = True
        settle(call, exc=exc)
