"""The run record every importer writes: its id, the suite stored, the run created and finished."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import llmscope
from llmscope.data.suites import Suite
from llmscope.store.db import Store


def import_run_id(*parts: str) -> str:
    """The run id of an import: the same files imported again name the same run."""
    return "imp-" + hashlib.sha256("|".join(parts).encode()).hexdigest()[:10]


def store_suite(store: Store, suite: Suite) -> None:
    """Store the suite the imported results were scored on."""
    store.add_suite(
        suite.suite_id, suite.name, suite.task, suite.spec, suite.source or "", suite.items()
    )


def create_import_run(
    store: Store,
    run_id: str,
    suite: Suite,
    model: str,
    source: Path,
    n_total: int,
    options: dict[str, Any],
) -> bool:
    """Create the run; False when it was imported before (re-importing adds nothing)."""
    if run_exists(store, run_id):
        return False
    store.create_run(
        {
            "run_id": run_id,
            "suite_id": suite.suite_id,
            "suite_name": suite.name,
            "task": suite.task,
            "model": model,
            "model_path": str(source),
            "backend": "import",
            "seed": None,
            "options": {"import": options},
            "versions": {"llmscope": llmscope.__version__},
            "meta": {"imported_from": str(source), "suite": suite.describe()},
            "config_hash": run_id,
            "n_total": n_total,
            "status": "running",
        }
    )
    return True


def run_exists(store: Store, run_id: str) -> bool:
    """Whether the run is stored (imported before)."""
    row = store.execute("SELECT count(*) FROM runs WHERE run_id = ?", [run_id]).fetchone()
    return bool(row and row[0])


def store_import_run(
    store: Store,
    run_id: str,
    suite: Suite,
    model: str,
    source: Path,
    cols: dict[str, list[Any]],
    kind: str,
    cite: str,
    note: tuple[str, str],
) -> None:
    """Create, fill and finish an imported run in one go: `cols` are its result columns, `kind`
    and `cite` (the published source) go into its options and meta, `note` says in meta what
    the file does not hold (e.g. ("probabilities", "none: ...")."""
    create_import_run(
        store, run_id, suite, model, source, len(cols["item_id"]), {"kind": kind, "source": cite}
    )
    store.append_results(run_id, cols)
    store.update_run(
        run_id,
        meta={
            "imported_from": str(source),
            "source": cite,
            note[0]: note[1],
            "suite": suite.describe(),
        },
    )
    finish_import_run(store, run_id)


def finish_import_run(store: Store, run_id: str) -> None:
    """Mark the run completed with its stored counts."""
    import datetime as dt

    n, err = store.count_results(run_id)
    store.update_run(
        run_id,
        status="completed",
        n_done=n,
        n_errors=err,
        ended_at=dt.datetime.now(dt.UTC).replace(tzinfo=None),
    )
