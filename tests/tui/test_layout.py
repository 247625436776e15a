"""The dashboard at every terminal size, numeric item order, the list back at the top after a
sort or filter change, and what the numbers mean (definitions, no-gold variants)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from llmscope.analysis.metrics import METRICS
from llmscope.engine.types import Item, Result
from llmscope.store.db import Store
from llmscope.tui.app import LlmscopeApp
from llmscope.tui.definitions import plain_text
from llmscope.tui.screens import DashboardScreen, DefinitionsScreen, HelpScreen
from llmscope.tui.widgets import ItemList, ReliabilityPlot, fit_widths, item_sort_key
from tests.helpers.tui import (
    SUITE_ID,
    add_suite,
    create_run,
    expected_accuracy,
    make_db,
    screen_text,
    settle,
    toy_items,
    toy_result,
)
from tests.helpers.tui_pilot import on_dashboard, press_settled, started

# ids in insertion (arrival) order; numeric order written out by hand below (equal numbers: as text)
IDS = ["1003", "10", "141", "2", "1026", "x7", "20", "a1", "999", "0010"]
NUMERIC_ORDER = ["2", "0010", "10", "20", "141", "999", "1003", "1026", "a1", "x7"]


def _numeric_db(path: Path, copies: int = 8, status: str = "completed") -> Path:
    """Every row fails (prediction != gold), so the failing list holds them all."""
    with Store(path) as store:
        spec = {"name": "num", "task": "yesno", "answers": ["yes", "no"]}
        ids = [f"{i}" for i in IDS] + [str(5000 + k) for k in range(copies * len(IDS))]
        items = [Item(item_id=i, fields={}, gold="yes", text=f"text of {i}") for i in ids]
        store.add_suite(SUITE_ID, "num", "yesno", spec, "tests", items)
        create_run(store, "run-n", len(items), status=status)
        store.write_results(
            "run-n",
            [
                Result(
                    item_id=it.item_id,
                    variant="q1",
                    probs={"yes": 0.2, "no": 0.7},
                    other=0.1,
                    prediction="no",
                    gold="yes",
                    correct=0.0,
                    confidence=0.2 + 0.7 * (k % 5) / 5,
                )
                for k, it in enumerate(items)
            ],
        )
    return path


def test_item_sort_key_and_store_agree(tmp_path: Path) -> None:
    assert sorted(IDS, key=item_sort_key) == NUMERIC_ORDER
    db = _numeric_db(tmp_path / "n.duckdb", copies=0)
    with Store(db, read_only=True) as s:
        page = s.failing_page("run-n", 0, 100, sort="item")
    assert page["item_id"] == NUMERIC_ORDER


def test_fit_widths_keeps_the_text_column_readable() -> None:
    ws = [12, 8, 16, 8, 10, 5, 5, 0]
    got = fit_widths(ws, 80)
    assert sum(w + 1 for w in got if w) + 26 <= 80  # at least max(24, 80 // 3) cells of text
    assert min(w for w in got if w) >= 4 and got[-1] == 0
    assert fit_widths(ws, 200) == ws  # room enough: unchanged


@pytest.mark.parametrize("status", ["completed", "running"])  # paged from DuckDB / in memory
async def test_numeric_item_order_and_back_to_top(tmp_path: Path, status: str) -> None:
    db = _numeric_db(tmp_path / "n.duckdb", status=status)
    app = LlmscopeApp(db)
    async with on_dashboard(app) as pilot:
        lst = app.screen.query_one(ItemList)
        assert (lst.source is not None) == (status == "completed")
        n = lst.count
        assert n == len(IDS) * 9
        await pilot.press("end")
        await settle(pilot)
        assert lst.cursor == n - 1 and lst.scroll_offset.y > 0
        for key in ("s", "s", "s", "s"):  # confidence, distance, group, item
            await pilot.press(key)
            await settle(pilot)
            assert lst.cursor == 0 and lst.scroll_offset.y == 0, lst.sort_key
            await pilot.press("end")
            await settle(pilot)
        assert lst.sort_key == "item"
        got = [lst.row(i)["item_id"] for i in range(n)]
        assert got[: len(NUMERIC_ORDER) - 2] == NUMERIC_ORDER[:-2]  # 2 ... 1026, then 5000...
        assert got[-2:] == ["a1", "x7"]
        await pilot.press("f")  # a filter change: back to the top as well
        await settle(pilot)
        assert lst.cursor == 0 and lst.scroll_offset.y == 0
        assert "Failing items" in screen_text(app)


def _db_with_q3(path: Path) -> Path:
    """The toy suite with a third variant whose rows carry no gold (as commonsense q3)."""
    with Store(path) as store:
        items = add_suite(store, 12)
        create_run(store, "run-a", 36)
        res = [toy_result(it, i, v) for i, it in enumerate(items) for v in ("q1", "q2")]
        for i, it in enumerate(toy_items(12)):
            r = toy_result(it, i, "q3")
            r.gold, r.correct = None, None
            res.append(r)
        store.write_results("run-a", res)
    return path


@pytest.mark.slow
async def test_variant_without_gold_and_definitions(tmp_path: Path) -> None:
    app = LlmscopeApp(_db_with_q3(tmp_path / "q.duckdb"))
    async with on_dashboard(app) as pilot:
        dash = app.screen
        text = screen_text(app)
        assert "q3: no gold for this variant" in text
        assert "q1: no gold" not in text and "q2: no gold" not in text
        # the yes/no table: q3's gold-based cells say "no gold", q1/q2 have numbers
        bias = [ln for ln in text.splitlines() if "gold_yes_rate" in ln or "│ yes_bias" in ln]
        assert len(bias) == 2 and all(ln.count("no gold") == 1 for ln in bias), bias
        # hovering the calibration numbers: their definitions from the metrics registry
        tip = str(dash.query_one("#cal").tooltip)
        for name in ("ece", "mce", "brier", "brier_yes"):
            assert f"{name}: {METRICS[name].definition}" in tip
        assert str(dash.query_one("#acc").tooltip).startswith(
            f"accuracy: {METRICS['accuracy'].definition}"
        )
        # `d`: every metric on the screen with its definition
        shown = dash.shown_metric_names()
        assert {
            "accuracy",
            "ece",
            "mce",
            "brier",
            "brier_yes",
            "mean_p_yes",
            "pred_yes_rate",
            "gold_yes_rate",
            "yes_bias",
            "mean_p_other",
            "off_format_rate",
        } <= set(shown)
        assert isinstance(await press_settled(pilot, "d"), DefinitionsScreen)
        assert app.screen.metrics == shown
        defs = " ".join(plain_text(app.screen.query_one("#defs-table").content, width=4000).split())
        for name in shown:  # each metric with its registered definition
            assert f"{name} {' '.join(METRICS[name].definition.split())}" in defs, name
        assert "What the numbers on this screen mean" in screen_text(app)
        await pilot.press("escape")
        await pilot.press("f1")
        await settle(pilot)
        assert isinstance(app.screen, HelpScreen) and app.screen.metrics == shown
        await press_settled(pilot, "escape")
        # the drill-down of an item: q3 says it has no gold, q1 shows its gold
        dash.query_one(ItemList).focus()
        await press_settled(pilot, "enter")
        item = screen_text(app)
        assert "gold yes" in item or "gold no" in item
        lines = [ln for ln in item.splitlines() if "none (no gold for this variant)" in ln]
        assert len(lines) <= 1  # q3 is the third variant: below the fold or shown once
        app.screen.query_one("#item-body").scroll_end(animate=False)
        await settle(pilot)
        assert "gold none (no gold for this variant)" in screen_text(app)


async def test_narrow_dashboard_is_readable(tmp_path: Path) -> None:
    db = make_db(tmp_path / "t.duckdb", runs=(("run-a", "model-A", 0),))
    app = LlmscopeApp(db)
    async with on_dashboard(app, (80, 24)) as pilot:
        dash = app.screen
        assert dash.has_class("-narrow")
        text = screen_text(app)
        # one panel at a time, full width: group labels whole, the tab line says which panel
        assert "  animals " in text and "  food " in text
        assert "accuracy  calibration  humans" in text
        assert dash.query_one("#left").display and not dash.query_one("#middle").display
        # item text readable: "Statement number N about" whole in the list's text column
        assert re.search(r"Statement number \d+ about", text)
        await pilot.press("v")
        await settle(pilot)
        assert dash.query_one("#middle").display and not dash.query_one("#left").display
        plot = dash.query_one(ReliabilityPlot)
        assert plot.size.height >= 7 and plot.size.width >= 40
        await pilot.press("v", "v")
        await settle(pilot)
        assert dash.query_one("#left").display


async def test_wide_dashboard_uses_the_space(tmp_path: Path) -> None:
    db = make_db(tmp_path / "t.duckdb", runs=(("run-a", "model-A", 0),))
    app = LlmscopeApp(db)
    async with on_dashboard(app, (200, 60)):
        dash = app.screen
        assert dash.has_class("-wide")
        widths = [dash.query_one(f"#{w}").outer_size.width for w in ("left", "middle", "right")]
        assert all(w >= 60 for w in widths), widths  # the 120-column layout caps two at 36
        assert dash.query_one("#panels").size.height > 20  # 20 rows at most at 120x40
        assert not dash.query_one("#panel-tabs").display
        assert sum(widths) == 200  # the whole width


async def test_method_fallback_banner_on_the_run(tmp_path: Path) -> None:
    """An API run whose choice task fell back to letter labels says so on its dashboard, even at
    80x24; a run without a method choice shows no banner."""
    import datetime as dt

    from tests.helpers.tui import STARTED

    path = tmp_path / "b.duckdb"
    make_db(path, runs=(("run-a", "model-A", 0),))
    choice = {
        "method": "option labels A/B/C...",
        "reason": "the server gives no echo log-likelihoods",
    }
    with Store(path) as store:
        items = toy_items(12)
        store.create_run(
            {
                "run_id": "run-api",
                "suite_id": SUITE_ID,
                "suite_name": "toy",
                "task": "yesno",
                "model": "openai:m",
                "backend": "openai",
                "n_total": 12,
                "status": "completed",
                "started_at": STARTED + dt.timedelta(minutes=5),
                "updated_at": STARTED,
                "options": {},
                "meta": {"backend": {"method_choice": choice}},
                "versions": {},
            }
        )
        store.write_results("run-api", [toy_result(it, i) for i, it in enumerate(items)])
    app = LlmscopeApp(path)
    async with started(app, (80, 24)) as pilot:
        await pilot.press("down", "enter")
        await settle(pilot)
        dash = app.screen
        assert isinstance(dash, DashboardScreen) and dash.run_id == "run-api"
        assert dash.query_one("#method-banner").display
        banner = dash.query_one("#method-banner")
        assert str(banner.content) == (
            "API method: option labels A/B/C... (the server gives no echo log-likelihoods)"
        )
        assert "API method: option labels A/B/C..." in screen_text(app)  # on screen, at 80x24
        await pilot.press("escape", "up", "enter")
        await settle(pilot)
        assert app.screen.run_id == "run-a" and not app.screen.query_one("#method-banner").display


async def test_home_at_80x24_keeps_counts_and_the_accuracy(tmp_path: Path) -> None:
    """At 80x24 the suites' item counts keep every digit (once `commonsense-sample  24` for 243)
    and the runs list shows each run's accuracy (once scrolled out of view)."""
    builtin = Path(__file__).resolve().parents[2] / "data" / "builtin"
    counts = {
        s: sum(1 for ln in (builtin / s / "items.jsonl").read_text().splitlines() if ln.strip())
        for s in ("commonsense-sample", "minimal-pairs")
    }
    assert counts == {"commonsense-sample": 243, "minimal-pairs": 102}
    db = make_db(tmp_path / "t.duckdb", runs=(("run-a", "model-A", 0),))
    app = LlmscopeApp(db)
    async with started(app, (80, 24)):
        text = screen_text(app)
        for suite, n in counts.items():
            assert re.search(rf"\b{suite}\s+{n}\s", text), (suite, text)
        row = next(ln for ln in text.splitlines() if "run-a" in ln)
        assert f"{expected_accuracy(12):.3f}" in row and "24/24" in row, row


