"""`llmscope surprisal`: the word table as parquet and the held-out reading-time fit, end to end."""

from __future__ import annotations

import json

import pandas as pd
import pytest

pytest.importorskip("torch")

from llmscope.cli import main  # noqa: E402
from tests.helpers.cli import tiny_model_dir  # noqa: E402
from tests.helpers.paths import ROOT


def test_word_table_and_reading_time_fit(tmp_path, capsys):
    model = tiny_model_dir(tmp_path)
    db = str(tmp_path / "s.duckdb")
    assert (
        main(
            [
                "run",
                "--suite",
                "syntax-sample",
                "--db",
                db,
                "--model",
                f"hf:{model}",
                "--threads",
                "1",
                "--quiet",
                "--no-report",
            ]
        )
        == 0
    )
    out = tmp_path / "w.parquet"
    assert main(["surprisal", "last", "--db", db, "-o", str(out)]) == 0
    words = pd.read_parquet(out)
    # 20 items; each condition's sentence split on whitespace gives its words
    item = json.loads(
        ROOT.joinpath("data/builtin/syntax-sample/items.jsonl").read_text().split("\n")[0]
    )
    n_words = sum(
        len(" ".join(r for r in regs if r).split()) for regs in item["conditions"].values()
    )
    assert len(words[words.item_id == item["id"]]) == n_words
    assert words["surprisal_bits"].gt(0).all()
    rts = words[["item_id", "condition", "word_index"]].copy()
    rts["rt"] = 150 + 9 * words["surprisal_bits"] + 3 * words["length"]
    rt_path = tmp_path / "rt.csv"
    rts.to_csv(rt_path, index=False)
    capsys.readouterr()
    assert main(["surprisal", "last", "--db", db, "--rt", str(rt_path), "--json"]) == 0
    fit = json.loads(capsys.readouterr().out)
    assert fit["n_words"] == len(words)
    assert fit["coef"]["surprisal_bits"] == pytest.approx(9) and fit["r2_heldout"] == pytest.approx(
        1.0
    )
    # bad input: a one-line error naming the file and the missing column
    rts.drop(columns=["rt"]).to_csv(rt_path, index=False)
    assert main(["surprisal", "last", "--db", db, "--rt", str(rt_path)]) == 2
    err = capsys.readouterr().err
    assert "rt.csv" in err and "lacks column(s): rt" in err and "Traceback" not in err
