"""The study screen: a study's cells as a matrix, equal to `llmscope study status --json`;
Enter opens the cell's run; factors on the axes; paired comparisons equal `llmscope compare`
(Holm over several pairs, worked out by hand); live progress while `study run` writes the file
in another process; narrow terminals cut nothing without an ellipsis.

Real parts: a real DuckDB file (tests/helpers/study.py writes the study through
llmscope.studies.spec's API), the CLI in a subprocess, and for the live test `llmscope study run`
against the scripted OpenAI-wire server.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from textual.coordinate import Coordinate
from textual.widgets import DataTable

from llmscope.tui.app import LlmscopeApp
from llmscope.tui.screens import CompareScreen, DashboardScreen, HomeScreen
from llmscope.tui.screens.study import StudiesScreen, StudyPairsScreen, StudyScreen
from tests.helpers.cli import cli, cli_cmd, cli_env, write_yesno_suite
from tests.helpers.study import (
    FAILED,
    N_ITEMS,
    NAME,
    PARTIAL,
    PARTIAL_DONE,
    UNSTARTED,
    shift_of,
    write_study_db,
)
from tests.helpers.tui import p_yes_for, screen_text, settle, wait_until

SIZE = (120, 40)


@pytest.fixture(scope="module")
def study_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("study")
    db = base / "g.duckdb"
    write_study_db(db, base / "files")
    return db


@pytest.fixture(scope="module")
def status(study_db: Path) -> dict[str, dict[str, Any]]:
    """`llmscope study status NAME --json`: cell key -> its row."""
    proc = cli("study", "status", NAME, "--db", str(study_db), "--json")
    assert proc.returncode == 0, proc.stderr
    return {c["cell"]: c for c in json.loads(proc.stdout)["cells"]}


def _accuracy_by_hand(shift: int, n_items: int) -> float:
    """The toy rule (tests/helpers/tui.py): predict yes when P(yes) > 0.9 - P(yes); gold is yes
    for even items."""
    right = sum(
        (p_yes_for(i, shift) > 0.9 - p_yes_for(i, shift)) == (i % 2 == 0) for i in range(n_items)
    )
    return right / n_items


def _expected_lines(c: dict[str, Any]) -> tuple[str, str]:
    top = "-"
    if c["value"] is not None:
        top = f"{c['value']:.3f} [{c['ci95'][0]:.3f}, {c['ci95'][1]:.3f}]"
    low = c["state"].replace("_", " ")
    if c["n_total"] or c["n_done"]:
        low += f" {c['n_done']}/{c['n_total']}"
    return top, low


def _shown(screen: StudyScreen) -> dict[str, tuple[str, str]]:
    """Cell key -> the two lines its matrix cell shows (visible columns)."""
    t = screen.query_one("#study-matrix", DataTable)
    m = screen.matrix
    assert m is not None
    out = {}
    for (i, j), c in m.cells.items():
        if j in screen._shown_cols:
            v = t.get_cell_at(Coordinate(i, screen._shown_cols.index(j) + 1))
            a, _, b = v.plain.partition("\n")
            out[c.cell] = (a, b)
    return out


async def _open(app: LlmscopeApp, pilot: Any) -> StudyScreen:
    await settle(pilot)
    assert await wait_until(pilot, lambda: isinstance(app.screen, StudyScreen) and app.screen.rows)
    await settle(pilot)
    screen = app.screen
    assert isinstance(screen, StudyScreen)
    return screen


def _move_to(screen: StudyScreen, key: str) -> None:
    m = screen.matrix
    assert m is not None
    (i, j) = next(ij for ij, c in m.cells.items() if c.cell == key)
    screen.query_one("#study-matrix", DataTable).move_cursor(
        row=i, column=screen._shown_cols.index(j) + 1
    )


async def test_matrix_equals_study_status_json(study_db: Path, status: dict) -> None:
    # the accuracies are the toy rule's, recomputed by hand (and `status` is the CLI's JSON)
    for key, c in status.items():
        if c["value"] is not None:
            n = PARTIAL_DONE if key == PARTIAL else N_ITEMS
            assert c["value"] == pytest.approx(_accuracy_by_hand(shift_of(c["position"]), n))
    assert {k: c["state"] for k, c in status.items() if c["state"] != "done"} == {
        PARTIAL: "partial",
        FAILED: "error",
        UNSTARTED: "not_started",
    }
    app = LlmscopeApp(study_db, study=NAME, refresh_s=3600)
    async with app.run_test(size=SIZE) as pilot:
        screen = await _open(app, pilot)
        assert [r.to_dict() for r in screen.rows] == list(status.values())
        shown = _shown(screen)
        assert set(shown) == set(status)  # every cell visible at 120 columns
        for key, c in status.items():
            assert shown[key] == _expected_lines(c), key
        text = screen_text(app)
        for c in status.values():
            for line in _expected_lines(c):
                assert line in text, (line, text)
        # rows: models with the prompt stacked; columns: suites
        assert "base prompt=plain" in text and "api prompt=careful" in text
        # the detail under the matrix gives the exact value, run and interval method
        _move_to(screen, PARTIAL)
        await pilot.pause()
        detail = str(screen.query_one("#study-detail").render())
        p = status[PARTIAL]
        assert PARTIAL in detail and p["run_id"] in detail and repr(p["value"]) in detail
        assert p["interval_method"] in detail


@pytest.mark.slow
async def test_studies_list_then_enter_opens_the_cells_run(study_db: Path, status: dict) -> None:
    app = LlmscopeApp(study_db, refresh_s=3600)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, HomeScreen)
        await pilot.press("S")
        await settle(pilot)
        assert isinstance(app.screen, StudiesScreen)
        assert NAME in screen_text(app) and "8" in screen_text(app)
        await pilot.press("enter")
        screen = await _open(app, pilot)
        for key in ("ch | api | prompt=plain", PARTIAL):
            _move_to(screen, key)
            await pilot.press("enter")
            await settle(pilot)
            assert isinstance(app.screen, DashboardScreen), key
            assert app.screen.run_id == status[key]["run_id"]
            await pilot.press("escape")
            await settle(pilot)
            assert app.screen is screen
        # a cell with no run stays here, and says so
        _move_to(screen, UNSTARTED)
        await pilot.press("enter")
        await settle(pilot)
        assert app.screen is screen
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, StudiesScreen)


async def test_factors_on_the_axes(study_db: Path, status: dict) -> None:
    """`f` puts the prompt across (the metric by system prompt for each model and suite), `s`
    holds the rest at one level and `v` steps it; the numbers stay the CLI's."""
    app = LlmscopeApp(study_db, study=NAME, refresh_s=3600)
    async with app.run_test(size=SIZE) as pilot:
        screen = await _open(app, pilot)
        await pilot.press("f")
        await pilot.pause()
        m = screen.matrix
        assert m is not None and m.col_factor == "prompt" and m.col_labels == ["plain", "careful"]
        assert m.row_labels == ["base suite=yn", "base suite=ch", "api suite=yn", "api suite=ch"]
        assert m.cells[(3, 1)].cell == PARTIAL
        assert _shown(screen) == {k: _expected_lines(c) for k, c in status.items()}
        await pilot.press("s")
        await pilot.pause()
        m = screen.matrix
        assert m is not None and m.filtered == {"suite": "yn"} and m.row_labels == ["base", "api"]
        assert {c.cell for c in m.cells.values()} == {k for k in status if k.startswith("yn |")}
        assert "only suite=yn" in screen_text(app)
        await pilot.press("v")
        await pilot.pause()
        m = screen.matrix
        assert m is not None and m.filtered == {"suite": "ch"}
        assert m.cells[(1, 1)].cell == PARTIAL
        await pilot.press("t")
        await pilot.pause()
        m = screen.matrix
        assert m is not None and (m.row_factor, m.col_factor) == ("prompt", "model")