@pytest.mark.parametrize("size", [(80, 24), (160, 40)])
async def test_help_gives_each_key_its_own_line(tmp_path: Path, size: tuple[int, int]) -> None:
    """Every key of the help starts a line with the start of its own description beside it
    (two keys' descriptions once shared lines, wrapping into each other), at 80x24 and 160x40;
    scrolled through, the help shows every key."""
    from llmscope.tui.screens.help import KEYS

    db = make_db(tmp_path / "t.duckdb", runs=(("run-a", "model-A", 0),))
    app = LlmscopeApp(db)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await pilot.press("f1")
        await settle(pilot)
        assert isinstance(app.screen, HelpScreen)
        scroll = app.screen.query_one("#help-scroll")
        seen: list[str] = []
        for _ in range(40):
            seen += screen_text(app).splitlines()
            if scroll.scroll_y >= scroll.max_scroll_y:
                break
            scroll.scroll_page_down(animate=False)
            await settle(pilot)
        # the text inside the help box's borders (the home screen shows around it)
        lines = [ln.split("│")[1].strip() for ln in seen if ln.count("│") >= 2]
        for _section, keys in KEYS:
            for k, what in keys:
                first = k.split()[0]
                start = " ".join(what.split()[:2])
                assert any(
                    re.match(
                        rf"(?:\w+\s+)?{re.escape(first)}(?:\s\S+)*?\s{{2,}}{re.escape(start)}", ln
                    )
                    for ln in lines
                ), (k, what, size)


