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

Every HTTP attempt goes through `_request`: a semaphore per endpoint bounds requests in
flight (several base URLs are served round-robin), 429/5xx/timeouts/connection errors/
malformed or invalid bodies (non-finite or positive log-probs) are retried with
exponential backoff and full jitter (honouring `Retry-After` and `retry-after-ms`), the
same 5xx body three times in a row is a deterministic error (adapted to, or the item's
error), consecutive timeouts/connection failures open a circuit breaker
(`BackendUnavailable`: the run pauses), and other 4xx raise `BackendError` (after the
parameter adaptations in `_adapt`).

`probe(task)` runs before a run stores anything: it raises `BackendConfigError` (one line
in the CLI) for an unreachable server, a rejected key, a missing model or a task the
server cannot score, and records `capabilities` and `method_choice` in `describe()`.
Prompt log-likelihoods come from vLLM's `prompt_logprobs` or completions echo, each
accepted only when it agrees with next-token log-probs of the same tokens (`_check_echo`).
"""

from __future__ import annotations

import asyncio
import base64
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
from llmscope.engine.backend import (
    Backend,
    BackendConfigError,
    BackendError,
    BackendUnavailable,
    Capabilities,
    GenParams,
)
from llmscope.engine.fleet import Fleet
from llmscope.engine.retry import RetryPolicy, parse_retry_after
from llmscope.engine.start_tokens import StartTokens
from llmscope.engine.start_tokens import from_vllm as start_tokens_from_vllm
from llmscope.engine.textsafety import REDACTED, key_redactor, map_strings
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
# the same 5xx body this many times in a row for one request is a capability problem,
# not a transient fault (llama.cpp answers a list of prompts with HTTP 500 every time)
DETERMINISTIC_REPEATS = 3
# log-probs a hair above 0 are float noise from servers (exp() rounding), not invalid
LOGPROB_SLACK = 1e-6
PROBE_RETRIES = 2  # a configuration probe fails fast: an unreachable server is not a transient fault
PROBE_REPEATS = 3  # "no log-probs" must be the answer to this many probe requests, not one
ECHO_CHECK_CONTEXT = "The capital of France is"
ECHO_CHECK_TOL = 0.05  # nats: echo and next-token log-probs of the same token must agree


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


class _GaveUp(BackendError):
    """Retries exhausted; `kind` is the last fault: connection, timeout, server, malformed, invalid."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


class _NoLogprobs(BackendError):
    """The server said it cannot return log-probabilities for this model."""


def prompt_logprobs_as_echo(choice: dict[str, Any], full: str) -> dict[str, Any]:
    """vLLM's `prompt_logprobs` for one prompt, in the echo shape `_score` reads.

    vLLM returns, per prompt token, None (the first) or {token_id: {"logprob", "rank",
    "decoded_token"}} holding the prompt token (and top alternatives when asked for);
    `prompt_token_ids` names the prompt token. Text offsets are rebuilt from the end of
    the prompt, since the first token's text is not returned.
    """
    pl = choice.get("prompt_logprobs")
    if not isinstance(pl, list) or not pl:
        raise InvalidResponse("response without prompt_logprobs")
    ids = choice.get("prompt_token_ids")
    if ids is not None and (not isinstance(ids, list) or len(ids) != len(pl)):
        raise InvalidResponse("prompt_token_ids and prompt_logprobs differ in length")
    tokens: list[str] = []
    lps: list[float | None] = []
    for i, entry in enumerate(pl):
        if entry is None:
            tokens.append("")
            lps.append(None)
            continue
        if not isinstance(entry, dict) or not entry:
            raise InvalidResponse(f"prompt_logprobs[{i}] is not a token dict")
        if ids is not None:
            got = entry.get(str(ids[i]))
        elif len(entry) == 1:
            got = next(iter(entry.values()))
        else:
            raise InvalidResponse("prompt_logprobs without prompt_token_ids: cannot tell the prompt token")
        if not isinstance(got, dict) or "logprob" not in got:
            raise InvalidResponse(f"prompt_logprobs[{i}] lacks the prompt token's log-prob")
        tokens.append(str(got.get("decoded_token") or ""))
        lps.append(valid_logprob(got["logprob"], f"prompt token {i}"))
    tail = "".join(tokens)
    if not full.endswith(tail):
        # not a transient fault (e.g. a character split over byte-level tokens decodes to
        # U+FFFD): the same request gives the same text, so the item fails at once, saying why
        raise BackendError(
            "vLLM prompt_logprobs: the decoded prompt tokens do not spell the prompt "
            f"(...{tail[-40:]!r} vs ...{full[-40:]!r}); the continuation boundary cannot be placed"
        )
    offsets = []
    pos = len(full) - len(tail)
    tokens[0] = full[:pos] if lps[0] is None else tokens[0]
    pos = 0
    for t in tokens:
        offsets.append(pos)
        pos += len(t)
    return {"tokens": tokens, "token_logprobs": lps, "text_offset": offsets}


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


