"""Sampled text: n texts per prompt, generate(), and answer probabilities from sampled answers."""

from __future__ import annotations

import asyncio
import functools
from collections import Counter
from collections.abc import Callable
from typing import Any

from llmscope.engine.answers import match_answer
from llmscope.engine.backend import BackendError, GenParams
from llmscope.engine.openai.client import HTTPLayer, NoLogprobs
from llmscope.engine.openai.parse import choice_text, token_usage
from llmscope.engine.openai.topk import first_word
from llmscope.engine.types import GenerateOut, NextTokenOut, TopToken


class SampledText(HTTPLayer):
    """Texts from the chat or completions endpoint, and the sampled-answer estimate."""

    reasoning: bool
    samples: int
    sample_max_tokens: int
    _logprobs_reason: str | None

    async def _texts(
        self, endpoint: str, make: Callable[[int, int], dict[str, Any]], n: int
    ) -> tuple[list[tuple[str, str | None]], list[dict[str, Any]], dict[str, Any]]:
        """`n` (text, finish_reason) pairs; servers that ignore or reject `n` are topped
        up with single requests, each with its own seed so that they differ."""
        body, data = await self._adaptive(endpoint, lambda: make(n, 0))
        datas = [data]
        out = [choice_text(c, endpoint) for c in data["choices"]][:n]
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
                out.extend(choice_text(c, endpoint) for c in d["choices"][:1])
        return out, datas, body

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
        usage = token_usage(datas)
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
            n_tokens=token_usage(datas[:1])["prompt_tokens"],
            meta=meta,
        )

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
        except NoLogprobs as e:  # cannot happen without logprobs in the body; be explicit
            self._c["failed"] += 1
            raise BackendError(str(e)) from None
        except BackendError:
            self._c["failed"] += 1
            raise
        usage = token_usage(datas)
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
            n_tokens=token_usage(datas[:1])["prompt_tokens"],
            meta=meta,
        )
