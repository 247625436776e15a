"""API-model backend: any OpenAI-compatible server (OpenAI, vLLM, llama.cpp, Ollama...).

`--model openai:<name> [--base-url URL]`. The key comes from `OPENAI_API_KEY` (or the
`api_key` argument) and is only ever handed to the `openai` client: it is not kept in
`describe()`, `stats()`, result `meta` or error messages (which are redacted).

Answer probabilities (`next_token`) come from the top-k log-probabilities of the first
generated token, reduced with one of three rules (`apply_topk_rule`). Models without
log-probabilities (reasoning models, some providers) fall back to an estimate from
sampled answers. Option scoring (`loglik`) uses the completions endpoint with
`echo=True` where the server supports it; otherwise callers use `choice_by_labels` or
`generate` (generate-and-match).

Every HTTP attempt goes through `_request`: a semaphore bounds requests in flight,
429/5xx/timeouts/connection errors/malformed bodies are retried with exponential
backoff and full jitter (honouring `Retry-After` and `retry-after-ms`), and other 4xx
raise `BackendError` (after the parameter adaptations in `_adapt`).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import logging
import math
import os
import random
import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import openai

from llmscope.engine.answers import match_answer
from llmscope.engine.backend import Backend, BackendError, GenParams
from llmscope.engine.retry import RetryPolicy, parse_retry_after
from llmscope.engine.types import GenerateOut, LogLikOut, NextTokenOut, TopToken

log = logging.getLogger(__name__)

OPENAI_URL = "https://api.openai.com/v1"
REASONING_SUFFIX = "Do not include anything else, such as an explanation or reasoning."
CHOICE_INSTRUCTION = "Answer with the letter of the correct option only."
MIN_TOP_LOGPROBS = 5
# o1, o1-mini, o3, o3-pro, o4-mini, gpt-5, gpt-5-mini, gpt-5.1 ... (optionally "org/" prefixed)
_REASONING_NAME = re.compile(r"^(o[134]([-.].*)?|gpt-5([-.].*)?)$", re.IGNORECASE)
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
_LOGLIK_UNSUPPORTED = re.compile(
    r"echo|logprob|not supported|unsupported|chat model|not implemented", re.IGNORECASE
)


class APIRequestError(BackendError):
    """A non-retryable HTTP error (4xx other than 408/429) from the server."""

    def __init__(self, status: int, message: str, param: str | None = None, code: Any = None):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.param = param
        self.code = code


class _NoLogprobs(Exception):
    """The server said it cannot return log-probabilities for this model."""


def is_reasoning_model(model: str) -> bool:
    """True for the o1/o3/o4/gpt-5 families (by the last path component of the name)."""
    return bool(_REASONING_NAME.match(model.rsplit("/", 1)[-1]))


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
    details = {"topk_mass": total, "outside_mass": outside, "missing": missing}
    return probs, other, rule, details


def first_word(text: str | None) -> str:
    """The first whitespace-separated word of a reply ("" when empty)."""
    words = (text or "").split()
    return words[0] if words else ""


def _redactor(secret: str | None) -> Callable[[str], str]:
    if not secret or len(secret) < 4:
        return lambda s: s
    return lambda s: s.replace(secret, "***")


def _public_url(url: str) -> str:
    """The base URL without user:password@ or a query string (they may carry secrets)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def _param_names(fn: Any) -> set[str]:
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


