"""Bad command-line input gets one clear line and exit 2, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "llmscope", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def test_unloadable_hub_model_is_explained(tmp_path):
    r = _cli(
        "run",
        "--suite",
        "commonsense-sample",
        "--limit",
        "1",
        "--db",
        str(tmp_path / "x.duckdb"),
        "--model",
        "hf:nobody/no-such-model",
    )
    assert r.returncode == 2
    assert "cannot load model 'hf:nobody/no-such-model'" in r.stderr
    assert "Traceback" not in r.stderr


def test_missing_model_folder_and_gguf_are_explained(tmp_path):
    r = _cli(
        "run",
        "--suite",
        "commonsense-sample",
        "--db",
        str(tmp_path / "x.duckdb"),
        "--model",
        f"gguf:{tmp_path / 'missing.gguf'}",
    )
    assert r.returncode == 2 and "GGUF file not found" in r.stderr and "Traceback" not in r.stderr
    (tmp_path / "empty").mkdir()
    r = _cli(
        "run",
        "--suite",
        "commonsense-sample",
        "--db",
        str(tmp_path / "x.duckdb"),
        "--model",
        f"hf:{tmp_path / 'empty'}",
    )
    assert r.returncode == 2 and "no config.json" in r.stderr and "Traceback" not in r.stderr


def test_parquet_export_needs_an_output_file(tmp_path):
    from llmscope.store.db import Store

    db = tmp_path / "x.duckdb"
    with Store(db) as st:
        st.create_run(
            {"run_id": "r1", "suite_id": "s@1", "suite_name": "s", "task": "yesno", "n_total": 0}
        )
    r = _cli("export", "--db", str(db), "--run", "r1", "--format", "parquet")
    assert r.returncode == 2 and "pass -o FILE" in r.stderr and "Traceback" not in r.stderr
    r = _cli("export", "--db", str(db), "--run", "nope")
    assert r.returncode == 2 and "no run 'nope'" in r.stderr
