import json
import math

import pandas as pd
import pytest

from llmscope.analysis import worldsense as ws
from tests.helpers.paths import SHARED

WS_DIR = SHARED / "data" / "worldsense" / "test_set"

TF = ["TRUE", "FALSE"]
K3 = ["1", "2", "3"]

# (tuple_ID, problemname, problemsize, expectedresp, [(gold, resp), ...])
TUPLES = [
    # acc (.5*1 + .5*0)/1 = .5 ; bias (.5*1 + .5*1) = 1
    ("A", "P1", 3, TF, [("TRUE", "TRUE"), ("FALSE", "TRUE")]),
    # acc 1 ; bias 0
    ("B", "P1", 3, TF, [("TRUE", "TRUE"), ("FALSE", "FALSE")]),
    ("B2", "P1", 3, TF, [("TRUE", "TRUE"), ("FALSE", "FALSE")]),
    # empty response: wrong, bias 0 but weight kept -> acc .5 ; bias (0 - .5)/1 = -.5
    ("C", "P1", 4, TF, [("TRUE", ""), ("FALSE", "FALSE")]),
    # acc .5 ; bias -1
    ("C2", "P1", 4, TF, [("TRUE", "FALSE"), ("FALSE", "FALSE")]),
    # 1 and 2 both map to KNOW: acc 1 ; bias .25 + .25 - .5 = 0
    ("D", "P2", 3, K3, [("Mark", "2"), ("Youssef", "1"), ("Yoda", "3")]),
    # acc .25 + .25 + 0 = .5 ; bias 1
    ("E", "P2", 3, K3, [("Mark", "1"), ("Youssef", "1"), ("Yoda", "1")]),
    # acc 0 ; bias -.25 - .25 + 0 = -.5
    ("F", "P2", 4, K3, [("Mark", "3"), ("Youssef", "3"), ("Yoda", "")]),
    # acc 0 + .25 + .5 = .75 ; bias -.25 + .25 - .5 = -.5
    ("G", "P2", 4, K3, [("Mark", "3"), ("Youssef", "2"), ("Yoda", "3")]),
    # incomplete (1 of 2 trials answered) -> excluded with a warning
    ("H", "P1", 4, TF, [("TRUE", "TRUE")]),
]
EXPECTED = {
    "A": (0.5, 1.0),
    "B": (1.0, 0.0),
    "B2": (1.0, 0.0),
    "C": (0.5, -0.5),
    "C2": (0.5, -1.0),
    "D": (1.0, 0.0),
    "E": (0.5, 1.0),
    "F": (0.0, -0.5),
    "G": (0.75, -0.5),
}


def make_frames():
    trials, resps = [], []
    key = 0
    for tid, prob, size, exp, pairs in TUPLES:
        for gold, resp in pairs:
            obf = {v: k for k, v in ws.GOLD_DEOBFUSCATION.items()}.get(gold, gold)
            trials.append(
                {
                    "Key": key,
                    "tuple_ID": tid,
                    "problemname": prob,
                    "problemsize": size,
                    "expectedresp": exp,
                    "goldresp_obfusc": obf,
                    "text": "q",
                }
            )
            resps.append({"Key": key, "resp": resp})
            key += 1
    # tuple H's second trial exists in the trial list but was never answered
    trials.append({**trials[-1], "Key": key, "goldresp_obfusc": "Megi"})
    return pd.DataFrame(trials), pd.DataFrame(resps)


def _frame():
    t, r = make_frames()
    r["modelname"] = "M"
    return ws.worldsense_frame(t, r)


def test_tuple_weighted_means_and_incomplete_warning():
    df = _frame()
    assert set(df["goldresp"]) == {"TRUE", "FALSE", "1", "2", "3"}
    with pytest.warns(UserWarning, match="incomplete"):
        tup = ws.tuple_table(df)
    got = {r["tuple_ID"]: (r["acc"], r["bias"]) for r in tup.to_dict("records")}
    assert set(got) == set(EXPECTED)
    for k, (a, b) in EXPECTED.items():
        assert got[k] == (pytest.approx(a), pytest.approx(b)), k
    assert "resp" not in tup and "goldresp" not in tup


