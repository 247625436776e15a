"""Bad command-line input gets one clear line and exit 2, never a traceback."""

from __future__ import annotations

import pytest

from tests.helpers.cli import cli


@pytest.mark.parametrize(
    ("model", "needle"),
    [
        ("hf:nobody/no-such-model", "cannot load model 'hf:nobody/no-such-model'"),
        ("gguf:{tmp}/missing.gguf", "GGUF file not found"),
        ("hf:{tmp}/empty", "no config.json"),
    ],
    ids=["unloadable-hub-model", "missing-gguf", "folder-without-config"],
)
def test_a_model_that_cannot_load_is_explained(tmp_path, model: str, needle: str):
    (tmp_path / "empty").mkdir()
    r = cli(
        "run",
        "--suite",
        "commonsense-sample",
        "--limit",
        "1",
        "--db",
        str(tmp_path / "x.duckdb"),
        "--model",
        model.format(tmp=tmp_path),
    )
    assert r.returncode == 2
    assert needle in r.stderr
    assert "Traceback" not in r.stderr


def test_parquet_export_needs_an_output_file(tmp_path):
    from llmscope.store.db import Store

    db = tmp_path / "x.duckdb"
    with Store(db) as st:
        st.create_run(
            {"run_id": "r1", "suite_id": "s@1", "suite_name": "s", "task": "yesno", "n_total": 0}
        )
    r = cli("export", "--db", str(db), "--run", "r1", "--format", "parquet")
    assert r.returncode == 2 and "pass -o FILE" in r.stderr and "Traceback" not in r.stderr
    r = cli("export", "--db", str(db), "--run", "nope")
    assert r.returncode == 2 and "no run 'nope'" in r.stderr
