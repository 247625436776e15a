import numpy as np
import pytest

from llmscope.analysis.calibration import (
    brier,
    brier_binary,
    calibration_table,
    ece,
    predicted_confidence,
    reliability,
)

# Six items (confidence, correct):
#   0.55 1 | 0.65 0 | 0.75 1 | 0.85 1 | 0.95 1 | 0.90 0
CONF = [0.55, 0.65, 0.75, 0.85, 0.95, 0.90]
CORR = [1, 0, 1, 1, 1, 0]


def test_uniform_bins_by_hand():
    # 5 uniform bins [0,.2) [.2,.4) [.4,.6) [.6,.8) [.8,1]
    # [.4,.6): {.55}          conf .55  acc 1    gap .45
    # [.6,.8): {.65,.75}      conf .70  acc .5   gap .20
    # [.8,1]:  {.85,.95,.90}  conf .90  acc 2/3  gap .2333
    # ECE = (1*.45 + 2*.20 + 3*.23333)/6 = 1.55/6 ; MCE = .45
    r = reliability(CONF, CORR, n_bins=5)
    b = r.bins
    assert list(b["count"]) == [0, 0, 1, 2, 3]
    assert np.allclose(b["lo"], [0, 0.2, 0.4, 0.6, 0.8])
    assert np.allclose(b["hi"], [0.2, 0.4, 0.6, 0.8, 1.0])
    assert np.isnan(b.loc[0, "confidence"])
    assert np.allclose(b["confidence"][2:], [0.55, 0.70, 0.90])
    assert np.allclose(b["accuracy"][2:], [1.0, 0.5, 2 / 3])
    assert r.ece == pytest.approx(1.55 / 6)
    assert r.mce == pytest.approx(0.45)
    assert r.n == 6
    assert ece(CONF, CORR, n_bins=5) == pytest.approx(1.55 / 6)


def test_quantile_bins_by_hand():
    # sorted conf .55 .65 .75 .85 .90 .95; linear quantiles at 0,1/3,2/3,1 ->
    # edges .55, .71667, .86667, .95 -> bins {.55,.65} {.75,.85} {.90,.95}
    # conf .6 .8 .925 ; acc .5 1 .5 ; gaps .1 .2 .425 ; ECE = 2*(.1+.2+.425)/6
    r = reliability(CONF, CORR, n_bins=3, strategy="quantile")
    assert list(r.bins["count"]) == [2, 2, 2]
    assert np.allclose(r.bins["lo"], [0.55, 0.65 + 0.1 * 2 / 3, 0.85 + 0.05 / 3])
    assert np.allclose(r.bins["gap"], [0.1, 0.2, 0.425])
    assert r.ece == pytest.approx(1.45 / 6)
    assert r.mce == pytest.approx(0.425)


def test_last_bin_closed_and_missing_dropped():
    r = reliability([1.0, 0.0, None, 0.5], [1, 0, 1, None], n_bins=2)
    assert list(r.bins["count"]) == [1, 1]
    assert r.n_missing == 2
    assert r.ece == pytest.approx((1 * 0.0 + 1 * 0.0) / 2)


def test_brier_multiclass_by_hand():
    p = [[0.7, 0.2, 0.1], [0.5, 0.3, 0.2], [0.1, 0.1, 0.6]]  # last row has 0.2 "other"
    gold = [0, 1, 2]
    # item1: .3^2+.2^2+.1^2 = .14 ; item2: .5^2+.7^2+.2^2 = .78 ; item3: .1^2+.1^2+.4^2 = .18
    assert brier(p, gold) == pytest.approx((0.14 + 0.78 + 0.18) / 3)
    # a missing gold row is skipped
    assert brier(p + [[1, 0, 0]], gold + [None]) == pytest.approx(1.10 / 3)


def test_brier_binary_by_hand():
    # (.9-1)^2 + (.2-0)^2 + (.6-0)^2 = .01 + .04 + .36
    assert brier_binary([0.9, 0.2, 0.6], ["yes", "No", "no"]) == pytest.approx(0.41 / 3)
    assert brier_binary([0.9, 0.2, 0.6, 0.3], [1, 0, 0, None]) == pytest.approx(0.41 / 3)
    # two-class multi-class form is twice the binary form
    p = np.array([0.9, 0.2, 0.6])
    m = np.stack([p, 1 - p], axis=1)
    assert brier(m, [0, 1, 1]) == pytest.approx(2 * 0.41 / 3)


def test_predicted_confidence():
    idx, conf = predicted_confidence([[0.2, 0.5, 0.1], [0.3, 0.1, 0.1], [np.nan, np.nan, np.nan]])
    assert list(idx) == [1, 0, -1]
    assert conf[:2] == pytest.approx([0.5, 0.3]) and np.isnan(conf[2])
    _, conf_n = predicted_confidence([[0.2, 0.5, 0.1], [0.3, 0.1, 0.1]], normalize=True)
    assert conf_n == pytest.approx([0.5 / 0.8, 0.3 / 0.5])


def test_calibration_table_groups():
    import pandas as pd

    df = pd.DataFrame(
        {"g": ["a"] * 6 + ["b"] * 2, "confidence": CONF + [0.5, 0.5], "correct": CORR + [1, 0]}
    )
    t = calibration_table(df, ["g"], n_bins=5)
    assert t.loc[0, "ece"] == pytest.approx(1.55 / 6)
    assert t.loc[1, "ece"] == pytest.approx(0.0)
    assert t.loc[1, "accuracy"] == pytest.approx(0.5)
