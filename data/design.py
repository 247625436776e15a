"""Experimental design on top of a suite's work list: counterbalancing and few-shot demos.

Declared in the suite's `task_options` or with `--opt` (validated by `check_design`):

- ``answer_orders: true`` (yesno): every template is also asked with its two
  answers swapped in the template's own text ("yes" or "no" -> "no" or "yes";
  the item's fields are untouched). Variant "<v>@swap".
- ``reverse_templates: {variant: template}`` (rating): the scale asked the other
  way round (1 = agree vs 1 = disagree). Variant "<v>@rev"; the rating task maps
  label n back to (min + max − n), so `expected` and correctness stay on the
  suite's own scale.
- ``permutations: k`` (choice, existing): option orders, variants "<v>@p<j>".
- ``fewshot: {k, balance, pattern, orders, seed, format, separator, file}``: k demos
  per prompt drawn from the suite's other items that have a gold answer (or from
  ``file``, a JSONL of items with the suite's fields, relative to the spec)
  (Brown et al. 2020; biases after Zhao et al. 2021). ``balance``: "balanced"
  (labels as equal as k allows, default) or "random" (labels as drawn, so demo
  label compositions vary and majority-label bias can be measured); ``pattern``:
  an explicit list of demo labels in order (e.g. [yes, yes, yes, no]);
  ``orders``: the number of demo orders asked (1 = as drawn; more add
  variants "<v>@o<j>", j ≥ 2, the demos cyclically shifted then shuffled);
  ``format`` ("{prompt}\\n{answer}"; choice "{prompt} {answer}") renders one demo, joined by ``separator``
  ("\\n\\n") and placed before the prompt (with swapped answers the demos are swapped
  too). Demo answers are the items' gold answers; a variant whose gold is null
  (`variant_gold`) gets no demos (its design says so). Demos are chosen per item with
  `random.Random(f"{seed}:{item_id}")`, so a run is reproducible.

Every variant of an item stays one cluster (its item id) in the report.
`Work.design` records the factor levels, the demo ids and labels (stored with
the result as `extra.design`); keys starting with "_" are not stored.
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmscope.engine.choice_math import permute_options
from llmscope.engine.errors import SuiteError
from llmscope.engine.schemes import check_schemes
from llmscope.engine.tasks import get_task, task_names
from llmscope.engine.templates import check_template
from llmscope.engine.templates import render_template as render
from llmscope.engine.types import Work

if TYPE_CHECKING:
    from llmscope.data.suites import Suite

DESIGN_KEYS = ("answer_orders", "reverse_templates", "fewshot")
FEWSHOT_KEYS = ("k", "balance", "pattern", "orders", "seed", "format", "separator", "file")
BALANCE = ("balanced", "random")


def _err(msg: str, suite: Suite, key: str) -> Exception:
    return SuiteError(msg, suite.spec_path, None, f"task_options.{key}")


def check_design(suite: Suite, opts: dict[str, Any]) -> None:
    """Validate the design options against the suite (SuiteError naming the option)."""
    if opts.get("answer_orders"):
        if "answer_orders" not in get_task(suite.task).design_options:
            raise _err(
                f"answer_orders applies to {_tasks_with('answer_orders')} suites only",
                suite,
                "answer_orders",
            )
        if opts["answer_orders"] is not True:
            raise _err("must be true or false", suite, "answer_orders")
        answers = suite.answers or ["yes", "no"]
        if len(answers) != 2:
            raise _err(
                f"needs exactly two answers, the suite has {answers}", suite, "answer_orders"
            )
        for v, tpl in (suite.templates or {}).items():
            if not all(_word(a).search(tpl) for a in answers):
                raise _err(
                    f"template {v!r} does not name both answers {answers} to swap",
                    suite,
                    "answer_orders",
                )
    rev = opts.get("reverse_templates")
    if rev is not None:
        if "reverse_templates" not in get_task(suite.task).design_options:
            raise _err(
                f"reverse_templates applies to {_tasks_with('reverse_templates')} suites only",
                suite,
                "reverse_templates",
            )
        if not isinstance(rev, dict) or not all(
            isinstance(k, str) and isinstance(t, str) for k, t in rev.items()
        ):
            raise _err(
                "must map a variant name to its reversed-scale template", suite, "reverse_templates"
            )
        unknown = [k for k in rev if k not in suite.variant_names()]
        if unknown:
            raise _err(
                f"no template {unknown[0]!r}; templates: {', '.join(suite.variant_names())}",
                suite,
                "reverse_templates",
            )
        for k, t in rev.items():  # the same plain-field rule as the suite's own templates
            try:
                check_template(t)
            except ValueError as e:
                raise _err(
                    f"template {k!r} is malformed: {e}", suite, "reverse_templates"
                ) from None
    fs = opts.get("fewshot")
    if fs is not None:
        if not isinstance(fs, dict):
            raise _err(
                "must be a mapping with k (and optionally balance, pattern, orders, seed, format)",
                suite,
                "fewshot",
            )
        bad = [k for k in fs if k not in FEWSHOT_KEYS]
        if bad:
            raise _err(
                f"unknown key {bad[0]!r}; allowed: {', '.join(FEWSHOT_KEYS)}", suite, "fewshot"
            )
        pattern = fs.get("pattern")
        if pattern is not None and (not isinstance(pattern, list) or not pattern):
            raise _err("pattern must be a non-empty list of labels", suite, "fewshot.pattern")
        k = fs.get("k", len(pattern) if pattern else None)
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise _err(f"k must be a positive integer, got {k!r}", suite, "fewshot.k")
        if pattern is not None and len(pattern) != k:
            raise _err(f"pattern has {len(pattern)} labels but k = {k}", suite, "fewshot.pattern")
        if fs.get("balance", "balanced") not in BALANCE:
            raise _err(f"balance must be one of {', '.join(BALANCE)}", suite, "fewshot.balance")
        orders = fs.get("orders", 1)
        if not isinstance(orders, int) or isinstance(orders, bool) or orders < 1:
            raise _err(
                f"orders must be a positive integer, got {orders!r}", suite, "fewshot.orders"
            )
        for key in ("format", "separator", "file"):
            if key in fs and not isinstance(fs[key], str):
                raise _err("must be a string", suite, f"fewshot.{key}")
        if "file" in fs and not _demo_path(suite, fs["file"]).is_file():
            raise _err(
                f"demo file not found: {_demo_path(suite, fs['file'])}", suite, "fewshot.file"
            )
    if "schemes" in opts:
        try:
            check_schemes(opts["schemes"])
        except ValueError as e:
            raise _err(str(e).replace("task option 'schemes': ", ""), suite, "schemes") from e


def _tasks_with(factor: str) -> str:
    """The task types a design factor applies to (their `design_options`), for messages."""
    return ", ".join(t for t in task_names() if factor in get_task(t).design_options)


def _demo_path(suite: Suite, name: str) -> Path:
    p = Path(name)
    if not p.is_absolute() and suite.spec_path is not None:
        p = suite.spec_path.parent / p
    return p


def _word(a: str) -> re.Pattern[str]:
    return re.compile(r"(?<![A-Za-z0-9])" + re.escape(a) + r"(?![A-Za-z0-9])", re.IGNORECASE)


def swap_answers(template: str, a: str, b: str) -> str:
    """The template with the words `a` and `b` exchanged (case kept: "Yes" -> "No")."""
    pat = re.compile(
        r"(?<![A-Za-z0-9])(" + re.escape(a) + "|" + re.escape(b) + r")(?![A-Za-z0-9])",
        re.IGNORECASE,
    )

    def repl(m: re.Match[str]) -> str:
        w = m.group(0)
        other = b if w.lower() == a.lower() else a
        if w.isupper() and len(w) > 1:
            return other.upper()
        if w[:1].isupper():
            return other[:1].upper() + other[1:]
        return other

    return pat.sub(repl, template)


def _demo_orders(n: int, orders: int, seed: str) -> list[list[int]]:
    base = list(range(n))
    return [base] + [
        list(p)
        for p in permute_options(base, orders - 1, seed=random.Random(seed).randrange(2**31))
    ]


def _pick_demos(
    pool: list[tuple[str, str, Any]], labels: list[str], fs: dict[str, Any], item_id: str, seed: int
) -> list[tuple[str, str, Any]]:
    """k demos (id, label, item) for one item, by pattern, balanced or random labels."""
    rng = random.Random(f"{seed}:{item_id}")
    k = int(fs.get("k", len(fs.get("pattern") or [])))
    cands = [d for d in pool if d[0] != item_id]
    by_label: dict[str, list[tuple[str, str, Any]]] = {}
    for d in cands:
        by_label.setdefault(d[1], []).append(d)
    pattern = fs.get("pattern")
    if (
        pattern is None
        and fs.get("balance", "balanced") == "balanced"
        and len(by_label) <= max(2, k)
    ):
        order = sorted(by_label)
        pattern = [order[i % len(order)] for i in range(k)]
        rng.shuffle(pattern)
    if pattern is None:
        if len(cands) < k:
            raise ValueError(f"few-shot: only {len(cands)} items with a gold answer for k = {k}")
        return rng.sample(cands, k)
    out: list[tuple[str, str, Any]] = []
    used: set[str] = set()
    for lab in pattern:
        avail = [d for d in by_label.get(str(lab), []) if d[0] not in used]
        if not avail:
            raise ValueError(
                f"few-shot: not enough items with gold {lab!r} for the demo labels {pattern}"
            )
        d = rng.choice(avail)
        used.add(d[0])
        out.append(d)
    return out


def expand_design(suite: Suite, work: list[Work], opts: dict[str, Any]) -> list[Work]:
    """Apply few-shot demos and counterbalancing to a suite's work list (see module doc)."""
    for w in work:
        if "@p" in w.variant:
            w.design = {**(w.design or {}), "option_order": int(w.variant.rsplit("@p", 1)[1])}
    if not any(opts.get(k) for k in DESIGN_KEYS):
        if opts.get("schemes"):
            check_design(suite, {"schemes": opts["schemes"]})
        return work
    check_design(suite, opts)
    templates = suite.templates or {"default": "{" + suite.text_field + "}"}
    out = list(work)

    if opts.get("answer_orders"):
        a, b = (suite.answers or ["yes", "no"])[:2]
        swapped = []
        for w in out:
            swapped.append(w)
            tpl = templates[w.variant.split("@", 1)[0]]
            swapped.append(
                Work(
                    item=w.item,
                    variant=f"{w.variant}@swap",
                    prompt=render(swap_answers(tpl, a, b), w.item.fields),
                    gold=w.gold,
                    options=w.options,
                    design={**(w.design or {}), "answer_order": "swapped"},
                )
            )
            w.design = {**(w.design or {}), "answer_order": "as_written"}
        out = swapped

    rev = opts.get("reverse_templates") or {}
    if rev:
        more = []
        for w in out:
            more.append(w)
            base = w.variant.split("@", 1)[0]
            if base in rev:
                w.design = {**(w.design or {}), "scale": "as_written"}
                try:
                    prompt = render(rev[base], w.item.fields)
                except KeyError as e:
                    raise _err(
                        f"template {base!r} names {e}, which item {w.item.item_id!r} does not have",
                        suite,
                        "reverse_templates",
                    ) from None
                except ValueError as e:
                    raise _err(
                        f"template {base!r} on item {w.item.item_id!r}: {e}",
                        suite,
                        "reverse_templates",
                    ) from None
                more.append(
                    Work(
                        item=w.item,
                        variant=f"{w.variant}@rev",
                        prompt=prompt,
                        gold=w.gold,
                        options=w.options,
                        design={**(w.design or {}), "scale": "reversed"},
                    )
                )
        out = more

    fs = opts.get("fewshot")
    if fs:
        seed = int(fs.get("seed", 0))
        # a choice prompt ends where the answer continues ("Answer:"); others get the answer on a new line
        fmt = str(fs.get("format", get_task(suite.task).fewshot_format))
        sep = str(fs.get("separator", "\n\n"))
        n_orders = int(fs.get("orders", 1))
        pool = []
        first_tpl = next(iter(templates.values()))
        if fs.get("file"):
            demo_items = suite.read_demo_items(_demo_path(suite, str(fs["file"])))
        else:
            demo_items = suite.items()
        for it in demo_items:
            if it.gold is not None:
                pool.append((it.item_id, str(it.gold), it))
        labels = sorted({d[1] for d in pool})
        shots = []
        for w in out:
            base = w.variant.split("@", 1)[0]
            tpl = templates.get(base, first_tpl)
            if (w.design or {}).get(
                "answer_order"
            ) == "swapped":  # demos asked the same way as the query
                tpl = swap_answers(tpl, *(suite.answers or ["yes", "no"])[:2])
            if base in suite.variant_gold and suite.variant_gold[base] is None:
                # a variant without a gold answer (e.g. commonsense q3) has no answers for demos
                w.design = {
                    **(w.design or {}),
                    "k": 0,
                    "fewshot": "skipped: this variant has no gold answer",
                }
                shots.append(w)
                continue
            try:
                demos = _pick_demos(pool, labels, fs, w.item.item_id, seed)
            except ValueError as e:
                raise _err(str(e), suite, "fewshot") from e
            texts = [
                fmt.replace("{prompt}", render(tpl, d[2].fields)).replace("{answer}", d[1])
                for d in demos
            ]
            for j, order in enumerate(
                _demo_orders(len(demos), n_orders, f"{seed}:{w.item.item_id}"), 1
            ):
                prefix = sep.join(texts[i] for i in order) + sep
                d_ids = [demos[i][0] for i in order]
                d_labels = [demos[i][1] for i in order]
                design = {
                    **(w.design or {}),
                    "demo_order": j,
                    "demo_ids": d_ids,
                    "demo_labels": d_labels,
                    "k": len(demos),
                    "_prefix": prefix,
                }
                shots.append(
                    Work(
                        item=w.item,
                        variant=w.variant if j == 1 else f"{w.variant}@o{j}",
                        prompt=prefix + w.prompt,
                        gold=w.gold,
                        options=w.options,
                        design=design,
                    )
                )
        out = shots
    return out
