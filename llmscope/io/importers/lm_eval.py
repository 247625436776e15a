"""`llmscope import lm-eval FILE...`: `lm_eval --log_samples` output stored as runs.

Each `samples_<task>_<date>.jsonl` file (lm-eval 0.4.x) becomes one run. A sample line holds
`doc_id`, `doc`, `target`, `arguments` ({"gen_args_i": {"arg_0": context, "arg_1": continuation}}),
`filtered_resps` ([["<loglik>", "<is_greedy>"], ...]) and lm-eval's per-sample metrics (`acc`,
`acc_norm`, ...). Per sample llmscope stores what its own `task: choice` stores: the option
log-likelihoods, softmax probabilities, the raw-argmax prediction and correctness, and its
per-char/per-byte methods (lengths of the continuation as scored, delimiter included), so
report, compare and TUI read an imported run like a local one. Where the samples log
`acc_norm` / `acc_mutual_info`, those are stored as the methods of those names by lm-eval's rules
(engine/schemes.py), the unconditional log-likelihoods included, so the report shows lm-eval's
values under lm-eval's names; each request's `is_greedy` is kept per option. lm-eval's own
per-sample values are kept in `extra["lm_eval"]`, and the number of samples where llmscope's raw
correctness differs from lm-eval's `acc` is printed (0 when both agree on the gold).

Suite: with `--suite SPEC` (the lm-eval task YAML, or any llmscope suite whose item ids are
the doc ids) the samples are stored against that suite, so the import sits beside llmscope's
own run of the same suite; each sample's continuations must equal that suite's option
continuations. Without it a suite is built from the samples themselves (context, choices,
gold), named after the task.

Model name: `--model`, else `model_name` from a `results_*.json` beside the file, else the
folder name (lm-eval writes into a folder named after the model).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmscope.data.lm_eval_tasks import CHOICES, CONTEXT, GOLD, ID, lm_eval_suite_spec
from llmscope.data.suites import (
    Suite,
    SuiteError,
    _make_item,
    load_suite,
    read_jsonl,
    suite_from_spec,
)
from llmscope.engine.choice_math import score_options, softmax
from llmscope.engine.schemes import LM_EVAL_SCHEMES, add_lm_eval_schemes
from llmscope.engine.tasks.choice import continuation_text
from llmscope.engine.types import Item, Result
from llmscope.io.importers.runs import (
    create_import_run,
    finish_import_run,
    import_run_id,
    store_suite,
)
from llmscope.store.db import Store

_NAME = re.compile(r"^samples_(?P<task>.+?)_(?P<date>\d{4}-\d{2}-\d{2}T[\d\-.]+)\.jsonl$")


@dataclass
class Sample:
    """One parsed lm-eval sample line."""

    line: int
    doc_id: int
    doc: dict[str, Any]
    target: str
    context: str
    continuations: list[str]
    logliks: list[float]
    greedy: list[bool]
    metrics: dict[str, Any]
    # lm-eval's unconditional requests ("", continuation), one per choice, for acc_mutual_info
    uncond: list[float] | None = None
    uncond_greedy: list[bool] | None = None


def _parse_sample(rec: dict[str, Any], path: Path, line: int) -> Sample:
    for key in ("doc_id", "arguments", "filtered_resps"):
        if key not in rec:
            raise SuiteError(
                "missing (is this an `lm_eval --log_samples` samples_*.jsonl file?)",
                path,
                line,
                key,
            )
    doc_id = rec["doc_id"]
    if isinstance(doc_id, bool) or not isinstance(doc_id, int):
        raise SuiteError(f"doc_id must be an integer, got {doc_id!r}", path, line, "doc_id")
    args = rec["arguments"]
    if isinstance(args, dict):  # 0.4.x files: {"gen_args_0": {"arg_0": ..., "arg_1": ...}, ...}
        keys = sorted(
            args, key=lambda k: int(k.rsplit("_", 1)[-1]) if k.rsplit("_", 1)[-1].isdigit() else 0
        )
        pairs: list[Any] = [
            [args[k].get(f"arg_{j}") for j in range(len(args[k]))]
            if isinstance(args[k], dict)
            else None
            for k in keys
        ]
    elif isinstance(args, list):  # older files: [[context, continuation], ...]
        pairs = args
    else:
        raise SuiteError("arguments must be a mapping or a list", path, line, "arguments")
    if not pairs or not all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p) for p in pairs
    ):  # generate_until logs (context, {generation kwargs})
        raise SuiteError(
            "only loglikelihood requests (context, continuation) can be imported; this looks like "
            "a generate_until or loglikelihood_rolling task",
            path,
            line,
            "arguments",
        )
    half = len(pairs) // 2
    n_uncond = 0
    if (
        len(pairs) % 2 == 0
        and half
        and all(p[0] == "" for p in pairs[half:])
        and [p[1] for p in pairs[half:]] == [p[1] for p in pairs[:half]]
        and pairs[0][0] != ""
    ):
        # acc_mutual_info: lm-eval appends one ("", continuation) request per choice; the
        # choices are the first half, the second half their unconditional log-likelihoods
        n_uncond = half
    n_requests = len(pairs)
    pairs = pairs[: n_uncond or n_requests]
    contexts = {p[0] for p in pairs}
    if len(contexts) != 1:
        raise SuiteError(
            "requests with different contexts (a multiple-input task) cannot be imported",
            path,
            line,
            "arguments",
        )
    resps = rec["filtered_resps"]
    if not isinstance(resps, list) or len(resps) != n_requests:
        raise SuiteError(
            f"expected {n_requests} responses, one per request", path, line, "filtered_resps"
        )
    lls, greedy = [], []
    for r in resps:
        if isinstance(r, list) and len(r) == 1 and isinstance(r[0], list):
            r = r[0]  # `resps` nests one level deeper; accept either
        try:
            ll = float(r[0])
        except (TypeError, ValueError, IndexError) as e:
            raise SuiteError(
                f"response {r!r} has no log-likelihood", path, line, "filtered_resps"
            ) from e
        if not math.isfinite(ll):
            raise SuiteError(f"log-likelihood {r[0]!r} is not finite", path, line, "filtered_resps")
        if ll > 0:  # a log-probability is at most 0: this is not lm-eval's log-likelihood
            raise SuiteError(
                f"log-likelihood {r[0]!r} is positive (a log-probability is at most 0)",
                path,
                line,
                "filtered_resps",
            )
        lls.append(ll)
        greedy.append(str(r[1]) == "True" if len(r) > 1 else False)
    metrics = {
        k: v
        for k, v in rec.items()
        if isinstance(v, (int, float))
        and not isinstance(v, bool)
        and k in (rec.get("metrics") or [])
    }
    doc: dict[str, Any] = rec["doc"] if isinstance(rec.get("doc"), dict) else {}
    if len(pairs) > 1 and "target" in rec:
        _check_target(rec["target"], [p[1] for p in pairs], path, line)
    n = len(pairs)
    return Sample(
        line=line,
        doc_id=doc_id,
        doc=doc,
        target=str(rec.get("target", "")),
        context=pairs[0][0],
        continuations=[p[1] for p in pairs],
        logliks=lls[:n],
        greedy=greedy[:n],
        metrics=metrics,
        uncond=lls[n:] if n_uncond else None,
        uncond_greedy=greedy[n:] if n_uncond else None,
    )


def _check_target(target: Any, continuations: list[str], path: Path, line: int) -> None:
    """A multiple-choice sample's target is an option's index (0 to n-1) or one of its options;
    anything else would store the item without a gold and drop it from accuracy unsaid."""
    t = str(target).strip()
    if re.fullmatch(r"[+-]?\d+", t):
        if not 0 <= int(t) < len(continuations):
            raise SuiteError(
                f"target {t} is not an option index (0 to {len(continuations) - 1})",
                path,
                line,
                "target",
            )
        return
    _, choices = _split_delim(continuations)
    if t not in choices and str(target) not in continuations and str(target) not in choices:
        raise SuiteError(
            f"target {str(target)[:80]!r} is neither an option index (0 to "
            f"{len(continuations) - 1}) nor one of the options",
            path,
            line,
            "target",
        )


def _read_samples(f: Path) -> list[Sample]:
    if not f.is_file():
        raise SuiteError("file not found", f)
    recs = read_jsonl(f)
    if not recs:
        raise SuiteError("no samples", f)
    return [_parse_sample(rec, f, n) for n, rec in recs]


def _model_name(path: Path, override: str | None) -> str:
    if override:
        return override
    for res in sorted(path.parent.glob("results_*.json"), reverse=True):
        try:
            data = json.loads(res.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        name = data.get("model_name") if isinstance(data, dict) else None
        if isinstance(name, str) and name:
            return name
    return path.parent.name


def _split_delim(conts: list[str]) -> tuple[str, list[str]]:
    """lm-eval writes target_delimiter + choice; the default delimiter is one space."""
    if conts and all(c.startswith(" ") for c in conts):
        return " ", [c[1:] for c in conts]
    return "", list(conts)


def _gold_of(target: str, choices: list[str]) -> str | None:
    if target.isdigit() and int(target) < len(choices):
        return choices[int(target)]
    return target if target in choices else None


def suite_from_samples(task: str, samples: list[Sample], path: Path) -> Suite:
    """A choice suite rebuilt from the samples (context, choices, gold per doc)."""
    multi = any(len(s.continuations) > 1 for s in samples)
    delims = {_split_delim(s.continuations)[0] for s in samples}
    delim = delims.pop() if len(delims) == 1 else ""
    spec = lm_eval_suite_spec(
        task,
        "choice",
        f"lm-evaluation-harness task {task}, rebuilt from {path.name}",
        f"lm_eval --log_samples {path}",
        delim,
    )
    suite = suite_from_spec(spec, None)
    suite.items_path = path

    def load() -> list[Item]:
        items = []
        for s in samples:
            choices = [c[len(delim) :] for c in s.continuations]
            gold = _gold_of(s.target, choices) if multi else None
            rec = {**s.doc, ID: s.doc_id, CONTEXT: s.context, CHOICES: choices, GOLD: gold}
            items.append(_make_item(suite, rec, path, s.line))
        return items

    suite._loader = load
    return suite


def _result(s: Sample, it: Item, variant: str, cont_fmt: str, scored: bool) -> Result:
    options = list(it.options or [])
    conts = [continuation_text(cont_fmt, o) for o in options]
    lm_extra: dict[str, Any] = {
        "doc_id": s.doc_id,
        "target": s.target,
        "is_greedy": s.greedy,
        **s.metrics,
    }
    if not scored:  # loglikelihood task: one continuation, no gold
        opt = options[0]
        return Result(
            item_id=it.item_id,
            variant=variant,
            prompt=s.context,
            option_scores={
                opt: {
                    "logprob": s.logliks[0],
                    "n_chars": float(len(conts[0])),
                    "n_bytes": float(len(conts[0].encode("utf-8"))),
                }
            },
            extra={"imported": True, "lm_eval": lm_extra},
        )
    from llmscope.engine.tasks.choice import gold_index

    gi = gold_index(options, it.gold)
    n_chars = [max(len(c), 1) for c in conts]
    n_bytes = [max(len(c.encode("utf-8")), 1) for c in conts]
    # lm-eval logs no token counts: per-token scores cannot be formed, so `mean_token` is dropped below
    cs = score_options(options, s.logliks, [1] * len(options), n_chars, n_bytes, gold=gi)
    probs = softmax(cs.scores["raw"])
    pred = cs.predictions["raw"]
    option_scores = {
        o: {
            "logprob": s.logliks[i],
            "n_chars": float(len(conts[i])),
            "n_bytes": float(len(conts[i].encode("utf-8"))),
            "per_char": float(cs.values["per_char"][i]),
            "per_byte": float(cs.values["per_byte"][i]),
        }
        for i, o in enumerate(options)
    }
    for i, o in enumerate(options):
        if i < len(s.greedy):
            option_scores[o]["is_greedy"] = float(s.greedy[i])
    methods = {m: v for m, v in cs.method_summary().items() if m != "mean_token"}
    res = Result(
        item_id=it.item_id,
        variant=variant,
        prompt=s.context,
        probs={o: float(p) for o, p in zip(options, probs, strict=True)},
        option_scores=option_scores,
        prediction=options[pred],
        gold=it.gold,
        correct=cs.correct["raw"],
        confidence=float(probs[pred]),
        extra={"imported": True, "methods": methods, "continuations": conts, "lm_eval": lm_extra},
    )
    # lm-eval's acc_norm / acc_mutual_info under their own names, by lm-eval's rules (engine/schemes.py)
    schemes = [
        m for m in LM_EVAL_SCHEMES if m in s.metrics and (m != "acc_mutual_info" or s.uncond)
    ]
    if schemes:
        add_lm_eval_schemes(
            res,
            options,
            s.logliks,
            s.uncond,
            gi,
            {"schemes": schemes},
            uncond_greedy=list(s.uncond_greedy) if s.uncond_greedy else None,
        )
    return res


def import_lm_eval(
    store: Store, files: list[Path], suite_spec: str | None = None, model: str | None = None
) -> list[str]:
    """Import `lm_eval --log_samples` files, one run per file; returns one message per file."""
    msgs = []
    # every sample of every file checked before anything is stored
    read = [(f, _read_samples(f)) for f in files]
    for f, samples in read:
        m = _NAME.match(f.name)
        task = m.group("task") if m else f.stem
        if suite_spec:
            suite = load_suite(suite_spec)
            if suite.task != "choice":
                raise SuiteError(
                    f"--suite must be a choice suite (lm-eval loglikelihood requests), got {suite.task}",
                    suite_spec,
                )
        else:
            suite = suite_from_samples(task, samples, f)
        items = {it.item_id: it for it in suite.items()}
        cont_fmt = str(suite.task_options.get("continuation", " {option}"))
        variant = suite.variant_names()[0]
        scored = any(len(s.continuations) > 1 for s in samples)
        pairs = []
        for s in samples:
            it = items.get(str(s.doc_id))
            if it is None:
                raise SuiteError(
                    f"doc_id {s.doc_id} is not an item of suite {suite.name}", f, s.line, "doc_id"
                )
            want = [continuation_text(cont_fmt, o) for o in (it.options or [])]
            if want != s.continuations:
                raise SuiteError(
                    f"the sample's continuations {s.continuations!r} differ from the suite's "
                    f"{want!r} for item {it.item_id}",
                    f,
                    s.line,
                    "arguments",
                )
            pairs.append((s, it))
        name = _model_name(f, model)
        store_suite(store, suite)
        run_id = import_run_id("lm-eval", suite.suite_id, f.name, name)
        if not create_import_run(
            store, run_id, suite, name, f, len(samples), {"lm_eval_samples": f.name}
        ):
            msgs.append(f"{f.name}: already imported as run {run_id}")
            continue
        results = [_result(s, it, variant, cont_fmt, scored) for s, it in pairs]
        store.write_results(run_id, results)
        prompts = {w.item.item_id: w.prompt for w in suite.work() if w.variant == variant}
        prompt_diff = sum(1 for s, it in pairs if s.context != prompts.get(it.item_id, s.context))
        acc_diff = sum(
            1
            for r, (s, _) in zip(results, pairs, strict=True)
            if "acc" in s.metrics and r.correct is not None and float(s.metrics["acc"]) != r.correct
        )
        store.update_run(
            run_id,
            meta={
                "imported_from": str(f),
                "suite": suite.describe(),
                "lm_eval_task": task,
                "acc_disagreements": acc_diff,
                "prompt_differences": prompt_diff,
            },
        )
        finish_import_run(store, run_id)
        note = (
            f", {acc_diff} samples where lm-eval's acc differs from the raw argmax"
            if acc_diff
            else ""
        )
        note += f", {prompt_diff} contexts differ from the suite's" if prompt_diff else ""
        msgs.append(
            f"{f.name}: run {run_id} ({name}, suite {suite.suite_id}), {len(results)} samples{note}"
        )
    return msgs
