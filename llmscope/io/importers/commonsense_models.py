"""Published binarised answers of many models on the commonsense corpus as runs
(`llmscope import commonsense-models [CSV]`).

The file is Watts-Lab commonsense-llm-eval's `all_models_binarythresh.csv`: one line per
statement (first column its id), the human majority `human_q1`, and per published model the
columns `<Model>_q1` and `<Model>_q2` holding its answer (1 yes, 0 no) to prompts q1 ("Do you
agree?") and q2 ("Would most people agree?"). Each model becomes one run on the full
`commonsense` suite with rows for variants q1 and q2, scored against the suite's gold (the human
majority, for both prompts, as the paper scores them). The file holds no probabilities: the rows
store none, and the run's meta says so.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmscope.data.suites import SuiteError, _find_shared, load_suite
from llmscope.io.importers.runs import (
    import_run_id,
    run_exists,
    store_import_run,
    store_suite,
)
from llmscope.store.db import Store

SOURCE = "published binarised answers, Watts-Lab commonsense-llm-eval"
VARIANTS = ("q1", "q2")
_ANSWER = {"1": "yes", "0": "no"}


def default_csv() -> Path | None:
    """The shared `all_models_binarythresh.csv`, when present."""
    shared = _find_shared()
    p = None if shared is None else shared / "data" / "commonsense" / "all_models_binarythresh.csv"
    return p if p is not None and p.is_file() else None


@dataclass
class ModelAnswers:
    """One model's answers read from the file: (statement id, variant, prediction) in file order."""

    model: str
    rows: list[tuple[str, str, str]] = field(default_factory=list)


def read_models_csv(path: Path) -> tuple[list[ModelAnswers], dict[str, tuple[str, int]]]:
    """Every `<Model>_q1` / `<Model>_q2` column's answers, and each id's (statement, line).

    A cell other than exactly 0 or 1, a repeated id, a model column given twice or a short line
    is an error naming file, line and field.
    """
    try:
        f = open(path, newline="", encoding="utf-8")
    except OSError as e:
        raise SuiteError(f"cannot read: {e.strerror or e}", path) from e
    with f:
        reader = csv.reader(f)
        try:
            header = next(reader)
        except StopIteration:
            raise SuiteError("empty file", path) from None
        except (csv.Error, UnicodeDecodeError) as e:
            raise SuiteError(f"unreadable header: {e}", path, 1) from e
        # model columns: `<Model>_<variant>`, the human majority excluded; q1 and q2 both expected
        cols: dict[str, dict[str, int]] = {}
        for j, name in enumerate(header):
            model, _, variant = name.rpartition("_")
            if variant in VARIANTS and model and model != "human":
                if variant in cols.get(model, {}):
                    # two answer sets under one name: keeping either would drop the other
                    raise SuiteError(
                        f"column {name!r} appears twice (two answer sets for model {model!r}); "
                        "give each model its own name",
                        path,
                        1,
                        name,
                    )
                cols.setdefault(model, {})[variant] = j
        if not cols:
            raise SuiteError("no <Model>_q1 / <Model>_q2 columns in the header", path, 1)
        stmt_col = header.index("statement") if "statement" in header else None
        models = {m: ModelAnswers(m) for m in cols}
        statements: dict[str, tuple[str, int]] = {}
        try:
            for row in reader:
                line = reader.line_num
                if not row or not row[0].strip():
                    raise SuiteError("missing statement id", path, line, header[0] or "id")
                sid = row[0].strip()
                if sid in statements:
                    raise SuiteError(f"statement id {sid} repeated", path, line, header[0] or "id")
                if len(row) != len(header):
                    raise SuiteError(f"{len(row)} fields, the header has {len(header)}", path, line)
                statements[sid] = (row[stmt_col] if stmt_col is not None else "", line)
                for model, by_variant in cols.items():
                    for variant, j in by_variant.items():
                        cell = row[j]
                        pred = _ANSWER.get(cell)  # exactly 0 or 1: " 1" or "1.0" is not an answer
                        if pred is None:
                            raise SuiteError(
                                f"expected 0 or 1, got {cell!r}", path, line, header[j]
                            )
                        models[model].rows.append((sid, variant, pred))
        except (csv.Error, UnicodeDecodeError) as e:
            raise SuiteError(f"unreadable line: {e}", path, reader.line_num) from e
    return list(models.values()), statements


