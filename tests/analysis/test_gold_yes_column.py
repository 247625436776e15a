"""The yes/no gold column is mapped once per distinct value (big runs) with each row's value
as the per-row rule gives it."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from llmscope.analysis.producers.yesno import gold_yes_column


def test_gold_yes_column_by_hand() -> None:
    gold = pd.Series(
        ["yes", "no", None, " YES", "true", "maybe", "False", "yes"],
        dtype=pd.StringDtype(na_value=np.nan),
        index=[10, 11, 12, 13, 14, 15, 16, 17],
    )
    got = gold_yes_column(gold)
    want = [1.0, 0.0, math.nan, 1.0, 1.0, math.nan, 0.0, 1.0]  # by hand: yes/true 1, no/false 0
    assert np.array_equal(got, np.array(want), equal_nan=True)


def test_gold_yes_column_object_values_and_empty() -> None:
    got = gold_yes_column(pd.Series([True, 0, None, float("nan"), "No"], dtype=object))
    assert np.array_equal(got, np.array([1.0, 0.0, math.nan, math.nan, 0.0]), equal_nan=True)
    assert gold_yes_column(pd.Series([], dtype=object)).shape == (0,)
