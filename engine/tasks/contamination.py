"""Contamination probes (`task: contamination`): Min-K% probability and a completion probe.

For each item's text (the suite's `text_field`):

* **Min-K% Prob** (Shi et al. 2023, "Detecting Pretraining Data from Large Language
  Models"): the mean log-probability (nats) of the k% least likely tokens of the text,
  scored with ``loglik(("", text))`` (BOS-conditioned). Higher means the text is less
  surprising anywhere, a sign it was seen in training. ``k`` = task option ``mink_k``
  (percent, default 20); the number of tokens kept is ``max(1, floor(n * k / 100))``.
* **Completion probe**: the text is cut at half its words; the model continues the
  first half greedily (temperature 0, ``max_new_tokens`` = option, default 48) and the
  continuation's word n-grams (``ngram``, default 3) are compared with the true second
  half: ``ngram_overlap`` = clipped count of shared n-grams / n-grams in the true half
  (n-gram recall, as in the n-gram overlap probes of e.g. Deng et al. 2024; lower-cased,
  punctuation stripped from word edges).

An item is flagged when ``ngram_overlap >= overlap_threshold`` (default 0.5) or, when
the option ``mink_threshold`` is set (log-prob in nats; it is model-specific, so there
is no default), when Min-K% ≥ that threshold. ``correct`` is left empty: a probe has no
gold answer; `prediction` is "flagged" or "clean".
"""

from __future__ import annotations

import math
import re
from collections import Counter

from llmscope.engine.backend import Backend, GenParams
from llmscope.engine.tasks.base import COMMON_ITEM_FIELDS, ItemField, Task, register
from llmscope.engine.tasks.options import OptionSpec
from llmscope.engine.types import Result, Work

_EDGE = re.compile(r"^\W+|\W+$")


def min_k_prob(token_logprobs: list[float], k: float = 20.0) -> float:
    """Mean of the lowest k% token log-probabilities (at least one token)."""
    if not token_logprobs:
        return math.nan
    n = max(1, math.floor(len(token_logprobs) * k / 100.0))
    return float(sum(sorted(token_logprobs)[:n]) / n)


def _words(text: str) -> list[str]:
    return [w for w in (_EDGE.sub("", t).lower() for t in text.split()) if w]


def ngram_recall(generated: str, reference: str, n: int = 3) -> float:
    """Clipped share of the reference's word n-grams that the generated text contains."""
    ref, gen = _words(reference), _words(generated)
    n = max(1, min(n, len(ref)))
    rc = Counter(tuple(ref[i : i + n]) for i in range(len(ref) - n + 1))
    gc = Counter(tuple(gen[i : i + n]) for i in range(len(gen) - n + 1))
    total = sum(rc.values())
    return float(sum(min(c, gc[g]) for g, c in rc.items()) / total) if total else math.nan


def split_half(text: str) -> tuple[str, str]:
    """First half of the words (prefix, keeping its trailing space off) and the rest."""
    spans = [m.span() for m in re.finditer(r"\S+", text)]
    if len(spans) < 2:
        return text, ""
    cut = spans[len(spans) // 2][0]
    return text[:cut].rstrip(), text[cut:]


@register
class ContaminationTask(Task):
    """Min-K% probability and a greedy completion probe per item."""

    name = "contamination"
    summary = "Min-K% probability and a greedy completion probe per item"
    needs = frozenset({"loglik", "generate"})
    metric_producers = ("contamination",)
    default_method = "min-k%-prob+greedy-completion"
    result_fields = (
        "flagged",
        "flag_reasons",
        "min_k_prob",
        "mink_k",
        "mean_logprob",
        "ngram",
        "ngram_overlap",
        "prefix",
        "reference",
        "continuation",
    )
    # The probes that flag an item, for the drill-down: (label, score key in `extra`, threshold
    # option, parameter option).
    flag_probes = (
        ("Min-K% prob", "min_k_prob", "mink_threshold", "mink_k"),
        ("completion n-gram recall", "ngram_overlap", "overlap_threshold", "ngram"),
    )
    item_fields = (
        *COMMON_ITEM_FIELDS,
        ItemField("extra.flag_reasons", "flags", "flags"),
        ItemField("extra.flagged", "flagged", "bool", column=False),
        ItemField("extra.min_k_prob", "Min-K% prob", "number"),
        ItemField("extra.ngram_overlap", "n-gram recall", "number"),
    )

    def probe_need(self) -> str:
        return "loglik"  # the greedy probe needs generation too, which every API server offers

    option_specs = (
        OptionSpec(
            "chat",
            "bool",
            False,
            "always false: the probes score raw text, never a chat template",
            choices=(False,),
        ),
        OptionSpec(
            "mink_k",
            "float",
            20,
            "k of Min-K% prob: the share (in %) of least likely tokens averaged",
            min=0.0,
            max=100.0,
        ),
        OptionSpec("ngram", "int", 3, "n of the completion probe's n-gram recall", min=1),
        OptionSpec(
            "overlap_threshold",
            "float",
            0.5,
            "n-gram recall at which an item is flagged",
            min=0.0,
            max=1.0,
        ),
        OptionSpec(
            "mink_threshold",
            "any",
            None,
            "Min-K% prob above which an item is flagged (null: never)",
        ),
        OptionSpec(
            "max_new_tokens", "int", 48, "greedy continuation budget of the completion probe", min=1
        ),
    )

    async def score(self, work: Work, backend: Backend) -> Result:
        o = self.options
        field = str(o.get("text_field", "text"))
        text = str(work.item.fields.get(field) or work.item.text or work.prompt)
        if len(text.split()) < 4:
            raise ValueError(
                f"contamination probes need a text of at least 4 words in field {field!r}"
            )
        k = float(o.get("mink_k", 20))
        n = int(o.get("ngram", 3))
        over_t = float(o.get("overlap_threshold", 0.5))
        mink_t = o.get("mink_threshold")
        (ll,) = await backend.loglik([("", text)], chat=False)
        mink = min_k_prob([float(x) for x in ll.token_logprobs], k)
        prefix, rest = split_half(text)
        gen = await backend.generate(
            prefix,
            GenParams(
                max_new_tokens=int(o.get("max_new_tokens", 48)),
                temperature=0.0,
                n=1,
                seed=0,
                stop=[],
            ),
            chat=False,
        )
        cont = gen.texts[0] if gen.texts else ""
        ref_len = len(rest.split())
        cont_cut = " ".join(
            cont.split()[:ref_len]
        )  # compare equal lengths: extra words cannot add recall
        overlap = ngram_recall(cont_cut, rest, n)
        reasons = []
        if overlap >= over_t:
            reasons.append(f"ngram_overlap {overlap:.3f} >= {over_t}")
        if mink_t is not None and mink >= float(mink_t):
            reasons.append(f"min_k_prob {mink:.3f} >= {float(mink_t)}")
        res = Result(
            item_id=work.item.item_id,
            variant=work.variant,
            prompt=prefix,
            prediction="flagged" if reasons else "clean",
            confidence=overlap,
            n_tokens=ll.n_tokens + gen.n_tokens,
        )
        res.extra.update(
            flagged=bool(reasons),
            flag_reasons=reasons,
            min_k_prob=mink,
            mink_k=k,
            mean_logprob=float(ll.logprob / max(ll.n_tokens, 1)),
            ngram=n,
            ngram_overlap=overlap,
            prefix=prefix,
            reference=rest,
            continuation=cont,
            per_token=[
                {"tokens": list(ll.tokens), "logprobs": [float(x) for x in ll.token_logprobs]}
            ],
        )
        return res
