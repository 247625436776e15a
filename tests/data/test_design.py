"""Counterbalancing and few-shot design (data/design.py), reversed scales, yes/no calibration, and
the order-effect / few-shot-bias rows, against hand-built expectations and scipy."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from llmscope.analysis.design_effects import fewshot_rows, order_effect_rows
from llmscope.data.design import swap_answers
from llmscope.data.suites import SuiteError, suite_from_spec
from llmscope.engine.tasks.rating import RatingTask
from llmscope.engine.tasks.yesno import YesNoTask
from llmscope.engine.types import Item, Work
from tests.helpers.fakes import TableBackend

TPL = 'Is it true that "{s}"? Answer "yes" or "no".'


def make_suite(tmp_path, task_options, task="yesno"):
    items = [
        {"id": f"i{n}", "s": f"statement {n}", "gold": g, "options": ["yes", "no"]}
        for n, g in enumerate(["yes", "no", "yes", "no", "yes"])
    ]
    p = tmp_path / "items.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in items) + "\n")
    spec = {
        "name": "t",
        "task": task,
        "items": "items.jsonl",
        "text_field": "s",
        "templates": {"v": TPL},
        "task_options": task_options,
    }
    return suite_from_spec(spec, tmp_path / "suite.yaml")


def test_swap_answers_keeps_case_and_fields():
    assert (
        swap_answers('Say "yes" or "no". Yes, NO, yesterday.', "yes", "no")
        == 'Say "no" or "yes". No, YES, yesterday.'
    )


def test_answer_orders_and_fewshot_expansion(tmp_path):
    s = make_suite(
        tmp_path,
        {"answer_orders": True, "fewshot": {"pattern": ["yes", "no"], "orders": 2, "seed": 1}},
    )
    work = s.work()
    assert [w.variant for w in work[:4]] == ["v", "v@o2", "v@swap", "v@swap@o2"]
    assert len(work) == 5 * 4
    w1, w2, w3 = work[0], work[1], work[2]
    assert w1.item.item_id == "i0"
    # demos: one "yes" item and one "no" item other than i0, in the pattern's order
    ids = w1.design["demo_ids"]
    assert w1.design["demo_labels"] == ["yes", "no"] and "i0" not in ids
    by_id = {it.item_id: it for it in s.items()}
    demo = [TPL.format(s=by_id[i].fields["s"]) + "\n" + by_id[i].gold for i in ids]
    assert w1.prompt == demo[0] + "\n\n" + demo[1] + "\n\n" + TPL.format(s="statement 0")
    # the second order has the two demos exchanged
    assert w2.design["demo_labels"] == ["no", "yes"] and w2.design["demo_ids"] == ids[::-1]
    assert w2.prompt == demo[1] + "\n\n" + demo[0] + "\n\n" + TPL.format(s="statement 0")
    # swapped answer order: the same demos, every template's answers exchanged (demos and query alike)
    assert w3.design["answer_order"] == "swapped" and w3.design["demo_ids"] == ids
    sw = 'Is it true that "{s}"? Answer "no" or "yes".'
    assert w3.prompt == "\n\n".join(
        sw.format(s=by_id[i].fields["s"]) + "\n" + by_id[i].gold for i in ids
    ) + "\n\n" + sw.format(s="statement 0")


def test_balanced_demos_and_determinism(tmp_path):
    s = make_suite(tmp_path, {"fewshot": {"k": 2}})
    a = [w.design["demo_ids"] for w in s.work()]
    b = [w.design["demo_ids"] for w in make_suite(tmp_path, {"fewshot": {"k": 2}}).work()]
    assert a == b
    assert all(sorted(w.design["demo_labels"]) == ["no", "yes"] for w in s.work())


@pytest.mark.parametrize(
    "opts,msg",
    [
        ({"fewshot": {"k": 0}}, "k must be a positive integer"),
        ({"fewshot": {"k": 2, "shots": 3}}, "unknown key 'shots'"),
        ({"fewshot": {"k": 2, "balance": "even"}}, "balance must be one of balanced, random"),
        ({"schemes": ["logits"]}, "unknown scheme 'logits'"),
    ],
)
def test_bad_design_options(tmp_path, opts, msg):
    s = make_suite(
        tmp_path, opts, task="choice" if "answer_orders" in opts or "schemes" in opts else "yesno"
    )
    s.task_options = opts
    with pytest.raises(SuiteError, match=msg):
        s.work()


def test_cli_rejects_bad_design_before_loading_a_model(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "llmscope",
            "--db",
            str(tmp_path / "x.duckdb"),
            "run",
            "--suite",
            "mc-sample",
            "--opt",
            "answer_orders=true",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    assert (
        "unknown option 'answer_orders' for task 'choice'" in out.stderr
        and "Traceback" not in out.stderr
    )
    assert out.stderr.count("\n") == 1


async def test_reversed_rating_scale_maps_back():
    labels = ["1", "2", "3", "4", "5"]
    item = Item(item_id="r", fields={}, gold="5")
    w = Work(item=item, variant="v@rev", prompt="rate", gold="5", design={"scale": "reversed"})
    be = TableBackend(next_table={"rate": {"1": 0.6, "2": 0.2}})
    r = await RatingTask({"answers": labels}).score(w, be)
    # label "1" now means 5, "2" means 4: expected = 0.75·5 + 0.25·4
    assert r.extra["expected"] == pytest.approx(4.75)
    assert r.prediction == "1" and r.correct == 1.0  # gold 5 is asked as "1"
    assert r.extra["abs_error"] == pytest.approx(0.25)


async def test_yesno_contextual_calibration_by_hand():
    item = Item(item_id="a", fields={}, gold="yes", text="cats bark")
    w = Work(
        item=item,
        variant="v",
        prompt="DEMO\n\nQ: cats bark?",
        gold="yes",
        design={"_prefix": "DEMO\n\n"},
    )
    be = TableBackend(
        next_table={
            "DEMO\n\nQ: cats bark?": {"yes": 0.3, "no": 0.5},
            "DEMO\n\nQ: N/A?": {"yes": 0.1, "no": 0.7},  # 0.125 / 0.875
            "DEMO\n\nQ: ?": {"yes": 0.5, "no": 0.5},  # 0.5 / 0.5
        }
    )
    r = await YesNoTask({"content_free": ["N/A", ""]}).score(w, be)
    p_cf = np.array([(0.125 + 0.5) / 2, (0.875 + 0.5) / 2])
    p = np.array([0.3, 0.5]) / 0.8
    cal = (p / p_cf) / (p / p_cf).sum()
    assert r.extra["calibration"]["p_cf"] == pytest.approx(p_cf.tolist())
    assert r.extra["calibration"]["calibrated"]["yes"] == pytest.approx(cal[0])
    assert r.extra["methods"]["raw"]["prediction"] == "no"
    assert (
        r.extra["methods"]["calibrated"]["prediction"] == "yes"
        and r.extra["methods"]["calibrated"]["correct"] == 1.0
    )


def _row(item, variant, correct, p_yes, design, pred=None):
    return {
        "item_id": item,
        "variant": variant,
        "error": None,
        "correct": correct,
        "gold": "yes",
        "prediction": pred or ("yes" if p_yes >= 0.5 else "no"),
        "probs": json.dumps({"yes": p_yes, "no": 1 - p_yes}),
        "fields": "{}",
        "extra": json.dumps({"design": design}),
    }


RUN = {"run_id": "r", "model": "m", "suite_name": "s", "task": "yesno"}


def test_order_effect_matches_paired_t_interval():
    a = [0.9, 0.6, 0.7, 0.2, 0.55]
    b = [0.8, 0.3, 0.65, 0.1, 0.4]
    rows = []
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        rows.append(_row(str(i), "v", float(x >= 0.5), x, {"answer_order": "as_written"}))
        rows.append(_row(str(i), "v@swap", float(y >= 0.5), y, {"answer_order": "swapped"}))
    out = {r["metric"]: r for r in order_effect_rows(pd.DataFrame(rows), RUN, {})}
    eff = out["order_effect_p_first_answer"]
    ref = stats.ttest_rel(b, a).confidence_interval(0.95)
    assert eff["value"] == pytest.approx(np.mean(np.subtract(b, a)))
    assert eff["ci95"] == pytest.approx([ref.low, ref.high])
    assert out["order_effect_accuracy"]["value"] == pytest.approx((0 - 1 + 0 + 0 - 1) / 5)
    # order-robust: average P(yes) over the two orders, argmax vs gold "yes"
    robust = [float((x + y) / 2 >= 0.5) for x, y in zip(a, b, strict=True)]
    assert out["order_robust_accuracy"]["value"] == pytest.approx(np.mean(robust))


def test_fewshot_recency_and_majority_by_hand():
    rows = [
        _row("1", "v", 1.0, 0.9, {"demo_labels": ["no", "yes", "yes"]}),  # last yes, maj yes -> yes
        _row("2", "v", 1.0, 0.8, {"demo_labels": ["yes", "no", "yes"]}),  # last yes, maj yes -> yes
        _row("3", "v", 0.0, 0.3, {"demo_labels": ["yes", "yes", "no"]}),  # last no, maj yes -> no
        _row("4", "v", 0.0, 0.2, {"demo_labels": ["no", "yes", "no"]}),  # last no, maj no -> no
        _row("5", "v", 1.0, 0.7, {"demo_labels": ["yes", "no", "no"]}),  # last no, maj no -> yes
    ]
    out = {
        (r["metric"], r["group"].get("label")): r for r in fewshot_rows(pd.DataFrame(rows), RUN, {})
    }
    assert out[("pred_equals_last_demo", None)]["value"] == pytest.approx(4 / 5)
    # P(yes | last yes) = 2/2, P(yes | last no) = 1/3
    assert out[("recency_effect", "yes")]["value"] == pytest.approx(1 - 1 / 3)
    # P(yes | majority yes) = 2/3, P(yes | majority no) = 1/2
    assert out[("majority_effect", "yes")]["value"] == pytest.approx(2 / 3 - 1 / 2)
    lo, hi = out[("recency_effect", "yes")]["ci95"]
    assert lo <= 2 / 3 <= hi
    assert math.isfinite(lo)


def test_contrast_bootstrap_agrees_with_cluster_bootstrap():
    from llmscope.analysis.design_effects import contrast_boot
    from llmscope.analysis.intervals import cluster_bootstrap

    rng = np.random.default_rng(1)
    n = 40
    df = pd.DataFrame(
        {
            "hit": rng.integers(0, 2, n).astype(float),
            "on": rng.integers(0, 2, n).astype(bool),
            "c": rng.integers(0, 12, n),
        }
    )

    def stat(d):
        a, b = d["hit"][d["on"]], d["hit"][~d["on"]]
        return math.nan if a.empty or b.empty else float(a.mean() - b.mean())

    est, lo, hi = contrast_boot(
        df["hit"].to_numpy(), df["on"].to_numpy(), df["c"].to_numpy(), n_boot=400
    )
    ref = cluster_bootstrap(stat, df, "c", n_boot=400)
    assert est == pytest.approx(ref.estimate)
    # different random draws, same scheme: the percentile intervals agree to Monte-Carlo error
    assert lo == pytest.approx(ref.lo, abs=0.08) and hi == pytest.approx(ref.hi, abs=0.08)


async def test_choice_fewshot_keeps_demos_in_content_free_prompts(tmp_path):
    from llmscope.engine.tasks.choice import ChoiceTask

    items = [
        {"id": f"c{n}", "q": f"question {n}", "options": ["x", "y"], "gold": g}
        for n, g in enumerate("xyx")
    ]
    (tmp_path / "items.jsonl").write_text("\n".join(json.dumps(r) for r in items) + "\n")
    s = suite_from_spec(
        {
            "name": "c",
            "task": "choice",
            "items": "items.jsonl",
            "text_field": "q",
            "templates": {"qa": "Q: {q}\nA:"},
            "task_options": {"fewshot": {"pattern": ["x"]}},
        },
        tmp_path / "suite.yaml",
    )
    w = s.work()[0]
    assert w.prompt == "Q: question 2\nA: x\n\nQ: question 0\nA:"
    task = ChoiceTask({"templates": s.templates, "text_field": "q"})
    prompts, how = task.content_free_prompts(w)
    assert how == "template" and prompts[0] == "Q: question 2\nA: x\n\nQ: N/A\nA:"


def test_fewshot_demo_file(tmp_path):
    demos = [
        {"id": "d1", "s": "demo one", "gold": "no"},
        {"id": "d2", "s": "demo two", "gold": "yes"},
    ]
    (tmp_path / "demos.jsonl").write_text("\n".join(json.dumps(r) for r in demos) + "\n")
    s = make_suite(tmp_path, {"fewshot": {"file": "demos.jsonl", "pattern": ["yes", "no"]}})
    w = s.work()[0]
    assert w.design["demo_ids"] == ["d2", "d1"]
    assert w.prompt.startswith(
        TPL.format(s="demo two") + "\nyes\n\n" + TPL.format(s="demo one") + "\nno\n\n"
    )
    s2 = make_suite(tmp_path, {"fewshot": {"file": "missing.jsonl", "k": 1}})
    with pytest.raises(SuiteError, match="demo file not found"):
        s2.work()