def test_trial_without_its_item_is_excluded_not_a_crash():
    # A result whose item is not stored reaches the tuple table with no expected responses
    # (and no tuple): it is left out with the incomplete ones, the other tuples unchanged.
    df = _frame()
    extra = df.iloc[[0]].copy()
    extra["expectedresp"] = None
    extra["tuple_ID"] = None
    with pytest.warns(UserWarning, match="incomplete"):
        tup = ws.tuple_table(pd.concat([df, extra], ignore_index=True))
    got = {r["tuple_ID"]: (r["acc"], r["bias"]) for r in tup.to_dict("records")}
    assert set(got) == set(EXPECTED)
    assert got["A"] == (pytest.approx(0.5), pytest.approx(1.0))
    # the same tuple's trial with its expected responses missing: that tuple is excluded
    bad = df.copy()
    bad["expectedresp"] = bad["expectedresp"].astype(object)
    bad.at[bad.index[bad["tuple_ID"] == "D"][0], "expectedresp"] = None
    with pytest.warns(UserWarning, match="incomplete"):
        tup2 = ws.tuple_table(bad)
    assert set(tup2["tuple_ID"]) == set(EXPECTED) - {"D"}


def test_rebalanced_group_stats_by_hand():
    with pytest.warns(UserWarning):
        rep = ws.analyse(_frame())
    assert rep.n_incomplete_trials == 1
    pa = rep.problem_accuracy.set_index("problemname")

    # P1 size 3: acc .5, 1, 1 -> mean 5/6, var(ddof=1) = 1/12, count 3
    # P1 size 4: acc .5, .5   -> mean .5,  var 0,               count 2
    # rebalance: both counts -> min = 2 ; mean = (5/6 + .5)/2 = 2/3
    # mean of squares = ((1/12 + 25/36) + (0 + .25))/2 ; var = msq - mean^2 ; sem = sqrt(var/4)
    msq = ((1 / 12 + 25 / 36) + 0.25) / 2
    var1 = msq - (2 / 3) ** 2
    assert pa.loc["P1", "mean"] == pytest.approx(2 / 3)
    assert pa.loc["P1", "count"] == 4
    assert pa.loc["P1", "var"] == pytest.approx(var1)
    assert pa.loc["P1", "sem"] == pytest.approx(math.sqrt(var1 / 4))
    assert pa.loc["P1", "conf95"] == pytest.approx(1.96 * math.sqrt(var1 / 4))

    # P2 size 3: acc 1, .5  -> mean .75,  var .125 ; size 4: 0, .75 -> mean .375, var .28125
    msq2 = ((0.125 + 0.75**2) + (0.28125 + 0.375**2)) / 2
    m2 = (0.75 + 0.375) / 2
    assert pa.loc["P2", "mean"] == pytest.approx(m2)
    assert pa.loc["P2", "var"] == pytest.approx(msq2 - m2**2)

    # over problems: counts 4 and 4 -> equal weights, variance from the pooled squares
    acc = rep.accuracy.iloc[0]
    m = (2 / 3 + m2) / 2
    v = (msq + msq2) / 2 - m**2
    assert acc["mean"] == pytest.approx(m)
    assert acc["count"] == 8
    assert acc["conf95"] == pytest.approx(1.96 * math.sqrt(v / 8))

    # bias P1: size 3: 1, 0, 0 -> mean 1/3, var 1/3 ; size 4: -.5, -1 -> mean -.75, var .125
    pb = rep.problem_bias.set_index("problemname")
    mb = (1 / 3 - 0.75) / 2
    vb = ((1 / 3 + 1 / 9) + (0.125 + 0.5625)) / 2 - mb**2
    assert pb.loc["P1", "mean"] == pytest.approx(mb)
    assert pb.loc["P1", "var"] == pytest.approx(vb)


def test_unbalanced_versus_plain_mean():
    with pytest.warns(UserWarning):
        tup = ws.tuple_table(_frame())
    plain = ws.group_stats(tup, ["modelname", "problemname"], rebalance=False)
    # the plain mean of P1 weights size 3 (3 tuples) more: (0.5+1+1+0.5+0.5)/5
    assert plain.loc[("M", "P1"), "mean"] == pytest.approx(3.5 / 5)


