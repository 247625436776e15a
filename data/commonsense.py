"""The commonsense corpus (Whiting & Watts): statements, three prompts, human majority.

The full corpus lives outside the package (MIT-licensed, `statements_and_prompts.csv`);
the built-in `commonsense-sample` suite ships a stratified sample of it.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from llmscope.data.registry import SuiteEntry, register_suite
from llmscope.data.suites import (
    BUILTIN_DIR,
    Suite,
    SuiteError,
    _read_spec,
    shared_data,
    suite_from_spec,
)
from llmscope.engine.errors import SuiteDataMissing
from llmscope.engine.types import Item

CATEGORY_FIELDS = ["behavior", "everyday", "figure_of_speech", "judgment", "opinion", "reasoning"]
BOOL_FIELDS = set(CATEGORY_FIELDS)


def _default_csv() -> Path | None:
    return shared_data("commonsense/statements_and_prompts.csv")


def read_human_majority(path: Path) -> dict[str, int]:
    """`human_q1` per statement id from `all_models_binarythresh.csv` (first column = id)."""
    out: dict[str, int] = {}
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader)
        try:
            col = header.index("human_q1")
        except ValueError:
            raise SuiteError("no human_q1 column", path, 1, "human_q1") from None
        for row in reader:
            if len(row) > col and row[col] in ("0", "1"):
                out[row[0]] = int(row[col])
    return out


def read_statements(csv_path: Path) -> list[dict[str, Any]]:
    """Rows of statements_and_prompts.csv with `id` (row index) and typed category flags."""
    required = ["statement", "category", "q1", "q2", "q3"]
    rows: list[dict[str, Any]] = []
    with open(csv_path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise SuiteError("missing column in header", csv_path, 1, missing[0])
        for idx, row in enumerate(reader):
            line = reader.line_num
            if not row.get("statement"):
                raise SuiteError("empty statement", csv_path, line, "statement")
            rec: dict[str, Any] = {"id": idx, **row}
            for k in BOOL_FIELDS & row.keys():
                if row[k] not in ("0", "1"):
                    raise SuiteError(f"expected 0 or 1, got {row[k]!r}", csv_path, line, k)
                rec[k] = int(row[k])
            rec["_line"] = line
            rows.append(rec)
    return rows


def load_full_commonsense(suite_path: str | Path | None) -> Suite:
    """The full corpus as a suite, with the sample's spec (templates, gold, groups)."""
    csv_path = Path(suite_path) if suite_path else _default_csv()
    if csv_path is None:
        raise SuiteDataMissing(
            "the full commonsense corpus is not bundled; pass --suite-path statements_and_prompts.csv"
        )
    if csv_path.is_dir():
        csv_path = csv_path / "statements_and_prompts.csv"
    if not csv_path.is_file():
        raise SuiteError("file not found", csv_path)
    spec = dict(_read_spec(BUILTIN_DIR / "commonsense-sample" / "suite.yaml"))
    spec.pop("items", None)
    spec["name"] = "commonsense"
    spec["source"] = str(csv_path)
    suite = suite_from_spec(spec, BUILTIN_DIR / "commonsense-sample" / "suite.yaml")
    suite.items_path = csv_path
    gold_path = csv_path.parent / "all_models_binarythresh.csv"
    majority = read_human_majority(gold_path) if gold_path.is_file() else {}

    def loader() -> list[Item]:
        items = []
        for rec in read_statements(csv_path):
            line = rec.pop("_line")
            h = majority.get(str(rec["id"]))
            rec["human_q1"] = h
            rec["gold"] = None if h is None else ("yes" if h == 1 else "no")
            items.append(
                Item(
                    item_id=str(rec["id"]),
                    fields=rec,
                    gold=rec["gold"],
                    text=rec["statement"],
                    line=line,
                )
            )
        return items

    suite._loader = loader
    return suite


register_suite(
    SuiteEntry(
        "commonsense",
        "yesno",
        load_full_commonsense,
        "the full commonsense statements file (needs --suite-path or ../shared)",
        large=True,
    )
)
