"""Targeted syntactic evaluation as in SyntaxGym (`task: syntaxgym`; Hu et al. 2020).

An item has several *conditions* (sentence variants); each condition is a list of
*regions* (numbered from 1). A *prediction* is an inequality over region
surprisals written in the SyntaxGym formula language, e.g.
``[(8;%neg_pos%) < (8;%pos_pos%)] & [(8;%neg_neg%) < (8;%pos_neg%)]``: ``(r;%c%)`` is
the surprisal of region ``r`` in condition ``c`` (``r`` may also be a region name
given by the task option ``regions``), ``[ ]`` groups, ``+ - * /`` combine,
``< > <= >= =`` compare and ``&`` / ``|`` join. ``=`` is "equal within tolerance"
(relative 1e-5, absolute 1e-3 bits) as in syntaxgym-core. An item is correct when
every prediction holds.

Item formats (JSONL): SyntaxGym's own (``conditions: [{condition_name, regions:
[{region_number, content}]}]``) or the compact form ``conditions: {name: [region
contents...]}``. Predictions come from the item's ``predictions`` field (a list of
formula strings) or the task option ``predictions``.

Surprisal: each condition's sentence (non-empty region contents joined by one
space) is scored with ``loglik(("", sentence))`` (the backend prepends BOS), in bits.
Words are the sentence's whitespace-separated strings, so word boundaries do not
depend on the tokenizer; each token is assigned to the word holding its first
non-space character (a whitespace-only token to the next word) and a word's
surprisal is the sum of its tokens' surprisals. A region's surprisal is the sum of
its words' (SyntaxGym's ``sum`` metric). A token whose text runs past the end of its
word is reported in ``crossing_tokens`` rather than split.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmscope.engine.backend import Backend
from llmscope.engine.errors import SuiteError
from llmscope.engine.tasks.base import COMMON_ITEM_FIELDS, ItemField, SuiteLike, Task, register
from llmscope.engine.tasks.minpairs import align_tokens
from llmscope.engine.tasks.options import OptionSpec
from llmscope.engine.types import Item, LogLikOut, Result, Work

LN2 = math.log(2.0)
# syntaxgym-core's tolerance for "=" between surprisals (bits)
EQUALITY_RTOL = 1e-5
EQUALITY_ATOL = 1e-3


class FormulaError(ValueError):
    """A prediction formula that cannot be parsed or refers to unknown regions/conditions."""


# -- formulas ------------------------------------------------------------------------------
# A small recursive-descent parser: the grammar is ten lines and pyparsing (which
# syntaxgym-core uses) would be a new dependency for it.
_TOKEN = re.compile(
    r"\s*(?:(?P<ref>\(\s*(?P<region>[\w-]+)\s*;\s*%(?P<cond>[^%]+)%\s*\))|(?P<num>\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)"
    r"|(?P<op><=|>=|[<>=&|+\-*/\[\]]))"
)


@dataclass(frozen=True)
class RegionRef:
    region: str
    condition: str


def tokenize_formula(formula: str) -> list[Any]:
    """Formula text to tokens: RegionRef, float, or operator strings."""
    out: list[Any] = []
    pos = 0
    text = formula.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise FormulaError(
                f"cannot parse formula at {text[pos : pos + 12]!r} (column {pos + 1})"
            )
        if m.group("ref"):
            out.append(RegionRef(m.group("region"), m.group("cond").strip()))
        elif m.group("num"):
            out.append(float(m.group("num")))
        else:
            out.append(m.group("op"))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, tokens: list[Any], formula: str) -> None:
        self.t, self.i, self.formula = tokens, 0, formula

    def peek(self) -> Any:
        return self.t[self.i] if self.i < len(self.t) else None

    def take(self) -> Any:
        tok = self.peek()
        self.i += 1
        return tok

    def parse(self) -> Any:
        node = self.disj()
        if self.peek() is not None:
            raise FormulaError(f"unexpected {self.peek()!r} in formula {self.formula!r}")
        return node

    def disj(self) -> Any:
        node = self.conj()
        while self.peek() == "|":
            self.take()
            node = ("|", node, self.conj())
        return node

    def conj(self) -> Any:
        node = self.cmp()
        while self.peek() == "&":
            self.take()
            node = ("&", node, self.cmp())
        return node

    def cmp(self) -> Any:
        node = self.sum()
        if self.peek() in ("<", ">", "=", "<=", ">="):
            op = self.take()
            node = (op, node, self.sum())
        return node

    def sum(self) -> Any:
        node = self.term()
        while self.peek() in ("+", "-"):
            op = self.take()
            node = (op, node, self.term())
        return node

    def term(self) -> Any:
        node = self.factor()
        while self.peek() in ("*", "/"):
            op = self.take()
            node = (op, node, self.factor())
        return node

    def factor(self) -> Any:
        tok = self.take()
        if tok == "[":
            node = self.disj()
            if self.take() != "]":
                raise FormulaError(f"missing ']' in formula {self.formula!r}")
            return node
        if tok == "-":
            return ("neg", self.factor())
        if isinstance(tok, (RegionRef, float)):
            return tok
        raise FormulaError(f"unexpected {tok!r} in formula {self.formula!r}")


def parse_formula(formula: str) -> Any:
    """The syntax tree of a prediction formula (FormulaError when malformed)."""
    return _Parser(tokenize_formula(formula), formula).parse()


def formula_refs(tree: Any) -> list[RegionRef]:
    """Every region reference in a parsed formula."""
    if isinstance(tree, RegionRef):
        return [tree]
    if isinstance(tree, tuple):
        return [r for sub in tree[1:] for r in formula_refs(sub)]
    return []


def evaluate_formula(tree: Any, lookup: Any) -> Any:
    """Evaluate a parsed formula; `lookup(RegionRef)` gives a region's surprisal."""
    if isinstance(tree, RegionRef):
        return lookup(tree)
    if isinstance(tree, float):
        return tree
    op = tree[0]
    if op == "neg":
        return -evaluate_formula(tree[1], lookup)
    a, b = evaluate_formula(tree[1], lookup), evaluate_formula(tree[2], lookup)
    if op == "&":
        return bool(a) and bool(b)
    if op == "|":
        return bool(a) or bool(b)
    if op == "=":
        return math.isclose(a, b, rel_tol=EQUALITY_RTOL, abs_tol=EQUALITY_ATOL)
    return {
        "<": lambda: a < b,
        ">": lambda: a > b,
        "<=": lambda: a <= b,
        ">=": lambda: a >= b,
        "+": lambda: a + b,
        "-": lambda: a - b,
        "*": lambda: a * b,
        "/": lambda: a / b,
    }[op]()


