"""HTTP to the server: round-robin endpoints, retries, the circuit breaker, parameter adaptation.

Every HTTP attempt goes through `_request`: `concurrency` slots per endpoint bound requests in
flight (several base URLs are served round-robin, the replica chosen when one of its slots is
free; engine/fleet.py), 429/5xx/timeouts/connection errors/
malformed or invalid bodies (non-finite or positive log-probs) are retried with
exponential backoff and full jitter (honouring `Retry-After` and `retry-after-ms`), the
same 5xx body three times in a row is a deterministic error (adapted to, or the item's
error), consecutive timeouts/connection failures open a circuit breaker
(`BackendUnavailable`: the run pauses), and other 4xx raise `BackendError` (after the
parameter adaptations in `_adapt`, which `_base_body` and `_finish` apply to later bodies).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import random
import re
from collections.abc import Callable
from typing import Any

import openai

from llmscope.engine.backend import Backend, BackendError, BackendUnavailable
from llmscope.engine.fleet import Fleet
from llmscope.engine.openai.endpoints import public_url
from llmscope.engine.openai.parse import InvalidResponse, token_usage
from llmscope.engine.retry import RetryPolicy, parse_retry_after
from llmscope.engine.textsafety import REDACTED, map_strings

log = logging.getLogger(__name__)

MIN_TOP_LOGPROBS = 5
# params a server may reject that we can simply stop sending (remembered per backend)
_DROPPABLE = ("temperature", "top_p", "seed", "stop", "n", "presence_penalty")
_KNOWN_PARAMS = (
    "top_logprobs",
    "reasoning_effort",
    "max_completion_tokens",
    "max_tokens",
    "logprobs",
    "echo",
    *_DROPPABLE,
)
_EFFORT_LADDER = {"none": "minimal", "minimal": "low", "low": None}  # on rejection
# the same 5xx body this many times in a row for one request is a capability problem,
# not a transient fault (llama.cpp answers a list of prompts with HTTP 500 every time)
DETERMINISTIC_REPEATS = 3
PROBE_RETRIES = (
    2  # a configuration probe fails fast: an unreachable server is not a transient fault
)


class APIRequestError(BackendError):
    """A non-retryable HTTP error (4xx other than 408/429) from the server."""

    def __init__(self, status: int, message: str, param: str | None = None, code: Any = None):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.param = param
        self.code = code


class DeterministicError(APIRequestError):
    """The server gave the same 5xx body `deterministic_after` times in a row for one request."""

    def __init__(self, status: int, message: str, param: str | None, code: Any, repeats: int):
        super().__init__(status, message, param, code)
        self.args = (
            f"HTTP {status}: {message} (the same answer {repeats} times in a row: a "
            "deterministic server error, not retried further)",
        )


class GaveUp(BackendError):
    """Retries exhausted; `kind` is the last fault: connection, timeout, server, malformed, invalid."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


class ModelChanged(Exception):
    """A replica answered with another served model (or fingerprint) than the run's."""


class NoLogprobs(BackendError):
    """The server said it cannot return log-probabilities for this model."""


def param_names(fn: Any) -> set[str]:
    """The keyword parameters an `openai` client method takes (extra_body and timeout aside)."""
    return {p for p in inspect.signature(fn).parameters if p not in ("extra_body", "timeout")}


def _parse_maximum(message: str, requested: int) -> int | None:
    """The largest allowed value stated in an error message, if it says one below `requested`."""
    pats = [
        r"<=\s*(\d+)",
        r"(?:maximum|max)(?: value| allowed)?(?: of| is|:)?\s*(\d+)",
        r"at most\s*(\d+)",
        r"between\s*\d+\s*and\s*(\d+)",
        r"less than or equal to\s*(\d+)",
        r"cannot exceed\s*(\d+)",
    ]
    found = [int(m) for p in pats for m in re.findall(p, message, re.IGNORECASE)]
    found = [v for v in found if v < requested]
    return max(found) if found else None


