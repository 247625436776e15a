"""A database whose runs mix rows and items with and without a value (a cluster label, a gold
answer, a prediction, an error), for the tests of missing stored text: pandas 3 reads a VARCHAR
column with some values as the `str` dtype, where a missing value is NaN, not None."""

from __future__ import annotations

import math
from pathlib import Path

from llmscope.engine.types import Item, Result
from llmscope.store.db import Store
from tests.helpers.bulk import finished_run

OPTIONS = ["A", "B", "C"]
# item -> (cluster label or None, gold or None)
ITEMS = {
    "i0": ("c0", "A"),
    "i1": ("c0", "A"),
    "i2": ("c1", "A"),
    "i3": (None, "A"),
    "i4": (None, "A"),
    "i5": ("c2", None),
    "i6": ("c2", "A"),
}
# run -> item -> prediction ("!" = an error row, None = an abstention)
PREDICTIONS = {
    "r1": {"i0": "A", "i1": "B", "i2": "A", "i3": "A", "i4": "B", "i5": "A", "i6": "!"},
    "r2": {"i0": "A", "i1": "A", "i2": "A", "i3": None, "i4": "B", "i5": "A", "i6": "!"},
}
# r1's "free" scheme (extra.methods) where it differs from the loglik prediction (None: no
# option matched its text, as engine/schemes.py records it)
FREE = {"i0": "B", "i2": None, "i5": "C"}


def _methods(item: str, pred: str, gold: str | None) -> dict[str, dict[str, object]]:
    free = FREE.get(item, pred)
    return {
        "loglik": {"prediction": pred, "correct": None if gold is None else float(pred == gold)},
        "free": {"prediction": free, "correct": None if gold is None else float(free == gold)},
    }


def _row(run: str, item: str) -> Result:
    pred = PREDICTIONS[run][item]
    gold = ITEMS[item][1]
    if pred == "!":
        return Result(item_id=item, variant="v0", prompt=f"q {item}", error="timeout")
    if pred is None:  # an abstention (engine/abstain.py): no prediction, 0 when the item has gold
        return Result(
            item_id=item,
            variant="v0",
            prompt=f"q {item}",
            probs={o: 0.0 for o in OPTIONS},
            gold=gold,
            correct=0.0,
            option_scores={o: {"logprob": None} for o in OPTIONS},  # -inf, stored null
            extra={"abstained": True, "abstain_reason": "no option has a finite log-likelihood"},
        )
    probs = {o: (0.6 if o == pred else 0.2) for o in OPTIONS}
    return Result(
        item_id=item,
        variant="v0",
        prompt=f"q {item}",
        probs=probs,
        prediction=pred,
        gold=gold,
        correct=None if gold is None else float(pred == gold),
        confidence=0.6,
        option_scores={o: {"loglik": math.log(p)} for o, p in probs.items()},
        extra={
            "choice_method": "loglik",
            **({"methods": _methods(item, pred, gold)} if run == "r1" else {}),
        },
    )


def write_mixed_db(db: Path) -> Path:
    """A choice suite (clustered and grouped by `cl`) whose items i3, i4 lack the cluster label
    and i5 its gold; two finished runs with an error row (i6), r2 with an abstention (i3), r1
    with two scoring schemes."""
    items = [
        Item(
            item_id=k,
            fields={"cl": cl} if cl else {"other": 1},
            gold=g,
            options=OPTIONS,
            text=f"q {k}",
        )
        for k, (cl, g) in ITEMS.items()
    ]
    with Store(db) as st:
        spec = {"task": "choice", "cluster_field": "cl", "group_by": ["cl"]}
        st.add_suite("s-mixed", "mixed", "choice", spec, "", items)
        for rid in PREDICTIONS:
            finished_run(st, rid, "s-mixed", "mixed", len(ITEMS), task="choice", model=f"m-{rid}")
            st.write_results(rid, [_row(rid, k) for k in ITEMS])
    return db


# -- a choice run scored by letter labels, with an abstention -----------------------------------
LABEL_OPTIONS = ["a", "b"]
LABEL_PROBS = {"a": 0.3, "b": 0.7}  # every answered row; gold "b"
HUMAN_COUNTS = [3, 7]  # every item: P_human(b) = 0.7 = softmax(1 * log p)[b], so alpha = 1


