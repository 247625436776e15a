"""IRT in the TUI: the item drill-down and the study's IRT screen show the numbers
`llmscope irt --json` prints (a subprocess on the same real DuckDB file), read back from the
rendered screen; the fit runs in a worker thread and is not refitted when stepping items; a
suite with too few runs says so. The readings' labels are worked out here from the printed
numbers (Baker's discrimination ranges, P(right) at average ability by the logistic formula).
"""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path
from typing import Any

import pytest

from llmscope.analysis.irt import MIN_RUNS
from llmscope.tui.app import LlmscopeApp
from llmscope.tui.screens.irt import StudyIrtScreen
from llmscope.tui.screens.item import ItemScreen
from tests.helpers.cli import cli
from tests.helpers.irt import FLIPPED, N_RUNS, STUDY, write_flipped_db, write_irt_study
from tests.helpers.tui import make_db, screen_text, settle, wait_until
from tests.helpers.tui_pilot import press_until


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    base = tmp_path_factory.mktemp("irt-tui")
    path = base / "flip.duckdb"
    write_flipped_db(path)
    return path, write_irt_study(path, base / "study")


def _cli_fit(db: Path, *args: str) -> dict[str, Any]:
    proc = cli("irt", "--db", str(db), *args, "--json")
    assert proc.returncode == 0, proc.stderr
    (fit,) = json.loads(proc.stdout)
    return fit


def _ci(lo: float, hi: float) -> str:
    return f"[{lo:+.2f}, {hi:+.2f}]"


def _item_cells(it: dict[str, Any]) -> tuple[str, str]:
    b, (blo, bhi) = it["difficulty"], it["difficulty_ci"]
    a, (alo, ahi) = it["discrimination"], it["discrimination_ci"]
    return f"{b:+.2f} {_ci(blo, bhi)}", f"{a:+.2f} {_ci(alo, ahi)}"


def _flat(text: str) -> str:
    """Screen text with its line breaks and runs of spaces as one space (readings wrap)."""
    return " ".join(text.split())


async def _open_item(app: LlmscopeApp, pilot: Any, run: str, item: str, **kw: Any) -> ItemScreen:
    app.push_screen(ItemScreen([run], item, **kw))
    assert await wait_until(
        pilot, lambda: isinstance(app.screen, ItemScreen) and app.screen.irt is not None
    )
    await settle(pilot)
    screen = app.screen
    assert isinstance(screen, ItemScreen)
    return screen


@pytest.mark.slow
async def test_item_drill_down_shows_the_cli_fit_and_its_reading(
    db: tuple[Path, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = db
    fit = _cli_fit(path, "--suite", "flipped")
    items = {i["item"]: i for i in fit["items"]}
    threads: list[bool] = []
    import llmscope.tui.panels.irt as panel

    real = panel.item_irt

    def spy(*a: Any, **k: Any) -> Any:  # where the fit is made: never the UI thread
        threads.append(threading.current_thread() is threading.main_thread())
        return real(*a, **k)

    monkeypatch.setattr(panel, "item_irt", spy)
    app = LlmscopeApp(path, refresh_s=3600)
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot)
        screen = await _open_item(app, pilot, "run03", FLIPPED)
        text = _flat(screen_text(app))
        b, a = _item_cells(items[FLIPPED])
        assert f"{b} {a}" in text
        assert f"fitted on the {N_RUNS} runs of suite flipped in this file" in text
        assert "(= llmscope irt --suite flipped)" in text
        assert "discriminates negatively: likely label error, check the gold" in text
        p0 = 1 / (1 + math.exp(items[FLIPPED]["discrimination"] * items[FLIPPED]["difficulty"]))
        assert f"right with probability {p0:.2f}" in text
        fitted = screen.irt
        assert fitted is not None and fitted.fit is not None
        await pilot.press("escape")
        await settle(pilot)
        # a discriminating item: the difficulty label from b by hand, no label-error words
        easy = min(
            (i for i in fit["items"] if i["discrimination"] > 0.65), key=lambda i: i["difficulty"]
        )
        screen = await _open_item(app, pilot, "run03", easy["item"])
        text = _flat(screen_text(app))
        b_val = easy["difficulty"]
        label = (
            "very easy"
            if b_val < -2
            else "easy"
            if b_val < -0.5
            else "medium"
            if b_val < 0.5
            else "hard"
            if b_val < 2
            else "very hard"
        )
        a_val = easy["discrimination"]
        baker = "very high" if a_val >= 1.70 else "high" if a_val >= 1.35 else "moderate"
        p0 = 1 / (1 + math.exp(a_val * b_val))
        assert f"{label}: a run of average ability is right with probability {p0:.2f}" in text
        assert f"discriminates ({baker})" in text and "label error" not in text
        assert "{} {}".format(*_item_cells(easy)) in text
        # the second screen read the remembered fit: the same object, not a refit
        assert screen.irt is not None and screen.irt.fit is fitted.fit
    assert threads and not any(threads)


async def test_too_few_runs_are_said_not_fitted(tmp_path: Path) -> None:
    path = make_db(
        tmp_path / "few.duckdb",
        n_items=12,
        runs=(("run-a", "A", 0), ("run-b", "B", 17), ("run-c", "C", 40)),
    )
    app = LlmscopeApp(path, refresh_s=3600)
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot)
        screen = await _open_item(app, pilot, "run-a", "s001")
        assert screen.irt is not None and screen.irt.fit is None
        assert not screen.query_one("#item-irt").display  # nothing at the top: one line at the end
        screen.query_one("#item-body").scroll_end(animate=False)
        await settle(pilot)
        text = _flat(screen_text(app))
        assert (
            f"IRT: 3 run(s) of suite toy here; item difficulty and discrimination are shown from {MIN_RUNS} runs"
            in text
        )
        assert "`llmscope irt --suite toy` fits any 2 or more" in text


