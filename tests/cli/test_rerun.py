"""`llmscope rerun RUN --where ...`: only the selected items, as a new run linked to the old one."""

from __future__ import annotations

import json

import duckdb
import pytest

pytest.importorskip("torch")

from llmscope.cli import main  # noqa: E402
from tests.helpers.cli import tiny_model_dir, write_yesno_suite  # noqa: E402


def test_rerun_failing_items_links_new_run(tmp_path, capsys):
    model = tiny_model_dir(tmp_path)
    spec = write_yesno_suite(tmp_path / "suite", 8)
    db = str(tmp_path / "r.duckdb")
    base = ["--db", db, "--model", f"hf:{model}", "--threads", "1", "--quiet", "--no-report"]
    assert main(["run", "--suite", str(spec), *base]) == 0
    con = duckdb.connect(db, read_only=True)
    (old_id,) = con.execute("SELECT run_id FROM runs").fetchone()
    wrong = {
        r[0]
        for r in con.execute(
            "SELECT item_id FROM results WHERE run_id = ? AND correct = 0", [old_id]
        ).fetchall()
    }
    con.close()
    assert wrong, "the random tiny model should get some items wrong"
    assert main(["rerun", old_id, "--where", "failing", *base]) == 0
    con = duckdb.connect(db, read_only=True)
    runs = con.execute("SELECT run_id, meta FROM runs WHERE run_id <> ?", [old_id]).fetchall()
    assert len(runs) == 1
    new_id, meta = runs[0]
    got = {
        r[0]
        for r in con.execute("SELECT item_id FROM results WHERE run_id = ?", [new_id]).fetchall()
    }
    con.close()
    assert got == wrong  # every variant of each failing item, nothing else
    link = json.loads(meta)["rerun_of"]
    assert link["run_id"] == old_id and link["where"] == "failing" and link["n_items"] == len(wrong)

    # a filter over an item field and one that names an unknown column
    assert main(["rerun", old_id, "--where", "id = 'q1'", *base]) == 0
    capsys.readouterr()
    assert main(["rerun", old_id, "--where", "nosuch = 1", *base]) == 2
    err = capsys.readouterr().err
    assert err.startswith("llmscope: error: --where 'nosuch = 1'") and "columns: item_id" in err
    assert "Traceback" not in err
