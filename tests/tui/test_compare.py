"""Compare any number of runs (tui/panels/compare.py and the compare screen): every pair's
cell equals `llmscope compare A B --json`, disagreements sort by difference and numerically;
with 3+ runs each p-value is also Holm-adjusted (checked against Holm written out here), on
the screen and in `llmscope compare`'s output."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from llmscope.analysis.rows import format_p
from llmscope.cli import main
from llmscope.store.db import Store
from llmscope.tui.panels.compare import compare_matrix, disagreement_rows, sort_disagreements
from tests.helpers.tui import make_db, p_yes_for

RUNS = (("run-a", "model-A", 0), ("run-b", "model-B", 17), ("run-c", "model-C", 40))


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return make_db(tmp_path / "cmp.duckdb", n_items=12, runs=RUNS)


def _cli(db: Path, a: str, b: str, capsys: pytest.CaptureFixture[str]) -> dict:
    capsys.readouterr()
    assert main(["compare", "--db", str(db), a, b, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_every_pair_equals_the_cli(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with Store(db, read_only=True) as st:
        m = compare_matrix(st, ["run-a", "run-b", "run-c"])
    assert set(m.pairs) == {("run-a", "run-b"), ("run-a", "run-c"), ("run-b", "run-c")}
    for (a, b), cell in m.pairs.items():
        cli = _cli(db, a, b, capsys)["comparisons"][0]
        ours = json.loads(json.dumps(cell.comparison, default=str))
        for k in (
            "n",
            "n_clusters",
            "diff",
            "diff_ci95",
            "p_value",
            "acc_base",
            "acc_run",
            "mcnemar",
        ):
            assert ours[k] == cli[k], (a, b, k)

    # b vs c: difference by hand from the generating rule (correct per item and variant)
    def correct(i: int, shift: int) -> int:
        py = p_yes_for(i, shift)
        return int(("yes" if py > 0.9 - py else "no") == ("yes" if i % 2 == 0 else "no"))

    want = sum(correct(i, 40) - correct(i, 17) for i in range(12)) / 12
    assert m.pairs[("run-b", "run-c")].diff == pytest.approx(want, abs=1e-12)
    # the runs x metrics matrix holds each run's report accuracy
    assert m.metrics[0] == "accuracy"
    acc_a = m.values["run-a"]["accuracy"]["value"]
    assert acc_a == pytest.approx(sum(correct(i, 0) for i in range(12)) / 12)


def test_disagreements_sort_by_difference_then_numeric_item(db: Path) -> None:
    with Store(db, read_only=True) as st:
        m = compare_matrix(st, ["run-a", "run-b", "run-c"])
    rows = disagreement_rows(m)
    n_expected = sum(len(c.comparison["disagreements"]) for c in m.pairs.values())
    assert len(rows) == n_expected > 0
    assert all(abs(r["diff"]) == 1.0 for r in rows)  # binary correctness: every disagreement is ±1
    by_item = sort_disagreements(rows, "item")
    nums = [int(r["item_id"][1:]) for r in by_item]
    assert nums == sorted(nums)


def test_item_ids_sort_as_numbers() -> None:
    rows = [
        {"item_id": i, "variant": "q1", "pair": "a→b", "diff": d}
        for i, d in (("10", 1.0), ("1003", -1.0), ("141", 0.5), ("9", -0.25))
    ]
    assert [r["item_id"] for r in sort_disagreements(rows, "item")] == ["9", "10", "141", "1003"]
    assert [r["item_id"] for r in sort_disagreements(rows, "|difference|")] == [
        "10",
        "1003",
        "141",
        "9",
    ]


async def test_compare_screen_shows_every_pair_and_opens_both_runs(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from llmscope.tui.app import LlmscopeApp
    from llmscope.tui.screens import HomeScreen
    from llmscope.tui.screens.compare import CompareScreen
    from llmscope.tui.screens.item import ItemScreen
    from llmscope.tui.widgets import ItemList
    from tests.helpers.tui import screen_text, settle, wait_until

    cli = _cli(db, "run-b", "run-c", capsys)["comparisons"][0]
    app = LlmscopeApp(db, refresh_s=0.2)
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot)
        home = app.screen
        assert isinstance(home, HomeScreen)
        for _ in range(3):  # mark all three runs from the keyboard
            await pilot.press("space")
            await pilot.press("down")
        await pilot.press("c")
        assert await wait_until(
            pilot, lambda: isinstance(app.screen, CompareScreen) and app.screen.matrix is not None
        )
        scr = app.screen
        assert isinstance(scr, CompareScreen) and scr.matrix is not None
        assert set(scr.matrix.pairs) == {("run-a", "run-b"), ("run-a", "run-c"), ("run-b", "run-c")}
        # the b-vs-c cell on screen shows the CLI's numbers
        lo, hi = cli["diff_ci95"]
        text = screen_text(app)
        assert (
            f"{cli['diff']:+.3f} [{lo:+.3f}, {hi:+.3f}] p={format_p(cli['p_value'])} n={cli['n']}"
            in text
        )
        # three runs: each pair's Holm-adjusted p over the three pairs, named on screen
        holm = scr.matrix.pairs[("run-b", "run-c")].p_holm
        assert holm is not None and f"Holm-adjusted p={format_p(holm)}" in text
        assert "Holm-adjusted p: Holm" in text and "over the 3 pairs shown" in text
        # one p-value, one format: every "p=" of the pair on screen reads the same
        shown = set(re.findall(r"\[[-+.\d]+, [-+.\d]+\] p=(\S+)", text))
        assert shown <= {format_p(c.comparison["p_value"]) for c in scr.matrix.pairs.values()}
        lst = scr.query_one("#dis", ItemList)
        assert lst.count == len(disagreement_rows(scr.matrix))
        await pilot.press("o")  # sort by item id: numeric order, list back at its top
        await settle(pilot)
        ids = [lst.row(i)["item_id"] for i in range(lst.count)]  # type: ignore[index]
        assert [int(i[1:]) for i in ids] == sorted(int(i[1:]) for i in ids) and lst.cursor == 0
        first = lst.row(0)
        assert first is not None
        await pilot.press("enter")
        assert await wait_until(
            pilot, lambda: isinstance(app.screen, ItemScreen) and app.screen.details
        )
        item = app.screen
        assert isinstance(item, ItemScreen)
        assert [d["run_id"] for d in item.details] == [first["a"], first["b"]]
        assert all(d["variants"] for d in item.details)


def _holm_by_hand(ps: list[float]) -> list[float]:
    """Holm (1979) written out: the i-th smallest p times (m - i + 1), made non-decreasing in
    that order and capped at 1, returned in the input's order."""
    order = sorted(range(len(ps)), key=lambda k: ps[k])
    out = [0.0] * len(ps)
    running = 0.0
    for rank, k in enumerate(order):
        running = max(running, min(1.0, (len(ps) - rank) * ps[k]))
        out[k] = running
    return out