class HTTPLayer(Backend):
    """The OpenAI backend's HTTP side: requests, retries, adaptation and request bodies.

    The state it reads is set by `OpenAIBackend.__init__` (engine/openai/backend.py).
    """

    model: str
    base_url: str
    seed: int | None
    timeout: float
    policy: RetryPolicy
    system_prompt: str | None
    reasoning_effort: str | None
    fixed_effort: bool
    breaker_after: int
    deterministic_after: int
    notices: list[str]
    _redact: Callable[[str], str]
    _redact_body: Callable[[str], str]
    _rng: random.Random
    _clients: list[openai.AsyncOpenAI]
    _busy: list[int]
    _slot_freed: asyncio.Event
    _expect: tuple[str | None, str | None] | None
    _per_endpoint: list[int]
    _fleet: Fleet
    _pinned: int | None
    _chat_params: set[str]
    _cmpl_params: set[str]
    _pause_until: float
    _c: dict[str, int]
    _in_flight: int
    _down_streak: int
    _breaker: str | None
    _probing: bool
    _held: list[str]
    _warned: set[str]
    _dropped: set[str]
    _k_cap: int
    _max_key: str
    _echo_max_tokens: int
    _efforts_tried: list[str]
    _models_seen: set[str]
    _fingerprints: set[str]

    def _warn_once(self, key: str, message: str) -> None:
        if key in self._warned:
            return
        self._warned.add(key)
        self.notices.append(message)
        if self._probing:
            # held until the probe decides: a run that stops says it in its one error line
            self._held.append(message)
            return
        log.warning(message)

    # ------------------------------------------------------------------ HTTP

    def _split(self, endpoint: str, body: dict[str, Any]) -> dict[str, Any]:
        known = self._chat_params if endpoint == "chat" else self._cmpl_params
        kwargs = {k: v for k, v in body.items() if k in known}
        extra = {k: v for k, v in body.items() if k not in known}
        if extra:
            kwargs["extra_body"] = extra
        return kwargs

    async def _request(
        self,
        endpoint: str,
        body: dict[str, Any],
        check: Callable[[dict[str, Any]], None] | None = None,
        retries: int | None = None,
    ) -> dict[str, Any]:
        """One logical request with retries; returns the parsed JSON body.

        `check` validates a 200 body (raising InvalidResponse); a body that fails is retried
        like a 5xx. The same 5xx body DETERMINISTIC_REPEATS times in a row raises
        DeterministicError; `breaker_after` consecutive timeouts/connection failures open
        the circuit breaker (BackendUnavailable, also for every later request).
        """
        kwargs = self._split(endpoint, body)
        loop = asyncio.get_running_loop()
        max_retries = self.policy.max_retries if retries is None else retries
        last, kind = "no attempt made", "none"
        same: tuple[int, str] | None = None
        repeats = 0
        elsewhere = False  # the last attempt's replica failed and another one is up
        for attempt in range(max_retries + 1):
            elsewhere = False
            if self._breaker:
                raise BackendUnavailable(self._breaker)
            if attempt:
                self._c["retries"] += 1
            wait = self._pause_until - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            retry_after: float | None = None
            # round-robin over the endpoints, per attempt: a retry goes to the next replica
            ep = await self._take_slot()
            client = self._clients[ep]
            api = client.chat.completions if endpoint == "chat" else client.completions
            create = api.with_raw_response.create
            self._c["requests"] += 1
            self._per_endpoint[ep] += 1
            self._in_flight += 1
            try:
                # the client's own timeout covers connect/read/write; the outer bound
                # also catches a server that trickles bytes forever
                raw = await asyncio.wait_for(
                    create(**kwargs, timeout=self.timeout), self.timeout + 1.0
                )
                self._down_streak = 0
                data = json.loads(raw.http_response.content)
                data = self._redact_reply(data)
                if isinstance(data, dict) and "error" in data and not data.get("choices"):
                    raise ValueError(f"an error body with HTTP 200: {str(data['error'])[:200]}")
                if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
                    raise ValueError("no 'choices' list in the response")
                if not data["choices"] or not all(isinstance(c, dict) for c in data["choices"]):
                    raise ValueError("empty or invalid 'choices' in the response")
                self._check_served(ep, data)
                if check is not None:
                    check(data)
                self._fleet.answered(ep)
            except (TimeoutError, openai.APITimeoutError):
                self._c["timeouts"] += 1
                last, kind = f"timed out after {self.timeout:g}s", "timeout"
                elsewhere = self._fleet.failed(ep, last)
                if not elsewhere:  # the breaker counts only when no replica is left
                    self._went_down(last)
            except openai.APIConnectionError as e:
                self._c["connection_errors"] += 1
                cause = e.__cause__ or e
                last = f"connection error: {self._redact(str(cause) or str(e))[:300]}"
                kind = "connection"
                elsewhere = self._fleet.failed(ep, last)
                if not elsewhere:
                    self._went_down(last)
            except openai.APIStatusError as e:
                self._down_streak = 0
                self._fleet.answered(ep)
                status = e.status_code
                message, param, code = self._error_fields(e)
                retry_after = parse_retry_after(e.response.headers)
                if status == 429:
                    self._c["rate_limited"] += 1
                elif status >= 500:
                    self._c["server_errors"] += 1
                elif status == 408:
                    self._c["timeouts"] += 1
                else:
                    raise APIRequestError(status, message, param, code) from None
                last, kind = f"HTTP {status}: {message}", "server"
                sig = (status, message)
                repeats = repeats + 1 if sig == same else 1
                same = sig
                if (
                    status >= 500
                    and retry_after is None
                    and self.deterministic_after
                    and repeats >= self.deterministic_after
                ):
                    self._c["deterministic"] += 1
                    raise DeterministicError(status, message, param, code, repeats) from None
            except ModelChanged as e:
                # its answer is not the run's: never used; the replica is out for good
                self._c["model_changed"] += 1
                last, kind = str(e), "model_changed"
                self._fleet.exclude(ep, "model_changed", last)
                self._warn_once(
                    f"changed:{ep}",
                    f"{self._fleet.replicas[ep].url}: {last}; "
                    "taken out of the rotation, its answers since not used",
                )
                if not self._fleet.usable():
                    self._breaker = (
                        f"no replica serves {(self._expect[0] if self._expect else None) or self.model!r} "
                        f"any more ({last}); the run is paused, resume it when the server "
                        "serves the run's model again"
                    )
                    self.notices.append(self._breaker)
                    raise BackendUnavailable(self._breaker) from None
                elsewhere = True
            except InvalidResponse as e:
                # impossible numbers: a fault of this replica (it leaves the rotation)
                self._c["invalid"] += 1
                last, kind = f"invalid response: {self._redact(str(e))[:300]}", "invalid"
                same, repeats = None, 0
                elsewhere = self._fleet.failed(ep, last)
            except (ValueError, UnicodeDecodeError) as e:
                self._c["malformed"] += 1
                last, kind = f"malformed response: {self._redact(str(e))[:200]}", "malformed"
                same, repeats = None, 0
                elsewhere = self._fleet.failed(ep, last)
            else:
                self._account(data, ep)
                return data
            finally:
                self._in_flight -= 1
                self._release(ep)
            if self._probing and kind in ("connection", "timeout") and attempt >= PROBE_RETRIES:
                break  # an unreachable server is a configuration error at probe time
            if attempt < max_retries:
                if kind == "model_changed" or (
                    elsewhere
                    and self._pinned is None
                    and kind in ("connection", "timeout", "invalid", "malformed")
                ):
                    continue  # another replica is up: retry there without waiting
                delay = self.policy.delay(attempt, retry_after, self._rng)
                if retry_after is not None:
                    # the server asked everyone to hold off, not just this request
                    self._pause_until = max(self._pause_until, loop.time() + delay)
                await asyncio.sleep(delay)
        raise GaveUp(f"giving up after {attempt} retries: {last}", kind)

    async def _take_slot(self) -> int:
        """The replica for the next attempt, chosen when one of its slots is free (waiting for
        the first free slot of any usable replica; the probe's pinned replica while probing)."""
        pinned = self._pinned
        while True:
            if pinned is not None:
                ep = pinned if self._busy[pinned] < self.concurrency else None
            else:
                if not self._fleet.usable():
                    raise BackendUnavailable(self._breaker or "no replica serves the run's model")
                ep = self._fleet.pick(lambda i: self._busy[i] < self.concurrency)
            if ep is not None:
                self._busy[ep] += 1
                return ep
            self._slot_freed.clear()
            wake = None if pinned is not None else self._fleet.next_trial_in()
            try:
                # a slot freed, or a replica's cool-off ended (its trial may go first)
                await asyncio.wait_for(
                    self._slot_freed.wait(), None if wake is None else wake + 0.01
                )
            except TimeoutError:
                pass

    def _release(self, ep: int) -> None:
        self._busy[ep] -= 1
        self._slot_freed.set()

    def _check_served(self, ep: int, data: dict[str, Any]) -> None:
        """Raise ModelChanged when a replica answers with another model than the run's (set by
        the probe; a fleet also checks the fingerprint)."""
        if self._expect is None:
            return
        model, fingerprint = self._expect
        got = data.get("model")
        if model is not None and got is not None and str(got) != model:
            raise ModelChanged(f"now serves model {str(got)[:200]!r}, not {model!r}")
        fp = data.get("system_fingerprint")
        if fingerprint is not None and fp is not None and str(fp) != fingerprint:
            raise ModelChanged(
                f"now answers with fingerprint {str(fp)[:200]!r}, not {fingerprint!r}"
            )

    def _redact_reply(self, data: Any) -> Any:
        """The reply with the key replaced wherever it appears (text, tokens, every field), before
        any check, cache or store sees it (engine/textsafety.py)."""
        data, n = map_strings(data, self._redact_body)
        if n:
            self._c["key_redacted"] += n
            self._warn_once(
                "key_redacted",
                f"{public_url(self.base_url)} sent the API key back in a reply; "
                f"it was replaced by {REDACTED} before anything was stored (rows say key_redacted)",
            )
        return data

    def _went_down(self, last: str) -> None:
        """Count a timeout/connection failure; open the breaker after `breaker_after` in a row."""
        self._down_streak += 1
        if self.breaker_after and self._down_streak >= self.breaker_after and not self._breaker:
            self._breaker = (
                f"{public_url(self.base_url)} stopped answering ({self._down_streak} timeouts or "
                f"connection failures in a row, last: {last}); the run is paused, resume it when "
                "the server is back"
            )
            self.notices.append(self._breaker)  # the runner prints it when it pauses the run
        if self._breaker:
            raise BackendUnavailable(self._breaker)

    def _error_fields(self, e: openai.APIStatusError) -> tuple[str, str | None, Any]:
        body = e.body
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            body = body["error"]
        message = body.get("message") if isinstance(body, dict) else None
        if not message:
            message = e.message
        param = body.get("param") if isinstance(body, dict) else None
        code = body.get("code") if isinstance(body, dict) else None
        return self._redact(str(message))[:2000], param, code

    def _account(self, data: dict[str, Any], ep: int) -> None:
        usage = token_usage([data])
        self._c["prompt_tokens"] += usage["prompt_tokens"]
        self._c["completion_tokens"] += usage["completion_tokens"]
        r = self._fleet.replicas[ep]
        if data.get("model"):
            self._models_seen.add(str(data["model"]))
            r.models.add(str(data["model"]))
        if data.get("system_fingerprint"):
            self._fingerprints.add(str(data["system_fingerprint"]))
            r.fingerprints.add(str(data["system_fingerprint"]))

    async def _adaptive(
        self,
        endpoint: str,
        build: Callable[[], dict[str, Any]],
        check: Callable[[dict[str, Any]], None] | None = None,
        retries: int | None = None,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """`_request` with the body rebuilt after each parameter the server rejected."""
        for _ in range(8):
            body = build()
            try:
                return body, await self._request(endpoint, body, check, retries)
            except APIRequestError as e:
                if not self._adapt(endpoint, e, body):
                    raise
        raise BackendError("the server kept rejecting request parameters")

    def _adapt(self, endpoint: str, e: APIRequestError, body: dict[str, Any]) -> bool:
        """Learn from a 400/422 about a parameter; True when the request should be rebuilt."""
        if e.status not in (400, 422):
            return False
        msg = e.message
        param = e.param if e.param in _KNOWN_PARAMS else None
        if param is None:
            quoted = re.findall(r"['\"`](\w+)['\"`]", msg)
            bare = [p for p in _KNOWN_PARAMS if re.search(rf"\b{p}\b", msg)]
            param = next((p for p in quoted if p in _KNOWN_PARAMS), None) or next(iter(bare), None)
        if param is None:
            return False
        k_key = "top_logprobs" if endpoint == "chat" else "logprobs"
        k_val = body.get(k_key)
        # vLLM says "Requested sample logprobs of 30, which is greater than max allowed: 20"
        # without naming the parameter, hence both names
        if (
            param in ("top_logprobs", "logprobs")
            and isinstance(k_val, int)
            and not isinstance(k_val, bool)
            and k_val > 1
        ):
            cap = _parse_maximum(msg, k_val)
            if cap is not None:
                if cap < MIN_TOP_LOGPROBS:
                    raise BackendError(
                        f"server allows top_logprobs <= {cap}, below the minimum of "
                        f"{MIN_TOP_LOGPROBS}: {msg}"
                    ) from None
                self._k_cap = cap
                self._warn_once("kcap", f"{self.model}: server caps top_logprobs at {cap}")
                return True
        if param == "reasoning_effort" and "reasoning_effort" in body:
            current = body["reasoning_effort"]
            if self.fixed_effort:  # the user asked for this effort: never answer with another
                raise BackendError(
                    f"{self.model}: server rejects --reasoning-effort {current}: {msg}"
                ) from None
            self._efforts_tried.append(str(current))
            self.reasoning_effort = _EFFORT_LADDER.get(current)
            return True
        if param == "max_tokens" and "max_tokens" in body:
            if "max_completion_tokens" in msg:
                self._max_key = "max_completion_tokens"
                return True
            if body.get("echo") and body["max_tokens"] == 0:
                self._echo_max_tokens = 1  # generated tokens are ignored by offset
                return True
        if (
            param in ("logprobs", "top_logprobs", "echo")
            and param in body
            and re.search(
                r"not support|unsupported|not available|not allowed|disabled", msg, re.IGNORECASE
            )
        ):
            raise NoLogprobs(msg)
        if param in _DROPPABLE and param in body:
            self._dropped.add(param)
            self._warn_once(f"drop:{param}", f"{self.model}: server rejects '{param}': {msg}")
            return True
        return False

    # ------------------------------------------------------------------ bodies

    def _base_body(self, message: str, chat: bool, max_tokens: int) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model}
        if chat:
            system = self.system_prompt  # set by engine/config.py (--system-prompt)
            body["messages"] = [
                *([{"role": "system", "content": system}] if system else []),
                {"role": "user", "content": message},
            ]
            body[self._max_key] = max_tokens
        else:
            body["prompt"] = message
            body["max_tokens"] = max_tokens
        if self.seed is not None:
            body["seed"] = self.seed
        if chat and self.reasoning_effort:  # set only for reasoning models or by the user
            body["reasoning_effort"] = self.reasoning_effort
        return body

    def _finish(self, body: dict[str, Any]) -> dict[str, Any]:
        for p in self._dropped:
            body.pop(p, None)
        return body
