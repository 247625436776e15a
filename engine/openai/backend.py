"""API-model backend: any OpenAI-compatible server (OpenAI, vLLM, llama.cpp, Ollama...).

`--model openai:<name> [--base-url URL]`. The key comes from `OPENAI_API_KEY` (or the
`api_key` argument) and is only ever handed to the `openai` client: it is not kept in
`describe()`, `stats()`, result `meta` or error messages (which are redacted).

Answer probabilities (`next_token`) come from the top-k log-probabilities of the first
generated token, reduced with one of three rules (`apply_topk_rule`, topk.py). Models without
log-probabilities (reasoning models, some providers) fall back to an estimate from
sampled answers (sampling.py). Option scoring (`loglik`, loglik.py) uses the completions
endpoint with `echo=True` or vLLM's `prompt_logprobs` where the server supports it; otherwise
callers use `choice_by_labels` or `generate` (generate-and-match).

The class is built in layers, each in its own module: `HTTPLayer` (client.py: requests,
retries, the circuit breaker, parameter adaptation), `PromptLoglik` (loglik.py),
`CapabilityProbe` (probe.py: `probe(task)` before a run stores anything) and `SampledText`
(sampling.py: sampled texts and `generate`). This module holds the constructor (the
backend's whole state), the description and the next-token and label-choice calls.
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import openai

from llmscope.engine.backend import BackendConfigError, BackendError
from llmscope.engine.fleet import Fleet
from llmscope.engine.openai.client import DETERMINISTIC_REPEATS, NoLogprobs, param_names
from llmscope.engine.openai.endpoints import (
    OPENAI_URL,
    check_base_url,
    expand_base_urls,
    public_url,
    redactor,
    secret_forms,
)
from llmscope.engine.openai.parse import InvalidResponse, first_top, token_usage
from llmscope.engine.openai.probe import CapabilityProbe
from llmscope.engine.openai.sampling import SampledText
from llmscope.engine.openai.topk import apply_topk_rule
from llmscope.engine.retry import RetryPolicy
from llmscope.engine.start_tokens import StartTokens
from llmscope.engine.textsafety import key_redactor
from llmscope.engine.types import NextTokenOut, TopToken

REASONING_SUFFIX = "Do not include anything else, such as an explanation or reasoning."
CHOICE_INSTRUCTION = "Answer with the letter of the correct option only."
# o1, o1-mini, o3, o3-pro, o4-mini, gpt-5, gpt-5-mini, gpt-5.1 ... (optionally "org/" prefixed)
_REASONING_NAME = re.compile(r"^(o[134]([-.].*)?|gpt-5([-.].*)?)$", re.IGNORECASE)


def is_reasoning_model(model: str) -> bool:
    """True for the o1/o3/o4/gpt-5 families (by the last path component of the name)."""
    return bool(_REASONING_NAME.match(model.rsplit("/", 1)[-1]))


class OpenAIBackend(CapabilityProbe, SampledText):
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
            check_base_url(u)
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
        self._redact = redactor(key)
        self._redact_body = key_redactor(secret_forms(key) if key != "EMPTY" else [])
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
        self._busy = [0 for _ in self.base_urls]  # requests in flight per endpoint (<= concurrency)
        self._slot_freed = asyncio.Event()
        # the served model (and, for a fleet, fingerprint) every answer must carry; set by the probe
        self._expect: tuple[str | None, str | None] | None = None
        self._per_endpoint = [0 for _ in self.base_urls]  # HTTP attempts sent to each
        # several base URLs: round-robin over the replicas that answer (engine/fleet.py)
        self._fleet = Fleet([public_url(u) for u in self.base_urls])
        # what an empty context becomes, learned from the server (engine/start_tokens.py)
        self._start: StartTokens | None = None
        self._start_learned = False
        self._start_lock = asyncio.Lock()
        self._chat_params = param_names(self._client.chat.completions.create)
        self._cmpl_params = param_names(self._client.completions.create)
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
                "model_changed",
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
        self.system_prompt: str | None = (
            None  # what `probe` learned (recorded as describe()['capabilities'])
        )
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
            "base_url": public_url(self.base_url),
            "base_urls": [public_url(u) for u in self.base_urls],
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
            "expected_model": self._expect[0] if self._expect else None,
            "expected_fingerprint": self._expect[1] if self._expect else None,
            "replicas": [
                {
                    "url": r.url,
                    "served_models": sorted(r.models),
                    "fingerprints": sorted(r.fingerprints),
                    "excluded": r.excluded,
                }
                for r in self._fleet.replicas
            ],
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

    def _user_message(self, prompt: str) -> str:
        if self.reasoning:
            return f"{prompt.rstrip()}\n{REASONING_SUFFIX}"
        return prompt

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
            if first_top(data["choices"][0], chat) is None:
                raise InvalidResponse("response without logprobs (the server returned them before)")

        try:
            body, data = found or await self._adaptive(endpoint, build, check)
        except NoLogprobs as e:
            # the server returned log-probs before; a refusal now is an item error, not a new mode
            raise BackendError(f"server refused logprobs after returning them: {e}") from None
        choice = data["choices"][0]
        top = first_top(choice, chat)
        assert top is not None  # checked above
        self._logprobs = True
        probs, other, rule, details = apply_topk_rule(top, answers)
        text = (choice.get("message") or {}).get("content") if chat else choice.get("text")
        k_sent = body.get("top_logprobs", body.get("logprobs"))
        usage = token_usage([data])
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

    # ------------------------------------------------------------------ misc

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        for c in self._clients:
            await c.close()
