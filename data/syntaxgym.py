"""SyntaxGym test suites (Hu et al. 2020) as one `syntaxgym` suite.

Each `<suite>.json` file holds `meta.name`, `predictions` ([{type: formula,
formula}]) and `items` ([{item_number, conditions: [{condition_name, regions:
[{region_number, content}]}]}]). Items become `<suite>/<item_number>` with the
suite's predictions copied into the item and `suite` as a grouping field, so
`llmscope report` gives the SG score per suite. `--suite-path` is one JSON file or
a folder of them (default: the shared `syntaxgym/test_suites` when present).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from llmscope.data.registry import SuiteEntry, register_suite
from llmscope.data.suites import Suite, SuiteError, suite_from_spec, suite_source
from llmscope.engine.tasks.syntaxgym import (
    FormulaError,
    build_sentence,
    item_conditions,
    parse_formula,
)
from llmscope.engine.types import Item

# Hu et al. (2020)'s six circuits by test-suite tag, as their analysis maps them
# (cpllab/syntactic-generalization, notebooks/main.py: the tag is the suite name up to its first
# "-", "_" or digit).
CIRCUITS = {
    "npi": "Licensing",
    "reflexive": "Licensing",
    "fgd": "Long-Distance Dependencies",
    "cleft": "Long-Distance Dependencies",
    "number": "Agreement",
    "npz": "Garden-Path Effects",
    "mvrr": "Garden-Path Effects",
    "subordination": "Gross Syntactic State",
    "center": "Center Embedding",
}


# Suites their analysis leaves out of every figure (the same notebook's `exclude_suite_re`).
EXCLUDED = re.compile(r"^fgd-embed[34]|^gardenpath|^nn-nv")


def circuit_of(suite_name: str) -> str | None:
    """The circuit of a test suite named as Hu et al.'s are (`npz_ambig_mod` -> Garden-Path
    Effects); None for a suite their analysis excludes or whose tag they do not map."""
    if EXCLUDED.search(suite_name):
        return None
    return CIRCUITS.get(re.split(r"[-_0-9]", suite_name)[0])


SPEC: dict[str, Any] = {
    "name": "syntaxgym",
    "task": "syntaxgym",
    "description": "SyntaxGym test suites (Hu et al. 2020): region surprisals checked against each suite's predictions",
    "source": "cpllab/syntactic-generalization test_suites/json",
    "id_field": "id",
    "text_field": "text",
    "group_by": ["suite"],
}


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(path.glob("*.json"))
        if not files:
            raise SuiteError("no SyntaxGym *.json suites in this folder", path)
        return files
    if not path.is_file():
        raise SuiteError("file or folder not found", path)
    return [path]


def load_syntaxgym_file(path: Path) -> list[Item]:
    """Items of one SyntaxGym JSON suite; errors name the file and field."""

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SuiteError(f"cannot read SyntaxGym JSON: {e}", path) from e
    if not isinstance(data, dict) or not isinstance(data.get("items"), list):
        raise SuiteError("expected an object with an `items` list", path, field="items")
    name = str((data.get("meta") or {}).get("name") or path.stem)
    metric = (data.get("meta") or {}).get("metric", "sum")
    if metric != "sum":
        raise SuiteError(
            f"region metric {metric!r} is not supported (only 'sum')", path, field="meta.metric"
        )
    preds = []
    for p in data.get("predictions") or []:
        f = p.get("formula") if isinstance(p, dict) else None
        if not isinstance(f, str):
            raise SuiteError("each prediction needs a formula string", path, field="predictions")
        try:
            parse_formula(f)
        except FormulaError as e:
            raise SuiteError(str(e), path, field="predictions") from e
        preds.append(f.strip())
    if not preds:
        raise SuiteError("no predictions", path, field="predictions")
    region_meta = data.get("region_meta") or {}
    items = []
    for rec in data["items"]:
        num = rec.get("item_number") if isinstance(rec, dict) else None
        if num is None:
            raise SuiteError("item without item_number", path, field="items")
        try:
            conds = item_conditions(rec)
        except ValueError as e:
            raise SuiteError(f"item {num}: {e}", path, field="conditions") from e
        fields = {
            "id": f"{name}/{num}",
            "suite": name,
            "item_number": num,
            "conditions": rec["conditions"],
            "predictions": preds,
            "region_names": {str(k): v for k, v in region_meta.items()},
            "text": build_sentence(conds[0].regions)[0],
        }
        circuit = (data.get("meta") or {}).get("circuit")
        if not (isinstance(circuit, str) and circuit):
            circuit = circuit_of(name)
        if circuit:  # Hu et al.'s circuit: named by the suite, else from its name's tag
            fields["circuit"] = circuit
        items.append(Item(item_id=fields["id"], fields=fields, text=fields["text"]))
    return items


def load_syntaxgym_suite(suite_path: str | Path | None = None) -> Suite:
    """The `syntaxgym` suite from a JSON file or folder (default: the shared test suites)."""
    path = suite_source(
        suite_path, "syntaxgym/test_suites", "syntaxgym", "a SyntaxGym suite .json file or folder"
    )
    files = _files(path)
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    # the item files are hashed into the spec so the suite id changes with their content
    suite = suite_from_spec(dict(SPEC), None)
    suite.spec = dict(suite.spec, files_sha256=h.hexdigest())
    suite.items_path = path.resolve()

    def load() -> list[Item]:
        return [it for f in files for it in load_syntaxgym_file(f)]

    suite._loader = load
    return suite


register_suite(
    SuiteEntry(
        "syntaxgym",
        "syntaxgym",
        load_syntaxgym_suite,
        "SyntaxGym test suites (needs --suite-path or ../shared)",
    )
)
