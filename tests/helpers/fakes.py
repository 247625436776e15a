"""A table-driven Backend for the scoring-method tests (no model; hand-made numbers)."""

from __future__ import annotations

from typing import Any

from llmscope.engine.backend import Backend, BackendError, GenParams
from llmscope.engine.types import GenerateOut, LogLikOut, NextTokenOut, TopToken


class TableBackend(Backend):
    """Answers from fixed tables and records every call.

    loglik: {(context, continuation): [(token, logprob), ...]}
    next_token: {prompt: {answer: prob}}
    generate: {prompt: [text, ...]} (the texts for successive calls with that prompt)
    """

    kind = "table"

    def __init__(
        self,
        loglik_table: dict[tuple[str, str], list[tuple[str, float]]] | None = None,
        next_table: dict[str, dict[str, float]] | None = None,
        gen_table: dict[str, list[list[str]]] | None = None,
        kind: str = "table",
        can_loglik: bool = True,
    ) -> None:
        self.loglik_table = loglik_table or {}
        self.next_table = next_table or {}
        self.gen_table = {k: list(v) for k, v in (gen_table or {}).items()}
        self.kind = kind
        self.can_loglik = can_loglik
        self.calls: list[tuple[str, Any]] = []

    def describe(self) -> dict[str, Any]:
        return {"backend": "table"}

    def render(self, prompt: str, *, chat: bool = True) -> str:
        return f"<user>{prompt}</user>" if chat else prompt

    async def next_token(
        self, prompt: str, answers: list[str], *, chat: bool = True, top_k: int = 20
    ) -> NextTokenOut:
        self.calls.append(("next_token", (prompt, tuple(answers), chat)))
        probs = {a: self.next_table[prompt].get(a, 0.0) for a in answers}
        top = [TopToken(a, i, p) for i, (a, p) in enumerate(self.next_table[prompt].items())]
        return NextTokenOut(
            prompt=self.render(prompt, chat=chat),
            probs=probs,
            other=1.0 - sum(probs.values()),
            top=top,
            n_tokens=len(prompt.split()),
        )

    async def loglik(
        self, requests: list[tuple[str, str]], *, chat: bool = False
    ) -> list[LogLikOut]:
        self.calls.append(("loglik", (list(requests), chat)))
        if not self.can_loglik:
            raise BackendError("no loglik")
        out = []
        for ctx, cont in requests:
            toks = self.loglik_table[(ctx, cont)]
            out.append(
                LogLikOut(
                    logprob=sum(lp for _, lp in toks),
                    n_tokens=len(toks),
                    token_logprobs=[lp for _, lp in toks],
                    tokens=[t for t, _ in toks],
                    n_context_tokens=len(ctx.split()),
                )
            )
        return out

    async def generate(self, prompt: str, params: GenParams, *, chat: bool = True) -> GenerateOut:
        self.calls.append(("generate", (prompt, params, chat)))
        if prompt not in self.gen_table or not self.gen_table[prompt]:
            raise BackendError("cannot generate")
        texts = self.gen_table[prompt].pop(0)
        return GenerateOut(texts=list(texts), prompt=self.render(prompt, chat=chat), n_tokens=3)
