"""Multiple choice by option log-likelihood (`task: choice`).

Each option is scored as log P(continuation.format(option=...) | prompt) with all
options of an item sent in one `backend.loglik` call (the HF backend serves
single-token options sharing a context from one forward pass).

Task options (all optional):

- ``chat`` (False): pass the prompt through the chat template.
- ``continuation`` (" {option}"): how an option is appended to the prompt.
- ``domain_prompt`` ("Answer:"): context for PMI; None/"" disables PMI.
- ``content_free`` (["N/A", "", "[MASK]"]): strings put in place of the text
  field for contextual calibration; [] disables calibration.
- ``templates`` (variant -> template) and ``text_field``: passed by the runner
  from the suite so content-free prompts can be rendered. A variant missing from
  `templates` uses the longest template name it starts with when the next
  character is not a letter or digit (so "q1@p2" or "q1/perm1" use "q1").
  Without a template the item's text is replaced inside the rendered
  prompt (`str.replace`) when it occurs there; otherwise calibration is skipped
  and `extra["calibration"]` says why.
- ``alpha`` (1.0): inverse temperature for expected accuracy.
- ``schemes`` ([]): extra scoring schemes from engine/schemes.py ("labels",
  "free", "rating", "embedding", and lm-eval's "acc_norm" and "acc_mutual_info"),
  stored beside the log-likelihood methods.

Result: `prediction` = argmax raw log-likelihood (first max on ties), `probs` =
softmax of raw over options, `option_scores[option]` = {logprob, n_tokens,
n_chars, n_bytes, mean_token, per_char, per_byte[, calibrated][, pmi]} where
n_chars/n_bytes count the continuation string as scored (including its leading
space) and `calibrated` is the calibrated *probability*; `extra["methods"]` =
{method: {prediction, correct, expected_acc}}; `n_tokens` = prompt tokens.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping
from typing import Any

from llmscope.engine.abstain import abstain
from llmscope.engine.backend import Backend, BackendConfigError, BackendError
from llmscope.engine.choice_math import (
    ChoiceScores,
    content_free_probs,
    permute_options,
    score_options,
    softmax,
)
from llmscope.engine.tasks.base import (
    COMMON_ITEM_FIELDS,
    ItemField,
    SuiteLike,
    Task,
    chat_option,
    register,
)
from llmscope.engine.tasks.options import FEWSHOT_OPTION, OptionSpec
from llmscope.engine.templates import render_template
from llmscope.engine.types import Item, LogLikOut, Result, Work

DEFAULT_CONTENT_FREE = ["N/A", "", "[MASK]"]


def render_fields(template: str, fields: dict[str, Any]) -> str:
    """Fill a suite template the way the suite loader does (engine/templates.py)."""
    return render_template(template, fields)


def continuation_text(fmt: str, option: str) -> str:
    """The continuation string for an option: `fmt` with `{option}` filled."""
    return fmt.replace("{option}", option)


def gold_index(options: list[str], gold: str | None) -> int | None:
    """Index of the gold option (exact string match first, then stripped/case-folded), or None."""
    if gold is None:
        return None
    if gold in options:
        return options.index(gold)
    g = gold.strip().casefold()
    for i, o in enumerate(options):
        if o.strip().casefold() == g:
            return i
    raise ValueError(f"gold {gold!r} is not one of the options {options!r}")


def loglik_option_result(
    work: Work,
    options: list[str],
    outs: list[LogLikOut],
    conts: list[str],
    rendered_prompt: str,
    *,
    p_cf: list[float] | None = None,
    domain: list[float] | None = None,
    alpha: float = 1.0,
) -> tuple[Result, ChoiceScores]:
    """Build a Result from per-option log-likelihoods (shared by choice and constrained)."""
    gi = gold_index(options, work.gold)
    n_chars = [max(len(c), 1) for c in conts]
    n_bytes = [max(len(c.encode("utf-8")), 1) for c in conts]
    n_toks = [max(o.n_tokens, 1) for o in outs]
    cs = score_options(
        options,
        [o.logprob for o in outs],
        n_toks,
        n_chars,
        n_bytes,
        p_cf=p_cf,
        domain_logprobs=domain,
        gold=gi,
        alpha=alpha,
        token_logprobs=[o.token_logprobs for o in outs]
        if all(o.token_logprobs for o in outs)
        else None,
    )
    probs = softmax(cs.scores["raw"])
    option_scores: dict[str, dict[str, float]] = {}
    for i, opt in enumerate(options):
        row = {
            "logprob": float(outs[i].logprob),
            "n_tokens": float(outs[i].n_tokens),
            "n_chars": float(len(conts[i])),
            "n_bytes": float(len(conts[i].encode("utf-8"))),
            "mean_token": float(cs.values["mean_token"][i]),
            "per_char": float(cs.values["per_char"][i]),
            "per_byte": float(cs.values["per_byte"][i]),
        }
        for m in ("calibrated", "pmi", "mean_token_prob", "surprisal_ratio"):
            if m in cs.values:
                row[m] = float(cs.values[m][i])
        if (
            outs[i].greedy is not None
        ):  # lm-eval's is_greedy, written back by `export --format lm-eval`
            row["is_greedy"] = float(outs[i].greedy)
        option_scores[opt] = row
    pred = cs.predictions["raw"]
    res = Result(
        item_id=work.item.item_id,
        variant=work.variant,
        prompt=rendered_prompt,
        probs={o: float(p) for o, p in zip(options, probs, strict=True)},
        option_scores=option_scores,
        prediction=options[pred],
        gold=work.gold,
        correct=cs.correct["raw"],
        confidence=float(probs[pred]),
        n_tokens=int(outs[0].n_context_tokens) if outs else 0,
    )
    res.extra["methods"] = cs.method_summary()
    res.extra["continuations"] = conts
    return res, cs


@register
class ChoiceTask(Task):
    """Score each option by log-likelihood; report raw, length-normalised, calibrated and PMI choices."""

    name = "choice"
    summary = "options scored by log-likelihood (raw, normalised, calibrated, PMI)"
    needs_options = True
    fewshot_format = "{prompt} {answer}"
    predicts_option = True
    default_method = "loglik"
    metric_producers = (
        "methods",
        "position",
        "calibration",
        "abstention",
        "softmax_accuracy_curve",
    )
    result_fields = ("choice_method", "methods", "calibration", "continuations", "domain_prompt")
    item_fields = (
        *COMMON_ITEM_FIELDS,
        ItemField("extra.choice_method", "method"),
        ItemField("option_scores", "option scores", "json", column=False),
        ItemField("extra.methods", "methods", "json", column=False),
    )
    option_specs = (
        chat_option(False),
        OptionSpec("continuation", "str", " {option}", "how an option is appended to the prompt"),
        OptionSpec(
            "domain_prompt", "str?", "Answer:", 'context for PMI scoring; null or "" disables PMI'
        ),
        OptionSpec(
            "content_free",
            "list[str]",
            list(DEFAULT_CONTENT_FREE),
            "content-free inputs for contextual calibration; [] disables it",
        ),
        OptionSpec("alpha", "float", 1.0, "inverse temperature of expected accuracy", min=0.0),
        OptionSpec(
            "permutations",
            "int",
            0,
            "extra option-order permutations per item (variants <v>@p<j>)",
            min=0,
        ),
        OptionSpec(
            "schemes",
            "list[str]",
            None,
            "extra scoring schemes: labels, free, rating, embedding, acc_norm, acc_mutual_info "
            "(engine/schemes.py)",
        ),
        OptionSpec("label_template", "str?", None, "lettered-options prompt for the labels scheme"),
        OptionSpec(
            "rating_template", "str?", None, "prompt asking each option as a rating (rating scheme)"
        ),
        OptionSpec("rating_labels", "list[str]", None, "scale labels of the rating scheme"),
        OptionSpec(
            "free_max_tokens", "int", 16, "generation budget of the free-production scheme", min=1
        ),
        FEWSHOT_OPTION,
    )

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        super().__init__(options)
        self._cf_cache: dict[tuple[str, str], Any] = {}
        self._domain_cache: dict[tuple[str, str], Any] = {}
        self._uncond_cache: dict[tuple[str, str], Any] = {}

    @classmethod
    def gold_problem(cls, gold: str, options: list[str] | None, suite: SuiteLike) -> str | None:
        if options:
            try:
                gold_index(options, gold)
            except ValueError:
                return f"gold {gold!r} is not one of the options {options}"
        return None

    @classmethod
    def expand_work(cls, work: Work, suite: SuiteLike, options: Mapping[str, Any]) -> list[Work]:
        """The item as asked plus ``permutations`` option orders, variants "<variant>@p<j>";
        a template that lists the options sees them in the permuted order."""
        n_perm = int(options.get("permutations", 0) or 0)
        it = work.item
        if not n_perm or not it.options:
            return [work]
        tpl = (suite.templates or {"default": "{" + suite.text_field + "}"})[work.variant]
        out = [work]
        for j, order in enumerate(permute_options(it.options, n_perm, seed=0), 1):
            fields = dict(it.fields)
            if suite.options_field:
                fields[suite.options_field] = order
            out.append(
                Work(
                    item=it,
                    variant=f"{work.variant}@p{j}",
                    prompt=render_template(tpl, fields),
                    gold=work.gold,
                    options=list(order),
                )
            )
        return out

    def check_backend(self, backend: Backend) -> None:
        """Options are scored by log-likelihood, or else as letters (label choice)."""
        caps = backend.capabilities
        if caps.loglik is False and not caps.label_choice:
            raise BackendConfigError(
                f"task 'choice' needs log-likelihoods or label choice, and the {backend.kind} backend offers neither"
            )

    def probe_need(self) -> str:
        return "options"  # log-likelihoods when the server has them, else labels

    def describe(self) -> dict[str, Any]:
        # Templates are part of the suite's identity already; keep the run record small.
        d = {k: v for k, v in self.options.items() if k not in ("templates",)}
        return {"task": self.name, **d}

    @property
    def chat(self) -> bool:
        return bool(self.options.get("chat", False))

    @property
    def continuation(self) -> str:
        return str(self.options.get("continuation", " {option}"))

    def content_free_prompts(self, work: Work) -> tuple[list[str], str]:
        """Prompts with the text field replaced by each content-free string, and how they were made."""
        cfs = self.options.get("content_free", DEFAULT_CONTENT_FREE)
        if not cfs:
            return [], "disabled"
        templates = self.options.get("templates") or {}
        text_field = self.options.get("text_field")
        item: Item = work.item
        tpl = templates.get(work.variant)
        if tpl is None:
            # derived variants (e.g. option permutations named "<variant><sep><k>") use their base template
            bases = [
                k
                for k in templates
                if work.variant.startswith(k) and not work.variant[len(k) :][:1].isalnum()
            ]
            if bases:
                tpl = templates[max(bases, key=len)]
        if tpl is not None and text_field:
            prefix = str(
                (work.design or {}).get("_prefix", "")
            )  # few-shot demos stay (data/design.py)
            out = []
            for cf in cfs:
                fields = dict(item.fields)
                fields[text_field] = cf
                out.append(prefix + render_fields(tpl, fields))
            return out, "template"
        if item.text and item.text in work.prompt:
            return [work.prompt.replace(item.text, cf) for cf in cfs], "replace"
        return (
            [],
            "unavailable: no template for this variant and the item text is not in the prompt",
        )

    async def _option_logprobs(
        self,
        backend: Backend,
        context: str,
        conts: list[str],
        cache: dict[tuple[str, str], Any],
        chat: bool | None = None,
        greedy: list[bool | None] | None = None,
    ) -> list[float]:
        """log P(cont | context) per continuation, cached per (context, continuation).

        The cache holds futures, so items scored concurrently share one request, and
        permuted option orders reuse the same values.
        """
        missing = [c for c in dict.fromkeys(conts) if (context, c) not in cache]
        if missing:
            fut = asyncio.ensure_future(
                backend.loglik(
                    [(context, c) for c in missing], chat=self.chat if chat is None else chat
                )
            )
            for i, c in enumerate(missing):
                cache[(context, c)] = (fut, i)
        out = []
        for c in conts:
            fut, i = cache[(context, c)]
            try:
                res = await fut
            except Exception:
                # do not keep a failed request: a later item retries it
                for k in [k for k, v in cache.items() if v[0] is fut]:
                    del cache[k]
                raise
            out.append(float(res[i].logprob))
            if greedy is not None:
                greedy.append(res[i].greedy)
        return out

    async def score(self, work: Work, backend: Backend) -> Result:
        options = list(work.options or work.item.options or [])
        if not options:
            raise ValueError("choice item has no options")
        conts = [continuation_text(self.continuation, o) for o in options]
        try:
            outs = await backend.loglik([(work.prompt, c) for c in conts], chat=self.chat)
        except BackendError:
            # APIs without prompt log-probs (OpenAI chat): single-token labels + the top-k rule.
            if not backend.capabilities.label_choice:
                raise
            res = await self._score_by_labels(work, options, backend)
            # the extra schemes need no log-likelihoods: they still run (not silently dropped)
            await self._add_schemes(res, work, options, backend)
            return res

        cf_prompts, how = self.content_free_prompts(work)
        p_cf = None
        if cf_prompts:
            rows = [
                await self._option_logprobs(backend, p, conts, self._cf_cache) for p in cf_prompts
            ]
            p_cf = content_free_probs(rows).tolist()
        domain = None
        dp = self.options.get("domain_prompt", "Answer:")
        if dp:
            domain = await self._option_logprobs(backend, str(dp), conts, self._domain_cache)

        if not any(math.isfinite(o.logprob) for o in outs):
            # Every option unscorable: no evidence to rank them, so no prediction.
            res = Result(
                item_id=work.item.item_id,
                variant=work.variant,
                prompt=backend.render(work.prompt, chat=self.chat),
                gold=work.gold,
                option_scores={
                    o: {"logprob": float(x.logprob)} for o, x in zip(options, outs, strict=True)
                },
                extra={"choice_method": "loglik"},
            )
            return abstain(res, "no option has a finite log-likelihood")
        res, _ = loglik_option_result(
            work,
            options,
            outs,
            conts,
            backend.render(work.prompt, chat=self.chat),
            p_cf=p_cf,
            domain=domain,
            alpha=float(self.options.get("alpha", 1.0)),
        )
        res.extra["calibration"] = {"source": how, "content_free_prompts": cf_prompts, "p_cf": p_cf}
        res.extra["choice_method"] = "loglik"
        if dp:
            res.extra["domain_prompt"] = dp
        await self._add_lm_eval_schemes(res, work, options, outs, conts, backend)
        await self._add_schemes(res, work, options, backend)
        return res

    async def _add_lm_eval_schemes(
        self,
        res: Result,
        work: Work,
        options: list[str],
        outs: list[LogLikOut],
        conts: list[str],
        backend: Backend,
    ) -> None:
        """lm-eval's acc_norm / acc_mutual_info (engine/schemes.py) from the option log-likelihoods."""
        from llmscope.engine.schemes import add_lm_eval_schemes, check_schemes

        wanted = check_schemes(self.options.get("schemes"))
        if "acc_norm" not in wanted and "acc_mutual_info" not in wanted:
            return
        uncond = None
        greedy: list[bool | None] = []
        if "acc_mutual_info" in wanted:
            # lm-eval's unconditional request ("", delimiter + choice): never chat-templated
            uncond = await self._option_logprobs(
                backend, "", conts, self._uncond_cache, chat=False, greedy=greedy
            )
        add_lm_eval_schemes(
            res,
            options,
            [float(o.logprob) for o in outs],
            uncond,
            gold_index(options, work.gold),
            self.options,
            uncond_greedy=greedy or None,
        )

    async def _add_schemes(
        self, res: Result, work: Work, options: list[str], backend: Backend
    ) -> None:
        if self.options.get("schemes"):  # labels / free / rating / embedding (engine/schemes.py)
            from llmscope.engine.schemes import (
                LM_EVAL_SCHEMES,
                add_schemes,
                check_schemes,
                embedder_for,
            )

            if res.extra.get("choice_method") == "labels-topk":
                left = [
                    x for x in check_schemes(self.options.get("schemes")) if x in LM_EVAL_SCHEMES
                ]
                for x in left:  # said so, not silently dropped
                    res.extra.setdefault("schemes", {})[x] = {
                        "error": "needs option log-likelihoods; this backend answers by labels only"
                    }

            await add_schemes(
                res,
                work,
                options,
                gold_index(options, work.gold),
                backend,
                self.options,
                embedder_for(self.options),
            )

    async def _score_by_labels(self, work: Work, options: list[str], backend: Backend) -> Result:
        out = await backend.choice_by_labels(work.prompt, options)
        probs = {o: float(out.probs.get(o, 0.0)) for o in options}
        pred = max(options, key=lambda o: probs[o])
        gi = gold_index(options, work.gold)
        mass = sum(probs.values())
        res = Result(
            item_id=work.item.item_id,
            variant=work.variant,
            prompt=out.prompt,
            probs=probs,
            other=out.other,
            top_tokens=[{"token": t.token, "id": t.id, "prob": t.prob} for t in out.top],
            option_scores={o: {"label_prob": probs[o]} for o in options},
            prediction=pred,
            gold=work.gold,
            correct=None if gi is None else float(options[gi] == pred),
            confidence=probs[pred] / mass if mass > 0 else None,
            n_tokens=out.n_tokens,
            extra={"choice_method": "labels-topk", **out.meta},
        )
        if not mass > 0:
            return abstain(res, "no probability mass on any option label")
        return res
