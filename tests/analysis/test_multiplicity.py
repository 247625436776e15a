"""Holm's step-down adjustment (analysis/multiplicity.py) against values worked out by hand."""

from __future__ import annotations

import math

import pytest

from llmscope.analysis.multiplicity import holm


def test_holm_by_hand() -> None:
    # sorted: 0.005 (x4), 0.01 (x3), 0.03 (x2), 0.04 (x1) -> 0.02, 0.03, 0.06, max(0.06, 0.04)
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])


def test_holm_caps_at_one_and_skips_missing() -> None:
    assert holm([0.6, 0.7]) == [1.0, 1.0]
    # a missing p-value is not part of the family: m = 2 here
    out = holm([0.2, None, math.nan, 0.6])
    assert out[1] is None and out[2] is None
    assert out[0] == pytest.approx(0.4) and out[3] == pytest.approx(0.6)
    assert holm([0.03]) == [0.03]  # one test: nothing to adjust
    assert holm([]) == []
