"""Constrained-answer items (`task: constrained`, WorldSense style).

Each item lists its allowed responses (`options`) and its gold.

Modes (task option ``mode``: "auto" (default), "loglik", "generate"):

- loglik (auto when `backend.capabilities.local_loglik`, i.e. a local model): every allowed response is scored by
  log P(continuation.format(option) | prompt), raw sum (as in `task: choice`,
  continuation default " {option}", chat default False), prediction = argmax
  (first on ties). If the backend's loglik raises BackendError in auto mode, the
  generate mode is used instead.
- generate (auto for every other backend): greedy generation (``max_new_tokens``
  16, ``stop`` [] by default, chat default True). The reply is accepted when,
  after `clean_response`, it equals an allowed response (case-insensitive unless
  ``case_sensitive: true``; the allowed spelling is stored). Otherwise the model
  is asked once more with the prompt plus "\\n\\nOnly respond with one of these
  options: [o1, o2, ...]"; a reply still not allowed becomes the response ""
  (counted wrong, never dropped). Both raw replies are kept in
  `extra["raw_responses"]`.

`clean_response`: strip whitespace; then repeatedly remove one trailing "." and
one pair of surrounding quotes ("", '', “”, ‘’, ``) or brackets ((), [])
while anything changes, stripping whitespace after each removal. So
' "TRUE". ', '(1)' and '“Possible.”' become 'TRUE', '1' and 'Possible'.
"""

from __future__ import annotations

from llmscope.engine.backend import Backend, BackendError, GenParams
from llmscope.engine.tasks.base import COMMON_ITEM_FIELDS, ItemField, SuiteLike, Task, register
from llmscope.engine.tasks.choice import continuation_text, loglik_option_result
from llmscope.engine.tasks.options import OptionSpec
from llmscope.engine.types import Result, Work

_PAIRS = [
    ('"', '"'),
    ("'", "'"),
    ("\u201c", "\u201d"),
    ("\u2018", "\u2019"),
    ("`", "`"),
    ("(", ")"),
    ("[", "]"),
]
REPROMPT = "Only respond with one of these options: [{options}]"


def clean_response(text: str) -> str:
    """Trim whitespace, a trailing period and surrounding quotes/brackets (see module docstring)."""
    t = text.strip()
    changed = True
    while changed and t:
        changed = False
        if t.endswith("."):
            t = t[:-1].strip()
            changed = True
        for a, b in _PAIRS:
            if len(t) >= 2 and t.startswith(a) and t.endswith(b):
                t = t[1:-1].strip()
                changed = True
                break
    return t


def match_allowed(text: str, options: list[str], case_sensitive: bool = False) -> str | None:
    """The allowed response the cleaned reply equals, or None."""
    t = clean_response(text)
    for o in options:
        if t == o or (not case_sensitive and t.casefold() == o.casefold()):
            return o
    return None


def class_correct(pred: str, gold: str, classes: dict[str, str]) -> float:
    """1.0 when the response and the gold fall in the same answer class; "" (invalid) is wrong."""
    return float(pred != "" and classes.get(pred, pred) == classes.get(gold, gold))


