"""Published SyntaxGym per-item results as runs (`llmscope import syntaxgym-results CSV...`).

The files are Hu et al. (2020)'s `syntaxgym_results_<model>_.csv` (cpllab/syntactic-generalization,
`data/raw/sg_results/`): one line per (suite, item) with `model,suite,item,correct`, where `item`
counts a test suite's items from 0 in the suite file's order and `correct` is `True` when every
prediction of the item holds. Each file becomes one run on the `syntaxgym` suite (the 34 test
suites), so `llmscope report`, `figure sg`, `compare` and a study's matrix put the published
models beside runs of the same items. The files hold no surprisals: the rows store none.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from llmscope.data.suites import SuiteError, load_suite
from llmscope.io.importers.runs import (
    import_run_id,
    run_exists,
    store_import_run,
    store_suite,
)
from llmscope.store.db import Store

SOURCE = "published per-item results, Hu et al. (2020), cpllab/syntactic-generalization"
COLUMNS = ("model", "suite", "item", "correct")
_CORRECT = {"True": 1.0, "False": 0.0}


def _model_name(path: Path, first: str) -> str:
    """`gpt-2-xl-pretrained__0` in the file -> `gpt-2-xl-pretrained` (the `__0` is a seed index)."""
    name = first.rsplit("__", 1)[0] if "__" in first else first
    return name or path.stem


def read_results(
    path: Path, items: dict[tuple[str, int], str]
) -> tuple[str, list[tuple[str, float]]]:
    """The model's name and its (item id, correct) rows; a malformed line names file, line and field."""
    try:
        f = open(path, newline="", encoding="utf-8")
    except OSError as e:
        raise SuiteError(f"cannot read: {e.strerror or e}", path) from e
    rows: list[tuple[str, float]] = []
    seen: dict[str, int] = {}
    models: set[str] = set()
    with f:
        reader = csv.reader(f)
        try:
            header = next(reader, None)
            if header is None:
                raise SuiteError("empty file", path)
            if tuple(h.strip() for h in header) != COLUMNS:
                raise SuiteError(f"the header must be {','.join(COLUMNS)}", path, 1)
            for row in reader:
                line = reader.line_num
                if len(row) != len(COLUMNS):
                    raise SuiteError(
                        f"{len(row)} fields, the header has {len(COLUMNS)}", path, line
                    )
                model, suite, item, correct = row
                models.add(model)
                if not item.isdigit():
                    raise SuiteError("expected an item index (0, 1, ...)", path, line, "item")
                item_id = items.get((suite, int(item)))
                if item_id is None:
                    field = "suite" if all(s != suite for s, _ in items) else "item"
                    raise SuiteError(
                        f"no item {item} of test suite {suite!r} in the syntaxgym suite",
                        path,
                        line,
                        field,
                    )
                if correct not in _CORRECT:
                    raise SuiteError("expected True or False", path, line, "correct")
                if item_id in seen:
                    raise SuiteError(
                        f"{suite} item {item} repeated (first on line {seen[item_id]})",
                        path,
                        line,
                        "item",
                    )
                seen[item_id] = line
                rows.append((item_id, _CORRECT[correct]))
        except (csv.Error, UnicodeDecodeError) as e:
            raise SuiteError(f"unreadable line: {e}", path, reader.line_num) from e
    if not rows:
        raise SuiteError("no results", path)
    if len(models) > 1:
        raise SuiteError(
            f"{len(models)} models in one file ({', '.join(sorted(models)[:3])}); one file a model",
            path,
            field="model",
        )
    return _model_name(path, next(iter(models))), rows


def import_syntaxgym_results(
    store: Store, paths: list[Path], suite_path: str | None = None
) -> list[str]:
    """One run per file on the `syntaxgym` suite, all new runs in one transaction (a bad line in
    any file leaves none); a file imported before is named and skipped."""
    suite = load_suite("syntaxgym", suite_path)
    # an item's first unit: its variant, prompt and gold (a syntaxgym item has one)
    first: dict[str, Any] = {}
    for w in suite.work():
        first.setdefault(w.item.item_id, w)
    variant_of = {i: w.variant for i, w in first.items()}
    prompts = {i: w.prompt for i, w in first.items()}
    golds = {i: w.gold for i, w in first.items()}
    # a test suite's items in file order: the published `item` index
    by_suite: dict[str, list[str]] = {}
    for it in suite.items():
        by_suite.setdefault(str(it.fields.get("suite")), []).append(it.item_id)
    items = {(s, i): item_id for s, ids in by_suite.items() for i, item_id in enumerate(ids)}
    read = [(p, *read_results(p, items)) for p in paths]  # every file checked before writing
    names = [m for _, m, _ in read]
    if len(set(names)) < len(names):
        dup = next(m for m in names if names.count(m) > 1)
        raise SuiteError(
            f"model {dup!r} is in two of the files; import one result set a model", read[0][0]
        )
    store_suite(store, suite)
    msgs = [f"suite {suite.suite_id}: {len(suite.items())} items in {len(by_suite)} test suites"]
    with store.transaction():
        for path, model, rows in read:
            run_id = import_run_id("syntaxgym-results", suite.suite_id, path.name, model)
            if run_exists(store, run_id):
                msgs.append(f"{model}: already imported as run {run_id}")
                continue
            cols: dict[str, list[Any]] = {
                k: [] for k in ("item_id", "variant", "prompt", "gold", "correct", "extra")
            }
            for item_id, correct in rows:
                cols["item_id"].append(item_id)
                cols["variant"].append(variant_of[item_id])
                cols["prompt"].append(prompts[item_id])
                cols["gold"].append(golds[item_id])
                cols["correct"].append(correct)
                cols["extra"].append('{"imported": true}')
            store_import_run(
                store,
                run_id,
                suite,
                model,
                path,
                cols,
                "syntaxgym-results",
                SOURCE,
                ("surprisals", "none: the file holds per-item pass/fail only"),
            )
            covered = (
                f"{len(rows)} of {len(suite.items())} items"
                if len(rows) < len(suite.items())
                else (f"{len(rows)} items")
            )
            msgs.append(f"{model}: run {run_id}, {covered}")
    return msgs
