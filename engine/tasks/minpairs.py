"""Minimal pairs (`task: minpairs`): is the acceptable sentence more probable?

An item carries `sentences` (≥ 2 strings), `good` (index of the acceptable one,
default 0) and optionally `critical`: a [start, end) character span applied to
every sentence, or a list with one span (or null) per sentence.

Each sentence is scored as log P(sentence | context). Task option `context` says
what the sentence is conditioned on (all sentences of an item go in one loglik call):

- ``eos``: the tokenizer's document separator, the token that sat between documents
  in pretraining: ``<|endoftext|>`` when the vocabulary has it (GPT-2, Qwen, SmolLM),
  else the EOS token. For SmolLM2-Instruct this matters: its BOS is the chat token
  ``<|im_start|>``, after which a sentence scores far lower than after
  ``<|endoftext|>``.
- ``bos``: the backend's start token (the empty context: BOS, or EOS without one).
- ``none``: no conditioning token is scored against: the sentence's first token is
  left out of log P (it has no context); later tokens are scored as for ``bos``.
- ``text``: the literal prefix in option ``context_text``.
- ``auto`` (default): ``eos`` when the backend's tokenizer has a document separator
  (``<|endoftext|>``) and does not add a BOS itself; ``bos`` otherwise (tokenizers that
  start every document with BOS, such as Llama and Gemma, and API backends whose
  tokenizer is unknown).

The resolved context is stored with every item (`extra["context"]`: mode, text,
why) and the option itself with the run, so the drill-down and the run record show it.

correct = 1.0 when log P(good) > log P(s) for every other sentence (strictly; a
tie counts as wrong, the project's tie rule, docs/METRICS.md), else 0.0.
prediction = the sentence with the highest log-probability (first on ties); probs = softmax of the sentence log-probs (a
forced choice between the sentences); confidence = probs[prediction].

Critical region: tokens are mapped to characters with the backend's `tokens`
(each continuation token decoded on its own). When they concatenate to the
sentence ("exact" alignment), token i covers [off_i, off_i + len(tokens[i]))
where off_i is the length of tokens[0..i-1] joined. Otherwise (tokenisers whose
single-token decode drops a word-initial space) a "whitespace" alignment is
tried: each token's text without surrounding whitespace must be found at the
current position after skipping only whitespace, and the token covers the
skipped whitespace plus its text. A token is in the region when its span
overlaps [start, end). Surprisal is −log P in nats (`surprisal_nats`) and in
bits (`surprisal_bits` = nats / ln 2). When neither alignment works (e.g. a
byte split inside a multi-byte character decodes to U+FFFD), the region is
reported with `aligned: False` and no surprisals rather than guessed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from llmscope.engine.backend import Backend
from llmscope.engine.choice_math import argmax_first, softmax
from llmscope.engine.errors import SuiteError
from llmscope.engine.tasks.base import COMMON_ITEM_FIELDS, ItemField, SuiteLike, Task, register
from llmscope.engine.tasks.options import OptionSpec
from llmscope.engine.types import Item, LogLikOut, Result, Work

LN2 = math.log(2.0)


def token_char_spans(tokens: list[str]) -> list[tuple[int, int]]:
    """[start, end) character span of each token in the concatenation of `tokens`."""
    spans = []
    off = 0
    for t in tokens:
        spans.append((off, off + len(t)))
        off += len(t)
    return spans


def align_tokens(text: str, tokens: list[str]) -> tuple[list[tuple[int, int]], str] | None:
    """Character span of each token in `text` and the alignment used, or None (see module doc)."""
    if "".join(tokens) == text:
        return token_char_spans(tokens), "exact"
    spans = []
    pos = 0
    for t in tokens:
        core = t.strip()
        if not core:
            spans.append((pos, pos + len(t)) if text[pos : pos + len(t)] == t else (pos, pos))
            pos = spans[-1][1]
            continue
        i = text.find(core, pos)
        if i < 0 or text[pos:i].strip():
            return None
        spans.append((pos, i + len(core)))
        pos = i + len(core)
    if text[pos:].strip():
        return None
    return spans, "whitespace"


def critical_surprisal(text: str, out: LogLikOut, span: tuple[int, int]) -> dict[str, Any]:
    """Per-token surprisal of the tokens overlapping the character span `span` of `text`."""
    start, end = int(span[0]), int(span[1])
    info: dict[str, Any] = {"span": [start, end], "text": text[start:end]}
    aligned = align_tokens(text, list(out.tokens))
    if aligned is None:
        info["aligned"] = False
        return info
    spans, how = aligned
    idx = [i for i, (a, b) in enumerate(spans) if a < end and b > start]
    nats = [-float(out.token_logprobs[i]) for i in idx]
    info.update(
        aligned=True,
        alignment=how,
        token_indices=idx,
        tokens=[out.tokens[i] for i in idx],
        surprisal_nats=nats,
        surprisal_bits=[s / LN2 for s in nats],
        total_nats=sum(nats),
        total_bits=sum(nats) / LN2,
    )
    return info


CONTEXT_MODES = ("auto", "eos", "bos", "none", "text")
DOC_SEPARATOR = "<|endoftext|>"


def document_separator(tok: Any) -> str | None:
    """The token a tokenizer's pretraining put between documents, or None when unknown."""
    if tok is None:
        return None
    vocab = set(getattr(tok, "all_special_tokens", []) or []) | set(
        (getattr(tok, "get_added_vocab", lambda: {})() or {}).keys()
    )
    if DOC_SEPARATOR in vocab:
        return DOC_SEPARATOR
    eos = getattr(tok, "eos_token", None)
    return str(eos) if eos else None


