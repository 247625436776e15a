"""The metrics pipeline (analysis/metrics.py): values and intervals by hand or by a naive loop."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from llmscope.analysis.calibration import reliability
from llmscope.analysis.metrics import (
    BOOTSTRAP,
    PRODUCERS,
    BootstrapConfig,
    compute_metrics,
    metrics_markdown,
    register_row_producer,
    run_metrics,
)
from llmscope.analysis.paired import paired_comparison
from llmscope.analysis.producers.calibration import _calibration_bootstrap
from llmscope.analysis.rows import metric_row
from llmscope.cli import main
from llmscope.engine.types import Item, Result
from llmscope.report import build_report
from llmscope.store.db import Store
from tests.helpers.paths import ROOT


def cr1(values, clusters):
    """Ratio estimate and CR1 t interval, written out from Cameron & Miller (2015)."""
    df = pd.DataFrame({"v": values, "g": clusters})
    y = df.groupby("g", sort=False)["v"].sum().to_numpy()
    m = df.groupby("g", sort=False)["v"].size().to_numpy().astype(float)
    G, p = len(y), y.sum() / m.sum()
    se = math.sqrt(G / (G - 1) * np.sum((y - p * m) ** 2) / m.sum() ** 2)
    t = stats.t.ppf(0.975, G - 1)
    return p, p - t * se, p + t * se


# (item, variant, p_yes, p_no, gold)
YESNO = [
    ("0", "a", 0.7, 0.2, "yes"),
    ("0", "b", 0.6, 0.3, "yes"),
    ("1", "a", 0.8, 0.1, "no"),
    ("1", "b", 0.3, 0.6, "no"),
    ("2", "a", 0.2, 0.7, "yes"),
    ("2", "b", 0.4, 0.5, "yes"),
    ("3", "a", 0.55, 0.4, "no"),
    ("3", "b", 0.5, 0.45, "no"),
    ("4", "a", 0.3, 0.3, "no"),
    ("4", "b", 0.1, 0.8, "no"),
]


@pytest.fixture()
def yesno_db(tmp_path):
    db = tmp_path / "y.duckdb"
    with Store(db) as st:
        items = [
            Item(item_id=str(i), fields={"id": i}, gold="yes" if i in (0, 2) else "no")
            for i in range(5)
        ]
        st.add_suite("yn@1", "yn", "yesno", {"task": "yesno"}, "", items)
        st.create_run(
            {
                "run_id": "ry",
                "suite_id": "yn@1",
                "suite_name": "yn",
                "task": "yesno",
                "model": "m",
                "n_total": len(YESNO),
            }
        )
        res = []
        for i, v, py, pn, g in YESNO:
            pred = "yes" if py >= pn else "no"  # first listed on a tie (item 4a)
            corr = 1.0 if (py > pn and g == "yes") or (pn > py and g == "no") else 0.0
            res.append(
                Result(
                    item_id=i,
                    variant=v,
                    probs={"yes": py, "no": pn},
                    other=1 - py - pn,
                    prediction=pred,
                    gold=g,
                    correct=corr,
                    confidence=max(py, pn) / (py + pn),
                )
            )
        st.write_results("ry", res)
    return db


def test_yes_bias_with_clustered_interval_and_brier_names(yesno_db):
    with Store(yesno_db, read_only=True) as st:
        rm = run_metrics(st, st.get_run("ry"))
    ids = [r[0] for r in YESNO]
    pred_yes = [float(py > pn) for _, _, py, pn, _ in YESNO]  # the tie (0.3, 0.3) is not a yes
    gold_yes = [float(g == "yes") for *_, g in YESNO]
    d = np.array(pred_yes) - np.array(gold_yes)
    p, lo, hi = cr1(d, ids)
    yb = rm.get("yes_bias")
    assert (
        yb is not None and yb.value == pytest.approx(p) and yb.value == pytest.approx(0.5 - 0.4)
    )  # 5 yes predictions, 4 yes golds
    assert (yb.lo, yb.hi) == pytest.approx(
        (max(-1.0, lo), min(1.0, hi))
    )  # clipped to yes_bias's range
    assert yb.interval_method == "cluster-t" and yb.n == 10 and yb.n_clusters == 5
    # brier: multi-class sum over the listed answers; brier_yes: (P(yes) - y)^2
    brier = np.mean(
        [(py - (g == "yes")) ** 2 + (pn - (g == "no")) ** 2 for _, _, py, pn, g in YESNO]
    )
    brier_yes = np.mean([(py - (g == "yes")) ** 2 for _, _, py, _, g in YESNO])
    assert rm.get("brier").value == pytest.approx(brier)
    assert rm.get("brier_yes").value == pytest.approx(brier_yes)
    assert rm.get("tie_rate").value == pytest.approx(1 / 10)
    # build_report is the same rows
    with Store(yesno_db, read_only=True) as st:
        rows = build_report(st, st.get_run("ry"))
    assert [(r["metric"], r["value"]) for r in rows] == [
        (r["metric"], r["value"]) for r in rm.rows()
    ]
    assert {"interval_method", "n_clusters"} <= set(rows[0])


def test_ece_bootstrap_equals_naive_loop():
    rng = np.random.default_rng(3)
    conf = rng.uniform(0.3, 1.0, 60).round(2)
    corr = (rng.random(60) < conf).astype(float)
    cl = np.repeat(np.arange(20), 3)
    cfg = BootstrapConfig(resamples=300, seed=5)
    (elo, ehi), (mlo, mhi), G = _calibration_bootstrap(conf, corr, cl, 10, cfg)
    # naive: the same cluster draws, each resample through `reliability`
    draws = np.random.default_rng(5).integers(0, 20, size=(300, 20))
    groups = [np.flatnonzero(cl == g) for g in range(20)]
    eces, mces = [], []
    for row in draws:
        ix = np.concatenate([groups[g] for g in row])
        r = reliability(conf[ix], corr[ix], n_bins=10)
        eces.append(r.ece)
        mces.append(r.mce)
    assert G == 20
    assert (elo, ehi) == pytest.approx(tuple(np.quantile(eces, [0.025, 0.975])))
    assert (mlo, mhi) == pytest.approx(tuple(np.quantile(mces, [0.025, 0.975])))


def _gen_frame(f1s, ids):
    return pd.DataFrame(
        {
            "item_id": ids,
            "variant": "default",
            "error": None,
            "correct": [float(x == 1.0) for x in f1s],
            "extra": [json.dumps({"f1": x, "samples": [{}]}) for x in f1s],
            "prediction": "x",
            "gold": "x",
        }
    )


def test_f1_gets_a_t_interval_not_wilson():
    f1 = [1.0, 0.5, 0.0, 0.8, 0.4, 1.0]
    rm = compute_metrics(
        _gen_frame(f1, [str(i) for i in range(6)]), {"run_id": "g", "task": "generation"}, {}
    )
    m = rm.get("token_f1")
    x = np.array(f1)
    n = len(x)
    se = math.sqrt(n / (n - 1) * np.sum((x - x.mean()) ** 2) / n**2)
    t = stats.t.ppf(0.975, n - 1)
    assert m.value == pytest.approx(x.mean())
    assert (m.lo, m.hi) == pytest.approx((max(0.0, x.mean() - t * se), min(1.0, x.mean() + t * se)))
    assert m.interval_method == "cluster-t"


def test_row_producer_adapter():
    def my_metric(df, run, spec):
        return [metric_row(run["run_id"], "m", "n_rows_seen", float(len(df)), None, len(df))]

    register_row_producer("test_adapter", my_metric, every_task=True)  # no task lists it
    try:
        rm = compute_metrics(
            _gen_frame([1.0, 0.0], ["a", "b"]), {"run_id": "g", "task": "generation"}, {}
        )
    finally:
        PRODUCERS[:] = [p for p in PRODUCERS if p.name != "test_adapter"]
    assert rm.get("n_rows_seen").value == 2.0 and rm.get("n_rows_seen").producer == "test_adapter"


def test_paired_comparison_equals_naive_loop():
    rng = np.random.default_rng(1)
    ids = [str(i) for i in range(15) for _ in range(2)]
    var = ["a", "b"] * 15
    ca = (rng.random(30) < 0.5).astype(float)
    cb = (rng.random(30) < 0.7).astype(float)
    a = pd.DataFrame({"item_id": ids, "variant": var, "correct": ca, "error": None})
    b = pd.DataFrame({"item_id": ids, "variant": var, "correct": cb, "error": None})
    cfg = BootstrapConfig(resamples=500, seed=2)
    c = paired_comparison(a, b, None, cfg)
    d = cb - ca
    assert c.diff == pytest.approx(d.mean()) and c.n == 30 and c.n_clusters == 15
    # naive: resample items (both variants together) with the same draws; clusters are
    # numbered in the order of the paired rows, which are sorted by (item_id, variant)
    order = sorted(set(ids))
    draws = np.random.default_rng(2).integers(0, 15, size=(500, 15))
    per = {i: d[[k for k, x in enumerate(ids) if x == i]] for i in order}
    reps = np.array([np.concatenate([per[order[g]] for g in row]).mean() for row in draws])
    assert (c.lo, c.hi) == pytest.approx(tuple(np.quantile(reps, [0.025, 0.975])))
    p = (1 + np.sum(np.abs(reps - d.mean()) >= abs(d.mean()) - 1e-12)) / 501
    assert c.p_value == pytest.approx(p)


def test_docs_and_explain_come_from_the_registry(capsys):
    assert (ROOT / "docs" / "METRICS.md").read_text() == metrics_markdown()
    assert main(["report", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "`brier_yes`" in out and "`yes_bias`" in out and BOOTSTRAP.describe() in out


def test_worldsense_run_leads_with_the_authors_metric():
    # two tuples of two trials (TRUE/FALSE questions); tuple 1 all right, tuple 2 half right
    rows = []
    for t, resp in (("t1", ("TRUE", "FALSE")), ("t2", ("TRUE", "TRUE"))):
        for j, gold in enumerate(("TRUE", "FALSE")):
            rows.append(
                {
                    "item_id": f"{t}{j}",
                    "variant": "default",
                    "error": None,
                    "prediction": resp[j],
                    "gold": gold,
                    "correct": float(resp[j] == gold),
                    "f.tuple_ID": t,
                    "f.expectedresp": ["TRUE", "FALSE"],
                    "f.problemname": "p",
                    "f.problemsize": 1,
                }
            )
    df = pd.DataFrame(rows)
    rm = compute_metrics(
        df,
        {"run_id": "w", "task": "constrained", "suite_name": "worldsense", "model": "m"},
        {"cluster_field": "tuple_ID"},
    )
    assert rm.metrics[0].name == "worldsense_accuracy" and rm.metrics[0].group == {}
    assert rm.get("accuracy") is None and rm.get("item_accuracy").value == pytest.approx(3 / 4)
    # the authors' analysis of the same responses (analysis.worldsense.analyse) gives the same number
    from llmscope.analysis.worldsense import analyse, worldsense_frame

    trials = pd.DataFrame(
        {
            "Key": df["item_id"],
            "tuple_ID": df["f.tuple_ID"],
            "goldresp": df["gold"],
            "expectedresp": df["f.expectedresp"],
            "problemname": "p",
            "problemsize": 1,
        }
    )
    rep = analyse(
        worldsense_frame(trials, pd.DataFrame({"Key": df["item_id"], "resp": df["prediction"]}))
    )
    assert rm.metrics[0].value == pytest.approx(float(rep.accuracy["mean"].iloc[0]))


def test_ratio_bootstrap_is_the_per_resample_loop_for_the_same_seed():
    """The vectorised Ratio path and the callable path both equal a naive loop written here:
    one rng.integers(0, G, size=G) draw per resample, clusters in order of first appearance."""
    from llmscope.analysis.metric_stats import Ratio, cluster_bootstrap_stat

    rng = np.random.default_rng(7)
    num = rng.random(41)
    den = rng.integers(1, 4, size=41).astype(float)
    cl = np.array([f"c{i}" for i in rng.integers(0, 17, size=41)])
    cfg = BootstrapConfig(resamples=300, seed=11)
    labels = list(dict.fromkeys(cl))
    groups = [np.flatnonzero(cl == g) for g in labels]
    ref_rng = np.random.default_rng(11)
    reps = []
    for _ in range(300):
        ix = np.concatenate([groups[i] for i in ref_rng.integers(0, len(groups), size=len(groups))])
        reps.append(num[ix].sum() / den[ix].sum())
    lo, hi = np.quantile(reps, [0.025, 0.975])
    fast = cluster_bootstrap_stat(Ratio(num, den), 41, cl, cfg)
    slow = cluster_bootstrap_stat(lambda ix: float(num[ix].sum() / den[ix].sum()), 41, cl, cfg)
    for got in (fast, slow):
        assert got[0] == pytest.approx(num.sum() / den.sum())
        assert got[1] == pytest.approx(lo, abs=1e-12) and got[2] == pytest.approx(hi, abs=1e-12)
        assert got[3] == len(labels)
