import numpy as np
import pandas as pd
import pytest

from llmscope.analysis.intervals import wilson_interval
from llmscope.analysis.yesno import other_histogram, yesno_frame, yesno_summary

RECORDS = [
    {"item_id": "1", "probs": {"yes": 0.6, "no": 0.3}, "other": 0.1, "gold": "yes", "g": "a"},
    {"item_id": "2", "probs": {"Yes": 0.2, "No": 0.7}, "other": 0.1, "gold": "no", "g": "a"},
    {"item_id": "3", "probs": {"yes": 0.1, "no": 0.1}, "gold": "no", "g": "a"},  # other .8
    {"item_id": "4", "probs": {"yes": 0.5, "no": 0.4}, "other": 0.1, "gold": None, "g": "b"},
]


def test_frame_fills_other_and_case():
    df = yesno_frame(RECORDS)
    assert list(df["p_yes"]) == pytest.approx([0.6, 0.2, 0.1, 0.5])
    assert list(df["p_no"]) == pytest.approx([0.3, 0.7, 0.1, 0.4])
    assert df.loc[2, "p_other"] == pytest.approx(0.8)
    assert "item_id" in df and "probs" not in df


def test_summary_by_hand():
    df = yesno_frame(RECORDS)
    s = yesno_summary(df).iloc[0]
    assert s["n"] == 4
    assert s["p_yes"] == pytest.approx((0.6 + 0.2 + 0.1 + 0.5) / 4)
    assert s["p_other"] == pytest.approx((0.1 + 0.1 + 0.8 + 0.1) / 4)
    # yes predictions (P(yes) > P(no)): items 1 and 4 ; item 3 is a tie -> not yes
    assert s["pred_yes_rate"] == pytest.approx(0.5)
    assert (s["pred_yes_lo"], s["pred_yes_hi"]) == pytest.approx(wilson_interval(2, 4))
    # gold yes rate over the 3 items with gold: 1/3
    assert s["n_gold"] == 3
    assert s["gold_yes_rate"] == pytest.approx(1 / 3)
    assert s["yes_bias"] == pytest.approx(0.5 - 1 / 3)
    # off-format: only item 3 (.8 > .2)
    assert s["off_format_rate"] == pytest.approx(0.25)
    # normalised P(yes): .6/.9, .2/.9, .5, .5/.9
    assert s["p_yes_norm"] == pytest.approx(np.mean([0.6 / 0.9, 0.2 / 0.9, 0.5, 0.5 / 0.9]))
    x = np.array([0.6, 0.2, 0.1, 0.5])
    h = 1.959963984540054 * x.std(ddof=1) / 2
    assert (s["p_yes_lo"], s["p_yes_hi"]) == pytest.approx((x.mean() - h, x.mean() + h))


def test_summary_per_group():
    s = yesno_summary(yesno_frame(RECORDS), ["g"])
    assert list(s["g"]) == ["a", "b"]
    assert list(s["n"]) == [3, 1]
    assert s.loc[1, "n_gold"] == 0 and np.isnan(s.loc[1, "gold_yes_rate"])
    assert s.loc[0, "off_format_rate"] == pytest.approx(1 / 3)


def test_other_histogram():
    h = other_histogram([0.0, 0.05, 0.15, 0.95, 1.0, None], bins=10)
    assert len(h) == 10
    assert list(h["count"]) == [2, 1, 0, 0, 0, 0, 0, 0, 0, 2]
    assert h["share"].sum() == pytest.approx(1.0)
    assert h.loc[9, "hi"] == pytest.approx(1.0)


def test_summary_without_other_column():
    df = pd.DataFrame({"p_yes": [0.3], "p_no": [0.2]})
    s = yesno_summary(df, other_col=None, gold_col=None).iloc[0]
    assert s["p_other"] == pytest.approx(0.5)
    assert s["off_format_rate"] == 0.0