async def test_home_at_80x24_keeps_progress_beside_a_long_model_name(tmp_path: Path) -> None:
    """With the embedded model's name (21 characters) the runs list at 80 columns once showed
    `300/300 10` for 300/300 100%, the rest past the edge: the model name gives way (ellipsis), the
    progress keeps its digits."""
    import duckdb

    model, rid = "SmolLM2-135M-Instruct", "0de66de3c9d5"
    db = make_db(tmp_path / "t.duckdb", n_items=150, runs=((rid, model, 0),))
    con = duckdb.connect(str(db))  # the README's main job: a 12-character id, its suite's name
    con.execute("UPDATE runs SET suite_name = 'commonsense-sample'")
    con.close()
    app = LlmscopeApp(db)
    async with started(app, (80, 24)) as pilot:
        row = next(ln for ln in screen_text(app).splitlines() if rid in ln)
        assert "commonsense-sample" in row, row
        # the whole progress cell: the count and its share, or the count alone, never "300/300 10"
        assert f"{expected_accuracy(150):.3f}" in row and re.search(
            r"\b300/300(\s+100%|\s*$|\s{2,}\S)", row
        ), row
        assert "SmolLM2" in row and ("…" in row or model in row), row
    async with LlmscopeApp(db).run_test(size=(150, 40)) as pilot:
        await settle(pilot)
        row = next(ln for ln in screen_text(pilot.app).splitlines() if rid in ln)
        assert model in row and "300/300 100%" in row, row  # wide: the whole name and the share
        await pilot.resize_terminal(80, 24)  # narrowed while open: the columns narrow too
        await settle(pilot)
        row = next(ln for ln in screen_text(pilot.app).splitlines() if rid in ln)
        assert re.search(r"\b300/300(\s+100%|\s*$|\s{2,}\S)", row), row