def _compare_json(db: Path, a: str, b: str) -> dict[str, Any]:
    proc = cli("compare", a, b, "--db", str(db), "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["comparisons"][0]


@pytest.mark.slow
async def test_row_pair_comparisons_equal_llmscope_compare_with_holm(
    study_db: Path, status: dict
) -> None:
    app = LlmscopeApp(study_db, study=NAME, refresh_s=3600)
    async with app.run_test(size=SIZE) as pilot:
        screen = await _open(app, pilot)
        # two marked cells: the compare screen on their runs
        _move_to(screen, "yn | base | prompt=plain")
        await pilot.press("space")
        _move_to(screen, "yn | api | prompt=plain")
        await pilot.press("space", "c")
        await settle(pilot)
        assert isinstance(app.screen, CompareScreen)
        assert app.screen.run_ids == [
            status["yn | base | prompt=plain"]["run_id"],
            status["yn | api | prompt=plain"]["run_id"],
        ]
        await pilot.press("escape")
        await settle(pilot)
        for key in ("yn | base | prompt=plain", "yn | api | prompt=plain"):  # unmarked again
            _move_to(screen, key)
            await pilot.press("space")
        assert screen.marked == []
        _move_to(screen, "yn | base | prompt=plain")
        await pilot.press("M")
        _move_to(screen, "yn | api | prompt=plain")
        await pilot.press("M", "c")
        await settle(pilot)
        pairs_screen = app.screen
        assert isinstance(pairs_screen, StudyPairsScreen)
        res = pairs_screen.result
        assert res is not None and res["family_size"] == 2 and "Holm" in res["correction"]
        want = [
            ("yn | base | prompt=plain", "yn | api | prompt=plain"),
            ("ch | base | prompt=plain", "ch | api | prompt=plain"),
        ]
        assert [(a.cell, b.cell) for a, b in pairs_screen.pairs] == want
        cli_pairs = [
            _compare_json(study_db, status[a]["run_id"], status[b]["run_id"]) for a, b in want
        ]
        for got, exp in zip(res["pairs"], cli_pairs, strict=True):
            cp = got["comparison"]
            assert (cp["diff"], cp["diff_ci95"], cp["p_value"], cp["n"]) == (
                exp["diff"],
                exp["diff_ci95"],
                exp["p_value"],
                exp["n"],
            )
        # Holm by hand for m = 2: the smaller p doubled, the larger kept, never below the first
        p1, p2 = (c["p_value"] for c in cli_pairs)
        lo_i = 0 if p1 <= p2 else 1
        small, large = min(p1, p2), max(p1, p2)
        adj = [0.0, 0.0]
        adj[lo_i] = min(1.0, 2 * small)
        adj[1 - lo_i] = max(adj[lo_i], min(1.0, large))
        assert [g["p_adjusted"] for g in res["pairs"]] == pytest.approx(adj)
        text = screen_text(app)
        assert "Holm" in text and "over the 2 pairs" in text
        assert f"{cli_pairs[0]['diff']:+.3f}" in text
        # Enter on a pair opens its compare screen
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, CompareScreen)
        assert app.screen.run_ids == [status[want[0][0]]["run_id"], status[want[0][1]]["run_id"]]


