"""Suites whose items come from a Hugging Face dataset file (parquet/JSON/CSV) through a
`dataset:` block with a field mapping (data/hf_datasets.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from llmscope.data.suites import SuiteError, load_suite

ROWS = [
    {
        "id": "Mercury_1",
        "question": "Which gas do plants take in?",
        "choices": {"text": ["oxygen", "carbon dioxide", "helium"], "label": ["A", "B", "C"]},
        "label": 1,
        "grade": "5",
    },
    {
        "id": "Mercury_2",
        "question": "What melts ice fastest?",
        "choices": {"text": ["salt", "sand", "paper"], "label": ["A", "B", "C"]},
        "label": 0,
        "grade": "4",
    },
]

SPEC = """name: arc-like
task: choice
text_field: question
templates:
  qa: "Question: {{question}}\\nAnswer:"
group_by: [grade]
dataset:
  path: {path}
  fields:
    options: choices.text
    gold: label
  gold_index: true
"""


def _write_spec(tmp_path: Path, data_name: str, extra: str = "") -> Path:
    spec = tmp_path / "suite.yaml"
    spec.write_text(SPEC.replace("{{", "{").replace("}}", "}").replace("{path}", data_name) + extra)
    return spec


def _run_no_server(
    launch: list[str], tmp_path: Path, spec: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`python LAUNCH --db x.duckdb run --suite SPEC` on a model no server answers: whatever
    it says comes from reading the suite."""
    return subprocess.run(
        [sys.executable, *launch, "--db", str(tmp_path / "x.duckdb"), "run", "--suite", str(spec)]
        + ["--model", "openai:none", "--base-url", "http://127.0.0.1:9/v1"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_parquet_with_nested_columns_and_gold_index(tmp_path: Path) -> None:
    pq.write_table(pa.Table.from_pylist(ROWS), tmp_path / "test.parquet")
    suite = load_suite(_write_spec(tmp_path, "test.parquet"))
    work = suite.work()
    assert [w.item.item_id for w in work] == ["Mercury_1", "Mercury_2"]
    assert work[0].prompt == "Question: Which gas do plants take in?\nAnswer:"
    assert work[0].options == ["oxygen", "carbon dioxide", "helium"]
    # label 1 -> the second option; label 0 -> the first
    assert [w.gold for w in work] == ["carbon dioxide", "salt"]
    # unmapped columns stay available (group_by)
    assert work[1].item.fields["grade"] == "4"
    assert suite.items_path == (tmp_path / "test.parquet").resolve()


def test_identity_covers_the_data_file(tmp_path: Path) -> None:
    pq.write_table(pa.Table.from_pylist(ROWS), tmp_path / "test.parquet")
    spec = _write_spec(tmp_path, "test.parquet")
    first = load_suite(spec).suite_id
    pq.write_table(pa.Table.from_pylist(ROWS[:1]), tmp_path / "test.parquet")
    assert load_suite(spec).suite_id != first


def test_jsonl_json_and_csv_read_the_same(tmp_path: Path) -> None:
    flat = [
        {"qid": "007", "q": "Is water wet?", "a": "yes"},
        {"qid": "008", "q": "Is fire cold?", "a": "no"},
    ]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in flat) + "\n")
    (tmp_path / "d.json").write_text(json.dumps({"test": flat, "train": []}))
    (tmp_path / "d.csv").write_text("qid,q,a\n007,Is water wet?,yes\n008,Is fire cold?,no\n")
    got = {}
    for name in ("d.jsonl", "d.json", "d.csv"):
        spec = tmp_path / f"{name}.yaml"
        spec.write_text(
            f"name: yn\ntask: yesno\ntemplates: '{{q}} Answer yes or no.'\n"
            f"dataset:\n  path: {name}\n  fields: {{id: qid, gold: a}}\n"
        )
        got[name] = [(w.item.item_id, w.prompt, w.gold) for w in load_suite(spec).work()]
    # the CSV id "007" stays text, as written
    assert (
        got["d.jsonl"]
        == got["d.json"]
        == got["d.csv"]
        == [
            ("007", "Is water wet? Answer yes or no.", "yes"),
            ("008", "Is fire cold? Answer yes or no.", "no"),
        ]
    )