# -- items -------------------------------------------------------------------------------------
@dataclass
class Condition:
    name: str
    regions: list[tuple[int, str]]  # (region number, content)


def item_conditions(fields: dict[str, Any]) -> list[Condition]:
    """The conditions of an item in either accepted format (ValueError when malformed)."""
    raw = fields.get("conditions")
    out: list[Condition] = []
    if isinstance(raw, dict):
        for name, regs in raw.items():
            if not isinstance(regs, list) or not all(isinstance(r, str) for r in regs):
                raise ValueError(f"condition {name!r} must be a list of region strings")
            out.append(Condition(str(name), [(i + 1, r) for i, r in enumerate(regs)]))
    elif isinstance(raw, list):
        for c in raw:
            if (
                not isinstance(c, dict)
                or "condition_name" not in c
                or not isinstance(c.get("regions"), list)
            ):
                raise ValueError("each condition needs condition_name and a list of regions")
            regs = []
            for r in c["regions"]:
                if not isinstance(r, dict) or "content" not in r:
                    raise ValueError(
                        f"condition {c['condition_name']!r}: each region needs content"
                    )
                regs.append((int(r.get("region_number", len(regs) + 1)), str(r["content"])))
            out.append(Condition(str(c["condition_name"]), regs))
    else:
        raise ValueError(
            "needs `conditions`: a mapping of condition name to region list, or SyntaxGym's list"
        )
    if len(out) < 2:
        raise ValueError("needs at least two conditions")
    return out


