"""A finished stored run's dashboard numbers come from SQL (`tui.data.store.stored_snapshot`)
without loading its rows: they equal the in-memory path over the same rows and values
computed here by hand from the rows' generating rule (tests/helpers/tui.py)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from llmscope.engine.types import Result
from llmscope.store.db import Store
from llmscope.tui.app import LlmscopeApp
from llmscope.tui.data.fields import LIGHT_COLS
from llmscope.tui.data.run_model import RunModel
from llmscope.tui.data.store import load_items, quick_snapshot, stored_snapshot
from llmscope.tui.pages import FailingSource
from llmscope.tui.widgets import ItemList
from tests.helpers.tui import (
    CATEGORIES,
    add_suite,
    create_run,
    expected_accuracy,
    screen_text,
    toy_result,
)
from tests.helpers.tui_pilot import on_dashboard

N = 30


def _db(path: Path) -> Path:
    """q1 rows with gold, q3 rows without (their accuracy is undefined), one error row."""
    with Store(path) as s:
        items = add_suite(s, N)
        create_run(s, "r", 2 * N + 1)
        rows = [toy_result(it, i) for i, it in enumerate(items)]
        for i, it in enumerate(items):
            r = toy_result(it, i, "q3")
            rows.append(
                Result(
                    item_id=r.item_id,
                    variant="q3",
                    probs=r.probs,
                    other=r.other,
                    prediction=r.prediction,
                    confidence=r.confidence,
                )
            )
        rows.append(Result(item_id=items[0].item_id, variant="q2", error="timeout"))
        s.write_results("r", rows)
    return path


def _hundredths(i: int) -> int:
    return 5 + (i * 37) % 81  # P(yes) of item i in hundredths (tests/helpers/tui.py p_yes_for)


def test_stored_snapshot_by_hand_and_equal_to_rows(tmp_path: Path) -> None:
    path = _db(tmp_path / "s.duckdb")
    with Store(path, read_only=True) as s:
        run = s.get_run("r")
        assert run is not None
        snap, no_gold = stored_snapshot(s, run)
        model = RunModel(run, s.suite_spec(run["suite_id"]), load_items(s, run["suite_id"]))
        model.poll_db(s)
        mem = model.compute()
    # by hand
    assert (snap.n, snap.n_errors, snap.n_scored) == (2 * N + 1, 1, N)
    assert snap.overall is not None
    assert math.isclose(snap.overall.mean, expected_accuracy(N, ("q1",)), abs_tol=1e-12)
    assert no_gold == ["q3"]
    assert snap.group_field == "category" and snap.group_values == sorted(CATEGORIES)
    agree = [0] * 10  # humans agree (human_q1 = 1, gold yes: even items), q1 rows only
    disagree = [0] * 10
    for i in range(N):
        (agree if i % 2 == 0 else disagree)[_hundredths(i) // 10] += 1
    assert snap.human_hist == {"humans agree": agree, "humans disagree": disagree}
    # P(other) = 0.1 on every answered row (q1 and q3): all in the [0.1, 0.2) bin
    assert (
        snap.other_hist is not None and snap.other_hist["count"].tolist() == [0] + [2 * N] + [0] * 8
    )
    # the same numbers as the path that holds every row
    assert snap.accuracy_name == mem.accuracy_name
    assert [(a.label, a.mean, a.n) for a in snap.variants] == [
        (a.label, a.mean, a.n) for a in mem.variants
    ]
    assert snap.groups.keys() == mem.groups.keys()
    assert snap.human_hist == mem.human_hist and snap.human_stats == mem.human_stats
    assert snap.rel_bins is not None and mem.rel_bins is not None
    assert np.allclose(snap.rel_bins.to_numpy(float), mem.rel_bins.to_numpy(float), equal_nan=True)
    assert snap.other_hist.equals(mem.other_hist)
    assert snap.group_values == mem.group_values
    assert (snap.ece, snap.brier) == (mem.ece, mem.brier)


def test_quick_snapshot_counts_and_light_columns(tmp_path: Path) -> None:
    path = _db(tmp_path / "q.duckdb")
    with Store(path, read_only=True) as s:
        run, snap = quick_snapshot(s, "r")
    assert run is not None and snap.pending
    assert (snap.n, snap.n_errors, snap.n_scored, snap.group_field) == (2 * N + 1, 1, N, "category")
    # the light columns are the store's columns, without the heavy ones
    assert {"item_id", "variant", "seq", "correct", "confidence", "p_yes", "probs"} <= set(
        LIGHT_COLS
    )
    assert not {"prompt", "top_tokens", "option_scores", "extra"} & set(LIGHT_COLS)


async def test_dashboard_of_stored_run_holds_no_rows(tmp_path: Path) -> None:
    """The finished run's dashboard: numbers from SQL, the list paged; no RunModel is built."""
    path = _db(tmp_path / "d.duckdb")
    app = LlmscopeApp(path)
    async with on_dashboard(app):
        scr = app.screen
        assert scr.model is None  # no light rows, no items loaded
        lst = scr.query_one(ItemList)
        assert isinstance(lst.source, FailingSource)
        n_wrong = round(N * (1 - expected_accuracy(N, ("q1",))))
        assert lst.n_total == n_wrong + 1  # the wrong q1 rows and the error row
        text = screen_text(app)
        assert f"{expected_accuracy(N, ('q1',)):.3f}" in text
        assert "q3: no gold for this variant" in text