SUITES = ("commonsense", "commonsense-sample")


def import_commonsense_models(
    store: Store,
    path: Path | None,
    suite_path: str | None = None,
    suite_name: str | None = None,
    on_model: Callable[[int, int, str], None] | None = None,
) -> list[str]:
    """One run per model column pair of `path` on the `commonsense` suite (or on
    `commonsense-sample`: the published answers to the sample's statements only, so that runs of
    the sample compare with them on the same items), all new runs in one transaction (a bad line
    leaves none); a model imported before is named and skipped. `on_model(i, n, name)` is told
    each model before it is written (a progress bar)."""
    suite_name = suite_name or "commonsense"
    if suite_name not in SUITES:
        raise SuiteError(
            f"--suite {suite_name!r}: the published answers are on {' or '.join(SUITES)}"
        )
    if path is None:
        path = default_csv()
        if path is None:
            raise SuiteError("no all_models_binarythresh.csv found in ../shared; give its path")
    if not path.is_file():
        raise SuiteError("file not found", path)
    if suite_name == "commonsense-sample":
        if suite_path is not None:
            raise SuiteError(
                "--suite-path is for the full commonsense suite, not commonsense-sample"
            )
    elif suite_path is None and (path.parent / "statements_and_prompts.csv").is_file():
        suite_path = str(path.parent / "statements_and_prompts.csv")
    models, statements = read_models_csv(path)  # every line checked before anything is written
    suite = load_suite(suite_name, suite_path)
    work = {(w.item.item_id, w.variant): w for w in suite.work()}
    n_file = len(statements)
    if suite_name == "commonsense-sample":
        # the sample's statements are a subset of the corpus: keep theirs, say how many
        statements = {s: v for s, v in statements.items() if (s, VARIANTS[0]) in work}
        if not statements:
            raise SuiteError("no statement of the file is in commonsense-sample", path)
        for m in models:
            m.rows = [r for r in m.rows if r[0] in statements]
    unknown = [s for s in statements if (s, VARIANTS[0]) not in work]
    if unknown:
        raise SuiteError(
            f"statement id {unknown[0]} is not in the commonsense suite ({len(unknown)} such ids); "
            f"pass the matching statements_and_prompts.csv with --suite-path",
            path,
            statements[unknown[0]][1],
            "id",
        )
    differ = sum(
        1
        for s, (text, _) in statements.items()
        if text and text != work[(s, VARIANTS[0])].item.text
    )
    store_suite(store, suite)
    msgs = [
        f"suite {suite.suite_id}: {len(statements)} statements x {len(VARIANTS)} prompts from {path.name}"
        + (
            f" (the {len(statements)} of its {n_file} statements in {suite_name})"
            if len(statements) < n_file
            else ""
        )
        + (f" ({differ} statements differ from the suite's text)" if differ else "")
    ]
    with store.transaction():
        for i, m in enumerate(models):
            if on_model is not None:
                on_model(i, len(models), m.model)
            run_id = import_run_id("commonsense-models", suite.suite_id, path.name, m.model)
            if run_exists(store, run_id):
                msgs.append(f"{m.model}: already imported as run {run_id}")
                continue
            cols: dict[str, list[Any]] = {
                k: []
                for k in ("item_id", "variant", "prompt", "prediction", "gold", "correct", "extra")
            }
            extra = '{"imported": true, "binarised": true}'
            for sid, variant, pred in m.rows:
                w = work[(sid, variant)]
                cols["item_id"].append(sid)
                cols["variant"].append(variant)
                cols["prompt"].append(w.prompt)
                cols["prediction"].append(pred)
                cols["gold"].append(w.gold)
                cols["correct"].append(None if w.gold is None else float(pred == w.gold))
                cols["extra"].append(extra)
            store_import_run(
                store,
                run_id,
                suite,
                m.model,
                path,
                cols,
                "commonsense-models",
                SOURCE,
                ("probabilities", "none: the file holds binarised answers only"),
            )
            msgs.append(f"{m.model}: run {run_id}, {len(m.rows)} answers")
    return msgs
