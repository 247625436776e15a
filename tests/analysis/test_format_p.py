"""One p-value format for every surface (analysis/rows.py `format_p`), checked by hand."""

from __future__ import annotations

import math

from llmscope.analysis.rows import format_p


def test_three_significant_digits_never_scientific() -> None:
    # 1/1001: the smallest p-value of a 1000-resample bootstrap; once shown as 0.001 and 0.0009995
    assert format_p(1 / 1001) == "0.000999"
    assert format_p(0.5) == "0.5"
    assert format_p(0.03125) == "0.0312"
    assert format_p(1.0) == "1"
    assert format_p(0.0001) == "0.0001"
    assert format_p(0.00009) == "<0.0001"
    assert format_p(0.0) == "<0.0001"
    assert format_p(None) == "-" and format_p(math.nan) == "-"