@register
class ConstrainedTask(Task):
    """Pick one allowed response: by likelihood for local models, by generation otherwise."""

    name = "constrained"
    summary = "a free answer constrained to the allowed responses (loglik or generate-and-match)"
    needs_options = True
    predicts_option = True
    default_method = "constrained"
    metric_producers = (
        "methods",
        "position",
        "calibration",
        "worldsense",
        "softmax_accuracy_curve",
    )
    result_fields = ("mode", "raw_responses", "scored_as", "exact_correct", "loglik_error")
    item_fields = (
        *COMMON_ITEM_FIELDS,
        ItemField("extra.mode", "mode"),
        ItemField("extra.raw_responses", "responses", "json", column=False),
    )
    option_specs = (
        OptionSpec(
            "chat", "bool", None, "chat template (unset: false for loglik, true for generate)"
        ),
        OptionSpec(
            "mode",
            "str",
            "auto",
            "loglik (local models), generate, or auto",
            choices=("auto", "loglik", "generate"),
        ),
        OptionSpec(
            "equivalent",
            "dict[str,str]?",
            None,
            "answer classes: response -> class scored as equal",
        ),
        OptionSpec("continuation", "str", " {option}", "how a response is appended (loglik mode)"),
        OptionSpec("case_sensitive", "bool", False, "match generated responses case-sensitively"),
        OptionSpec("stop", "str|list[str]", [], "stop sequences (generate mode)"),
        OptionSpec("max_new_tokens", "int", 16, "generation budget (generate mode)", min=1),
        OptionSpec("seed", "int?", 0, "sampling seed passed to the backend"),
        OptionSpec("prompting", "str", "basic", "prompting condition label (WorldSense analysis)"),
    )

    @classmethod
    def gold_problem(cls, gold: str, options: list[str] | None, suite: SuiteLike) -> str | None:
        if options and gold.casefold() not in {o.casefold() for o in options}:
            return f"gold {gold!r} is not one of the options {options}"
        return None

    def required_capabilities(self) -> frozenset[str]:
        mode = self.options.get("mode", "auto")
        return frozenset(
            {"loglik"} if mode == "loglik" else {"generate"} if mode == "generate" else ()
        )

    def probe_need(self) -> str:
        return "loglik" if self.options.get("mode") == "loglik" else "generate"

    def mode_for(self, backend: Backend) -> str:
        mode = str(self.options.get("mode", "auto"))
        if mode not in ("auto", "loglik", "generate"):
            raise ValueError(f"constrained mode must be auto, loglik or generate, not {mode!r}")
        if mode == "auto":
            # exact, cheap log-likelihoods (a local model) score every allowed response
            return "loglik" if backend.capabilities.local_loglik else "generate"
        return mode

    async def score(self, work: Work, backend: Backend) -> Result:
        options = list(work.options or work.item.options or [])
        if not options:
            raise ValueError("constrained item has no allowed responses")
        mode = self.mode_for(backend)
        if mode == "loglik":
            try:
                res = await self._score_loglik(work, options, backend)
            except BackendError as e:
                if self.options.get("mode", "auto") == "loglik":
                    raise
                res = await self._score_generate(work, options, backend)
                res.extra["loglik_error"] = str(e)
        else:
            res = await self._score_generate(work, options, backend)
        return self._apply_equivalence(res)

    def _apply_equivalence(self, res: Result) -> Result:
        """Score with the suite's answer classes when it defines them (task option `equivalent`).

        WorldSense counts responses 1 and 2 as the same answer (KNOW): its authors' accuracy
        compares classes, not strings. An empty (invalid) response stays wrong.
        """
        eq = self.options.get("equivalent")
        if not isinstance(eq, dict) or res.gold is None or res.prediction is None:
            return res
        pred, gold = str(res.prediction), str(res.gold)
        res.extra["exact_correct"] = res.correct
        res.correct = class_correct(pred, gold, eq)
        res.extra["scored_as"] = {"prediction": eq.get(pred, pred), "gold": eq.get(gold, gold)}
        return res

    async def _score_loglik(self, work: Work, options: list[str], backend: Backend) -> Result:
        chat = bool(self.options.get("chat", False))
        conts = [
            continuation_text(str(self.options.get("continuation", " {option}")), o)
            for o in options
        ]
        outs = await backend.loglik([(work.prompt, c) for c in conts], chat=chat)
        res, _ = loglik_option_result(
            work, options, outs, conts, backend.render(work.prompt, chat=chat)
        )
        res.extra["mode"] = "loglik"
        return res

    async def _score_generate(self, work: Work, options: list[str], backend: Backend) -> Result:
        chat = bool(self.options.get("chat", True))
        cs = bool(self.options.get("case_sensitive", False))
        stop = self.options.get("stop", [])
        params = GenParams(
            max_new_tokens=int(self.options.get("max_new_tokens", 16)),
            temperature=0.0,
            n=1,
            seed=self.options.get("seed", 0),
            stop=[stop] if isinstance(stop, str) else list(stop or []),
        )
        out = await backend.generate(work.prompt, params, chat=chat)
        raws = [out.texts[0] if out.texts else ""]
        prompts = [out.prompt or backend.render(work.prompt, chat=chat)]
        n_tokens = out.n_tokens
        answer = match_allowed(raws[0], options, cs)
        if answer is None:
            retry = work.prompt + "\n\n" + REPROMPT.format(options=", ".join(options))
            out2 = await backend.generate(retry, params, chat=chat)
            raws.append(out2.texts[0] if out2.texts else "")
            prompts.append(out2.prompt or backend.render(retry, chat=chat))
            answer = match_allowed(raws[1], options, cs)
        response = answer if answer is not None else ""
        res = Result(
            item_id=work.item.item_id,
            variant=work.variant,
            prompt=prompts[0],
            prediction=response,
            gold=work.gold,
            correct=None
            if work.gold is None
            else (1.0 if response != "" and response == work.gold else 0.0),
            n_tokens=n_tokens,
        )
        if work.gold is not None and res.correct == 0.0 and response and not cs:
            res.correct = 1.0 if response.casefold() == work.gold.casefold() else 0.0
        res.extra.update(
            mode="generate",
            raw_responses=raws,
            prompts=prompts,
            reprompted=len(raws) > 1,
            valid=answer is not None,
            options=options,
        )
        return res