def test_report_rows_and_pivot():
    with pytest.warns(UserWarning):
        rep = ws.analyse(_frame())
    rows = ws.report_rows(rep, run="r1")
    json.dumps(rows)
    top = [
        r for r in rows if r["metric"] == "worldsense_accuracy" and "problemname" not in r["group"]
    ]
    assert len(top) == 1 and top[0]["model"] == "M" and top[0]["group"] == {"prompting": "basic"}
    lo, hi = top[0]["ci95"]
    assert (lo + hi) / 2 == pytest.approx(top[0]["value"])
    assert len([r for r in rows if r["metric"] == "worldsense_bias"]) == 2
    piv = rep.pivot("problem_accuracy")
    assert piv.loc[("basic", "M"), "P1"] == ws.format_cell(2 / 3, pa_conf(rep, "P1"))


def pa_conf(rep, prob):
    return rep.problem_accuracy.set_index("problemname").loc[prob, "conf95"]


def test_format_cell():
    assert ws.format_cell(0.5556, 0.0044) == "55.6 (0.4)"
    assert ws.format_cell(-0.004, 0.01, scale=1.0) == "-0.00 (0.01)"


# Published output of the authors' analyse_results.py (README of facebookresearch/worldsense)
PUBLISHED_AVG = {"GPT3.5": 55.6, "GPT4": 75.6, "Llama2-chat": 56.2, "Llama2-FT+1M": 77.4}
PUBLISHED_ACC = """
GPT3.5          64.8 (1.1)   55.1 (0.6)      52.2 (0.7)     49.9 (0.7)    59.9 (1.0)   51.8 (1.0)
GPT4            90.3 (0.7)   75.6 (0.6)      71.2 (0.6)     65.0 (0.6)    93.1 (0.6)   58.5 (0.7)
Llama2-chat     62.2 (0.8)   59.1 (0.5)      54.2 (0.4)     49.4 (0.3)    60.5 (0.7)   51.5 (0.5)
Llama2-FT+1M    79.7 (0.9)   80.6 (0.5)      54.9 (0.3)     52.8 (0.3)    98.5 (0.2)   97.8 (0.3)
"""
PUBLISHED_BIAS = """
GPT3.5         0.08 (0.02)  -0.34 (0.01)    -0.15 (0.01)   -0.00 (0.01)  -0.02 (0.02)  0.20 (0.02)
GPT4          -0.14 (0.01)  -0.20 (0.01)    -0.12 (0.01)    0.00 (0.01)   0.09 (0.01)  0.78 (0.01)
Llama2-chat   -0.43 (0.02)  -0.63 (0.01)     0.52 (0.01)    0.79 (0.01)   0.52 (0.02)  0.83 (0.01)
Llama2-FT+1M   0.26 (0.02)   0.04 (0.01)     0.84 (0.01)    0.90 (0.01)  -0.02 (0.00)  0.02 (0.01)
"""
# the published tables' columns: the six non-extrema problems, in the paper's order
PROBLEMS = ws.PROBLEM_ORDER[:6]


def _parse(block):
    out = {}
    for line in block.strip().splitlines():
        parts = line.split()
        model, cells = parts[0], parts[1:]
        out[model] = [f"{cells[i]} {cells[i + 1]}" for i in range(0, len(cells), 2)]
    return out


@pytest.mark.slow
@pytest.mark.skipif(not WS_DIR.exists(), reason=f"WorldSense data not found at {WS_DIR}")
def test_real_test_set_reproduces_published_tables():
    df = ws.load_testset_dir(WS_DIR)
    assert len(df) == 4 * 87048
    rep = ws.analyse(df)
    assert rep.n_incomplete_trials == 0
    avg = rep.accuracy.set_index("modelname")
    for model, pub in PUBLISHED_AVG.items():
        assert round(100 * avg.loc[model, "mean"], 1) == pub, model
    acc = rep.pivot("problem_accuracy")
    bias = rep.pivot("problem_bias")
    for model, cells in _parse(PUBLISHED_ACC).items():
        assert [acc.loc[("basic", model), p] for p in PROBLEMS] == cells, model
    for model, cells in _parse(PUBLISHED_BIAS).items():
        assert [bias.loc[("basic", model), p] for p in PROBLEMS] == cells, model