def test_row_number_is_the_id_without_an_id_column(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text('{"q": "A?", "a": "yes"}\n{"q": "B?", "a": "no"}\n')
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "name: yn\ntask: yesno\ntemplates: '{q}'\ndataset:\n  path: d.jsonl\n  fields: {gold: a}\n"
    )
    assert [w.item.item_id for w in load_suite(spec).work()] == ["0", "1"]


@pytest.mark.parametrize(
    "extra, data, message",
    [
        (
            "",
            [{"id": "x", "question": "q", "choices": {"text": ["a", "b"]}, "label": 5}],
            "gold index 5 is outside the 2 options",
        ),
        ("", [{"id": "x", "question": "q", "label": 0}], "no column 'choices.text'"),
    ],
)
def test_bad_rows_name_file_row_and_field(
    tmp_path: Path, extra: str, data: list, message: str
) -> None:
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in data) + "\n")
    with pytest.raises(SuiteError) as e:
        load_suite(_write_spec(tmp_path, "d.jsonl", extra)).items()
    assert message in str(e.value)
    assert "d.jsonl, line 1" in str(e.value)


def test_spec_errors_are_one_line(tmp_path: Path) -> None:
    spec = _write_spec(tmp_path, "missing.parquet")
    with pytest.raises(SuiteError, match=r"field 'dataset.path'.*|data file not found"):
        load_suite(spec)
    spec.write_text("name: x\ntask: yesno\ndataset:\n  path: d.csv\n  splits: test\n")
    (tmp_path / "d.csv").write_text("id,text\n1,a\n")
    with pytest.raises(SuiteError, match="unknown key.*splits"):
        load_suite(spec)


def test_hub_id_without_datasets_or_network_is_a_clear_error(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "name: x\ntask: yesno\ndataset:\n  path: nobody-here/no-such-dataset-h18\n  split: test\n"
    )
    env_py = (
        "import os; os.environ['HF_HUB_OFFLINE']='1'; os.environ['HF_DATASETS_OFFLINE']='1';"
        "import sys; from llmscope.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    p = _run_no_server(["-c", env_py], tmp_path, spec)
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr
    assert "nobody-here/no-such-dataset-h18" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_data_folder_through_the_datasets_library(tmp_path: Path) -> None:
    """Folders and hub ids go through `datasets.load_dataset` (offline here: a local folder)."""
    pytest.importorskip(
        "datasets", reason="the `datasets` package is not installed (pip install datasets)"
    )
    folder = tmp_path / "arc"
    folder.mkdir()
    pq.write_table(pa.Table.from_pylist(ROWS), folder / "test.parquet")
    suite = load_suite(_write_spec(tmp_path, "arc"))
    assert [(w.item.item_id, w.gold) for w in suite.work()] == [
        ("Mercury_1", "carbon dioxide"),
        ("Mercury_2", "salt"),
    ]


def test_a_datasets_package_older_than_4_is_refused_before_it_loads(tmp_path: Path) -> None:
    """`datasets` before 4.0 ran a hub repository's loading script (2.16-2.19 with a warning
    only): such a version is refused with one line, and never asked to load anything."""
    fake = tmp_path / "site" / "datasets"
    fake.mkdir(parents=True)
    marker = tmp_path / "load_dataset_called"
    (fake / "__init__.py").write_text(
        '__version__ = "2.17.0"\n'
        "def load_dataset(*a, **k):\n"
        f"    open({str(marker)!r}, 'w').close()\n"
        "    return []\n"
    )
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "name: x\ntask: yesno\ndataset:\n  path: someone/scripted-dataset\n  split: test\n"
    )
    env = {**__import__("os").environ, "PYTHONPATH": str(tmp_path / "site")}
    p = _run_no_server(["-m", "llmscope"], tmp_path, spec, env=env)
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "4.0 or later" in p.stderr and "2.17.0" in p.stderr and "dataset.path" in p.stderr
    assert not marker.exists()
    assert not (tmp_path / "x.duckdb").exists()