def test_all_scope_pages_in_sql(tmp_path: Path) -> None:
    """The list's "all" scope: every row, sorted and filtered in SQL like the failing one."""
    path = _db(tmp_path / "a.duckdb")
    with Store(path, read_only=True) as s:
        seqs = {
            (i, v): q
            for i, v, q in s.execute("SELECT item_id, variant, seq FROM results").fetchall()
        }

        def use():  # noqa: ANN202 - a context manager yielding the open store
            from contextlib import nullcontext

            return nullcontext(s)

        src = FailingSource(use, "r", "category")
        src.scope = "all"
        assert src.set_view("arrival", None, None) == src.n_all == 2 * N + 1
        rows = src.page(0, 100)
        got = list(zip(rows["item_id"], rows["variant"], strict=True))
        assert got == sorted(seqs, key=lambda k: seqs[k])  # arrival order: the write order
        i = got.index(("s003", "q1"))
        assert (
            rows["text"][i] == "Tricky [bold]x[/] and \x1b[31mred"
        )  # the item's text, joined per page
        # confidence, highest first, the error row (no confidence) last; ties in arrival order
        src.set_view("confidence", None, None)
        conf = src.page(0, 100)["confidence"]
        finite = [c for c in conf if not math.isnan(c)]
        assert finite == sorted(finite, reverse=True) and math.isnan(conf[-1])
        # a group filter: items i % 3 == 1 are "food", each with a q1 and a q3 row (s000's error row is "animals")
        n_food = 2 * sum(1 for i in range(N) if i % 3 == 1)
        assert src.set_view("arrival", "food", None) == n_food and src.n_all == 2 * N + 1
        assert set(src.page(0, 100)["group"]) == {"food"}
        # arrival: every q1 row was written before the q3 rows, so s001's q3 row follows the food q1 rows
        assert src.position(("s001", "q3")) == n_food // 2


def _in_memory(s: Store, run_id: str) -> Any:
    """The snapshot of the path that holds every row (a live run's), over a stored run."""
    run = s.get_run(run_id)
    assert run is not None
    model = RunModel(run, s.suite_spec(run["suite_id"]), load_items(s, run["suite_id"]))
    model.poll_db(s)
    return model.compute()


def test_failing_list_of_rows_in_memory_has_none_for_missing_text(tmp_path: Path) -> None:
    """One error row among many: the other rows' error is None, not NaN (which the list would
    style red as a truthy error), and missing gold / prediction are None, not "nan"."""
    with Store(_db(tmp_path / "f.duckdb"), read_only=True) as s:
        f = _in_memory(s, "r").failing
    rows = list(zip(f["variant"], f["error"], f["gold"], f["prediction"], strict=True))
    assert [e for _, e, _, _ in rows if e is not None] == ["timeout"]
    assert all(isinstance(e, str) or e is None for _, e, _, _ in rows)
    # the error row has neither gold nor prediction; q3 rows have no gold
    err_row = next(r for r in rows if r[1] == "timeout")
    assert err_row[3] is None
    assert all(g is None for v, _, g, _ in rows if v == "q3")


def test_failing_list_in_memory_groups_items_without_the_field_as_the_paged_list(
    tmp_path: Path,
) -> None:
    """Items without the suite's group field: the in-memory list (a live run) labels them as
    the SQL-paged list of a stored run does ("None"), not NaN (astype(str) keeps a missing
    value missing in pandas' string dtype), so both show and sort them alike."""
    from tests.helpers.mixed import write_mixed_db

    path = write_mixed_db(tmp_path / "m.duckdb")
    with Store(path, read_only=True) as s:
        f = _in_memory(s, "r1").failing

        def use():  # noqa: ANN202 - a context manager yielding the open store
            from contextlib import nullcontext

            return nullcontext(s)

        src = FailingSource(use, "r1", "cl")
        src.scope = "all"
        src.set_view("arrival", None, None)
        page = src.page(0, 100)
    # items i3 and i4 have no `cl`
    assert dict(zip(f["item_id"], f["group"], strict=True)) == {
        "i0": "c0",
        "i1": "c0",
        "i2": "c1",
        "i3": "None",
        "i4": "None",
        "i5": "c2",
        "i6": "c2",
    }
    assert list(zip(f["item_id"], f["group"], strict=True)) == list(
        zip(page["item_id"], page["group"], strict=True)
    )


def test_load_items_has_none_for_an_item_without_options_or_gold(tmp_path: Path) -> None:
    """A suite where one item lists options and has gold and the other has neither: the
    items the live views read hold None there, not NaN (the live drill-down joins a truthy
    `options` value into text)."""
    from llmscope.engine.types import Item

    with Store(tmp_path / "i.duckdb") as s:
        s.add_suite(
            "s-opt",
            "opt",
            "generation",
            {"task": "generation"},
            "",
            [
                Item(item_id="a", fields={"k": 1}, gold="x", options=["x", "y"], text="first"),
                Item(item_id="b", fields={}, text="second"),
            ],
        )
        items = load_items(s, "s-opt")
    assert items == {
        "a": {"text": "first", "gold": "x", "options": ["x", "y"], "fields": {"k": 1}},
        "b": {"text": "second", "gold": None, "options": None, "fields": {}},
    }