@pytest.mark.parametrize("size", [(80, 24), (50, 24)])
async def test_narrow_terminals_cut_no_number_without_an_ellipsis(
    study_db: Path, status: dict, size: tuple[int, int]
) -> None:
    """Every cell shown is whole, or ends in "…"; columns that do not fit are on the next
    page (`]`), never cut at the window's edge."""
    app = LlmscopeApp(study_db, study=NAME, refresh_s=3600)
    async with app.run_test(size=size) as pilot:
        screen = await _open(app, pilot)
        seen: set[str] = set()
        for _ in range(3):
            text = screen_text(app)
            lines = text.splitlines()
            for key, (a, b) in _shown(screen).items():
                want = _expected_lines(status[key])
                for got, full in zip((a, b), want, strict=True):
                    assert got == full or (got.endswith("…") and full.startswith(got[:-1])), (
                        key,
                        got,
                    )
                    assert any(got in ln for ln in lines), (got, text)
                seen.add(key)
            # no line of the matrix ends in a cut number: the last visible character of every
            # row is a space, a closing bracket, a digit of a whole count, or an ellipsis
            for ln in lines:
                for num in re.findall(r"\d\.\d+", ln.rstrip()[-6:]):
                    assert len(num.split(".")[1]) == 3, ln
            await pilot.press("right_square_bracket")
            await pilot.pause()
        assert seen == set(status)
        if size[0] == 50:
            flat = " ".join(screen_text(app).split())  # the note may wrap
            assert "columns 2-2 of 2 ([ ])" in flat, flat


