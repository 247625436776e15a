"""Pre-registration: plan files, hypothesis tests against scipy, and the CLI flow on a real (tiny) model."""

from __future__ import annotations

import hashlib
import json

import duckdb
import numpy as np
import pandas as pd
import pytest
from scipy import stats

from llmscope.runs.plan import PlanError, evaluate, parse_hypothesis, read_plan
from tests.helpers.cli import cli_here, run_here


def test_parse_hypotheses():
    h = parse_hypothesis("accuracy(q1) > accuracy(variant=q2, method=raw)")
    assert h.left.group == {"variant": "q1"} and h.op == ">"
    assert h.right.group == {"variant": "q2", "method": "raw"}
    h2 = parse_hypothesis("p_yes(q1) < 0.5", "H2")
    assert h2.right == 0.5
    with pytest.raises(PlanError, match="unknown measure 'f1'"):
        parse_hypothesis("f1(q1) > f1(q2)")
    with pytest.raises(PlanError, match="expected MEASURE"):
        parse_hypothesis("q1 is better than q2")


def _df(a, b):
    rows = []
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        rows.append(
            {"item_id": str(i), "variant": "q1", "correct": x, "error": None, "extra": "{}"}
        )
        rows.append(
            {"item_id": str(i), "variant": "q2", "correct": y, "error": None, "extra": "{}"}
        )
    return pd.DataFrame(rows)


def test_paired_test_matches_scipy():
    a = [1, 1, 0, 1, 1, 1, 0, 1]
    b = [0, 1, 0, 0, 1, 0, 0, 1]
    ev = evaluate(parse_hypothesis("accuracy(q1) > accuracy(q2)"), _df(a, b), None, 0.05)
    ref = stats.ttest_rel(a, b, alternative="greater")
    assert ev["estimate"] == pytest.approx(np.mean(np.subtract(a, b)))
    assert ev["p"] == pytest.approx(ref.pvalue)
    ci = stats.ttest_rel(a, b).confidence_interval(0.95)
    assert ev["ci"] == pytest.approx([ci.low, ci.high])
    assert ev["verdict"] == ("supported" if ref.pvalue < 0.05 else "not supported")
    ev2 = evaluate(parse_hypothesis("accuracy(q1) < 0.5"), _df(a, b), None, 0.05)
    assert ev2["p"] == pytest.approx(stats.ttest_1samp(a, 0.5, alternative="less").pvalue)
    assert ev2["verdict"] == "not supported"


def test_bad_plan_file(tmp_path):
    p = tmp_path / "plan.yaml"
    p.write_text("llmscope_plan: 1\nsuite: mc-sample\nhypotheses:\n  - text: 'acc(q1) > acc(q2)'\n")
    with pytest.raises(PlanError, match=r"field 'hypotheses\[1\]'.*unknown measure 'acc'"):
        read_plan(p)
    p.write_text("llmscope_plan: 1\nsuite: mc-sample\nwhatever: 1\n")
    with pytest.raises(PlanError, match="field 'whatever': unknown plan key"):
        read_plan(p)


@pytest.mark.slow
def test_plan_run_report_end_to_end(tmp_path):
    from tests.helpers.tinymodel import make_tiny_model

    make_tiny_model(tmp_path, save=True)
    model = f"hf:{tmp_path / 'tiny-llama'}"
    db = tmp_path / "p.duckdb"
    plan = tmp_path / "plan.yaml"
    out = cli_here(
        "plan",
        "--suite",
        "commonsense-sample",
        "--model",
        model,
        "--opt",
        "top_k=5",
        "--hypothesis",
        "accuracy(q1) > accuracy(q2)",
        "--seed",
        "3",
        "-o",
        str(plan),
        db=db,
    )
    assert out.returncode == 0, out.stderr
    again = cli_here("plan", "--suite", "commonsense-sample", "-o", str(plan), db=db)
    assert again.returncode == 2 and "exists" in again.stderr
    digest = hashlib.sha256(plan.read_bytes()).hexdigest()
    out = run_here("--plan", str(plan), "--limit", "4", db=db)
    assert out.returncode == 0, out.stderr
    out = cli_here("report", "--json", db=db)
    rows = json.loads(out.stdout)
    assert rows[0]["metric"] == "hypothesis" and rows[0]["preregistered"] is True
    assert rows[0]["plan_hash"] == digest
    assert all(r["preregistered"] is False for r in rows[1:])
    con = duckdb.connect(str(db), read_only=True)
    meta = json.loads(con.execute("select meta from runs").fetchone()[0])
    assert meta["plan"]["hash"] == digest and meta["plan"]["results_before_plan"] == 0
    assert meta["plan"]["deviations"] == []
    assert con.execute("select seed from runs").fetchone()[0] == 3
    res = con.execute("select item_id, variant, correct from results").df()
    con.close()
    wide = res.pivot(index="item_id", columns="variant", values="correct")
    d = (wide["q1"] - wide["q2"]).to_numpy(float)
    assert rows[0]["value"] == pytest.approx(d.mean())
    ref = stats.ttest_1samp(d, 0, alternative="greater").pvalue if d.std() > 0 else None
    if ref is not None:
        assert rows[0]["p_value"] == pytest.approx(ref)
    text = cli_here("report", db=db).stdout
    assert "-- pre-registered (plan) --" in text and "-- exploratory (not in the plan) --" in text
    # a run whose options differ from its plan says so
    out = run_here("--plan", str(plan), "--limit", "2", "--opt", "top_k=7", db=db)
    assert out.returncode == 0 and "differs from plan" in out.stderr
    rows = json.loads(cli_here("report", "--json", db=db).stdout)
    devs = [r for r in rows if r["metric"] == "plan_deviation"]
    assert [r["group"]["deviation"] for r in devs] == ["task option top_k=7 (planned 5)"]
