"""Short-answer generation scored by exact match and token F1 (`task: generation`).

Task options: ``chat`` (True), ``stop`` (["\\n"]), ``temperature`` (0 = greedy),
``top_p`` (1.0), ``n`` (1 sample), ``seed`` (0), ``max_new_tokens`` (32),
``answers_field`` ("answers").

Gold answers: the item's `answers_field` (a list, or "a|b" string) when present,
plus `work.gold` when it is not among them; when the work's gold is None and the
item has no answers field, the item is unscored.

Stop sequences: stops that cannot cut a number are also sent to the backend;
"."/","-only stops are withheld from the backend (it might cut 12.25) and a
warning is issued. Every generated text is then cut here with
`normalize.apply_stop` (which skips a "." between digits) after removing leading
whitespace (so "\\n10" is not cut to "" by the newline stop).

Scoring: each sample's cut text is normalised (`normalize.normalise`), EM and
F1 are the max over gold answers. `prediction` = the first sample's cut text,
`correct` = EM of the first sample; `extra["em_majority"]` is the EM of the
most frequent normalised sample (ties: the earliest), and `confidence` the
fraction of samples whose normalised text equals the first sample's.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from llmscope.engine.backend import Backend, GenParams
from llmscope.engine.normalize import (
    apply_stop,
    check_stops,
    decimal_unsafe_stop,
    normalise,
    token_f1_normalised,
)
from llmscope.engine.tasks.base import COMMON_ITEM_FIELDS, ItemField, Task, chat_option, register
from llmscope.engine.tasks.options import OptionSpec
from llmscope.engine.types import Result, Work


def gold_answers(work: Work, field: str = "answers") -> list[str]:
    """Acceptable gold strings for a work unit (see module docstring)."""
    raw = work.item.fields.get(field)
    golds: list[str] = []
    if isinstance(raw, list):
        golds = [str(a) for a in raw if a is not None]
    elif isinstance(raw, str) and raw:
        golds = [a.strip() for a in raw.split("|")] if "|" in raw else [raw]
    elif raw is not None and not isinstance(raw, (dict, bool)):
        golds = [str(raw)]
    if work.gold is not None and work.gold not in golds:
        golds.append(work.gold)
    return golds


@register
class GenerationTask(Task):
    """Generate a short answer; exact match and token F1 against the gold answers."""

    name = "generation"
    summary = "a short generated answer; exact match and token F1 against gold answers"
    needs = frozenset({"generate"})
    default_method = "generate"
    lm_eval_metric = "exact_match"
    metric_producers = ("generation", "probeval", "genmetrics")
    result_fields = ("em", "em_mean", "em_majority", "majority", "stop_warnings")
    item_fields = (
        *COMMON_ITEM_FIELDS,
        ItemField("extra.em_mean", "EM (mean)", "number"),
        ItemField("extra.majority", "majority answer", column=False),
    )
    option_specs = (
        chat_option(True),
        OptionSpec("stop", "str|list[str]", ["\n"], "stop sequences"),
        OptionSpec("max_new_tokens", "int", 32, "generation budget", min=1),
        OptionSpec("temperature", "float", 0.0, "sampling temperature (0 = greedy)", min=0.0),
        OptionSpec("top_p", "float", 1.0, "nucleus sampling mass", min=0.0, max=1.0),
        OptionSpec("n", "int", 1, "samples per item", min=1),
        OptionSpec("seed", "int?", 0, "sampling seed"),
        OptionSpec("answers_field", "str", "answers", "item field with the acceptable answers"),
    )

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        super().__init__(options)
        stops = self.options.get("stop", ["\n"])
        if isinstance(stops, str):
            stops = [stops]
        self.stops: list[str] = [s for s in (stops or []) if s]
        self.stop_warnings = check_stops(self.stops)

    def params(self) -> GenParams:
        o = self.options
        seed = o.get("seed", 0)
        return GenParams(
            max_new_tokens=int(o.get("max_new_tokens", 32)),
            temperature=float(o.get("temperature", 0.0)),
            top_p=float(o.get("top_p", 1.0)),
            n=int(o.get("n", 1)),
            seed=None if seed is None else int(seed),
            stop=[s for s in self.stops if not decimal_unsafe_stop(s)],
        )

    async def score(self, work: Work, backend: Backend) -> Result:
        chat = bool(self.options.get("chat", True))
        out = await backend.generate(work.prompt, self.params(), chat=chat)
        golds = gold_answers(work, str(self.options.get("answers_field", "answers")))
        gold_norm = [normalise(g) for g in golds]
        cut = [apply_stop(t.lstrip(), self.stops) for t in out.texts]
        samples = []
        for text in cut:
            norm, trace = normalise(text)
            em = f1 = None
            if golds:
                em = 1.0 if any(norm == g[0] for g in gold_norm) else 0.0
                f1 = max(token_f1_normalised(norm, g[0]) for g in gold_norm)
            samples.append({"text": text, "normalised": norm, "trace": trace, "em": em, "f1": f1})
        res = Result(
            item_id=work.item.item_id,
            variant=work.variant,
            prompt=out.prompt or backend.render(work.prompt, chat=chat),
            gold=work.gold if work.gold is not None else (golds[0] if golds else None),
            n_tokens=out.n_tokens,
        )
        res.extra.update(
            raw=list(out.texts),
            samples=samples,
            golds=[
                {"text": g, "normalised": gn[0], "trace": gn[1]}
                for g, gn in zip(golds, gold_norm, strict=True)
            ],
            stops=self.stops,
            meta=out.meta,
        )
        if self.stop_warnings:
            res.extra["stop_warnings"] = self.stop_warnings
        if not samples:
            res.error = "the backend returned no text"
            return res
        first = samples[0]
        res.prediction = first["text"]
        res.correct = first["em"]
        res.confidence = sum(s["normalised"] == first["normalised"] for s in samples) / len(samples)
        res.extra["em"] = first["em"]
        res.extra["f1"] = first["f1"]
        if golds:
            counts = Counter(s["normalised"] for s in samples)
            top = max(counts.values())
            majority = next(s for s in samples if counts[s["normalised"]] == top)
            res.extra["majority"] = majority["normalised"]
            res.extra["em_majority"] = majority["em"]
            res.extra["em_mean"] = sum(s["em"] for s in samples) / len(samples)
            res.extra["f1_mean"] = sum(s["f1"] for s in samples) / len(samples)
        return res
