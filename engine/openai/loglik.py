"""Prompt log-likelihoods: echo or vLLM prompt_logprobs requests, the echo check, scoring.

Option scoring (`loglik`) uses the completions endpoint with `echo=True` where the server
supports it, or vLLM's `prompt_logprobs`, each accepted only when it agrees with next-token
log-probs of the same tokens (`_check_echo`); otherwise callers use `choice_by_labels` or
`generate` (generate-and-match). Every completions/echo request body is built here.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from llmscope.engine.backend import BackendError
from llmscope.engine.openai.client import APIRequestError, DeterministicError, HTTPLayer, NoLogprobs
from llmscope.engine.openai.endpoints import public_url
from llmscope.engine.openai.parse import InvalidResponse, valid_logprob
from llmscope.engine.start_tokens import StartTokens
from llmscope.engine.start_tokens import from_vllm as start_tokens_from_vllm
from llmscope.engine.textsafety import map_strings, repair_text
from llmscope.engine.types import LogLikOut

_LOGLIK_UNSUPPORTED = re.compile(
    r"echo|logprob|not supported|unsupported|chat model|not implemented", re.IGNORECASE
)
ECHO_CHECK_CONTEXT = "The capital of France is"
ECHO_CHECK_TOL = 0.05  # nats: echo and next-token log-probs of the same token must agree


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
            raise InvalidResponse(
                "prompt_logprobs without prompt_token_ids: cannot tell the prompt token"
            )
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


class PromptLoglik(HTTPLayer):
    """Log P(continuation | context) from the server's prompt log-probabilities."""

    loglik_batch: int
    adaptations: list[str]
    _loglik: bool | None
    _loglik_error: str | None
    # how prompt log-likelihoods are read: "echo" (completions echo=True) or
    # "prompt_logprobs" (vLLM's extension, chosen when the probe finds it and it agrees)
    _loglik_via: str
    _prompt_lp_note: str | None
    _echo_ok: bool | None
    _echo_reason: str | None
    _echo_lock: asyncio.Lock
    _batch_seen: bool  # a list of prompts was answered in one request
    _batch_refused: bool  # ... or refused (one prompt per request since)
    _start: StartTokens | None
    _start_learned: bool
    _start_lock: asyncio.Lock

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

    # -- start tokens (vLLM) ---------------------------------------------------------------

    def start_tokens(self) -> StartTokens | None:
        """What the server's tokenizer starts a text with (learned by `probe`); None: unknown."""
        return self._start

    async def _learn_start(self) -> None:
        async with self._start_lock:
            if not self._start_learned:
                self._start_learned = True
                headers = {"Authorization": f"Bearer {self._clients[0].api_key}"}
                self._start = await start_tokens_from_vllm(
                    self.base_urls[0],
                    self.model,
                    headers,
                    timeout=self.timeout,
                    clean=lambda d: map_strings(self._redact_reply(d), repair_text)[0],
                )
                if self._start is not None and self._start.empty_context is None:
                    self._warn_once(
                        "start_token",
                        f"{public_url(self.base_url)}: texts scored with no "
                        f"context (SyntaxGym, contamination, minpairs context bos) will fail: "
                        f"{self._start.note}",
                    )

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
                f"an empty context needs the model's start token, which {public_url(self.base_url)} "
                f"does not name ({st.note}); or condition on explicit text (minpairs: context text)"
            )
        return [(st.empty_context if c == "" else c, x) for c, x in requests]

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
        except NoLogprobs as e:
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
            f"{t!r}: next-token {a:.3f} vs echo {b:.3f}"
            for t, (a, b) in zip(gen_toks, pairs, strict=False)
        )
        if worst > ECHO_CHECK_TOL:
            self._echo_ok = False
            self._loglik = False
            self._loglik_error = (
                f"echo log-likelihoods from {public_url(self.base_url)} disagree with next-token "
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
            _, data = await self._adaptive(
                "completions", build, retries=min(1, self.policy.max_retries)
            )
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
                f"{self.model} at {public_url(self.base_url)} does not return prompt "
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
                    for t, v in zip(
                        lp.get("tokens") or [], lp.get("token_logprobs") or [], strict=False
                    ):
                        if v is not None:
                            valid_logprob(v, f"echo token {t!r}")

        try:
            _, data = await self._adaptive("completions", build, check)
        except NoLogprobs as e:
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
            if (
                len(prompts) > 1
                and e.status in (400, 422)
                and re.search(r"prompt|list|array|batch", e.message, re.IGNORECASE)
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

    def _loglik_method(self) -> str:
        if self._loglik is False or self._echo_ok is False:
            return "unsupported"
        if self._loglik_via == "prompt_logprobs":
            return "vllm-prompt_logprobs"
        return f"completions-echo(max_tokens={self._echo_max_tokens})"
