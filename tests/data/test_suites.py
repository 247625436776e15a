"""Suites: the built-in commonsense sample, the full-corpus loader, and malformed input."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from llmscope.data.suites import SuiteError, load_suite
from tests.helpers.paths import shared_path


def test_commonsense_sample_shape():
    s = load_suite("commonsense-sample")
    items = s.items()
    assert s.task == "yesno"
    assert len(items) >= 200
    assert s.variant_names() == ["q1", "q2", "q3"]
    assert len({it.item_id for it in items}) == len(items)
    for it in items:
        assert it.gold in ("yes", "no")
        assert it.fields["category"]
        assert set(it.fields) >= {
            "behavior",
            "everyday",
            "figure_of_speech",
            "judgment",
            "opinion",
            "reasoning",
        }
    # q3 has no human gold in the corpus: it must not be scored.
    golds = {w.variant: w.gold for w in s.work(limit=1)}
    assert golds["q3"] is None and golds["q1"] == items[0].gold


def test_sample_prompts_equal_the_corpus_prompts():
    csv_path = shared_path("data", "commonsense", "statements_and_prompts.csv")
    with open(csv_path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    s = load_suite("commonsense-sample")
    for w in s.work():
        row = rows[int(w.item.item_id)]
        assert row["statement"] == w.item.text
        assert w.prompt == row[w.variant]


def test_full_corpus_loader_and_gold():
    csv_path = shared_path("data", "commonsense", "statements_and_prompts.csv")
    s = load_suite("commonsense", csv_path)
    items = s.items()
    assert len(items) == 4407
    with open(csv_path.parent / "all_models_binarythresh.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    col = rows[0].index("human_q1")
    expected = {r[0]: ("yes" if r[col] == "1" else "no") for r in rows[1:]}
    assert all(it.gold == expected[it.item_id] for it in items)
    assert len(s.work()) == 3 * 4407


def _write_suite(tmp: Path, items_text: str, suffix: str = ".jsonl", extra: str = "") -> Path:
    (tmp / f"items{suffix}").write_text(items_text, encoding="utf-8")
    spec = tmp / "suite.yaml"
    spec.write_text(
        "name: mini\ntask: yesno\nitems: items" + suffix + "\ntext_field: text\n"
        "templates:\n  plain: 'Is this true? {text}'\n" + extra,
        encoding="utf-8",
    )
    return spec


def test_broken_json_line_names_file_and_line(tmp_path):
    spec = _write_suite(
        tmp_path, '{"id": 1, "text": "a", "gold": "yes"}\n{"id": 2, "text": "b", gold: "no"}\n'
    )
    with pytest.raises(SuiteError) as e:
        load_suite(spec).items()
    assert e.value.line == 2
    assert e.value.path == str(tmp_path / "items.jsonl")
    assert "items.jsonl, line 2" in str(e.value)


def test_missing_template_field_names_field(tmp_path):
    spec = _write_suite(tmp_path, '{"id": 1, "text": "a"}\n{"id": 2, "txt": "b"}\n')
    with pytest.raises(SuiteError) as e:
        load_suite(spec).items()
    assert (e.value.line, e.value.field) == (2, "text")


def test_duplicate_ids_and_wrong_types(tmp_path):
    spec = _write_suite(tmp_path, '{"id": 1, "text": "a"}\n{"id": 1, "text": "b"}\n')
    with pytest.raises(SuiteError) as e:
        load_suite(spec).items()
    assert (e.value.line, e.value.field) == (2, "id") and "first on line 1" in str(e.value)
    spec = _write_suite(tmp_path, '{"id": 1, "text": ["a"]}\n')
    with pytest.raises(SuiteError) as e:
        load_suite(spec).items()
    assert (e.value.line, e.value.field) == (1, "text")


def test_csv_items_and_ragged_row(tmp_path):
    spec = _write_suite(tmp_path, 'id,text,gold\n1,hello,yes\n2,"x, y",no\n', ".csv")
    items = load_suite(spec).items()
    assert [(i.item_id, i.text, i.gold) for i in items] == [
        ("1", "hello", "yes"),
        ("2", "x, y", "no"),
    ]
    spec = _write_suite(tmp_path, "id,text,gold\n1,hello,yes\n2,a,b,c\n", ".csv")
    with pytest.raises(SuiteError) as e:
        load_suite(spec).items()
    assert e.value.line == 3


def test_bad_spec_key(tmp_path):
    spec = _write_suite(tmp_path, '{"id": 1, "text": "a"}\n')
    spec.write_text(spec.read_text().replace("task: yesno", "task: yesnoo"))
    with pytest.raises(SuiteError) as e:
        load_suite(spec)
    assert e.value.field == "task" and e.value.line == 2


def test_cli_rejects_broken_suite_without_touching_db(tmp_path):
    db = tmp_path / "x.duckdb"
    from llmscope.store.db import Store

    with Store(db) as st:
        st.execute("CREATE TABLE marker AS SELECT 42 AS v")
    before = db.read_bytes()
    spec = _write_suite(tmp_path, '{"id": 1, "text": "a"}\n{"id": 2, "text": \n')
    proc = subprocess.run(
        [sys.executable, "-m", "llmscope", "run", "--suite", str(spec), "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "items.jsonl, line 2" in proc.stderr and "Traceback" not in proc.stderr
    assert db.read_bytes() == before


def test_suites_command_lists_builtins():
    proc = subprocess.run(
        [sys.executable, "-m", "llmscope", "suites", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    assert rows["commonsense-sample"]["task"] == "yesno"
    assert rows["commonsense-sample"]["items"] == len(load_suite("commonsense-sample").items())