BARS = "▁▂▃▄▅▆▇█▉▊▋▌▍▎▏"  # scrollbar thumbs


def _suite_rows_seen(app: LlmscopeApp) -> dict[str, tuple[str, list[str]]]:
    """The suites table as drawn: suite name -> (its line left of the form's border, the words
    after the name)."""
    from llmscope.data.suites import builtin_names

    names = set(builtin_names())
    seen: dict[str, tuple[str, list[str]]] = {}
    for ln in screen_text(app).splitlines():
        left = ln.split("│")[0]
        words = [w for w in left.split() if w.strip(BARS)]
        if words and words[0] in names:
            seen[words[0]] = (left, words[1:])
    return seen


def _whole_or_marked(shown: str, full: str) -> bool:
    return shown == full or (shown.endswith("…") and len(shown) > 1 and full.startswith(shown[:-1]))


@pytest.mark.parametrize(
    "sizes", [[(80, 24)], [(160, 40), (80, 24)], [(80, 24), (90, 24)], [(100, 30), (200, 60)]]
)
async def test_home_suites_table_cuts_text_only_with_an_ellipsis(
    tmp_path: Path, sizes: list[tuple[int, int]]
) -> None:
    """At 80 columns the suites table once showed `contamin` for the contamination task, cut at
    the panel's edge with no mark: every suite name stays whole, a task name or description is
    whole or ends in "…", and nothing runs into the panel's edge (also after the terminal is
    narrowed or widened while the screen is open)."""
    from llmscope.data.registry import external_suite
    from llmscope.data.suites import SuiteDataMissing, builtin_names, load_suite

    # each suite's task and description read from its spec, not from the table
    specs: dict[str, tuple[str, str | None]] = {}
    for n in builtin_names():
        e = external_suite(n)
        if e is not None and e.large:
            specs[n] = (e.task, None)
            continue
        try:
            s = load_suite(n)
        except SuiteDataMissing:  # its data (../shared) is absent here: listed as needing a path
            assert e is not None
            specs[n] = (e.task, None)
            continue
        specs[n] = (s.task, " ".join((s.description or "").split()))
    assert any(t == "contamination" for t, _ in specs.values())  # the task name that was cut
    app = LlmscopeApp(make_db(tmp_path / "t.duckdb"))
    async with app.run_test(size=sizes[0]) as pilot:
        for size in sizes:
            await pilot.resize_terminal(*size)
            await settle(pilot)
            await pilot.pause()
            seen = _suite_rows_seen(app)
            visible = [n for n in specs if n in seen]
            assert len(visible) >= 5, (size, seen)  # the table shows (most of) the suites
            for name in visible:
                left, (items, task, *desc) = seen[name]
                assert left.rstrip(BARS).endswith(" "), (size, left)  # nothing cut at the edge
                assert _whole_or_marked(task, specs[name][0]), (size, name, task)
                full = specs[name][1]
                if desc and full is not None:
                    assert _whole_or_marked(" ".join(desc), full), (size, name, desc)


async def test_home_lists_a_suite_whose_data_is_absent_as_needing_a_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ../shared the loaders of third-party corpora cannot read their default data: the
    home screen still lists every suite, those with their task and "needs --suite-path" (the
    listing once failed as a whole)."""
    from llmscope.data.registry import SUITES
    from llmscope.data.suites import builtin_names

    monkeypatch.setenv("LLMSCOPE_SHARED", str(tmp_path / "no-shared"))
    app = LlmscopeApp(make_db(tmp_path / "t.duckdb"))
    async with started(app, (240, 60)) as pilot:
        await pilot.pause()
        seen = _suite_rows_seen(app)
    assert set(builtin_names()) <= set(seen), seen
    for name, entry in SUITES.items():
        _, (items, task, *desc) = seen[name]
        assert (items, task) == ("-", entry.task), (name, seen[name])
        assert "--suite-path" in " ".join(desc), (name, seen[name])