@pytest.mark.slow
async def test_study_irt_screen_equals_the_cli_and_opens_the_drill_down(
    db: tuple[Path, dict[str, str]],
) -> None:
    path, cells = db
    runs = [f"run{i:02d}" for i in range(N_RUNS)]
    fit = _cli_fit(path, "--runs", ",".join(runs))
    abilities = sorted(fit["abilities"], key=lambda a: -a["theta"])
    app = LlmscopeApp(path, study=STUDY, refresh_s=3600)
    async with app.run_test(size=(170, 120)) as pilot:
        await settle(pilot)
        assert await wait_until(pilot, lambda: bool(getattr(app.screen, "rows", None)))
        await pilot.press("i")
        assert await wait_until(
            pilot, lambda: isinstance(app.screen, StudyIrtScreen) and app.screen.result is not None
        )
        await settle(pilot)
        text = screen_text(app)
        lines = text.splitlines()
        # flagged: the CLI's flagged items, each with its discrimination and interval
        assert "likely label errors: 1" in text
        flagged = [i for i in fit["items"] if i["flagged"]]
        assert [i["item"] for i in flagged] == [FLIPPED]
        _, a_txt = _item_cells(flagged[0])
        assert any(ln.strip().startswith(f"{FLIPPED}  a {a_txt}") for ln in lines)
        # hardest: by hand, the 5 highest difficulties among items with a >= 0.35, in order
        hard = sorted(
            (i for i in fit["items"] if i["discrimination"] >= 0.35), key=lambda i: -i["difficulty"]
        )[:5]
        at = next(k for k, ln in enumerate(lines) if "hardest" in ln)
        shown = [lines[at + 1 + k].split()[0] for k in range(5)]
        assert shown == [i["item"] for i in hard]
        least = sorted(
            (i for i in fit["items"] if not i["flagged"]), key=lambda i: i["discrimination"]
        )[:5]
        at = next(k for k, ln in enumerate(lines) if "least discriminating" in ln)
        assert [lines[at + 1 + k].split()[0] for k in range(5)] == [i["item"] for i in least]
        # abilities: each shown row is the CLI's theta and interval for that cell's run
        rows_seen = 0
        for a in abilities:
            row = next(
                (ln for ln in lines if ln.strip().startswith(cells[a["run_id"]] + " ")), None
            )
            if row is None:
                continue
            rows_seen += 1
            assert f"{a['theta']:+.2f} {_ci(*a['ci'])}" in row, (a, row)
            assert f"{a['accuracy']:.3f}" in row
        assert rows_seen >= 10
        # Enter on the first item (flagged first): its drill-down over the study's runs
        scr = app.screen
        assert isinstance(scr, StudyIrtScreen)
        item = await press_until(
            pilot, "enter", ItemScreen, lambda s: s.irt is not None and bool(s.details)
        )
        assert item.item_id == FLIPPED
        assert item.run_ids[0] == abilities[0]["run_id"]  # highest ability first
        text = _flat(screen_text(app))
        assert f"fitted on the {N_RUNS} cell runs of study {STUDY} on suite flipped" in text
        assert "{} {}".format(*_item_cells(flagged[0])) in text
        assert "likely label error, check the gold" in text
        await pilot.press("escape")
        await settle(pilot)
        await pilot.press("o")  # hardest first
        await settle(pilot)
        assert scr.sort == "difficulty"
        from llmscope.tui.widgets import ItemList

        lst = scr.query_one("#irt-items", ItemList)
        top = lst.row(0)
        assert top is not None
        assert top["item_id"] == max(fit["items"], key=lambda i: i["difficulty"])["item"]


async def test_study_with_too_few_runs_per_suite_says_so(tmp_path: Path) -> None:
    from tests.helpers.study import NAME, write_study_db

    db = tmp_path / "g.duckdb"
    write_study_db(db, tmp_path / "files")
    app = LlmscopeApp(db, study=NAME, refresh_s=3600)
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot)
        assert await wait_until(pilot, lambda: bool(getattr(app.screen, "rows", None)))
        rows = list(app.screen.rows)  # type: ignore[attr-defined]
        await pilot.press("i")
        assert await wait_until(
            pilot, lambda: isinstance(app.screen, StudyIrtScreen) and app.screen.result is not None
        )
        await settle(pilot)
        scr = app.screen
        assert isinstance(scr, StudyIrtScreen) and scr.result is not None
        with_run = [r for r in rows if r.run_id]
        # every cell here is on the toy suite (tests/helpers/study.py writes one suite's runs)
        (suite,) = scr.result.suites
        assert suite.fit is None and len(suite.runs) == len(with_run) < MIN_RUNS
        text = _flat(screen_text(app))
        assert (
            f"{len(with_run)} cell run(s) on suite toy: IRT is shown from {MIN_RUNS} runs" in text
        )
        assert f"{len(rows) - len(with_run)} cell(s) without a run are not in any fit" in text
        assert "items: 0" in text