def build_sentence(regions: list[tuple[int, str]]) -> tuple[str, dict[int, tuple[int, int]]]:
    """Sentence text (non-empty regions joined by one space) and each region's [start, end)."""
    parts: list[str] = []
    spans: dict[int, tuple[int, int]] = {}
    pos = 0
    for num, content in regions:
        c = content.strip()
        if not c:
            spans[num] = (pos, pos)
            continue
        if parts:
            pos += 1
        spans[num] = (pos, pos + len(c))
        parts.append(c)
        pos += len(c)
    return " ".join(parts), spans


def word_spans(text: str) -> list[tuple[int, int]]:
    """[start, end) of each whitespace-separated word (tokenizer-independent boundaries)."""
    return [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]


def word_surprisals(text: str, out: LogLikOut) -> dict[str, Any]:
    """Per-word surprisal (bits) from token log-probs; see the module docstring."""
    words = word_spans(text)
    aligned = align_tokens(text, list(out.tokens))
    if aligned is None:
        return {
            "aligned": False,
            "words": [{"word": text[a:b], "start": a, "end": b} for a, b in words],
        }
    spans, how = aligned
    bits = [0.0] * len(words)
    ntok = [0] * len(words)
    crossing: list[int] = []
    for ti, (a, b) in enumerate(spans):
        seg = text[a:b]
        lead = len(seg) - len(seg.lstrip())
        anchor = a + lead if seg.strip() else b
        wi = next((k for k, (ws, we) in enumerate(words) if anchor < we), None)
        if wi is None:  # trailing whitespace token: charge it to the last word
            wi = len(words) - 1
        if seg.strip() and b > words[wi][1]:
            crossing.append(ti)
        bits[wi] += -float(out.token_logprobs[ti]) / LN2
        ntok[wi] += 1
    return {
        "aligned": True,
        "alignment": how,
        "crossing_tokens": crossing,
        "words": [
            {"word": text[a:b], "start": a, "end": b, "surprisal_bits": s, "n_tokens": n}
            for (a, b), s, n in zip(words, bits, ntok, strict=True)
        ],
    }


def region_surprisals(
    words: list[dict[str, Any]], spans: dict[int, tuple[int, int]]
) -> dict[int, float]:
    """Sum of word surprisals inside each region's span (0 for an empty region)."""
    out = {}
    for num, (a, b) in spans.items():
        out[num] = float(
            sum(w["surprisal_bits"] for w in words if w["start"] >= a and w["end"] <= b and a < b)
        )
    return out


def region_name_map(region_names: Any) -> dict[str, int]:
    """Region name -> number from a list (1-based) or SyntaxGym's {"1": "name"} mapping."""
    if isinstance(region_names, list):
        return {str(n): i + 1 for i, n in enumerate(region_names)}
    if isinstance(region_names, dict):
        return {str(v): int(k) for k, v in region_names.items()}
    return {}


def check_item(item: Any, path: Any, options: dict[str, Any] | None = None) -> None:
    """Validate a syntaxgym item before any model runs (SuiteError naming file, line, field)."""
    f = item.fields
    try:
        conds = item_conditions(f)
    except ValueError as e:
        raise SuiteError(str(e), path, item.line, "conditions") from e
    preds = f.get("predictions") or (options or {}).get("predictions") or []
    if isinstance(preds, str):
        preds = [preds]
    if not isinstance(preds, list) or not preds:
        raise SuiteError(
            "needs a list of prediction formulas (item field or task option)",
            path,
            item.line,
            "predictions",
        )
    names = region_name_map((options or {}).get("regions") or f.get("region_names"))
    regions = {c.name: {n for n, _ in c.regions} for c in conds}
    for p in preds:
        try:
            refs = formula_refs(parse_formula(str(p)))
            for r in refs:
                if r.condition not in regions:
                    raise FormulaError(f"unknown condition {r.condition!r} in {p!r}")
                num = int(r.region) if r.region.isdigit() else names.get(r.region)
                if num is None or num not in regions[r.condition]:
                    raise FormulaError(
                        f"condition {r.condition!r} has no region {r.region!r} ({p!r})"
                    )
        except FormulaError as e:
            raise SuiteError(str(e), path, item.line, "predictions") from e


