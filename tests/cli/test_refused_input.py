"""A command that refuses its input file (a suite, templates, a file to import) leaves no
database behind that it created itself, and leaves a database that was there byte for byte
as it was: `run --suite bad --db new.duckdb` once left an empty `new.duckdb`."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from llmscope.store.db import Store
from tests.helpers.cli import assert_clean_error, cli, write_yesno_suite


def _files(folder: Path) -> dict[str, str]:
    """Every file and folder under `folder` (hidden ones too) -> its sha256 ("dir": a folder)."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        if p.is_file()
        else "dir"
        for p in sorted(folder.rglob("*"))
    }


def _one_line_refusal(args: list[str], *needles: str) -> None:
    proc = cli(*args, timeout=120)
    err = assert_clean_error(proc, *needles)
    assert len(err.strip().splitlines()) == 1, err


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    """Bad input files in `tmp_path/in`, and a database with one run in `tmp_path/db/old.duckdb`."""
    src = tmp_path / "in"
    spec = write_yesno_suite(src / "suite", 4)
    with open(spec.parent / "items.jsonl", "a", encoding="utf-8") as f:
        f.write("{not json\n")  # line 5 of the items
    (src / "terse.yaml").write_text("nosuch: 'Q: {text}?'\n", encoding="utf-8")  # no such variant
    (src / "samples_x.jsonl").write_text('{"doc_id": 0}\n', encoding="utf-8")  # lm-eval, no request
    (src / "answers.json").write_text("[1, 2", encoding="utf-8")
    (src / "results.jsonl").write_text('{"id": "1"}\n', encoding="utf-8")  # no q1/q2/q3 in the name
    # the good suites the two imports score against (their default data, ../shared, may be absent)
    (src / "targets.jsonl").write_text(
        '{"metadata": {"id": "q1"}, "question": {"normalized": "name a fruit"}, '
        '"answers": {"raw": {"apple": 3}, "clusters": {"apple": {"count": 3, "answers": ["apple"]}}}}\n',
        encoding="utf-8",
    )
    (src / "statements.csv").write_text(
        "statement,category,elicitation,q1,q2,q3\nCats purr.,animals,written,a,b,c\n",
        encoding="utf-8",
    )
    (tmp_path / "db").mkdir()
    with Store(tmp_path / "db" / "old.duckdb") as st:
        st.create_run(
            {"run_id": "r1", "suite_id": "s@1", "suite_name": "s", "task": "yesno", "n_total": 0}
        )
    return tmp_path


def _refusals(src: Path) -> list[tuple[list[str], str]]:
    """(arguments without --db, a word the error names) of each refused command."""
    suite = str(src / "suite" / "suite.yaml")
    return [
        (["run", "--suite", suite, "--limit", "1"], "items.jsonl"),
        (["run", "--suite", "mc-sample", "--templates", str(src / "terse.yaml")], "nosuch"),
        # a suite with its own items: the path was once ignored and the whole suite ran
        (
            ["run", "--suite", "commonsense-sample", "--suite-path", str(src / "terse.yaml")],
            "--suite-path",
        ),
        (["import", "lm-eval", str(src / "samples_x.jsonl")], "samples_x.jsonl"),
        (
            [
                "import",
                "answers",
                str(src / "answers.json"),
                "--suite-path",
                str(src / "targets.jsonl"),
            ],
            "answers.json",
        ),
        (
            [
                "import",
                "results",
                str(src / "results.jsonl"),
                "--suite-path",
                str(src / "statements.csv"),
            ],
            "results.jsonl",
        ),
    ]


@pytest.mark.slow
def test_a_refused_file_leaves_no_new_database(inputs: Path) -> None:
    src, folder = inputs / "in", inputs / "db"
    before = _files(folder)
    for k, (args, needle) in enumerate(_refusals(src)):
        new = folder / f"new{k}.duckdb"
        _one_line_refusal([*args, "--db", str(new)], needle)
        assert _files(folder) == before, args  # no new.duckdb, no .wal, no scratch file
    # nothing to resume or re-run in a file that is not there: said, and not made
    _one_line_refusal(["run", "--resume", "last", "--db", str(folder / "x.duckdb")], "no run")
    _one_line_refusal(
        ["rerun", "last", "--where", "failing", "--db", str(folder / "y.duckdb")], "no database"
    )
    assert _files(folder) == before


def test_a_refused_file_leaves_an_existing_database_as_it_was(inputs: Path) -> None:
    src, folder = inputs / "in", inputs / "db"
    before = _files(folder)
    assert list(before) == ["old.duckdb"]
    for args, needle in _refusals(src):
        _one_line_refusal([*args, "--db", str(folder / "old.duckdb")], needle)
        assert _files(folder) == before, args  # the same bytes, nothing beside it