def resolve_context(mode: str, text: str, backend: Backend) -> dict[str, Any]:
    """{mode, text, why} for a context option on a backend (see module docstring)."""
    caps = backend.capabilities
    tok = backend.tok if caps.tokenizer else None
    adds_bos = bool(backend.add_bos) if caps.tokenizer else False
    sep = document_separator(tok)
    served = None if caps.tokenizer else backend.start_tokens()
    if served is not None:  # the tokenizer is inside the server (vLLM): what it told the backend
        adds_bos, sep = served.adds_bos, served.separator
    if mode == "auto":
        if sep is not None and not adds_bos:
            src = f" ({served.source})" if served is not None else ""
            return {
                "mode": "eos",
                "text": sep,
                "why": f"auto: the tokenizer's document separator{src}",
            }
        why = (
            "auto: the tokenizer starts documents with BOS"
            if adds_bos
            else "auto: no tokenizer to find a document separator in (backend default start token)"
        )
        if served is not None:
            why += f" ({served.source})"
        return {"mode": "bos", "text": "", "why": why}
    if mode == "eos":
        if sep is None:
            raise ValueError(
                "context 'eos': the backend has no tokenizer with a document separator; "
                "use context bos, none or text"
            )
        return {"mode": "eos", "text": sep, "why": "option"}
    if mode == "text":
        return {"mode": "text", "text": text, "why": "option"}
    return {"mode": mode, "text": "", "why": "option"}


def _drop_first(o: LogLikOut) -> LogLikOut:
    """The sentence's log-probability without its first token (context `none`)."""
    lps = list(o.token_logprobs)[1:]
    return LogLikOut(
        logprob=float(sum(lps)),
        n_tokens=len(lps),
        token_logprobs=lps,
        tokens=list(o.tokens)[1:],
        n_context_tokens=o.n_context_tokens + 1,
    )


def _spans(critical: Any, n: int) -> list[tuple[int, int] | None]:
    if critical is None:
        return [None] * n
    if (
        isinstance(critical, (list, tuple))
        and len(critical) == 2
        and all(isinstance(x, int) and not isinstance(x, bool) for x in critical)
    ):
        return [(critical[0], critical[1])] * n
    if isinstance(critical, (list, tuple)) and len(critical) == n:
        out: list[tuple[int, int] | None] = []
        for c in critical:
            if c is None:
                out.append(None)
            elif isinstance(c, (list, tuple)) and len(c) == 2:
                out.append((int(c[0]), int(c[1])))
            else:
                raise ValueError(f"critical span must be [start, end], got {c!r}")
        return out
    raise ValueError(f"critical must be [start, end] or one span per sentence, got {critical!r}")


