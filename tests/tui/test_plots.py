"""Plots of a run (tui/plots.py): the data each plot draws, checked by hand, and the screen
drawing them from a real database."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pandas as pd
import pytest

from llmscope.tui.app import LlmscopeApp
from llmscope.tui.plots import (
    MinPairPlot,
    PlotsScreen,
    PositionPlot,
    ReliabilityByPlot,
    plot_data,
    position_shares,
    timeline,
)
from tests.helpers.tui import make_db, settle, wait_until


def test_timeline_running_accuracy_and_rate() -> None:
    t0 = dt.datetime(2025, 1, 1, 0, 0, 0)
    df = pd.DataFrame(
        {
            "seq": [0, 1, 2, 3, 4],
            "correct": [1.0, 0.0, None, 1.0, 1.0],
            "written_at": [
                t0,
                t0,
                t0 + dt.timedelta(seconds=2),
                t0 + dt.timedelta(seconds=2),
                t0 + dt.timedelta(seconds=4),
            ],
        }
    )
    done, acc, t_s, rate = timeline(df, buckets=2)
    assert done == [1, 2, 3, 4, 5]
    assert acc == pytest.approx([1.0, 0.5, 0.5, 2 / 3, 3 / 4])
    # 4 s span, 2 buckets of 2 s: [0,2) holds 2 results, [2,4) 2, [4,6) 1
    assert t_s == [0.0, 2.0, 4.0]
    assert rate == pytest.approx([1.0, 1.0, 0.5])


def test_position_shares_count_each_listed_position() -> None:
    scores = [
        json.dumps({"x": {}, "y": {}, "z": {}}),
        json.dumps({"y": {}, "x": {}, "z": {}}),
        json.dumps({"z": {}, "x": {}, "y": {}}),
        json.dumps({"x": {}, "z": {}, "y": {}}),
    ]
    df = pd.DataFrame(
        {"option_scores": scores, "prediction": ["x", "x", "z", "x"], "gold": ["y", "y", "y", "x"]}
    )
    p = position_shares(df)
    assert p is not None
    assert p["label"].tolist() == ["A", "B", "C"]
    # predictions at positions A, B, A, A; gold at B, A, C, A
    assert p["chosen"].tolist() == pytest.approx([0.75, 0.25, 0.0])
    assert p["gold"].tolist() == pytest.approx([0.5, 0.25, 0.25])


def test_minimal_pair_diffs_and_reliability_per_variant() -> None:
    df = pd.DataFrame(
        {
            "item_id": ["1", "2", "3"],
            "variant": ["a", "a", "b"],
            "seq": [0, 1, 2],
            "prediction": ["g", "b", "g"],
            "gold": ["g", "g", "g"],
            "correct": [1.0, 0.0, 1.0],
            "confidence": [0.9, 0.6, 0.75],
            "option_scores": [None] * 3,
            "error": [None] * 3,
            "written_at": [None] * 3,
            "extra": [json.dumps({"logprob_diff": 1.5}), json.dumps({"logprob_diff": -0.25}), "{}"],
        }
    )
    d = plot_data(df, "minpairs")
    assert d.minpair_diffs == [1.5, -0.25]
    assert set(d.reliability) == {"a", "b"}
    a = d.reliability["a"]
    a = a[a["count"] > 0]
    assert a["confidence"].tolist() == pytest.approx([0.6, 0.9])
    assert a["accuracy"].tolist() == pytest.approx([0.0, 1.0])
    assert d.positions is None


async def test_plots_screen_draws_a_stored_run(tmp_path: Path) -> None:
    db = make_db(tmp_path / "p.duckdb", n_items=12)
    app = LlmscopeApp(db, refresh_s=0.2)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        app.push_screen(PlotsScreen("run-a", "yesno"))
        assert await wait_until(
            pilot, lambda: isinstance(app.screen, PlotsScreen) and app.screen._n_shown == 24
        )
        scr = app.screen
        assert "24 results" in str(scr.query_one("#plots-head").render())
        assert scr.query_one(ReliabilityByPlot).display
        assert not scr.query_one(MinPairPlot).display  # yes/no: no minimal pairs
        assert not scr.query_one(PositionPlot).display


def test_sparkline_and_run_samples() -> None:
    from llmscope.tui.plots import RunSparks, sparkline

    assert sparkline([0.0, 0.5, 1.0], 0.0, 1.0) == "▁▅█"  # 0.5 * 7 = 3.5 -> index 4
    s = RunSparks(width=3)
    for done, acc, rate in (
        (1, 1.0, 2.0),
        (1, 0.0, 9.0),
        (2, 0.5, 4.0),
        (3, 0.0, 0.0),
        (4, 1.0, 4.0),
    ):
        s.add(done, acc, rate)  # a refresh without new results adds nothing
    assert s.done == [2, 3, 4] and s.acc == [0.5, 0.0, 1.0] and s.rate == [4.0, 0.0, 4.0]
    assert s.text().plain == "   acc ▅▁█  items/s █▁█"


def test_position_shares_leave_out_rows_without_a_prediction(tmp_path: Path) -> None:
    """The position plot over stored rows where one row abstained (no prediction, NaN beside
    the others' text in pandas' string dtype): it counts the rows with a prediction, as the
    report's chosen_rate does."""
    from llmscope.store.db import Store
    from llmscope.tui.plots import PLOT_COLUMNS
    from tests.helpers.mixed import write_mixed_db

    db = write_mixed_db(tmp_path / "mixed.duckdb")
    with Store(db, read_only=True) as st:
        df = st.query_df(
            f"SELECT {', '.join(PLOT_COLUMNS)} FROM results WHERE run_id = 'r2' ORDER BY seq"
        )
    d = plot_data(df, "choice")
    assert d.positions is not None
    # rows with a prediction: i0 A, i1 A, i2 A, i4 B, i5 A (i3 abstained, i6 an error);
    # gold A on i0, i1, i2, i4 (i5 has none)
    assert d.positions["n"].tolist() == [5, 5, 5]
    assert d.positions["chosen"].tolist() == pytest.approx([4 / 5, 1 / 5, 0.0])
    assert d.positions["gold"].tolist() == pytest.approx([4 / 5, 0.0, 0.0])