def _label_row(item: str, abstain: bool, error: bool = False) -> Result:
    if error:
        return Result(item_id=item, variant="v0", prompt=f"q {item}", error="timeout")
    if abstain:  # engine/tasks/choice.py _score_by_labels with no mass on any label
        probs = {o: 0.0 for o in LABEL_OPTIONS}
        return Result(
            item_id=item,
            variant="v0",
            prompt=f"q {item}",
            probs=probs,
            gold="b",
            correct=0.0,
            option_scores={o: {"label_prob": 0.0} for o in LABEL_OPTIONS},
            extra={
                "choice_method": "labels-topk",
                "abstained": True,
                "abstain_reason": "no probability mass on any option label",
            },
        )
    return Result(
        item_id=item,
        variant="v0",
        prompt=f"q {item}",
        probs=dict(LABEL_PROBS),
        prediction="b",
        gold="b",
        correct=1.0,
        confidence=0.7,
        option_scores={o: {"label_prob": p} for o, p in LABEL_PROBS.items()},
        extra={"choice_method": "labels-topk"},
    )


def write_labels_db(db: Path) -> Path:
    """A choice suite with human choice counts (i0..i3) and two runs scored by letter labels (no
    echo log-likelihoods): `lab-abs` abstains on i3 (all label probabilities 0), `lab-err` has an
    error row on i3 instead (left out of every statistic), the others answered alike."""
    items = [
        Item(
            item_id=f"i{k}",
            fields={"options": LABEL_OPTIONS, "human_counts": HUMAN_COUNTS},
            gold="b",
            options=LABEL_OPTIONS,
            text=f"q i{k}",
        )
        for k in range(4)
    ]
    with Store(db) as st:
        spec = {"task": "choice", "human_counts_field": "human_counts"}
        st.add_suite("s-lab", "labels", "choice", spec, "", items)
        for rid, how in (("lab-abs", "abstain"), ("lab-err", "error")):
            finished_run(
                st, rid, "s-lab", "labels", 4, task="choice", model="m-lab", backend="openai"
            )
            st.write_results(
                rid,
                [
                    _label_row(
                        f"i{k}",
                        abstain=k == 3 and how == "abstain",
                        error=k == 3 and how == "error",
                    )
                    for k in range(4)
                ],
            )
    return db


# -- a yes/no run with human majorities (human_q1), with an abstention ----------------------------
YESNO_HUMAN = {"i0": 1, "i1": 1, "i2": 0, "i3": 1}  # i3: the abstention in `yn-abs`
YESNO_PROBS = {
    "yes": 0.8,
    "no": 0.2,
}  # every answered row: alpha fitted to 2 of 3 yes -> log 2 / log 4


def write_yesno_db(db: Path) -> Path:
    """A yes/no suite with the human majority `human_q1` and two runs: `yn-abs` abstains on i3
    (no probability mass on yes or no), `yn-err` has an error row there instead."""
    items = [
        Item(item_id=k, fields={"human_q1": h}, gold="yes" if h else "no", text=f"s {k}")
        for k, h in YESNO_HUMAN.items()
    ]
    with Store(db) as st:
        st.add_suite("s-yn", "yn", "yesno", {"task": "yesno"}, "", items)
        for rid in ("yn-abs", "yn-err"):
            finished_run(st, rid, "s-yn", "yn", 4, model="m-yn")
            res = []
            for it in items:
                gold = str(it.gold)
                if it.item_id != "i3":
                    res.append(
                        Result(
                            item_id=it.item_id,
                            variant="v0",
                            prompt=it.text,
                            probs=dict(YESNO_PROBS),
                            prediction="yes",
                            gold=gold,
                            correct=float(gold == "yes"),
                            confidence=0.8,
                        )
                    )
                elif rid == "yn-err":
                    res.append(Result(item_id="i3", variant="v0", prompt=it.text, error="timeout"))
                else:
                    res.append(
                        Result(
                            item_id="i3",
                            variant="v0",
                            prompt=it.text,
                            probs={"yes": 0.0, "no": 0.0},
                            gold=gold,
                            correct=0.0,
                            extra={
                                "abstained": True,
                                "abstain_reason": "no probability mass on any answer",
                            },
                        )
                    )
            st.write_results(rid, res)
    return db