def test_three_runs_get_holm_adjusted_p_over_every_pair(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with Store(db, read_only=True) as st:
        m = compare_matrix(st, ["run-a", "run-b", "run-c"])
        two = compare_matrix(st, ["run-a", "run-b"])
    pairs = list(m.pairs.values())
    ps = [c.comparison["p_value"] for c in pairs]
    # each pair's p is `llmscope compare A B`'s; the adjusted ones are Holm over the 3 pairs
    assert ps == [_cli(db, c.a, c.b, capsys)["comparisons"][0]["p_value"] for c in pairs]
    assert [c.p_holm for c in pairs] == pytest.approx(_holm_by_hand(ps), abs=1e-15)
    assert len(set(ps)) > 1 and any(c.p_holm != c.comparison["p_value"] for c in pairs)
    assert m.family_size == 3 and m.correction and m.correction.startswith("Holm")
    # two runs: one comparison, nothing to adjust
    assert [c.p_holm for c in two.pairs.values()] == [None] and two.correction is None


def test_cli_compare_of_three_runs_prints_holm_adjusted_p(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["compare", "--db", str(db), "run-a", "run-b", "run-c", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    comps = out["comparisons"]
    ps = [c["p_value"] for c in comps]
    # the family is what this command reports: each run against the base, 2 comparisons
    assert [c["p_holm"] for c in comps] == pytest.approx(_holm_by_hand(ps), abs=1e-15)
    assert out["correction"]["name"] == "Holm-adjusted p" and out["correction"]["family_size"] == 2
    assert main(["compare", "--db", str(db), "run-a", "run-b", "run-c"]) == 0
    text = capsys.readouterr().out
    for c in comps:
        assert f"Holm-adjusted p={format_p(c['p_holm'])}" in text
    assert "over the 2 comparisons against the base" in text
    assert main(["compare", "--db", str(db), "run-a", "run-b", "--json"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert one["correction"] is None and one["comparisons"][0]["p_holm"] is None
