"""A real DuckDB file for the IRT tests: a choice suite with one label flipped on purpose and
N_RUNS runs of simulated models (2PL with known parameters), so a fit must flag FLIPPED.

Used by tests/analysis/test_irt.py, tests/cli/test_irt_outputs.py and tests/tui/test_irt.py;
`write_irt_study` records the runs as the cells of a study (`llmscope.studies.spec`'s own API).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from llmscope.engine.types import Item, Result
from llmscope.store.db import Store

OPTIONS = ["A", "B", "C"]
N_ITEMS, N_RUNS, FLIPPED = 24, 60, "q07"


def write_flipped_db(db: Path, seed: int = 11) -> dict[str, list[float]]:
    """A choice suite whose gold is "A" for every item but FLIPPED, stored as "B" (a label error),
    and N_RUNS runs of simulated models: a model that knows an item answers "A", else a wrong
    option ("B" or "C" in turn), so on FLIPPED the strong models are marked wrong and the weak
    ones right. Returns each item's stored expected accuracies."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(1.2, 2.2, N_ITEMS)
    b = rng.normal(0.0, 0.8, N_ITEMS)
    theta = rng.normal(0.0, 1.2, N_RUNS)
    ids = [f"q{j:02d}" for j in range(N_ITEMS)]
    gold = {k: ("B" if k == FLIPPED else "A") for k in ids}
    items = [
        Item(item_id=k, fields={}, gold=gold[k], options=OPTIONS, text=f"question {k}") for k in ids
    ]
    expected: dict[str, list[float]] = {k: [] for k in ids}
    with Store(db) as st:
        st.add_suite("s-flip", "flipped", "choice", {"task": "choice"}, "", items)
        for i in range(N_RUNS):
            rid = f"run{i:02d}"
            st.create_run(
                {
                    "run_id": rid,
                    "suite_id": "s-flip",
                    "suite_name": "flipped",
                    "task": "choice",
                    "n_total": N_ITEMS,
                    "model": f"model-{i:02d}",
                    "backend": "hf",
                    "status": "completed",
                }
            )
            rows = []
            for j, k in enumerate(ids):
                knows = rng.random() < 1.0 / (1.0 + math.exp(-a[j] * (theta[i] - b[j])))
                pred = "A" if knows else OPTIONS[1 + (i + j) % 2]
                probs = {o: (0.8 if o == pred else 0.1) for o in OPTIONS}
                exp_acc = probs[gold[k]]
                expected[k].append(exp_acc)
                rows.append(
                    Result(
                        item_id=k,
                        variant="v0",
                        prompt=f"question {k}",
                        probs=probs,
                        prediction=pred,
                        gold=gold[k],
                        correct=float(pred == gold[k]),
                        confidence=0.8,
                        extra={
                            "choice_method": "loglik",
                            "methods": {
                                "loglik": {
                                    "prediction": pred,
                                    "correct": float(pred == gold[k]),
                                    "expected_acc": exp_acc,
                                }
                            },
                        },
                    )
                )
            st.write_results(rid, rows)
    return expected


STUDY = "irt-study"


def write_irt_study(db: Path, folder: Path) -> dict[str, str]:
    """Record N_RUNS cells (one suite x N_RUNS models) as a study in `db`, cell `position` i
    holding run `run{i:02d}` of `write_flipped_db` (call that first). Returns run id -> cell."""
    from llmscope.studies.spec import load_study
    from llmscope.studies.store import record_cell, record_study, tag_run
    from tests.helpers.cli import write_choice_suite

    suite = write_choice_suite(folder / "suite", 4, name="flipped")
    models = "\n".join(
        f'  - {{model: "openai:model-{i:02d}", base_url: "http://127.0.0.1:9/v1", label: m{i:02d}}}'
        for i in range(N_RUNS)
    )
    path = folder / "irt.yaml"
    path.write_text(
        f"name: {STUDY}\nsuites: [{{suite: {suite}, label: flip}}]\nmodels:\n{models}\n",
        encoding="utf-8",
    )
    study = load_study(path)
    out = {}
    with Store(db) as store:
        record_study(store, study)
        for c in study.cells:
            rid = f"run{c.position:02d}"
            tag_run(store, rid, STUDY, c.key)
            record_cell(store, STUDY, c.key, "done", run_id=rid)
            out[rid] = c.key
    return out