@pytest.mark.slow
async def test_live_while_study_run_writes_in_another_process(tmp_path: Path) -> None:
    """`llmscope study run` writes the file; the open study screen reads its matrix from copies
    of the file as it grows (the cells' states, counts and metrics as `study status --json`
    reads them at that moment), then from the file itself once it is free."""
    from llmscope.studies.store import live_cells
    from tests.helpers.oai import start_server, stop_server

    yn = write_yesno_suite(tmp_path / "yn", 6)  # 12 prompts a cell (two templates)
    server = start_server()
    proc: subprocess.Popen[str] | None = None
    try:
        # every prompt of the suite: the first 3 answered, the rest held until the screen has
        # shown the running cell (tests/helpers/midrun.py)
        server.script("number", hold_after=3)
        study = tmp_path / "live.yaml"
        study.write_text(
            f"name: livestudy\nsuites: [{{suite: {yn}, label: yn}}]\n"
            f"models:\n  - {{model: 'openai:test-model', base_url: '{server.base_url}', "
            "label: api, concurrency: 1}\ngrid:\n  seed: [0, 1]\n",
            encoding="utf-8",
        )
        db = tmp_path / "live.duckdb"
        proc = subprocess.Popen(
            cli_cmd("study", "run", str(study), "--db", str(db), "--trust-study", "--jobs", "1"),
            env=cli_env(OPENAI_API_KEY="sk-test"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        app = LlmscopeApp(db, study="livestudy", refresh_s=0.1)
        async with app.run_test(size=SIZE) as pilot:
            assert await wait_until(pilot, lambda: bool(live_cells(db, "livestudy")))
            screen = await _open(app, pilot)

            def running() -> tuple[str, int] | None:
                for r in screen.rows:
                    if r.state == "running" and r.n_done > 0:
                        return r.cell, r.n_done
                return None

            assert await wait_until(
                pilot, lambda: running() is not None and server.held("number") > 0
            ), screen.rows
            # read from a copy of the file, not the live channel: the study is held mid-way, so
            # the matrix equals what `study status --json` reads now, metrics included
            assert not screen.live and app.blocked is None
            assert f"written by process {proc.pid}" in str(app.sub_title)
            key, first = running() or ("", 0)
            row = next(r for r in screen.rows if r.cell == key)
            # the whole grid while the study writes, not only the cells that have runs
            assert {r.cell for r in screen.rows} == {"yn | api | seed=0", "yn | api | seed=1"}
            other = next(r for r in screen.rows if r.cell != key)
            assert other.state in ("not_started", "done"), other
            assert row.n_total == 12 and row.metric is not None  # the stored rows' metric
            mid = cli("study", "status", "livestudy", "--db", str(db), "--json")
            assert mid.returncode == 0, mid.stderr
            now = {c["cell"]: c for c in json.loads(mid.stdout)["cells"]}
            assert await wait_until(
                pilot, lambda: [r.to_dict() for r in screen.rows] == list(now.values())
            ), (screen.rows, now)
            want = {k: _expected_lines(c) for k, c in now.items()}
            want[key] = (want[key][0], f"running {first}/12 {100 * first / 12:.0f}%")
            assert _shown(screen) == want
            assert "live channel" not in screen_text(app)
            # let go, the same cell advances (or finishes) while the screen stays open
            server.release("number")
            assert await wait_until(
                pilot, lambda: any(r.cell == key and r.n_done > first for r in screen.rows)
            )
            assert proc.wait(timeout=300) == 0, proc.stderr.read() if proc.stderr else ""
            # the file is free: the metrics appear, equal to `study status --json`
            assert await wait_until(
                pilot, lambda: not screen.live and all(r.metric for r in screen.rows)
            ), screen.rows
            await settle(pilot)
            out = cli("study", "status", "livestudy", "--db", str(db), "--json")
            assert out.returncode == 0, out.stderr
            cells = {c["cell"]: c for c in json.loads(out.stdout)["cells"]}
            assert [r.to_dict() for r in screen.rows] == list(cells.values())
            assert _shown(screen) == {k: _expected_lines(c) for k, c in cells.items()}
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        stop_server(server)


def test_study_flag_of_llmscope_and_view() -> None:
    """`llmscope --study NAME` and `llmscope view --study NAME` name the study to open."""
    from llmscope.cli import build_parser

    p = build_parser()
    assert p.parse_args(["--db", "x.duckdb", "--study", "grid"]).open_study == "grid"
    view = p.parse_args(["view", "--study", "grid"])
    assert view.open_study == "grid" and view.run is None