_AUTH_VALUE = re.compile(
    r"((?:proxy-)?authorization['\"]?\s*[:=]\s*['\"]?)(?:(?:bearer|basic|token)\s+)?[^\s'\",;}\]]+",
    re.IGNORECASE,
)
_SCHEME_VALUE = re.compile(r"\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}", re.IGNORECASE)
_USERINFO = re.compile(r"(\w+://)[^/\s@]+@")


def _secret_forms(secret: str) -> list[str]:
    """The key and the encodings it may travel in. HTTP Basic puts base64("user:key") on the
    wire, so the key's base64 sits at one of three byte alignments inside a longer blob: for
    each, keep the characters that depend on key bytes only."""
    raw = secret.encode()
    forms = {secret, base64.b64encode(raw).decode().rstrip("=")}
    for shift in (0, 1, 2):
        enc = base64.b64encode(b"\0" * shift + raw).decode()
        start = -(-shift // 3) * 4
        end = ((shift + len(raw)) // 3) * 4
        if end - start >= 8:
            forms.add(enc[start:end])
    return sorted(forms, key=len, reverse=True)


def _redactor(secret: str | None) -> Callable[[str], str]:
    """Redact the key, its base64 forms, any Authorization value and URL userinfo."""
    forms = _secret_forms(secret) if secret and len(secret) >= 4 and secret != "EMPTY" else []

    def redact(text: str) -> str:
        for f in forms:
            text = text.replace(f, "***")
        text = _AUTH_VALUE.sub(lambda m: m.group(1) + "***", text)
        text = _SCHEME_VALUE.sub(lambda m: m.group(1) + " ***", text)
        return _USERINFO.sub(lambda m: m.group(1) + "***@", text)

    return redact


def _public_url(url: str) -> str:
    """The base URL without user:password@ or a query string (they may carry secrets)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def expand_base_urls(value: str | Sequence[str] | None) -> list[str]:
    """Base URLs from one string or a list; `@FILE` items read one URL per line (blank
    lines and `#` comments skipped). Trailing slashes are dropped."""
    if value is None:
        return []
    items = [value] if isinstance(value, str) else list(value)
    out: list[str] = []
    for item in items:
        item = str(item).strip()
        if item.startswith("@"):
            path = item[1:]
            try:
                with open(path, encoding="utf-8") as f:
                    lines = [ln.split("#", 1)[0].strip() for ln in f]
            except OSError as e:
                raise BackendConfigError(f"--base-url {item}: cannot read {path}: {e.strerror or e}") from None
            found = [ln for ln in lines if ln]
            if not found:
                raise BackendConfigError(f"--base-url {item}: no URLs in {path}")
            out.extend(found)
        elif item:
            out.append(item)
    return [u.rstrip("/") for u in out]


def _check_base_url(url: str) -> None:
    """Refuse a base URL that would leak or mis-send the key (userinfo goes out as HTTP Basic)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as e:
        raise BackendConfigError(f"--base-url {_public_url_safe(url)!r} is not a valid URL: {e}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BackendConfigError(
            f"--base-url {_public_url_safe(url)!r} must be an http(s) URL such as http://127.0.0.1:8000/v1"
        )
    if parts.username is not None or parts.password is not None:
        raise BackendConfigError(
            "--base-url must not contain user:password@ (it would be sent as HTTP Basic auth and "
            "could be stored); put the key in OPENAI_API_KEY instead"
        )


def _public_url_safe(url: str) -> str:
    return _USERINFO.sub(lambda m: m.group(1) + "***@", url.split("?", 1)[0])


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
        base_url: str | Sequence[str] | None = None,
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
        fixed_effort: bool = False,
        sample_max_tokens: int | None = None,
        loglik_batch: int = 8,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
        max_retry_after: float = 300.0,
        jitter_seed: int | None = None,
        breaker_after: int = 8,
        echo_check: bool = True,
        deterministic_after: int = DETERMINISTIC_REPEATS,
    ) -> None:
        """See docs/scale-out.md. `model` may carry the `openai:` prefix of `--model`.

        - `base_url`: one URL, or several (a list; an item `@FILE` reads one URL per line)
          served round-robin, each with its own `concurrency` limit (a fleet of replicas
          of the same model: a failed attempt is retried on the next one).

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
        - `fixed_effort`: True = `reasoning_effort` was chosen by the user (--reasoning-effort):
          it is sent with every chat request, whatever the model, and a server's rejection is
          an error naming the flag (never answered with a lower effort).
        - `max_tokens`: tokens generated for the log-probability request (1-2 suffice).
        - `sample_max_tokens`: tokens per sampled answer (default 8, 2048 for reasoning
          models whose hidden reasoning counts against it).
        - `loglik_batch`: (context, continuation) pairs per completions request (set to 1
          when the server answers a list of prompts with the same error every time).
        - `breaker_after`: consecutive timeouts/connection failures (across all requests)
          after which the run pauses (`BackendUnavailable`); 0 disables the breaker.
        - `deterministic_after`: the same 5xx body this many times in a row for one request
          is a capability problem (adapt or stop), not retried further; 0 disables.
        - `echo_check`: before trusting echo log-likelihoods, compare them with next-token
          log-probs of the same tokens and refuse echo when they disagree.
        """
        if model.startswith("openai:"):
            model = model[len("openai:") :]
        self.model = model
        self.base_urls = expand_base_urls(base_url) or [
            (os.environ.get("OPENAI_BASE_URL") or OPENAI_URL).rstrip("/")
        ]
        for u in self.base_urls:
            _check_base_url(u)
        self.base_url = self.base_urls[0]
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self._key_source = "argument" if api_key is not None else ("env" if key else "none")
        if not key:
            if urlsplit(self.base_url).hostname == "api.openai.com":
                raise BackendConfigError(
                    "OPENAI_API_KEY is not set (needed for api.openai.com); export it, or pass "
                    "--base-url for a local server"
                )
            key = "EMPTY"  # local servers (vLLM, llama.cpp) accept any key
        self._redact = _redactor(key)
        self._redact_body = key_redactor(_secret_forms(key) if key != "EMPTY" else [])
        self.breaker_after = max(0, int(breaker_after))
        self.echo_check = bool(echo_check)
        self.deterministic_after = max(0, int(deterministic_after))
        self.concurrency = max(1, int(concurrency))
        self.top_logprobs = int(top_logprobs)
        self.seed = seed
        self.timeout = float(timeout)
        self.samples = max(1, int(samples))
        self.max_tokens = max(1, int(max_tokens))
        self.reasoning = is_reasoning_model(model) if reasoning is None else bool(reasoning)
        self.fixed_effort = bool(fixed_effort and reasoning_effort)
        self.reasoning_effort: str | None = (
            reasoning_effort if (self.reasoning or self.fixed_effort) else None
        )
        self.sample_max_tokens = sample_max_tokens or (2048 if self.reasoning else 8)
        self.loglik_batch = max(1, int(loglik_batch))
        self.policy = RetryPolicy(
            max_retries=int(max_retries),
            base=backoff_base,
            cap=backoff_cap,
            max_retry_after=max_retry_after,
        )
        self._rng = random.Random(jitter_seed)
        self._clients = [
            openai.AsyncOpenAI(api_key=key, base_url=u, max_retries=0, timeout=self.timeout)
            for u in self.base_urls
        ]
        self._client = self._clients[0]
        self._sems = [asyncio.Semaphore(self.concurrency) for _ in self.base_urls]
        self._per_endpoint = [0 for _ in self.base_urls]  # HTTP attempts sent to each
        # several base URLs: round-robin over the replicas that answer (engine/fleet.py)
        self._fleet = Fleet([_public_url(u) for u in self.base_urls])
        # what an empty context becomes, learned from the server (engine/start_tokens.py)
        self._start: StartTokens | None = None
        self._start_learned = False
        self._start_lock = asyncio.Lock()
        self._chat_params = _param_names(self._client.chat.completions.create)
        self._cmpl_params = _param_names(self._client.completions.create)
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
                "invalid",
                "key_redacted",
                "deterministic",
                "failed",
                "prompt_tokens",
                "completion_tokens",
            ),
            0,
        )
        self._in_flight = 0
        self._down_streak = 0  # consecutive timeouts/connection failures, all requests
        self._breaker: str | None = None  # set when the breaker opened: why
        self.probed: dict[str, Any] = {}
        self.system_prompt: str | None = None  # what `probe` learned (recorded as describe()['capabilities'])
        self.method_choice: dict[str, Any] = {}
        self.adaptations: list[str] = []
        # how prompt log-likelihoods are read: "echo" (completions echo=True) or
        # "prompt_logprobs" (vLLM's extension, chosen when the probe finds it and it agrees)
        self._loglik_via = "echo"
        self._prompt_lp_note: str | None = None
        self._echo_ok: bool | None = None if self.echo_check else True
        self._echo_reason: str | None = None if self.echo_check else "echo check disabled"
        self._echo_lock = asyncio.Lock()
        self._detect_lock = asyncio.Lock()
        self._probing = False
        self._held: list[str] = []  # notices raised while probing (see _warn_once)
        self._batch_seen = False  # a list of prompts was answered in one request
        self._batch_refused = False  # ... or refused (one prompt per request since)
        self._pinned: int | None = None  # the probe checks each endpoint in turn
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
            "base_urls": [_public_url(u) for u in self.base_urls],
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
            "loglik_batch": self.loglik_batch,
            "capabilities": self.probed or self._capabilities(),
            "method_choice": self.method_choice,
            "start_tokens": self._start.to_dict() if self._start else None,
            "adaptations": list(self.adaptations),
            "breaker_after": self.breaker_after,
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
            "requests_per_endpoint": list(self._per_endpoint),
            **self._fleet.summary(),
            "logprobs": self._logprobs,
            "method": self._method(),
            "top_logprobs_used": self._k_cap,
            "reasoning_effort": self.reasoning_effort,
            "adaptations": list(self.adaptations),
            "breaker": self._breaker,
            "notices": list(self.notices),
        }

    def _method(self) -> str:
        return {True: "logprobs", False: "sampled-estimate"}.get(self._logprobs, "undetected")  # type: ignore[arg-type]

    def _loglik_method(self) -> str:
        if self._loglik is False or self._echo_ok is False:
            return "unsupported"
        if self._loglik_via == "prompt_logprobs":
            return "vllm-prompt_logprobs"
        return f"completions-echo(max_tokens={self._echo_max_tokens})"

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
            if self._pinned is not None:
                ep = self._pinned
            else:
                ep = self._fleet.pick()
            client = self._clients[ep]
            api = client.chat.completions if endpoint == "chat" else client.completions
            create = api.with_raw_response.create
            async with self._sems[ep]:
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
                    self._fleet.answered(ep)
                    data = json.loads(raw.http_response.content)
                    data = self._redact_reply(data)
                    if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
                        raise ValueError("no 'choices' list in the response")
                    if not data["choices"] or not all(isinstance(c, dict) for c in data["choices"]):
                        raise ValueError("empty or invalid 'choices' in the response")
                    if check is not None:
                        check(data)
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
                except InvalidResponse as e:
                    self._c["invalid"] += 1
                    last, kind = f"invalid response: {self._redact(str(e))[:300]}", "invalid"
                    same, repeats = None, 0
                except (ValueError, UnicodeDecodeError) as e:
                    self._c["malformed"] += 1
                    last, kind = f"malformed response: {self._redact(str(e))[:200]}", "malformed"
                    same, repeats = None, 0
                else:
                    self._account(data)
                    return data
                finally:
                    self._in_flight -= 1
            if self._probing and kind in ("connection", "timeout") and attempt >= PROBE_RETRIES:
                break  # an unreachable server is a configuration error at probe time
            if attempt < max_retries:
                if kind in ("connection", "timeout") and elsewhere and self._pinned is None:
                    continue  # another replica is up: retry there without waiting
                delay = self.policy.delay(attempt, retry_after, self._rng)
                if retry_after is not None:
                    # the server asked everyone to hold off, not just this request
                    self._pause_until = max(self._pause_until, loop.time() + delay)
                await asyncio.sleep(delay)
        raise _GaveUp(f"giving up after {attempt} retries: {last}", kind)

    def _redact_reply(self, data: Any) -> Any:
        """The reply with the key replaced wherever it appears (text, tokens, every field), before
        any check, cache or store sees it (engine/textsafety.py)."""
        data, n = map_strings(data, self._redact_body)
        if n:
            self._c["key_redacted"] += n
            self._warn_once("key_redacted", f"{_public_url(self.base_url)} sent the API key back in a reply; "
                            f"it was replaced by {REDACTED} before anything was stored (rows say key_redacted)")
        return data

    def _went_down(self, last: str) -> None:
        """Count a timeout/connection failure; open the breaker after `breaker_after` in a row."""
        self._down_streak += 1
        if self.breaker_after and self._down_streak >= self.breaker_after and not self._breaker:
            self._breaker = (
                f"{_public_url(self.base_url)} stopped answering ({self._down_streak} timeouts or "
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

    def _account(self, data: dict[str, Any]) -> None:
        usage = self._usage([data])
        self._c["prompt_tokens"] += usage["prompt_tokens"]
        self._c["completion_tokens"] += usage["completion_tokens"]
        if data.get("model"):
            self._models_seen.add(str(data["model"]))
        if data.get("system_fingerprint"):
            self._fingerprints.add(str(data["system_fingerprint"]))

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
        if param in ("logprobs", "top_logprobs", "echo") and param in body and re.search(
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
            system = self.system_prompt  # set by engine/config.py (--system-prompt)
            body["messages"] = [*([{"role": "system", "content": system}] if system else []),
                                {"role": "user", "content": message}]
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

        endpoint = "chat" if chat else "completions"
        found = None
        if self._logprobs is None:
            async with self._detect_lock:
                if self._logprobs is None:
                    found = await self._detect_logprobs(endpoint, build, chat)
            if self._logprobs is False:
                return await self._sampled(message, answers, chat)

        def check(data: dict[str, Any]) -> None:
            if self._first_top(data["choices"][0], chat) is None:
                raise InvalidResponse("response without logprobs (the server returned them before)")

        try:
            body, data = found or await self._adaptive(endpoint, build, check)
        except _NoLogprobs as e:
            # the server returned log-probs before; a refusal now is an item error, not a new mode
            raise BackendError(f"server refused logprobs after returning them: {e}") from None
        choice = data["choices"][0]
        top = self._first_top(choice, chat)
        assert top is not None  # checked above
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

    async def _detect_logprobs(
        self, endpoint: str, build: Callable[[], dict[str, Any]], chat: bool
    ) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """Decide once whether the server returns log-probs: one response with them settles
        "yes"; "no" needs PROBE_REPEATS responses without them (or a refusal), so a single
        transient `logprobs: null` cannot switch a whole run to sampled estimates."""
        def check(data: dict[str, Any]) -> None:
            self._first_top(data["choices"][0], chat)  # absent is an answer; invalid is not

        absent = 0
        for _ in range(PROBE_REPEATS):
            try:
                body, data = await self._adaptive(endpoint, build, check)
            except _NoLogprobs as e:
                self._mark_no_logprobs(f"server: {e}")
                return None
            if self._first_top(data["choices"][0], chat) is not None:
                self._logprobs = True
                self._logprobs_reason = f"{endpoint} responses carry top-k log-probs"
                return body, data
            absent += 1
        self._mark_no_logprobs(f"{absent} of {absent} probe responses had no logprobs")
        return None

    @staticmethod
    def _first_top(choice: dict[str, Any], chat: bool) -> list[tuple[str, float]] | None:
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
            if self._loglik is not False and self._echo_ok is None:
                async with self._echo_lock:
                    if self._echo_ok is None:
                        await self._check_echo()
            if self._loglik is False:
                raise BackendError(self._loglik_error or "loglik unsupported")
            requests = await self._explicit_start(requests)
            return await self._loglik_all(requests)
        except BackendError:
            self._c["failed"] += 1
            raise

    async def _loglik_all(self, requests: list[tuple[str, str]]) -> list[LogLikOut]:
        batches = [
            requests[i : i + self.loglik_batch] for i in range(0, len(requests), self.loglik_batch)
        ]
        results = await asyncio.gather(*(self._loglik_batch(b) for b in batches))
        return [r for batch in results for r in batch]

    async def _check_echo(self) -> None:
        """Score a known continuation both ways before trusting echo log-likelihoods.

        The greedy continuation of ECHO_CHECK_CONTEXT comes back with the log-prob of each
        generated token; echoing context + continuation must give the same numbers for the
        same tokens. llama-cpp-python's server shifts echo log-probs by one token, which
        this catches; a disagreement marks echo unusable, with the numbers as the reason.
        """
        ctx = ECHO_CHECK_CONTEXT

        def build() -> dict[str, Any]:
            body = {
                "model": self.model,
                "prompt": ctx,
                "max_tokens": 3,
                "temperature": 0.0,
                "logprobs": 1,
            }
            if self.seed is not None:
                body["seed"] = self.seed
            return self._finish(body)

        try:
            _, data = await self._adaptive("completions", build)
        except _NoLogprobs as e:
            raise self._unsupported(str(e)) from None
        except APIRequestError as e:
            if (
                e.status in (404, 405)
                or isinstance(e, DeterministicError)
                or (e.status in (400, 422) and _LOGLIK_UNSUPPORTED.search(e.message))
            ):
                raise self._unsupported(f"HTTP {e.status}: {e.message}") from None
            raise
        lp = data["choices"][0].get("logprobs")
        gen_toks: list[str] = []
        gen_lps: list[float] = []
        if isinstance(lp, dict):
            for t, v in zip(lp.get("tokens") or [], lp.get("token_logprobs") or [], strict=False):
                if v is None or not str(t):
                    break
                gen_toks.append(str(t))
                gen_lps.append(valid_logprob(v, f"generated token {t!r}"))
        if not gen_toks or not "".join(gen_toks).strip():
            self._echo_ok = True
            self._echo_reason = "unchecked: the completions endpoint returned no token log-probs"
            return
        cont = "".join(gen_toks)
        if await self._try_prompt_logprobs(ctx, cont, gen_toks, gen_lps):
            return
        (echo,) = await self._loglik_all([(ctx, cont)])
        if echo.tokens[: len(gen_toks)] != gen_toks:
            self._echo_ok = True
            self._echo_reason = (
                f"unchecked: echo tokenises {cont!r} as {echo.tokens} (generated {gen_toks})"
            )
            return
        pairs = list(zip(gen_lps, echo.token_logprobs, strict=False))
        worst = max(abs(a - b) for a, b in pairs)
        shown = ", ".join(
            f"{t!r}: next-token {a:.3f} vs echo {b:.3f}" for t, (a, b) in zip(gen_toks, pairs, strict=False)
        )
        if worst > ECHO_CHECK_TOL:
            self._echo_ok = False
            self._loglik = False
            self._loglik_error = (
                f"echo log-likelihoods from {_public_url(self.base_url)} disagree with next-token "
                f"log-probs of the same tokens after {ctx!r} ({shown}); echo is refused (some "
                "servers shift echo log-probs by one token)"
            )
            self.adaptations.append("echo refused: " + self._loglik_error)
            self._warn_once("echo-refused", self._loglik_error)
            return
        self._echo_ok = True
        self._echo_reason = f"echo agrees with next-token log-probs ({shown})"

    async def _try_prompt_logprobs(
        self, ctx: str, cont: str, gen_toks: list[str], gen_lps: list[float]
    ) -> bool:
        """Use vLLM's `prompt_logprobs` when the server returns them and they agree with the
        next-token log-probs of the greedy continuation (one request; anything else: no)."""
        full = ctx + cont

        def build() -> dict[str, Any]:
            body = {
                "model": self.model,
                "prompt": full,
                "max_tokens": 1,
                "temperature": 0.0,
                "prompt_logprobs": 0,
                "return_token_ids": True,
            }
            return self._finish(body)

        try:
            _, data = await self._adaptive("completions", build, retries=min(1, self.policy.max_retries))
            choice = data["choices"][0]
            if choice.get("prompt_logprobs") is None:
                self._prompt_lp_note = "prompt_logprobs: not returned"
                return False
            got = self._score(ctx, cont, full, prompt_logprobs_as_echo(choice, full))
        except (BackendError, InvalidResponse) as e:
            self._prompt_lp_note = f"prompt_logprobs: {self._redact(str(e))[:200]}"
            return False
        pairs = list(zip(gen_lps, got.token_logprobs, strict=False))
        if got.tokens[: len(gen_toks)] != gen_toks or not pairs:
            self._prompt_lp_note = f"prompt_logprobs: tokenises {cont!r} as {got.tokens}"
            return False
        shown = ", ".join(
            f"{t!r}: next-token {a:.3f} vs prompt_logprobs {b:.3f}"
            for t, (a, b) in zip(gen_toks, pairs, strict=False)
        )
        if max(abs(a - b) for a, b in pairs) > ECHO_CHECK_TOL:
            self._prompt_lp_note = f"prompt_logprobs refused: they disagree ({shown})"
            return False
        self._loglik_via = "prompt_logprobs"
        self._loglik = True
        self._echo_ok = True
        self._echo_reason = f"vLLM prompt_logprobs agree with next-token log-probs ({shown})"
        return True

    async def _one_per_request(
        self, pairs: list[tuple[str, str]], e: APIRequestError
    ) -> list[LogLikOut]:
        """Adapt once to a server that rejects a list of prompts: one prompt per request."""
        self._batch_refused = True
        if self.loglik_batch > 1:
            self.loglik_batch = 1
            note = (
                f"one prompt per request: the server answered a list of prompts with "
                f"HTTP {e.status}: {e.message[:200]}"
            )
            self.adaptations.append(note)
            self._warn_once("one-prompt", f"{self.model}: {note}")
        return await self._loglik_all(pairs)

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

        via = self._loglik_via

        def build() -> dict[str, Any]:
            body: dict[str, Any] = {
                "model": self.model,
                "prompt": prompts if len(prompts) > 1 else prompts[0],
                "temperature": 0.0,
            }
            if via == "prompt_logprobs":
                # vLLM: the log-prob of every prompt token (0 = the prompt token only) and
                # the prompt's token ids, to pick that token out of each position's dict
                body.update(max_tokens=1, prompt_logprobs=0, return_token_ids=True)
            else:
                body.update(echo=True, logprobs=1, max_tokens=self._echo_max_tokens)
            if self.seed is not None:
                body["seed"] = self.seed
            return self._finish(body)

        def check(data: dict[str, Any]) -> None:
            if via == "prompt_logprobs":
                for c, full in zip(data["choices"], prompts, strict=False):
                    c["logprobs"] = prompt_logprobs_as_echo(c, full)
            for c in data["choices"]:
                lp = c.get("logprobs")
                if isinstance(lp, dict):
                    for t, v in zip(lp.get("tokens") or [], lp.get("token_logprobs") or [], strict=False):
                        if v is not None:
                            valid_logprob(v, f"echo token {t!r}")

        try:
            _, data = await self._adaptive("completions", build, check)
        except _NoLogprobs as e:
            raise self._unsupported(str(e)) from None
        except DeterministicError as e:
            if len(prompts) > 1:
                return await self._one_per_request(pairs, e)
            raise self._unsupported(
                f"HTTP {e.status} with the same body {self.deterministic_after} times: {e.message}"
            ) from None
        except APIRequestError as e:
            if e.status in (404, 405) or (
                e.status in (400, 422) and _LOGLIK_UNSUPPORTED.search(e.message)
            ):
                raise self._unsupported(f"HTTP {e.status}: {e.message}") from None
            if len(prompts) > 1 and e.status in (400, 422) and re.search(
                r"prompt|list|array|batch", e.message, re.IGNORECASE
            ):
                return await self._one_per_request(pairs, e)
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
        if len(prompts) > 1:
            self._batch_seen = True
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

    @property
    def capabilities(self) -> Capabilities:
        """What the server offers as far as it is known (None: not probed yet)."""
        loglik = None if self._loglik is None else bool(self._loglik and self._echo_ok is not False)
        return Capabilities(
            next_token=True,  # top-k log-probs, or else an estimate from sampled answers
            exact_next_token=False,
            loglik=loglik,
            local_loglik=False,
            batched_prompts=None if self._loglik is None else self.loglik_batch > 1,
            generate=True,
            chat=True,
            reasoning=self.reasoning,
            prompt_logprobs=None if self._loglik is None else self._loglik_via == "prompt_logprobs",
            tokenizer=False,
            label_choice=True,
        )

    async def probe(self, task: str | None = None, options: dict[str, Any] | None = None) -> dict[str, Any]:
        """Check the configuration and learn the server's capabilities before a run writes
        anything; returns describe().

        One tiny request proves the endpoint answers, the key is accepted and the model
        exists (retried only PROBE_RETRIES times: an unreachable server is a configuration
        error here). Then what the task needs is probed: log-probs on chat (several
        consistent answers, see `_detect_logprobs`) and the top-k limit for next-token
        tasks; echo log-likelihoods (with the echo sanity check) and batched prompts for
        option-scoring tasks. The method chosen for the task and the reason are recorded
        in `method_choice`. Raises BackendConfigError with one clear line when the server
        cannot be used or cannot answer the task's question.
        """
        from llmscope.engine.tasks import get_task  # the task says what it needs (Task.probe_need)

        need = get_task(task or "yesno")(dict(options or {})).probe_need()
        self._probing = True
        try:
            self._pinned = 0
            try:
                if need == "generate":
                    await self.generate("Say yes.", GenParams(max_new_tokens=1, stop=[]))
                else:
                    await self.next_token("Answer yes or no: is water wet?", ["yes", "no"])
                if need in ("loglik", "options"):
                    await self._probe_loglik()
            except BackendError as e:
                raise self._config_error(e, 0) from None
            for i in range(1, len(self._clients)):  # every replica must answer too
                self._pinned = i
                try:
                    await self.generate("Say yes.", GenParams(max_new_tokens=1, stop=[]))
                except BackendError as e:
                    raise self._config_error(e, i) from None
        finally:
            self._probing = False
            self._pinned = None
        self.probed = self._capabilities()
        self.method_choice = self._choose_method(task, need)
        held, self._held = self._held, []
        if self.method_choice["method"] is None:
            raise BackendConfigError(
                f"{_public_url(self.base_url)} cannot score task {task!r}: {self.method_choice['reason']}"
            )
        for message in held:
            log.warning(message)
        return self.describe()

    def _config_error(self, e: BackendError, ep: int) -> BackendConfigError:
        """One clear line for a probe failure at endpoint `ep`."""
        url = _public_url(self.base_urls[ep])
        if isinstance(e, BackendConfigError):
            return e
        if isinstance(e, BackendUnavailable | _GaveUp):
            return BackendConfigError(f"cannot use {url}: {self._redact(str(e))}")
        if isinstance(e, APIRequestError):
            if e.status in (401, 403):
                why = f"the API key was rejected (HTTP {e.status}: {e.message})"
            elif e.status == 404:
                why = f"model {self.model!r} or the endpoint was not found (HTTP 404: {e.message})"
            else:
                why = f"the server rejects the probe request (HTTP {e.status}: {e.message})"
            return BackendConfigError(f"{url}: {why}")
        return BackendConfigError(f"{url}: probe failed: {self._redact(str(e))}")

    async def _probe_loglik(self) -> None:
        """Echo log-likelihoods (checked against next-token log-probs) and, when the server
        takes them, a list of two prompts in one request."""
        try:
            await self.loglik([("The sky is", " blue")])
        except BackendError:
            if self._loglik is not False:
                raise
            return
        if self.loglik_batch > 1:
            await self.loglik([("The sky is", " blue"), ("The sea is", " wet")])
        await self._learn_start()

    # ------------------------------------------------------------------ start tokens (vLLM)

    def start_tokens(self) -> StartTokens | None:
        """What the server's tokenizer starts a text with (learned by `probe`); None: unknown."""
        return self._start

    async def _learn_start(self) -> None:
        async with self._start_lock:
            if not self._start_learned:
                self._start_learned = True
                headers = {"Authorization": f"Bearer {self._clients[0].api_key}"}
                self._start = await start_tokens_from_vllm(self.base_urls[0], self.model, headers,
                                                           timeout=self.timeout)
                if self._start is not None and self._start.empty_context is None:
                    self._warn_once("start_token", f"{_public_url(self.base_url)}: texts scored with no "
                                    f"context (SyntaxGym, contamination, minpairs context bos) will fail: "
                                    f"{self._start.note}")

    async def _explicit_start(self, requests: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """Empty contexts replaced by the start token's text, as the local backend scores them.

        A server that names no start token (not vLLM) gets the request unchanged."""
        if not any(c == "" for c, _ in requests):
            return requests
        await self._learn_start()
        st = self._start
        if st is None:
            return requests
        if st.empty_context is None:
            raise BackendError(
                f"an empty context needs the model's start token, which {_public_url(self.base_url)} "
                f"does not name ({st.note}); or condition on explicit text (minpairs: context text)")
        return [(st.empty_context if c == "" else c, x) for c, x in requests]

    def _capabilities(self) -> dict[str, Any]:
        return {
            "chat_logprobs": self._logprobs,
            "top_logprobs_limit": self._k_cap,
            "echo_loglik": None if self._loglik is None else bool(self._loglik and self._echo_ok),
            "echo_check": self._echo_reason,
            "prompt_logprobs": self._loglik_via == "prompt_logprobs"
            or (None if self._prompt_lp_note is None else False),
            "prompt_logprobs_note": self._prompt_lp_note,
            # True only once a list of prompts was answered, False once refused; None: never
            # tried (e.g. echo refused before any list was sent)
            "batched_prompts": False if self._batch_refused else (True if self._batch_seen else None),
            "reasoning": self.reasoning,
            "reasoning_effort": self.reasoning_effort,
        }

    def _choose_method(self, task: str | None, need: str) -> dict[str, Any]:
        lp = self._logprobs is True
        nt = "chat top-k log-probs" if lp else f"sampled estimate ({self.samples} answers)"
        nt_why = "the server returns top-k log-probs" if lp else (self._logprobs_reason or "")
        ll_ok = self._loglik is True and self._echo_ok is not False
        if need == "next_token":
            method, reason = nt, nt_why
        elif need == "generate":
            method, reason = "generate", "the task scores generated text"
        elif ll_ok and self._loglik_via == "prompt_logprobs":
            method = "vLLM prompt_logprobs log-likelihoods"
            reason = self._echo_reason or ""
        elif ll_ok:
            method = "completions echo log-likelihoods"
            reason = self._echo_reason or "echo accepted"
            if self.loglik_batch == 1:
                reason += "; one prompt per request"
        elif need == "options":
            method = f"option labels A/B/C... ({nt})"
            reason = f"no prompt log-likelihoods: {self._loglik_error}"
        else:
            method = None
            reason = (
                f"{task or 'the task'} needs log-likelihoods of given text and the server "
                f"offers none ({self._loglik_error})"
            )
        return {"task": task, "needs": need, "method": method, "reason": reason}

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        for c in self._clients:
            await c.close()
