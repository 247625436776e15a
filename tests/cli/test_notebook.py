"""The notebook API (`llmscope.open`, llmscope/notebook.py).

`metrics(run)` must equal what `llmscope report --json` prints (run in a subprocess) for a run of
every built-in suite, `results(run)` what `llmscope export --format parquet` writes, and reads
must work while another process holds the write lock.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import llmscope
from llmscope.notebook import NotebookError
from tests.helpers.cli import cli, cli_env
from tests.helpers.mixed import write_mixed_db


def _rows(rm: Any) -> list[dict[str, Any]]:
    return json.loads(json.dumps(rm.rows(), default=str))


@pytest.fixture(scope="module")
def suites_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """One short tiny-model run of every built-in suite that ships its items."""
    from llmscope.data.suites import EXTERNAL_SUITES, builtin_names, load_suite
    from llmscope.engine.runner import RunPlan
    from llmscope.store.db import Store
    from tests.helpers.tinymodel import make_tiny_model, run_plan, tiny_backend

    tmp = tmp_path_factory.mktemp("notebook")
    db = tmp / "runs.duckdb"
    model, tok = make_tiny_model(tmp)
    ids: dict[str, str] = {}
    with Store(db) as store:
        for name in [n for n in builtin_names() if n not in EXTERNAL_SUITES]:
            backend = tiny_backend(tmp, model, tok, batch_size=8)
            opts = (
                {"max_new_tokens": 4}
                if name in ("generation-sample", "contamination-sample", "probeval-oneshot")
                else {}
            )
            plan = RunPlan(
                suite=load_suite(name),
                model_label="tiny",
                model_arg="tiny",
                limit=4,
                task_options=opts,
            )

            ids[name] = run_plan(plan, backend, store).run_id
    return db, ids


@pytest.mark.slow
def test_metrics_equal_report_json_for_every_builtin_suite(
    suites_db: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    db, ids = suites_db
    proc = cli("report", "--db", str(db), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    nb = llmscope.open(db)
    assert sorted(nb.runs()["run_id"]) == sorted(ids.values())
    for name, rid in ids.items():
        expected = [r for r in report if r["run"] == rid]
        assert expected, name
        assert _rows(nb.metrics(rid)) == expected, name
    # results: the export's rows and types (one suite per task type through the CLI's parquet)
    for name in ("commonsense-sample", "mc-sample", "generation-sample"):
        out = tmp_path / f"{name}.parquet"
        proc = cli(
            "export", "--db", str(db), "--run", ids[name], "--format", "parquet", "-o", str(out)
        )
        assert proc.returncode == 0, proc.stderr
        pd.testing.assert_frame_equal(nb.results(ids[name]), pd.read_parquet(out))
        assert nb.results(ids[name], as_="arrow").equals(
            __import__("pyarrow").parquet.read_table(out)
        )
    assert nb.notices == []  # nothing held the file


def test_reads_beside_a_process_holding_the_write_lock(tmp_path: Path) -> None:
    db = write_mixed_db(tmp_path / "mixed.duckdb")
    nb = llmscope.open(db)
    before_runs = nb.runs()
    before = {rid: _rows(nb.metrics(rid)) for rid in ("r1", "r2")}
    results = nb.results("r1")
    # the report of the free file agrees
    report = json.loads(cli("report", "--db", str(db), "--json").stdout)
    assert before["r1"] == [r for r in report if r["run"] == "r1"]
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
            import sys
            from llmscope.store.db import Store
            st = Store({str(db)!r})
            print("held", flush=True)
            sys.stdin.readline()
            st.close()
        """),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=cli_env(),
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        # the report reads a copy as of the holder's last commit (DuckDB keeps read-only openers
        # out), says so in one line, and prints the same numbers
        held = cli("report", "--db", str(db), "--json")
        assert held.returncode == 0, held.stderr
        assert [r for r in json.loads(held.stdout) if r["run"] == "r1"] == before["r1"]
        assert held.stderr.count("still being written") == 1, held.stderr
        # ... the notebook too, and says so
        with pytest.warns(UserWarning, match="still being written") as caught:
            runs = nb.runs()
            pd.testing.assert_frame_equal(
                runs.drop(columns=["status"]), before_runs.drop(columns=["status"])
            )
            assert {rid: _rows(nb.metrics(rid)) for rid in ("r1", "r2")} == before
            pd.testing.assert_frame_equal(nb.results("r1"), results)
        assert len(nb.notices) == len(caught) == 4 and all(
            "as of its last flush" in n for n in nb.notices
        )
        assert {w.filename for w in caught} == {__file__}  # the warning points at the caller
    finally:
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.close()
        holder.wait(timeout=60)
    # no copy left behind, the file unchanged and free again
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".metrics.sqlite")) == [
        "mixed.duckdb"  # no copy or lock file beside it
    ]
    assert cli("report", "--db", str(db), "--json").returncode == 0


