"""What the IRT surfaces read from analysis/irt.py: an item's plain-words reading (labels and
P(right) at average ability worked out by hand), the remembered fit (the same object for the
same rows, a new fit when a run's rows change) and the runs a suite selects."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from llmscope.analysis.irt import (
    IrtError,
    ItemParams,
    fit_stored,
    items_frame,
    read_item,
    runs_of_suite,
)
from llmscope.store.db import Store
from tests.helpers.irt import FLIPPED, N_RUNS, write_flipped_db


def _item(
    a: float, b: float, ci: tuple[float | None, float | None], flagged: bool = False
) -> ItemParams:
    return ItemParams(
        item="x", item_id="x", variant="", difficulty=b, difficulty_ci=(b - 0.5, b + 0.5),
        discrimination=a, discrimination_ci=ci, n=40, p_correct=0.5, expected_accuracy=None,
        rest_correlation=None, reversed=a < 0, flagged=flagged,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("a", "b", "ci", "flagged", "difficulty", "discrimination", "words"),
    [
        # Baker (2001) Table 2-1: 1.35-1.69 high; difficulty 0.5-2 hard
        (1.5, 1.2, (0.8, 2.2), False, "hard", "high", "hard: a run of average ability"),
        (0.8, -2.5, (0.3, 1.3), False, "very easy", "moderate", "discriminates (moderate)"),
        (2.0, 0.0, (-0.1, 4.0), False, "medium", "very high", "though its interval reaches 0"),
        (0.2, 3.0, (None, None), False, "very hard", "very low", "does not discriminate"),
        (-1.2, -1.0, (-2.0, -0.4), True, "not read (negative discrimination)", "negative",
         "discriminates negatively: likely label error, check the gold"),
        (-0.5, 0.3, (-1.4, 0.4), False, "not read (negative discrimination)", "negative",
         "but its interval reaches 0: possibly a label error"),
    ],
)  # fmt: skip
def test_reading_by_hand(
    a: float,
    b: float,
    ci: tuple[float | None, float | None],
    flagged: bool,
    difficulty: str,
    discrimination: str,
    words: str,
) -> None:
    r = read_item(_item(a, b, ci, flagged))
    p0 = math.exp(-a * b) / (1 + math.exp(-a * b))  # logistic(a * (0 - b)), written otherwise
    assert r.p_average == pytest.approx(p0, abs=1e-12)
    assert (r.difficulty, r.discrimination) == (difficulty, discrimination)
    assert words in r.text and f"probability {p0:.2f}" in r.text
    assert ("label error" in r.text) == (a < 0)


@pytest.fixture
def flipped(tmp_path: Path) -> Path:
    db = tmp_path / "flip.duckdb"
    write_flipped_db(db)
    return db


def test_fit_is_remembered_until_the_rows_change(flipped: Path) -> None:
    with Store(flipped, read_only=True) as st:
        runs = runs_of_suite(st, suite_name="flipped")
        assert [r["run_id"] for r in runs] == [f"run{i:02d}" for i in range(N_RUNS)]
        assert [r["run_id"] for r in runs_of_suite(st, suite_id="s-flip")] == [
            r["run_id"] for r in runs
        ]
        assert runs_of_suite(st, suite_name="other") == []
        first = fit_stored(st, runs)
        assert fit_stored(st, runs) is first  # remembered: not refitted
        assert [i.item for i in first.flagged] == [FLIPPED]
        frame = items_frame([first])
        assert list(frame.loc[frame["flagged"], "item"]) == [FLIPPED]
    with Store(flipped) as st:  # one row fewer in one run: its rows fingerprint changes
        st.execute("DELETE FROM results WHERE run_id = 'run00' AND item_id = 'q00'")
    with Store(flipped, read_only=True) as st:
        again = fit_stored(st, runs_of_suite(st, suite_name="flipped"))
    assert again is not first
    q00 = next(i for i in again.items if i.item == "q00")
    assert q00.n == N_RUNS - 1
    with Store(flipped, read_only=True) as st, pytest.raises(IrtError, match="one of them"):
        runs_of_suite(st)
