"""A database for the number-format checks of the TUI: fixed data, written through the Store.

- `lim-choice`: a choice suite of 30 items run with `--limit 12` (options {"limit": 12}); every
  row stores what the choice task stores (option log-likelihoods with float32 digits, counts
  as floats such as ``n_tokens: 2.0``, the per-method `extra.methods`), and long answers that
  share their first words ("The pilot landed ..." / "The pilot lowered ...");
- `mp-run`: a minimal-pairs suite of 12 pairs (a forced choice between two sentences).
"""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path

from llmscope.engine.types import Item, Result
from llmscope.store.db import Store
from tests.helpers.tui import STARTED

CHOICE_SUITE = "lim-choice-suite@000000000001"
MP_SUITE = "minimal-pairs-demo@000000000002"
N_CHOICE = 30
LIMIT = 12
N_PAIRS = 12


def _choice_items() -> list[Item]:
    items = []
    for i in range(N_CHOICE):
        opts = [
            f"The pilot landed the plane on runway {i}",
            f"The pilot lowered the gear over field {i}",
            "cheese",
            "a cat",
        ]
        items.append(
            Item(
                item_id=f"q{i:02d}",
                fields={
                    "id": f"q{i:02d}",
                    "question": f"What happened {i}?",
                    "options": opts,
                    "gold": opts[0],
                },
                gold=opts[0],
                options=opts,
                text=f"What happened {i}?",
            )
        )
    return items


def _choice_result(it: Item, i: int) -> Result:
    opts = list(it.options or [])
    lls = [
        -14.848152160644531 - (i % 3) * 0.7,
        -12.508252143859863 - (i % 2) * 3.1,
        -21.029197692871094,
        -18.693504333496094,
    ]
    z = max(lls)
    ps = [math.exp(x - z) for x in lls]
    probs = [p / sum(ps) for p in ps]
    pred = max(range(4), key=lambda k: lls[k])
    scores = {
        o: {
            "logprob": lls[k],
            "n_tokens": 2.0 + k,
            "n_chars": float(len(o) + 1),
            "n_bytes": float(len(o) + 1),
            "per_char": lls[k] / (len(o) + 1),
            "is_greedy": 0.0,
        }
        for k, o in enumerate(opts)
    }
    methods = {
        m: {"prediction": opts[pred], "correct": float(pred == 0), "expected_acc": probs[0]}
        for m in ("raw", "per_char", "acc_norm")
    }
    return Result(
        item_id=it.item_id,
        variant="default",
        prompt=f"Question: {it.text}\nAnswer:",
        probs=dict(zip(opts, probs, strict=True)),
        option_scores=scores,
        prediction=opts[pred],
        gold=it.gold,
        correct=float(pred == 0),
        confidence=probs[pred],
        n_tokens=11,
        latency_ms=5.0,
        extra={
            "methods": methods,
            "continuations": [" " + o for o in opts],
            "choice_method": "loglik",
        },
    )


def _pair_items() -> list[Item]:
    return [
        Item(
            item_id=f"p{i:02d}",
            fields={
                "id": f"p{i:02d}",
                "sentences": [
                    f"The keys to the cabinet are here {i}.",
                    f"The keys to the cabinet is here {i}.",
                ],
                "good": 0,
                "phenomenon": "agreement",
            },
            gold=None,
            text=f"The keys to the cabinet are here {i}.",
        )
        for i in range(N_PAIRS)
    ]


def _pair_result(it: Item, i: int) -> Result:
    sents = list(it.fields["sentences"])
    lps = [-31.25 - (i % 4) * 0.9, -32.0 + (i % 3) * 0.8]
    z = max(lps)
    ps = [math.exp(x - z) for x in lps]
    probs = [p / sum(ps) for p in ps]
    pred = 0 if lps[0] > lps[1] else 1
    return Result(
        item_id=it.item_id,
        variant="default",
        prompt="",
        probs=dict(zip(sents, probs, strict=True)),
        option_scores={
            s: {"logprob": lp, "n_tokens": 9.0} for s, lp in zip(sents, lps, strict=True)
        },
        prediction=sents[pred],
        gold=sents[0],
        correct=float(pred == 0),
        confidence=probs[pred],
        n_tokens=18,
        latency_ms=5.0,
        extra={"sentences": sents, "good": 0, "logprob_diff": lps[0] - lps[1]},
    )


def _run(
    store: Store,
    run_id: str,
    suite_id: str,
    name: str,
    task: str,
    n_total: int,
    k: int,
    options: dict,
) -> None:
    at = STARTED + dt.timedelta(minutes=k)
    store.create_run(
        {
            "run_id": run_id,
            "suite_id": suite_id,
            "suite_name": name,
            "task": task,
            "model": "SmolLM2-135M-Instruct",
            "backend": "test",
            "n_total": n_total,
            "status": "completed",
            "started_at": at,
            "updated_at": at,
            "options": options,
            "meta": {},
            "versions": {},
        }
    )


def make_format_db(path: Path) -> Path:
    """The limited choice run and the minimal-pairs run (module docstring)."""
    with Store(path) as store:
        items = _choice_items()
        store.add_suite(
            CHOICE_SUITE,
            "lim-choice-suite",
            "choice",
            {
                "name": "lim-choice-suite",
                "task": "choice",
                "options_field": "options",
                "gold_field": "gold",
                "text_field": "question",
            },
            "tests",
            items,
        )
        _run(
            store,
            "lim-choice",
            CHOICE_SUITE,
            "lim-choice-suite",
            "choice",
            LIMIT,
            0,
            {"limit": LIMIT},
        )
        store.write_results(
            "lim-choice", [_choice_result(it, i) for i, it in enumerate(items[:LIMIT])]
        )
        pairs = _pair_items()
        store.add_suite(
            MP_SUITE,
            "minimal-pairs-demo",
            "minpairs",
            {"name": "minimal-pairs-demo", "task": "minpairs", "group_by": ["phenomenon"]},
            "tests",
            pairs,
        )
        _run(store, "mp-run", MP_SUITE, "minimal-pairs-demo", "minpairs", N_PAIRS, 1, {})
        store.write_results("mp-run", [_pair_result(it, i) for i, it in enumerate(pairs)])
    return path