class OpenAIBackend(Backend):
    """An OpenAI-compatible HTTP model (chat and completions endpoints)."""

    kind = "openai"

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        concurrency: int = 8,
        top_logprobs: int = 20,
        seed: int | None = 0,
        max_retries: int = 6,
        timeout: float = 60.0,
        samples: int = 10,
        reasoning: bool | None = None,
        max_tokens: int = 2,
        *,
        logprobs: bool | None = None,
        reasoning_effort: str | None = "minimal",
        sample_max_tokens: int | None = None,
        loglik_batch: int = 8,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
        max_retry_after: float = 300.0,
        jitter_seed: int | None = None,
    ) -> None:
        """See docs/scale-out.md. `model` may carry the `openai:` prefix of `--model`.

        - `concurrency`: requests in flight at once; `timeout`: seconds per HTTP attempt;
          `max_retries`: retries per request (429/5xx/timeouts/malformed bodies).
        - `top_logprobs`: the most top-k asked for (a call's `top_k` may ask for fewer);
          lowered to the server's stated maximum when rejected, never below 5.
        - `logprobs`: None = detect, False = always use the sampled estimate,
          True = try log-probabilities even for reasoning models.
        - `samples`: answers drawn (temperature 1) for the sampled estimate.
        - `reasoning`: None = guess from the model name (o1/o3/o4/gpt-5); reasoning models
          get `reasoning_effort` ("minimal", then "low" if rejected, then none) and
          the suffix REASONING_SUFFIX on yes/no and label prompts.
        - `max_tokens`: tokens generated for the log-probability request (1-2 suffice).
        - `sample_max_tokens`: tokens per sampled answer (default 8, 2048 for reasoning
          models whose hidden reasoning counts against it).
        - `loglik_batch`: (context, continuation) pairs per completions request.
        """
        if model.startswith("openai:"):
            model = model[len("openai:") :]
        self.model = model
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or OPENAI_URL).rstrip("/")
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self._key_source = "argument" if api_key is not None else ("env" if key else "none")
        if not key:
            if urlsplit(self.base_url).hostname == "api.openai.com":
                raise BackendError("OPENAI_API_KEY is not set (needed for api.openai.com)")
            key = "EMPTY"  # local servers (vLLM, llama.cpp) accept any key
        self._redact = _redactor(key)
        self.concurrency = max(1, int(concurrency))
        self.top_logprobs = int(top_logprobs)
        self.seed = seed
        self.timeout = float(timeout)
        self.samples = max(1, int(samples))
        self.max_tokens = max(1, int(max_tokens))
        self.reasoning = is_reasoning_model(model) if reasoning is None else bool(reasoning)
        self.reasoning_effort: str | None = reasoning_effort if self.reasoning else None
        self.sample_max_tokens = sample_max_tokens or (2048 if self.reasoning else 8)
        self.loglik_batch = max(1, int(loglik_batch))
        self.policy = RetryPolicy(
            max_retries=int(max_retries),
            base=backoff_base,
            cap=backoff_cap,
            max_retry_after=max_retry_after,
        )
        self._rng = random.Random(jitter_seed)
        self._client = openai.AsyncOpenAI(
            api_key=key, base_url=self.base_url, max_retries=0, timeout=self.timeout
        )
        self._chat_params = _param_names(self._client.chat.completions.create)
        self._cmpl_params = _param_names(self._client.completions.create)
        self._sem = asyncio.Semaphore(self.concurrency)
        self._pause_until = 0.0
        # what we have learned about the server
        self._logprobs: bool | None = False if logprobs is False else None
        self._logprobs_reason: str | None = "disabled by option" if logprobs is False else None
        if logprobs is None and self.reasoning:
            self._logprobs = False
            self._logprobs_reason = "reasoning model"
        self._k_cap = self.top_logprobs
        self._dropped: set[str] = set()
        self._max_key = "max_completion_tokens" if self.reasoning else "max_tokens"
        self._echo_max_tokens = 0
        self._loglik: bool | None = None
        self._loglik_error: str | None = None
        self._efforts_tried: list[str] = []
        self.notices: list[str] = []
        self._warned: set[str] = set()
        self._models_seen: set[str] = set()
        self._fingerprints: set[str] = set()
        self._c = dict.fromkeys(
            (
                "calls",
                "requests",
                "retries",
                "rate_limited",
                "server_errors",
                "timeouts",
                "connection_errors",
                "malformed",
                "failed",
                "prompt_tokens",
                "completion_tokens",
            ),
            0,
        )
        self._in_flight = 0
        if self._logprobs is False:
            self._warn_once(
                "nologprobs",
                f"{self.model}: log-probabilities not used ({self._logprobs_reason}); "
                f"answer probabilities are estimated from {self.samples} sampled answers",
            )

    # ------------------------------------------------------------------ reporting

    def describe(self) -> dict[str, Any]:
        """Run metadata; never contains the API key."""
        return {
            "backend": self.kind,
            "model": self.model,
            "base_url": _public_url(self.base_url),
            "api_key": self._key_source,  # where it came from, never the key
            "client": f"openai-python {openai.__version__}",
            "versions": {"openai": openai.__version__},
            "concurrency": self.concurrency,
            "top_logprobs": self.top_logprobs,
            "top_logprobs_used": self._k_cap,
            "seed": self.seed,
            "temperature": 0.0,
            "max_tokens": self.max_tokens,
            "max_retries": self.policy.max_retries,
            "timeout": self.timeout,
            "samples": self.samples,
            "sample_max_tokens": self.sample_max_tokens,
            "logprobs": self._logprobs,
            "logprobs_reason": self._logprobs_reason,
            "method": self._method(),
            "reasoning": self.reasoning,
            "reasoning_effort": self.reasoning_effort,
            "reasoning_efforts_rejected": list(self._efforts_tried),
            "reasoning_suffix": REASONING_SUFFIX if self.reasoning else None,
            "loglik": self._loglik_method(),
            "dropped_params": sorted(self._dropped),
            "served_models": sorted(self._models_seen),
            "system_fingerprints": sorted(self._fingerprints),
        }

    def stats(self) -> dict[str, Any]:
        """Counters: `requests` are HTTP attempts, `retries` attempts after the first,
        `failed` calls that ended in BackendError, `calls` public calls made."""
        return {
            **self._c,
            "in_flight": self._in_flight,
            "logprobs": self._logprobs,
            "method": self._method(),
            "top_logprobs_used": self._k_cap,
            "reasoning_effort": self.reasoning_effort,
            "notices": list(self.notices),
        }

    def _method(self) -> str:
        return {True: "logprobs", False: "sampled-estimate"}.get(self._logprobs, "undetected")  # type: ignore[arg-type]

    def _loglik_method(self) -> str:
        if self._loglik is False:
            return "unsupported"
        return f"completions-echo(max_tokens={self._echo_max_tokens})"

    def _warn_once(self, key: str, message: str) -> None:
        if key in self._warned:
            return
        self._warned.add(key)
        self.notices.append(message)
        log.warning(message)

    # ------------------------------------------------------------------ HTTP

    def _split(self, endpoint: str, body: dict[str, Any]) -> dict[str, Any]:
        known = self._chat_params if endpoint == "chat" else self._cmpl_params
        kwargs = {k: v for k, v in body.items() if k in known}
        extra = {k: v for k, v in body.items() if k not in known}
        if extra:
            kwargs["extra_body"] = extra
        return kwargs

    async def _request(self, endpoint: str, body: dict[str, Any]) -> dict[str, Any]:
        """One logical request with retries; returns the parsed JSON body."""
        api = self._client.chat.completions if endpoint == "chat" else self._client.completions
        create = api.with_raw_response.create
        kwargs = self._split(endpoint, body)
        loop = asyncio.get_running_loop()
        last = "no attempt made"
        for attempt in range(self.policy.max_retries + 1):
            if attempt:
                self._c["retries"] += 1
            wait = self._pause_until - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            retry_after: float | None = None
            async with self._sem:
                self._c["requests"] += 1
                self._in_flight += 1
                try:
                    # the client's own timeout covers connect/read/write; the outer bound
                    # also catches a server that trickles bytes forever
                    raw = await asyncio.wait_for(
                        create(**kwargs, timeout=self.timeout), self.timeout + 1.0
                    )
                    data = json.loads(raw.http_response.content)
                    if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
                        raise ValueError("no 'choices' list in the response")
                    if not data["choices"] or not all(isinstance(c, dict) for c in data["choices"]):
                        raise ValueError("empty or invalid 'choices' in the response")
                except (TimeoutError, openai.APITimeoutError):
                    self._c["timeouts"] += 1
                    last = f"timed out after {self.timeout:g}s"
                except openai.APIConnectionError as e:
                    self._c["connection_errors"] += 1
                    last = f"connection error: {self._redact(str(e))}"
                except openai.APIStatusError as e:
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
                    last = f"HTTP {status}: {message}"
                except (ValueError, UnicodeDecodeError) as e:
                    self._c["malformed"] += 1
                    last = f"malformed response: {self._redact(str(e))[:200]}"
                else:
                    self._account(data)
                    return data
                finally:
                    self._in_flight -= 1
            if attempt < self.policy.max_retries:
                delay = self.policy.delay(attempt, retry_after, self._rng)
                if retry_after is not None:
                    # the server asked everyone to hold off, not just this request
                    self._pause_until = max(self._pause_until, loop.time() + delay)
                await asyncio.sleep(delay)
        raise BackendError(f"giving up after {self.policy.max_retries} retries: {last}")

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

    def _account(self, data: dict[str, Any]) -> None:
        usage = self._usage([data])
        self._c["prompt_tokens"] += usage["prompt_tokens"]
        self._c["completion_tokens"] += usage["completion_tokens"]
        if data.get("model"):
            self._models_seen.add(str(data["model"]))
        if data.get("system_fingerprint"):
            self._fingerprints.add(str(data["system_fingerprint"]))

    async def _adaptive(
        self, endpoint: str, build: Callable[[], dict[str, Any]]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """`_request` with the body rebuilt after each parameter the server rejected."""
        for _ in range(8):
            body = build()
            try:
                return body, await self._request(endpoint, body)
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
        if param in ("logprobs", "top_logprobs", "echo") and re.search(
            r"not support|unsupported|not available|not allowed|disabled", msg, re.IGNORECASE
        ):
            raise _NoLogprobs(msg)
        if param in _DROPPABLE and param in body:
            self._dropped.add(param)
            self._warn_once(f"drop:{param}", f"{self.model}: server rejects '{param}': {msg}")
            return True
        return False

    # ------------------------------------------------------------------ bodies

    def _base_body(self, message: str, chat: bool, max_tokens: int) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model}
        if chat:
            system = getattr(self, "system_prompt", None)  # set by engine/config.py (--system-prompt)
            body["messages"] = [*([{"role": "system", "content": system}] if system else []),
                                {"role": "user", "content": message}]
            body[self._max_key] = max_tokens
        else:
            body["prompt"] = message
            body["max_tokens"] = max_tokens
        if self.seed is not None:
            body["seed"] = self.seed
        if chat and self.reasoning and self.reasoning_effort:
            body["reasoning_effort"] = self.reasoning_effort
        return body

    def _finish(self, body: dict[str, Any]) -> dict[str, Any]:
        for p in self._dropped:
            body.pop(p, None)
        return body

    def _user_message(self, prompt: str) -> str:
        if self.reasoning:
            return f"{prompt.rstrip()}\n{REASONING_SUFFIX}"
        return prompt

    @staticmethod
    def _usage(datas: Sequence[dict[str, Any]]) -> dict[str, int]:
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

    def _mark_no_logprobs(self, reason: str) -> None:
        self._logprobs = False
        self._logprobs_reason = reason
        self._warn_once(
            "nologprobs",
            f"{self.model}: the server returns no log-probabilities ({reason}); answer "
            f"probabilities are estimated from {self.samples} sampled answers",
        )

    # ------------------------------------------------------------------ next token

    async def next_token(
        self, prompt: str, answers: list[str], *, chat: bool = True, top_k: int | None = 20
    ) -> NextTokenOut:
        """Answer probabilities at the first generated position (see `apply_topk_rule`)."""
        self._c["calls"] += 1
        try:
            return await self._next_token(prompt, answers, chat, top_k)
        except BackendError:
            self._c["failed"] += 1
            raise

    async def _next_token(
        self, prompt: str, answers: list[str], chat: bool, top_k: int | None
    ) -> NextTokenOut:
        message = self._user_message(prompt)
        if self._logprobs is False:
            return await self._sampled(message, answers, chat)
        want_k = min(top_k or self.top_logprobs, self.top_logprobs)

        def build() -> dict[str, Any]:
            k = min(want_k, self._k_cap)
            body = self._base_body(message, chat, self.max_tokens)
            body["temperature"] = 0.0
            if chat:
                body["logprobs"] = True
                body["top_logprobs"] = k
            else:
                body["logprobs"] = k
            return self._finish(body)

        try:
            body, data = await self._adaptive("chat" if chat else "completions", build)
        except _NoLogprobs as e:
            self._mark_no_logprobs(f"server: {e}")
            return await self._sampled(message, answers, chat)
        choice = data["choices"][0]
        top = self._first_top(choice, chat)
        if top is None:
            if self._logprobs is None:
                self._mark_no_logprobs("response without logprobs")
                return await self._sampled(message, answers, chat)
            raise BackendError("response without logprobs (earlier responses had them)")
        self._logprobs = True
        probs, other, rule, details = apply_topk_rule(top, answers)
        text = (choice.get("message") or {}).get("content") if chat else choice.get("text")
        k_sent = body.get("top_logprobs", body.get("logprobs"))
        usage = self._usage([data])
        meta = {
            "method": "logprobs",
            "rule": rule,
            "top_logprobs": [(t, lp) for t, lp in top],
            "top_k": k_sent,
            **details,
            "text": text,
            "system_fingerprint": data.get("system_fingerprint"),
            "model": data.get("model"),
            "seed": body.get("seed"),
            "usage": usage,
            "endpoint": "chat" if chat else "completions",
        }
        if "reasoning_effort" in body:
            meta["reasoning_effort"] = body["reasoning_effort"]
        return NextTokenOut(
            prompt=message,
            probs=probs,
            other=other,
            top=[TopToken(t, None, math.exp(lp)) for t, lp in top],
            n_tokens=usage["prompt_tokens"],
            meta=meta,
        )

    @staticmethod
    def _first_top(choice: dict[str, Any], chat: bool) -> list[tuple[str, float]] | None:
        lp = choice.get("logprobs")
        if not isinstance(lp, dict):
            return None
        try:
            if chat:
                content = lp.get("content") or []
                if not content or not content[0].get("top_logprobs"):
                    return None
                entries = [
                    (str(t["token"]), float(t["logprob"])) for t in content[0]["top_logprobs"]
                ]
            else:
                tops = lp.get("top_logprobs") or []
                if not tops or not tops[0]:
                    return None
                entries = [(str(t), float(v)) for t, v in tops[0].items()]
        except (KeyError, TypeError, ValueError, AttributeError):
            return None
        entries.sort(key=lambda e: -e[1])
        return entries

    async def _texts(
        self, endpoint: str, make: Callable[[int, int], dict[str, Any]], n: int
    ) -> tuple[list[tuple[str, str | None]], list[dict[str, Any]], dict[str, Any]]:
        """`n` (text, finish_reason) pairs; servers that ignore or reject `n` are topped
        up with single requests, each with its own seed so that they differ."""
        body, data = await self._adaptive(endpoint, lambda: make(n, 0))
        datas = [data]
        out = [self._choice_text(c, endpoint) for c in data["choices"]][:n]
        missing = n - len(out)
        if missing > 0:
            results = await asyncio.gather(
                *(
                    self._adaptive(endpoint, functools.partial(make, 1, len(out) + i))
                    for i in range(missing)
                )
            )
            for _, d in results:
                datas.append(d)
                out.extend(self._choice_text(c, endpoint) for c in d["choices"][:1])
        return out, datas, body

    @staticmethod
    def _choice_text(choice: dict[str, Any], endpoint: str) -> tuple[str, str | None]:
        if endpoint == "chat":
            text = (choice.get("message") or {}).get("content")
        else:
            text = choice.get("text")
        return (text or "", choice.get("finish_reason"))

    async def _sampled(self, message: str, answers: list[str], chat: bool) -> NextTokenOut:
        """Distribution estimated from `samples` answers at temperature 1 (first word)."""
        endpoint = "chat" if chat else "completions"

        def make(n: int, offset: int) -> dict[str, Any]:
            body = self._base_body(message, chat, self.sample_max_tokens)
            body["temperature"] = 1.0
            if n > 1:
                body["n"] = n
            if self.seed is not None:
                body["seed"] = self.seed + offset
            return self._finish(body)

        pairs, datas, body = await self._texts(endpoint, make, self.samples)
        words = [first_word(t) for t, _ in pairs]
        labels = [match_answer(w, answers) for w in words]
        n = len(pairs)
        counts = Counter(a for a in labels if a is not None)
        probs = {a: counts.get(a, 0) / n for a in answers}
        unmatched = sum(1 for a in labels if a is None)
        word_counts = Counter(words)
        usage = self._usage(datas)
        meta = {
            "method": "sampled-estimate",
            "rule": "sampled-first-word",
            "n": n,
            "counts": {a: counts.get(a, 0) for a in answers},
            "samples": [t[:200] for t, _ in pairs],
            "finish_reasons": [f for _, f in pairs],
            "temperature": 1.0,
            "system_fingerprint": datas[0].get("system_fingerprint"),
            "model": datas[0].get("model"),
            "seed": body.get("seed"),
            "usage": usage,
            "logprobs_reason": self._logprobs_reason,
            "endpoint": endpoint,
        }
        if "reasoning_effort" in body:
            meta["reasoning_effort"] = body["reasoning_effort"]
        return NextTokenOut(
            prompt=message,
            probs=probs,
            other=unmatched / n,
            top=[TopToken(w, None, c / n) for w, c in word_counts.most_common(20)],
            n_tokens=self._usage(datas[:1])["prompt_tokens"],
            meta=meta,
        )

    # ------------------------------------------------------------------ choices

    async def choice_by_labels(
        self,
        prompt: str,
        options: list[str],
        *,
        chat: bool = True,
        top_k: int | None = 20,
        labels: list[str] | None = None,
    ) -> NextTokenOut:
        """Options shown as labels A, B, C...; the top-k rule is applied to the labels.

        `probs` is keyed by option text; `meta["labels"]` maps label -> option and
        `meta["label_probs"]` keeps the per-label numbers.
        """
        labels = labels or [chr(ord("A") + i) for i in range(len(options))]
        if len(labels) < len(options):
            raise BackendError(f"{len(options)} options but only {len(labels)} labels")
        if len(set(options)) != len(options):
            raise BackendError("choice_by_labels needs distinct option texts")
        labels = labels[: len(options)]
        listing = "\n".join(f"{lab}. {opt}" for lab, opt in zip(labels, options, strict=True))
        text = f"{prompt.rstrip()}\n\n{listing}\n\n{CHOICE_INSTRUCTION}"
        out = await self.next_token(text, labels, chat=chat, top_k=top_k)
        label_probs = dict(out.probs)
        out.probs = {opt: label_probs[lab] for lab, opt in zip(labels, options, strict=True)}
        out.meta["choice_method"] = "labels"
        out.meta["labels"] = dict(zip(labels, options, strict=True))
        out.meta["label_probs"] = label_probs
        return out

    # ------------------------------------------------------------------ loglik

    async def loglik(
        self, requests: list[tuple[str, str]], *, chat: bool = False
    ) -> list[LogLikOut]:
        """log P(continuation | context) via the completions endpoint with echo=True.

        Trailing spaces of the context move to the continuation (as the HF backend and
        lm-evaluation-harness do: tokenisers attach a space to the following word). Scored tokens are those whose `text_offset` is
        at/after the context length, plus a token straddling the boundary.
        """
        self._c["calls"] += 1
        try:
            if chat:
                raise BackendError(
                    "chat log-likelihoods are not available through an OpenAI-compatible API "
                    "(the chat template is applied server-side); use choice_by_labels() or "
                    "generate-and-match"
                )
            if self._loglik is False:
                raise BackendError(self._loglik_error or "loglik unsupported")
            batches = [
                requests[i : i + self.loglik_batch]
                for i in range(0, len(requests), self.loglik_batch)
            ]
            results = await asyncio.gather(*(self._loglik_batch(b) for b in batches))
            return [r for batch in results for r in batch]
        except BackendError:
            self._c["failed"] += 1
            raise

    def _unsupported(self, why: str) -> BackendError:
        if self._loglik is not True:
            self._loglik = False
            self._loglik_error = (
                f"{self.model} at {_public_url(self.base_url)} does not return prompt "
                f"log-probabilities (completions endpoint with echo=True: {why}); score "
                "options with choice_by_labels() (label top-k) or generate-and-match"
            )
            self._warn_once("nologlik", self._loglik_error)
            return BackendError(self._loglik_error)
        return BackendError(f"completions echo failed: {why}")

    async def _loglik_batch(self, pairs: list[tuple[str, str]]) -> list[LogLikOut]:
        shifted = []
        for ctx, cont in pairs:
            stripped = ctx.rstrip(" ")
            shifted.append((stripped, ctx[len(stripped) :] + cont))
        prompts = [c + x for c, x in shifted]

        def build() -> dict[str, Any]:
            body = {
                "model": self.model,
                "prompt": prompts if len(prompts) > 1 else prompts[0],
                "echo": True,
                "logprobs": 1,
                "max_tokens": self._echo_max_tokens,
                "temperature": 0.0,
            }
            if self.seed is not None:
                body["seed"] = self.seed
            return self._finish(body)

        try:
            _, data = await self._adaptive("completions", build)
        except _NoLogprobs as e:
            raise self._unsupported(str(e)) from None
        except APIRequestError as e:
            if e.status in (404, 405) or (
                e.status in (400, 422) and _LOGLIK_UNSUPPORTED.search(e.message)
            ):
                raise self._unsupported(f"HTTP {e.status}: {e.message}") from None
            raise
        choices = sorted(data["choices"], key=lambda c: c.get("index", 0))
        if len(choices) != len(prompts):
            raise BackendError(f"{len(prompts)} prompts but {len(choices)} choices returned")
        out = []
        for (ctx, cont), full, choice in zip(shifted, prompts, choices, strict=True):
            lp = choice.get("logprobs")
            if not isinstance(lp, dict) or not lp.get("text_offset") or not lp.get("tokens"):
                raise self._unsupported("response without logprobs.text_offset")
            lens = {len(lp.get(k) or []) for k in ("tokens", "token_logprobs", "text_offset")}
            if len(lens) != 1:
                raise BackendError(
                    "malformed echo logprobs: tokens/token_logprobs/text_offset differ"
                )
            out.append(self._score(ctx, cont, full, lp))
        self._loglik = True
        return out

    @staticmethod
    def _score(ctx: str, cont: str, full: str, lp: dict[str, Any]) -> LogLikOut:
        tokens = list(lp["tokens"])
        lps = list(lp["token_logprobs"])
        offsets = [int(o) for o in lp["text_offset"]]
        ctx_len, end = len(ctx), len(full)
        picked: list[int] = []
        n_ctx = 0
        for i, off in enumerate(offsets):
            nxt = offsets[i + 1] if i + 1 < len(offsets) else off + len(tokens[i])
            if off >= end:
                break  # generated tokens (max_tokens=1 fallback)
            if lps[i] is None and nxt == off:
                continue  # a zero-width special token such as BOS
            if off >= ctx_len or nxt > ctx_len:
                picked.append(i)
            else:
                n_ctx += 1
        if cont and not picked:
            raise BackendError("no continuation tokens in the echoed prompt")
        vals = []
        for i in picked:
            if lps[i] is None:
                raise BackendError("the continuation's first token has no logprob (empty context?)")
            vals.append(float(lps[i]))
        return LogLikOut(
            logprob=float(sum(vals)),
            n_tokens=len(picked),
            token_logprobs=vals,
            tokens=[tokens[i] for i in picked],
            n_context_tokens=n_ctx,
        )

    # ------------------------------------------------------------------ generate

    async def generate(self, prompt: str, params: GenParams, *, chat: bool = True) -> GenerateOut:
        """Text from the chat (or completions, chat=False) endpoint; `n` texts.

        Reasoning models get at least `sample_max_tokens` tokens (hidden reasoning counts)."""
        self._c["calls"] += 1
        endpoint = "chat" if chat else "completions"
        max_new = params.max_new_tokens
        if self.reasoning:
            max_new = max(max_new, self.sample_max_tokens)

        def make(n: int, offset: int) -> dict[str, Any]:
            body = self._base_body(prompt, chat, max_new)
            body["temperature"] = params.temperature
            body["top_p"] = params.top_p
            if n > 1:
                body["n"] = n
            if params.seed is not None:
                body["seed"] = params.seed + offset
            else:
                body.pop("seed", None)
            if params.stop:
                body["stop"] = list(params.stop)
            return self._finish(body)

        try:
            pairs, datas, body = await self._texts(endpoint, make, max(1, params.n))
        except _NoLogprobs as e:  # cannot happen without logprobs in the body; be explicit
            self._c["failed"] += 1
            raise BackendError(str(e)) from None
        except BackendError:
            self._c["failed"] += 1
            raise
        usage = self._usage(datas)
        meta = {
            "method": endpoint,
            "model": datas[0].get("model"),
            "system_fingerprint": datas[0].get("system_fingerprint"),
            "finish_reasons": [f for _, f in pairs],
            "usage": usage,
            "seed": body.get("seed"),
            "dropped_params": sorted(self._dropped),
        }
        if "reasoning_effort" in body:
            meta["reasoning_effort"] = body["reasoning_effort"]
        return GenerateOut(
            texts=[t for t, _ in pairs],
            prompt=prompt,
            n_tokens=self._usage(datas[:1])["prompt_tokens"],
            meta=meta,
        )

    # ------------------------------------------------------------------ misc

    async def probe(self) -> dict[str, Any]:
        """One tiny yes/no request so that describe() reports log-probability support,
        the top-k cap and the accepted reasoning effort before a run starts."""
        await self.next_token("Answer yes or no: is water wet?", ["yes", "no"])
        return self.describe()

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._client.close()