@register
class SyntaxGymTask(Task):
    """Region surprisals per condition; correct when every prediction formula holds."""

    name = "syntaxgym"
    summary = "region surprisals per condition; correct when every prediction holds"
    needs = frozenset({"loglik"})
    metric_producers = ("syntaxgym",)
    traits = frozenset({"regions"})
    default_method = "loglik-surprisal"
    result_fields = ("conditions", "predictions", "surprisal_unit", "per_token")
    item_fields = (
        *COMMON_ITEM_FIELDS,
        ItemField("extra.predictions", "predictions", "json", column=False),
    )

    @classmethod
    def check_item(cls, item: Item, suite: SuiteLike, src: Path | None) -> None:
        check_item(item, src, suite.task_options)

    option_specs = (
        OptionSpec(
            "predictions", "any", None, "suite-level predictions (formulas over region surprisals)"
        ),
        OptionSpec("regions", "any", None, "suite-level region names"),
    )

    def _region_number(self, ref: str, names: dict[str, int]) -> int:
        if ref.isdigit():
            return int(ref)
        if ref in names:
            return names[ref]
        raise FormulaError(f"unknown region {ref!r} (known names: {', '.join(names) or 'none'})")

    async def score(self, work: Work, backend: Backend) -> Result:
        f = work.item.fields
        conds = item_conditions(f)
        preds = f.get("predictions") or self.options.get("predictions") or []
        if isinstance(preds, str):
            preds = [preds]
        if not preds:
            raise ValueError(
                "no predictions: give the item a `predictions` list or the task option"
            )
        names = region_name_map(self.options.get("regions") or f.get("region_names"))
        sentences = [build_sentence(c.regions) for c in conds]
        outs = await backend.loglik([("", s) for s, _ in sentences], chat=False)
        per_cond: dict[str, Any] = {}
        region_bits: dict[str, dict[int, float]] = {}
        for c, (text, spans), o in zip(conds, sentences, outs, strict=True):
            ws = word_surprisals(text, o)
            if not ws["aligned"]:
                raise ValueError(
                    f"condition {c.name!r}: tokens do not align with the text {text!r}"
                )
            for w in ws["words"]:
                w["region"] = next(
                    (n for n, (a, b) in spans.items() if a <= w["start"] and w["end"] <= b), None
                )
            rs = region_surprisals(ws["words"], spans)
            region_bits[c.name] = rs
            per_cond[c.name] = {
                "sentence": text,
                "regions": {
                    str(n): {"content": text[a:b], "surprisal_bits": rs[n]}
                    for n, (a, b) in spans.items()
                },
                "words": ws["words"],
                "crossing_tokens": ws["crossing_tokens"],
                "logprob": float(o.logprob),
                "n_tokens": o.n_tokens,
            }

        def lookup(ref: RegionRef) -> float:
            if ref.condition not in region_bits:
                raise FormulaError(
                    f"unknown condition {ref.condition!r} (item has {', '.join(region_bits)})"
                )
            num = self._region_number(ref.region, names)
            if num not in region_bits[ref.condition]:
                raise FormulaError(f"condition {ref.condition!r} has no region {ref.region}")
            return region_bits[ref.condition][num]

        results = []
        for p in preds:
            val = evaluate_formula(parse_formula(str(p)), lookup)
            if not isinstance(val, bool):
                raise FormulaError(f"prediction {p!r} is not a comparison")
            results.append({"formula": str(p), "met": val})
        correct = 1.0 if all(r["met"] for r in results) else 0.0
        res = Result(
            item_id=work.item.item_id,
            variant=work.variant,
            prompt=backend.render("", chat=False),
            prediction="met" if correct else "not met",
            gold="met",
            correct=correct,
            n_tokens=sum(o.n_tokens for o in outs),
        )
        res.extra.update(
            conditions=per_cond,
            predictions=results,
            surprisal_unit="bits (-log2 P)",
            per_token=[
                {"tokens": list(o.tokens), "logprobs": [float(x) for x in o.token_logprobs]}
                for o in outs
            ],
        )
        return res