def test_errors_and_formats(tmp_path: Path) -> None:
    db = write_mixed_db(tmp_path / "mixed.duckdb")
    with pytest.raises(NotebookError, match="no database"):
        llmscope.open(tmp_path / "absent.duckdb")
    nb = llmscope.open(db)
    with pytest.raises(NotebookError, match="no run 'zzz'"):
        nb.metrics("zzz")
    with pytest.raises(NotebookError, match="pandas, arrow, polars"):
        nb.results("r1", as_="excel")
    df = nb.results("r1")
    from llmscope.io.export import COLUMNS

    assert list(df.columns) == COLUMNS
    assert df["item_id"].tolist() == ["i0", "i1", "i2", "i3", "i4", "i5", "i6"]
    assert df["correct"].dtype == "float64"
    try:
        import polars  # noqa: F401
    except ImportError:
        with pytest.raises(NotebookError, match="needs polars"):
            nb.results("r1", as_="polars")
    else:
        assert nb.results("r1", as_="polars").columns == COLUMNS


def test_import_llmscope_stays_light() -> None:
    code = (
        "import sys, llmscope; heavy = ('pandas', 'duckdb', 'pyarrow', 'numpy', 'torch', 'mirt'); "
        "print([m for m in heavy if m in sys.modules]); print(callable(llmscope.open))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), timeout=60
    )
    assert out.stdout.split("\n")[:2] == ["[]", "True"], out.stderr


def test_study_cells_equal_study_status_json(tmp_path: Path) -> None:
    """`db.study(name)` is `llmscope study status --json`'s grid, one row a cell."""
    from llmscope.store.db import Store
    from llmscope.studies.spec import load_study
    from llmscope.studies.store import record_cell, record_study, tag_run
    from tests.helpers.cli import write_yesno_suite
    from tests.helpers.mixed import write_yesno_db

    yn = write_yesno_suite(tmp_path / "yn", 4)
    spec = tmp_path / "s.yaml"
    spec.write_text(
        f"name: nbs\nsuites: [{{suite: {yn}, label: yn}}]\n"
        "models: [{model: 'openai:a', label: a}, {model: 'openai:b', label: b}]\n"
        "grid:\n  seed: [0]\n",
        encoding="utf-8",
    )
    study = load_study(spec)
    path = write_yesno_db(tmp_path / "st.duckdb")
    with Store(path) as st:
        record_study(st, study)
        first = study.cells[0].key
        record_cell(st, "nbs", first, "done", run_id="yn-abs")
        tag_run(st, "yn-abs", "nbs", first)
    proc = cli("study", "status", "nbs", "--db", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    expected = json.loads(proc.stdout)["cells"]
    db = llmscope.open(path)
    df = db.study("nbs")
    assert len(df) == len(expected) == 2
    for (_, row), exp in zip(df.iterrows(), expected, strict=True):
        assert row["cell"] == exp["cell"] and row["state"] == exp["state"]
        assert row["level.seed"] == exp["levels"]["seed"]
        for col in ("run_id", "metric", "value", "n", "n_done"):
            assert (pd.isna(row[col]) and exp[col] is None) or row[col] == exp[col], col
        if exp["ci95"] is not None:
            assert [row["ci95_lo"], row["ci95_hi"]] == exp["ci95"]
    assert df.loc[0, "run_id"] == "yn-abs" and df.loc[0, "value"] is not None
    assert db.studies() == ["nbs"]
    with pytest.raises(NotebookError, match="no study 'x'.*recorded studies: nbs"):
        db.study("x")
