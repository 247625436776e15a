import json
import math

import numpy as np
import pandas as pd
import pytest

from llmscope.analysis import commonsense as cs
from llmscope.analysis.intervals import wilson_interval
from tests.helpers.paths import SHARED

CS_DIR = SHARED / "data" / "commonsense"


def toy():
    human = pd.DataFrame(
        {"id": range(5), "human_q1": [1, 1, 0, 0, 1], "category": ["a", "a", "a", "b", "b"]}
    )
    # model q1 answers (yes > no): 1 0 0 1 1 ; the tie in row 1 counts as "no"
    q1 = pd.DataFrame(
        {"id": range(5), "p_yes": [0.6, 0.4, 0.1, 0.5, 0.45], "p_no": [0.3, 0.4, 0.8, 0.2, 0.3]}
    )
    # model q2 answers: 1 1 0 0 0
    q2 = pd.DataFrame(
        {"id": range(5), "p_yes": [0.9, 0.6, 0.2, 0.1, 0.2], "p_no": [0.1, 0.3, 0.7, 0.8, 0.7]}
    )
    return cs.commonsense_frame(human, q1, q2)


def test_binarize_rule():
    out = cs.binarize([0.6, 0.4, 0.3, None], [0.3, 0.4, 0.1, 0.5])
    assert out[:3].tolist() == [1.0, 0.0, 1.0] and np.isnan(out[3])


def test_commonsensicality_by_hand():
    df = toy()
    assert df["model_q1"].tolist() == [1, 0, 0, 1, 1]
    assert df["model_q2"].tolist() == [1, 1, 0, 0, 0]
    t = cs.commonsensicality(df, ["category"], n_boot=500).set_index("category")
    # overall: q1 matches T F T F T -> 3/5 ; q2 matches T T T T F -> 4/5
    assert t.loc["(all)", "consensus"] == pytest.approx(3 / 5)
    assert t.loc["(all)", "awareness"] == pytest.approx(4 / 5)
    assert t.loc["(all)", "commonsensicality"] == pytest.approx(math.sqrt(12 / 25))
    assert (t.loc["(all)", "consensus_lo"], t.loc["(all)", "consensus_hi"]) == pytest.approx(
        wilson_interval(3, 5)
    )
    # category a: consensus 2/3, awareness 3/3 ; category b: 1/2 and 1/2
    assert t.loc["a", "commonsensicality"] == pytest.approx(math.sqrt(2 / 3))
    assert t.loc["b", "commonsensicality"] == pytest.approx(0.5)
    assert t.loc["b", "n"] == 2
    lo, hi = t.loc["(all)", "commonsensicality_lo"], t.loc["(all)", "commonsensicality_hi"]
    assert 0 <= lo <= hi <= 1
    rows = cs.commonsense_rows(t.reset_index(), run="r", model="m", by=["category"])
    json.dumps(rows)
    assert len(rows) == 9


def test_bootstrap_deterministic():
    df = toy()
    a = cs.commonsensicality(df, n_boot=300, seed=4)
    b = cs.commonsensicality(df, n_boot=300, seed=4)
    assert a["commonsensicality_lo"][0] == b["commonsensicality_lo"][0]


def test_correlation_by_hand():
    # dx = dy' = (-1.5,-.5,.5,1.5) vs (-1.5,.5,-.5,1.5): sum dxdy = 4, sum dx^2 = 5 -> r = .8
    r = cs.correlation([1, 2, 3, 4, None], [1, 3, 2, 4, 0.5])
    assert r["n"] == 4
    assert r["pearson"] == pytest.approx(0.8)
    assert r["spearman"] == pytest.approx(0.8)
    assert np.isnan(cs.correlation([1, 1, 1], [1, 2, 3])["pearson"])


@pytest.mark.slow
@pytest.mark.skipif(not CS_DIR.exists(), reason=f"commonsense data not found at {CS_DIR}")
def test_published_qwen2_binarisation_and_scores(capsys):
    human = cs.load_human_table(CS_DIR / "all_models_binarythresh.csv")
    pub = CS_DIR / "published" / "Qwen2-0.5B-Instruct"
    q1 = cs.load_raw_results(pub / "results_raw_q1.jsonl")
    q2 = cs.load_raw_results(pub / "results_raw_q2.jsonl")
    assert len(human) == 4407 and len(q1) == 4407
    df = cs.commonsense_frame(human, q1, q2)
    ref = human.set_index("id").loc[df["id"]]
    agree_q1 = float(np.mean(df["model_q1"].to_numpy() == ref["Qwen2-0.5B_q1"].to_numpy()))
    agree_q2 = float(np.mean(df["model_q2"].to_numpy() == ref["Qwen2-0.5B_q2"].to_numpy()))
    assert agree_q1 == 1.0
    assert agree_q2 == 1.0
    # the P(yes) > 0.5 rule would not reproduce the published column
    half = (q1.set_index("id").loc[df["id"], "p_yes"] > 0.5).astype(int).to_numpy()
    assert np.mean(half == ref["Qwen2-0.5B_q1"].to_numpy()) < 1.0

    t = cs.commonsensicality(df, ["category"], n_boot=1000)
    allrow = t[t["category"] == "(all)"].iloc[0]
    # independent recomputation from the published binary columns
    cons = np.mean(ref["Qwen2-0.5B_q1"].to_numpy() == ref["human_q1"].to_numpy())
    awar = np.mean(ref["Qwen2-0.5B_q2"].to_numpy() == ref["human_q1"].to_numpy())
    assert allrow["consensus"] == pytest.approx(cons)
    assert allrow["awareness"] == pytest.approx(awar)
    assert allrow["commonsensicality"] == pytest.approx(math.sqrt(cons * awar))
    assert (
        allrow["commonsensicality_lo"]
        < allrow["commonsensicality"]
        < allrow["commonsensicality_hi"]
    )
    with capsys.disabled():
        print(
            f"\nQwen2-0.5B: q1 reproduction {agree_q1:.4f}, q2 {agree_q2:.4f}; "
            f"consensus {allrow['consensus']:.4f} awareness {allrow['awareness']:.4f} "
            f"commonsensicality {allrow['commonsensicality']:.4f} "
            f"[{allrow['commonsensicality_lo']:.4f}, {allrow['commonsensicality_hi']:.4f}]"
        )


def test_correlation_of_a_constant_column_is_undefined_without_a_warning():
    """Equal floats whose std is not exactly 0 (three 0.1: mean 0.10000000000000002): no
    correlation, and no scipy ConstantInputWarning leaking to the report's stderr."""
    import warnings

    assert np.std([0.1, 0.1, 0.1]) != 0  # the case the old guard missed
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = cs.correlation([0.1, 0.1, 0.1], [0.2, 0.5, 0.9])
        r2 = cs.correlation([0.3, 0.6, 0.9, 0.2, 0.5, 0.8], [0.7] * 6)
    assert r["n"] == 3 and all(
        np.isnan(r[k]) for k in ("pearson", "pearson_p", "spearman", "spearman_p")
    )
    assert r2["n"] == 6 and np.isnan(r2["pearson"]) and np.isnan(r2["spearman"])
