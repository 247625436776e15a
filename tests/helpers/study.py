"""A study database for the TUI's study screen, written through `llmscope.studies.spec`'s own API
(`load_study`, `record_study`, `tag_run`, `record_cell`) and the Store: a real study file, its
cells recorded, each cell a run of the toy yes/no suite (tests/helpers/tui.py) whose P(yes)
shift differs by cell, so every cell has its own accuracy, known by hand
(`expected_accuracy`). Fast: no model, no server.

Cells (2 suites x 2 models x 2 prompts = 8): most done; `PARTIAL` interrupted half-way,
`FAILED` failed before any run existed (an error, no run), `UNSTARTED` not started.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from llmscope.store.db import Store
from llmscope.studies.spec import Study, load_study
from llmscope.studies.store import record_cell, record_study, tag_run
from tests.helpers.cli import write_choice_suite, write_yesno_suite
from tests.helpers.tui import STARTED, add_suite, create_run, toy_result

NAME = "grid"
N_ITEMS = 12
VARIANTS = ("q1",)
PARTIAL = "ch | api | prompt=careful"
FAILED = "yn | api | prompt=careful"
UNSTARTED = "ch | base | prompt=careful"
PARTIAL_DONE = 5


def shift_of(position: int) -> int:
    """The toy P(yes) shift of the cell at `position` (its accuracy: expected_accuracy)."""
    return (position * 13) % 81


def run_id_of(position: int) -> str:
    return f"cell-{position:02d}"


def write_study_file(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    yn = write_yesno_suite(folder / "yn", 4)
    ch = write_choice_suite(folder / "ch", 4)
    path = folder / "grid.yaml"
    path.write_text(
        f"""name: {NAME}
suites: [{{suite: {yn}, label: yn}}, {{suite: {ch}, label: ch}}]
models:
  - {{model: default, label: base}}
  - {{model: "openai:model-x", base_url: "http://127.0.0.1:9/v1", label: api}}
grid:
  prompt:
    plain: {{}}
    careful: {{system_prompt: "Be careful."}}
""",
        encoding="utf-8",
    )
    return path


def write_study_db(db: Path, folder: Path) -> Study:
    """The study above in `db` (cells' runs written directly); returns the loaded study."""
    study = load_study(write_study_file(folder))
    with Store(db) as store:
        items = add_suite(store, N_ITEMS)
        record_study(store, study)
        for c in study.cells:
            if c.key == UNSTARTED:
                continue
            if c.key == FAILED:
                record_cell(store, NAME, c.key, "error", error="cannot reach http://127.0.0.1:9/v1")
                continue
            rid = run_id_of(c.position)
            partial = c.key == PARTIAL
            create_run(
                store,
                rid,
                N_ITEMS * len(VARIANTS),
                model=c.model.label,
                status="interrupted" if partial else "completed",
                started=STARTED + dt.timedelta(minutes=c.position),
            )
            upto = PARTIAL_DONE if partial else N_ITEMS
            store.write_results(
                rid,
                [
                    toy_result(it, i, v, shift_of(c.position))
                    for i, it in enumerate(items[:upto])
                    for v in VARIANTS
                ],
            )
            tag_run(store, rid, NAME, c.key)
            record_cell(store, NAME, c.key, "partial" if partial else "done", run_id=rid)
    return study
