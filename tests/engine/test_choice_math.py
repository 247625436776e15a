"""choice_math: every method checked against hand arithmetic on small tables."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llmscope.engine.choice_math import (
    calibrate,
    content_free_probs,
    permute_options,
    score_options,
    softmax,
)

OPTS = ["A", "BB", "CCC"]


def test_length_normalisations_and_ties():
    s = score_options(OPTS, [-2.0, -3.0, -6.0], [1, 2, 3], [2, 3, 4], [2, 6, 4])
    assert s.scores["raw"].tolist() == [-2.0, -3.0, -6.0]
    assert s.scores["mean_token"].tolist() == [-2.0, -1.5, -2.0]
    assert s.scores["per_char"].tolist() == [-1.0, -1.0, -1.5]
    assert s.scores["per_byte"].tolist() == [-1.0, -0.5, -1.5]
    assert s.predictions == {"raw": 0, "mean_token": 1, "per_char": 0, "per_byte": 1}
    # per_char is a tie between options 0 and 1: the first maximum wins
    assert "calibrated" not in s.scores and "pmi" not in s.scores


def test_default_lengths_are_the_option_strings():
    s = score_options(["é", "ab"], [-2.0, -2.0], [1, 1])
    # "é" is 1 char, 2 UTF-8 bytes
    assert s.scores["per_char"].tolist() == [-2.0, -1.0]
    assert s.scores["per_byte"].tolist() == [-1.0, -1.0]


def test_expected_accuracy_softmax_alpha():
    s = score_options(OPTS, [-2.0, -3.0, -6.0], [1, 1, 1], gold=1)
    z = math.exp(-2) + math.exp(-3) + math.exp(-6)
    assert s.expected_acc["raw"] == pytest.approx(math.exp(-3) / z)
    assert s.correct["raw"] == 0.0
    s2 = score_options(OPTS, [-2.0, -3.0, -6.0], [1, 1, 1], gold=0, alpha=2.0)
    z2 = math.exp(-4) + math.exp(-6) + math.exp(-12)
    assert s2.expected_acc["raw"] == pytest.approx(math.exp(-4) / z2)
    assert s2.correct["raw"] == 1.0
    s0 = score_options(OPTS, [-2.0, -3.0, -6.0], [1, 1, 1], gold=0, alpha=0.0)
    assert s0.expected_acc["raw"] == pytest.approx(1 / 3)
    unscored = score_options(OPTS, [-2.0, -3.0, -6.0], [1, 1, 1])
    assert unscored.expected_acc["raw"] is None and unscored.correct["raw"] is None


def test_contextual_calibration():
    raw = np.log([0.5, 0.3, 0.2]) - 1.7  # unnormalised: softmax removes the constant
    cf_rows = [np.log([0.6, 0.2, 0.2]) - 3.0, np.log([0.4, 0.3, 0.3])]
    p_cf = content_free_probs(cf_rows)
    assert p_cf.tolist() == pytest.approx([0.5, 0.25, 0.25])
    # p / p_cf = [1, 1.2, 0.8], sum 3
    cal = calibrate(raw, p_cf)
    assert cal.tolist() == pytest.approx([1 / 3, 0.4, 0.8 / 3])
    s = score_options(OPTS, raw, [1, 1, 1], p_cf=p_cf, gold=1, alpha=2.0)
    assert s.predictions["raw"] == 0 and s.predictions["calibrated"] == 1
    assert s.values["calibrated"].tolist() == pytest.approx([1 / 3, 0.4, 0.8 / 3])
    sq = [1 / 9, 0.16, 0.64 / 9]
    assert s.expected_acc["calibrated"] == pytest.approx(0.16 / sum(sq))
    s1 = score_options(OPTS, raw, [1, 1, 1], p_cf=p_cf, gold=1)
    assert s1.expected_acc["calibrated"] == pytest.approx(0.4)


def test_pmi():
    s = score_options(
        OPTS, [-2.0, -3.0, -6.0], [1, 1, 1], domain_logprobs=[-1.0, -4.0, -2.0], gold=1
    )
    assert s.scores["pmi"].tolist() == [-1.0, 1.0, -4.0]
    assert s.predictions["pmi"] == 1 and s.correct["pmi"] == 1.0
    summ = s.method_summary()
    assert summ["pmi"]["prediction"] == "BB" and summ["raw"]["prediction"] == "A"


def test_softmax_and_errors():
    assert softmax([0.0, math.log(3.0)]).tolist() == pytest.approx([0.25, 0.75])
    assert softmax([0.0, -math.inf]).tolist() == [1.0, 0.0]
    with pytest.raises(ValueError):
        score_options(OPTS, [-1.0, -1.0], [1, 1, 1])
    with pytest.raises(ValueError):
        score_options(OPTS, [-1.0, -1.0, -1.0], [1, 0, 1])


def test_permute_options_rule():
    assert permute_options(["a", "b", "c"], 2, seed=0) == [["b", "c", "a"], ["c", "a", "b"]]
    allp = permute_options(["a", "b", "c"], 10, seed=0)
    # all 5 non-identity orders, cyclic shifts first
    assert len(allp) == 5
    assert allp[:2] == [["b", "c", "a"], ["c", "a", "b"]]
    assert sorted(map(tuple, allp[2:])) == [("a", "c", "b"), ("b", "a", "c"), ("c", "b", "a")]
    assert permute_options(["a", "b", "c"], 10, seed=0) == allp  # deterministic
    assert permute_options(["a"], 3) == [] and permute_options(["a", "b"], 0) == []
    assert permute_options(["x", "x"], 5) == [["x", "x"]]
    big = list("abcdefghij")
    p1 = permute_options(big, 15, seed=3)
    assert p1 == permute_options(big, 15, seed=3)
    assert len({tuple(p) for p in p1}) == 15 and tuple(big) not in {tuple(p) for p in p1}
    assert p1[:9] == [big[s:] + big[:s] for s in range(1, 10)]
    assert all(sorted(p) == big for p in p1)
