"""A database whose runs mix rows and items with and without a value (a cluster label, a gold
answer, a prediction, an error), for the tests of missing stored text: pandas 3 reads a VARCHAR
column with some values as the `str` dtype, where a missing value is NaN, not None."""

from __future__ import annotations

import math
from pathlib import Path

from llmscope.engine.types import Item, Result
from llmscope.store.db import Store

OPTIONS = ["A", "B", "C"]
# item -> (cluster label or None, gold or None)
ITEMS = {"i0": ("c0", "A"), "i1": ("c0", "A"), "i2": ("c1", "A"), "i3": (None, "A"), "i4": (None, "A"),
         "i5": ("c2", None), "i6": ("c2", "A")}
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
    return {"loglik": {"prediction": pred, "correct": None if gold is None else float(pred == gold)},
            "free": {"prediction": free, "correct": None if gold is None else float(free == gold)}}


def _row(run: str, item: str) -> Result:
    pred = PREDICTIONS[run][item]
    gold = ITEMS[item][1]
    if pred == "!":
        return Result(item_id=item, variant="v0", prompt=f"q {item}", error="timeout")
    if pred is None:  # an abstention (engine/abstain.py): no prediction, 0 when the item has gold
        return Result(item_id=item, variant="v0", prompt=f"q {item}", probs={o: 0.0 for o in OPTIONS}, gold=gold,
                      correct=0.0, option_scores={o: {"logprob": None} for o in OPTIONS},  # -inf, stored null
                      extra={"abstained": True, "abstain_reason": "no option has a finite log-likelihood"})
    probs = {o: (0.6 if o == pred else 0.2) for o in OPTIONS}
    return Result(item_id=item, variant="v0", prompt=f"q {item}", probs=probs, prediction=pred, gold=gold,
                  correct=None if gold is None else float(pred == gold), confidence=0.6,
                  option_scores={o: {"loglik": math.log(p)} for o, p in probs.items()},
                  extra={"choice_method": "loglik", **({"methods": _methods(item, pred, gold)} if run == "r1" else {})})


def write_mixed_db(db: Path) -> Path:
    """A choice suite (clustered and grouped by `cl`) whose items i3, i4 lack the cluster label
    and i5 its gold; two finished runs with an error row (i6), r2 with an abstention (i3), r1
    with two scoring schemes."""
    items = [Item(item_id=k, fields={"cl": cl} if cl else {"other": 1}, gold=g, options=OPTIONS, text=f"q {k}")
             for k, (cl, g) in ITEMS.items()]
    with Store(db) as st:
        spec = {"task": "choice", "cluster_field": "cl", "group_by": ["cl"]}
        st.add_suite("s-mixed", "mixed", "choice", spec, "", items)
        for rid in PREDICTIONS:
            st.create_run({"run_id": rid, "suite_id": "s-mixed", "suite_name": "mixed", "task": "choice",
                           "n_total": len(ITEMS), "model": f"m-{rid}", "backend": "hf", "status": "completed"})
            st.write_results(rid, [_row(rid, k) for k in ITEMS])
    return db
