"""The SQL and export examples of docs/DATA.md run as written.

A database `llmscope.duckdb` with one yes/no run is made in a temporary folder; the `sql`
block of "The database" runs against it, the `bash` block of "Export" runs each `llmscope`
line through the CLI, and the `python` block runs there too. The printed averages are
checked against values computed here from the rows written.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from llmscope.engine.types import Result
from llmscope.store.db import Store
from tests.helpers.paths import ROOT

DOC = ROOT / "docs" / "DATA.md"


def _section(title: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", text, re.S | re.M)
    assert m, f"docs/DATA.md has no section {title!r}"
    return m.group(1)


def _blocks(section: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", section, re.S)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    with Store(tmp_path / "llmscope.duckdb") as st:
        st.create_run(
            {
                "run_id": "r1",
                "suite_id": "s@1",
                "suite_name": "s",
                "task": "yesno",
                "n_total": 4,
                "model": "m",
            }
        )
        st.write_results(
            "r1",
            [
                Result(
                    item_id=str(i),
                    variant=v,
                    prompt="p",
                    probs={"yes": py, "no": 0.5 - py / 2},
                    other=0.5 - py / 2,
                    prediction="yes" if py > 0.4 else "no",
                    gold="yes",
                    correct=float(py > 0.4),
                )
                for i, (v, py) in enumerate([("q1", 0.2), ("q1", 0.6), ("q2", 0.5), ("q2", 0.3)])
            ],
        )
    return tmp_path


def test_database_sql_example_runs(folder: Path) -> None:
    (sql,) = _blocks(_section("The database"), "sql")
    con = duckdb.connect(str(folder / "llmscope.duckdb"), read_only=True)
    rows = sorted(con.execute(sql).fetchall())
    con.close()
    assert (
        rows[0][0] == "q1" and rows[0][1] == pytest.approx(0.4) and rows[0][3] == pytest.approx(0.5)
    )
    assert (
        rows[1][0] == "q2" and rows[1][1] == pytest.approx(0.4) and rows[1][2] == pytest.approx(0.3)
    )


def test_export_examples_run_as_written(folder: Path) -> None:
    sec = _section("Export")
    (bash,) = _blocks(sec, "bash")
    (py,) = _blocks(sec, "python")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("LLMSCOPE_DB", None)
    for line in bash.strip().splitlines():
        assert line.startswith("llmscope ")
        args = line.split()[1:]
        proc = subprocess.run(
            [sys.executable, "-m", "llmscope", *args],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
        assert proc.returncode == 0, (line, proc.stderr)
    proc = subprocess.run(
        [sys.executable, "-c", py], cwd=folder, capture_output=True, text=True, timeout=300, env=env
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    # q1: p_yes 0.2, 0.6 -> 0.4; p_other 0.4, 0.2 -> 0.3; chosen_prob P(no)=0.4 then P(yes)=0.6 -> 0.5
    assert re.search(r"q1\s+│\s+0\.4\d*\s+│\s+0\.3\d*\s+│\s+0\.5", out), out
    assert re.search(r"q1\s+0\.4\d*\s+0\.5\d*\s+0\.5", out), out
    assert (folder / "lm-eval-out" / "results_r1.json").is_file()
