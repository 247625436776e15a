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
from tests.helpers.published import commonsense_models_db, published_models

N_STATEMENTS = 300


@pytest.mark.slow
def test_report_gives_each_published_model_its_consensus_and_awareness(tmp_path: Path) -> None:
    subset, db = commonsense_models_db(tmp_path, N_STATEMENTS)
    proc = cli("report", "--db", str(db), "--json", timeout=600)
    assert proc.returncode == 0, proc.stderr
    got: dict[str, dict[str, float]] = {}
    for row in json.loads(proc.stdout):
        if row["group"] == {} and row["metric"] in ("consensus", "awareness", "commonsensicality"):
            got.setdefault(row["model"], {})[row["metric"]] = row["value"]
    df = pd.read_csv(subset, index_col=0)
    models = published_models(df)
    assert sorted(got) == sorted(models) and len(models) >= 30
    for m in models:
        consensus = float((df[f"{m}_q1"] == df["human_q1"]).mean())
        awareness = float((df[f"{m}_q2"] == df["human_q1"]).mean())
        assert got[m]["consensus"] == pytest.approx(consensus, abs=1e-12), m
        assert got[m]["awareness"] == pytest.approx(awareness, abs=1e-12), m
        assert got[m]["commonsensicality"] == pytest.approx(
            math.sqrt(consensus * awareness), abs=1e-12
        ), m
