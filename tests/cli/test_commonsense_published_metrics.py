"""Consensus, awareness and commonsensicality of the published models' binarised answers
(`import commonsense-models`), as `llmscope report` prints them, against the CSV itself.

Whiting & Watts (2024): consensus is the share of statements where a model's q1 answer equals the
human majority, awareness the same for q2, commonsensicality their geometric mean. Expected values
are computed here with pandas from the first 300 statements of the published file.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from tests.helpers.cli import cli
from tests.helpers.paths import shared_path

N_STATEMENTS = 300


@pytest.mark.slow
def test_report_gives_each_published_model_its_consensus_and_awareness(tmp_path: Path) -> None:
    full = shared_path("data", "commonsense", "all_models_binarythresh.csv")
    statements = shared_path("data", "commonsense", "statements_and_prompts.csv")
    lines = full.read_text(encoding="utf-8").splitlines(keepends=True)
    subset = tmp_path / "models.csv"
    subset.write_text("".join(lines[: N_STATEMENTS + 1]), encoding="utf-8")
    db = tmp_path / "cs.duckdb"
    proc = cli(
        "import",
        "commonsense-models",
        str(subset),
        "--suite-path",
        str(statements),
        "--db",
        str(db),
    )
    assert proc.returncode == 0, proc.stderr
    proc = cli("report", "--db", str(db), "--json", timeout=600)
    assert proc.returncode == 0, proc.stderr
    got: dict[str, dict[str, float]] = {}
    for row in json.loads(proc.stdout):
        if row["group"] == {} and row["metric"] in ("consensus", "awareness", "commonsensicality"):
            got.setdefault(row["model"], {})[row["metric"]] = row["value"]
    df = pd.read_csv(subset, index_col=0)
    models = [c[: -len("_q1")] for c in df.columns if c.endswith("_q1") and c != "human_q1"]
    assert sorted(got) == sorted(models) and len(models) >= 30
    for m in models:
        consensus = float((df[f"{m}_q1"] == df["human_q1"]).mean())
        awareness = float((df[f"{m}_q2"] == df["human_q1"]).mean())
        assert got[m]["consensus"] == pytest.approx(consensus, abs=1e-12), m
        assert got[m]["awareness"] == pytest.approx(awareness, abs=1e-12), m
        assert got[m]["commonsensicality"] == pytest.approx(
            math.sqrt(consensus * awareness), abs=1e-12
        ), m