@register
class MinPairsTask(Task):
    """Compare sentence log-probabilities; the acceptable sentence should win."""

    name = "minpairs"
    summary = "sentence log-probabilities of minimal pairs; the acceptable one should win"
    needs = frozenset({"loglik"})
    default_method = "loglik"
    # the forced choice's confidence (probs[prediction]) is calibrated like a choice item's:
    # ECE, MCE and Brier beside the reliability curve the dashboard draws from it
    metric_producers = ("calibration",)
    result_fields = (
        "sentences",
        "logprob_diff",
        "good",
        "per_token",
        "context",
        "critical",
        "surprisal_unit",
    )
    item_fields = (
        *COMMON_ITEM_FIELDS,
        ItemField("extra.logprob_diff", "Δ logprob", "number"),
        ItemField("extra.sentences", "sentences", "json", column=False),
    )

    @classmethod
    def item_text(cls, record: Mapping[str, Any]) -> str | None:
        sents = record.get("sentences")
        return " / ".join(str(s) for s in sents) if isinstance(sents, list) else None

    @classmethod
    def check_item(cls, item: Item, suite: SuiteLike, src: Path | None) -> None:
        sents = item.fields.get("sentences")
        if (
            not isinstance(sents, list)
            or len(sents) < 2
            or not all(isinstance(s, str) for s in sents)
        ):
            raise SuiteError("needs a list of at least two sentences", src, item.line, "sentences")

    option_specs = (
        OptionSpec(
            "context", "str", "auto", "what each sentence is conditioned on", choices=CONTEXT_MODES
        ),
        OptionSpec("context_text", "str", "", "the literal prefix for context: text"),
    )

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        super().__init__(options)
        mode = self.options.get("context", "auto")
        if mode == "text" and "context_text" not in self.options:
            from llmscope.engine.tasks.options import TaskOptionError

            raise TaskOptionError(
                "option 'context' of task 'minpairs' is 'text' but no 'context_text' is given"
            )
        self._resolved: dict[str, Any] | None = None

    def describe(self) -> dict[str, Any]:
        # The context mode is part of the run's identity even when left at its default.
        return {"task": self.name, "context": "auto", **self.options}

    def resolve_context(self, backend: Backend) -> dict[str, Any]:
        """The context actually used: {mode, text, why} (see module docstring)."""
        if self._resolved is None:
            self._resolved = resolve_context(
                str(self.options.get("context", "auto")),
                str(self.options.get("context_text", "")),
                backend,
            )
        return self._resolved

    async def score(self, work: Work, backend: Backend) -> Result:
        f = work.item.fields
        sents = f.get("sentences")
        if not isinstance(sents, list) or len(sents) < 2:
            raise ValueError("minpairs item needs a list of at least two sentences")
        sents = [str(s) for s in sents]
        good = int(f.get("good", 0) if f.get("good") is not None else 0)
        if not 0 <= good < len(sents):
            raise ValueError(f"good index {good} out of range for {len(sents)} sentences")
        spans = _spans(f.get("critical"), len(sents))
        ctx = self.resolve_context(backend)
        context = str(ctx["text"])
        outs = await backend.loglik([(context, s) for s in sents], chat=False)
        # Critical regions keep every token (they align to the sentence text); the score
        # leaves the unconditioned first token out under context `none`.
        scored = [_drop_first(o) for o in outs] if ctx["mode"] == "none" else outs
        lps = [o.logprob for o in scored]
        pred = argmax_first(lps)
        probs = softmax(lps)
        correct = 1.0 if all(lps[good] > lp for i, lp in enumerate(lps) if i != good) else 0.0
        option_scores = {
            s: {
                "logprob": float(o.logprob),
                "n_tokens": float(o.n_tokens),
                "mean_token": o.logprob / max(o.n_tokens, 1),
            }
            for s, o in zip(sents, scored, strict=True)
        }
        critical = [
            None if sp is None else critical_surprisal(s, o, sp)
            for s, o, sp in zip(sents, outs, spans, strict=True)
        ]
        res = Result(
            item_id=work.item.item_id,
            variant=work.variant,
            prompt=backend.render(context, chat=False),
            probs={s: float(p) for s, p in zip(sents, probs, strict=True)},
            option_scores=option_scores,
            prediction=sents[pred],
            gold=sents[good],
            correct=correct,
            confidence=float(probs[pred]),
            n_tokens=sum(o.n_tokens for o in outs),
        )
        res.extra["sentences"] = sents
        res.extra["good"] = good
        res.extra["logprob_diff"] = float(
            lps[good] - max(lp for i, lp in enumerate(lps) if i != good)
        )
        res.extra["critical"] = critical
        res.extra["context"] = dict(ctx)
        res.extra["surprisal_unit"] = "surprisal_nats = -ln P; surprisal_bits = -log2 P"
        res.extra["per_token"] = [
            {"tokens": list(o.tokens), "logprobs": [float(x) for x in o.token_logprobs]}
            for o in outs
        ]
        return res
