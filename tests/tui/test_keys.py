"""Focus and keys that never surprise: Esc goes back to the list a screen was
opened from, no key lands in a form field the user did not select, F1 and ? open help on every
screen, and the command palette offers every action of the screen."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.command import CommandList, CommandPalette
from textual.widgets import DataTable, Input

from llmscope.tui.app import LlmscopeApp, RunStarted, TuiReporter, screen_commands
from llmscope.tui.screens import CompareScreen, DashboardScreen, HelpScreen, HomeScreen, ItemScreen
from llmscope.tui.widgets import ItemList
from tests.helpers.tui import make_db, settle, wait_until

SIZE = (120, 40)
BASE_URL = "http://127.0.0.1:9/v1"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return make_db(tmp_path / "t.duckdb", runs=(("run-a", "model-A", 0), ("run-b", "model-B", 13)))


async def test_esc_then_n_never_edits_the_base_url(db: Path) -> None:
    """A run is started from the form (focus in a form field), the
    dashboard opens, Esc goes back, and `n` is pressed: the base URL must stay as typed."""
    app = LlmscopeApp(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        home = app.screen
        assert isinstance(home, HomeScreen)
        url = home.query_one("#f-base-url", Input)
        url.focus()
        await pilot.press(*BASE_URL)
        assert url.value == BASE_URL
        # What the app does when a run started from the form reports its start.
        app.post_message(RunStarted("run-b", TuiReporter(app)))
        assert await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen))
        await settle(pilot)
        await pilot.press("escape")
        await settle(pilot)
        assert app.screen is home
        runs = home.query_one("#runs", DataTable)
        assert app.focused is runs  # the list it came from, not the form field
        assert runs.cursor_row == 1  # on the run that was shown
        await pilot.press("n")  # New run: moves to the form, edits nothing
        await pilot.pause()
        assert url.value == BASE_URL
        suite = home.query_one("#f-suite", Input)
        assert app.focused is suite and suite.value == "commonsense-sample"
        await pilot.press("escape")  # out of the form again: keys act on the list
        await pilot.pause()
        assert app.focused is runs
        await pilot.press("r", "space")
        await settle(pilot)
        assert home.marked == {"run-b"} and suite.value == "commonsense-sample"
        assert url.value == BASE_URL


@pytest.mark.slow
async def test_escape_returns_to_the_list_it_came_from(db: Path) -> None:
    app = LlmscopeApp(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        home = app.screen
        await pilot.press("down", "enter")
        await settle(pilot)
        dash = app.screen
        assert isinstance(dash, DashboardScreen) and dash.run_id == "run-b"
        lst = dash.query_one(ItemList)
        await pilot.press("down", "down", "enter")
        await settle(pilot)
        assert isinstance(app.screen, ItemScreen)
        dash.query_one("#left").focus()  # somewhere else meanwhile (e.g. a click on a panel)
        await pilot.press("escape")
        await settle(pilot)
        assert app.screen is dash and app.focused is lst and lst.cursor == 2
        await pilot.press("escape")
        await settle(pilot)
        assert app.screen is home and app.focused is home.query_one("#runs", DataTable)
        assert home.query_one("#runs", DataTable).cursor_row == 1
        await pilot.press("up", "space", "down", "space", "c")
        await settle(pilot)
        cmp = app.screen
        assert isinstance(cmp, CompareScreen)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, ItemScreen)
        await pilot.press("escape")
        await settle(pilot)
        assert app.screen is cmp and app.focused is cmp.query_one("#dis", ItemList)
        await pilot.press("escape")
        await settle(pilot)
        assert app.screen is home and app.focused is home.query_one("#runs", DataTable)


@pytest.mark.slow
async def test_f1_and_question_mark_open_help_on_every_screen(db: Path) -> None:
    app = LlmscopeApp(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)

        async def opens_help(key: str) -> None:
            below = app.screen
            await pilot.press(key)
            await pilot.pause()
            assert isinstance(app.screen, HelpScreen), (key, below)
            await pilot.press("escape")
            await pilot.pause()
            assert app.screen is below

        for key in ("f1", "question_mark"):
            await opens_help(key)
        # F1 from inside a text field too (the field keeps its text and the focus)
        url = app.screen.query_one("#f-base-url", Input)
        url.focus()
        await opens_help("f1")
        assert url.value == "" and app.focused is url
        await pilot.press("escape")  # back to the runs list
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, DashboardScreen)
        for key in ("f1", "question_mark"):
            await opens_help(key)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, ItemScreen)
        for key in ("f1", "question_mark"):
            await opens_help(key)
        # F1 pressed again closes help
        await pilot.press("f1")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("f1")
        await pilot.pause()
        assert isinstance(app.screen, ItemScreen)


def _highlighted(app: LlmscopeApp) -> str | None:
    """The command palette's highlighted hit (its first line), or None while it lists none."""
    cl = app.screen.query_one(CommandList)
    if not cl.option_count or cl.highlighted is None:
        return None
    return str(cl.get_option_at_index(cl.highlighted).prompt).splitlines()[0].strip()


def _titles(app: LlmscopeApp) -> set[str]:
    return {t for t, _, _ in screen_commands(app.screen)}


@pytest.mark.slow
async def test_command_palette_lists_every_action(db: Path) -> None:
    app = LlmscopeApp(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        # Written out by hand from the help text: the keys each screen documents.
        assert {
            "Mark for compare",
            "Compare",
            "Refresh",
            "New run",
            "Quit",
            "Runs list",
            "Help",
        } <= _titles(app)
        await pilot.press("enter")
        await settle(pilot)
        dash = _titles(app)
        assert {
            "Back",
            "Sort",
            "Group filter",
            "Conf. filter",
            "Items",
            "Methods",
            "Open item",
            "Definitions",
            "Help",
        } <= dash
        # a finished run cannot be stopped or resumed: not offered
        assert "Stop run" not in dash and "Resume run" not in dash
        # Textual's own cursor keys are not actions of llmscope
        assert "Cursor up" not in dash
        # choose one through the palette: ctrl+p, type, Enter
        lst = app.screen.query_one(ItemList)
        assert lst.sort_key == "arrival"
        await pilot.press("ctrl+p")
        await pilot.pause()
        assert isinstance(app.screen, CommandPalette)
        await pilot.press(*"Sort")
        # the palette gathers its hits in a worker: Enter once the best match is "Sort"
        assert await wait_until(pilot, lambda: _highlighted(app) == "Sort"), _highlighted(app)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, DashboardScreen)
        assert lst.sort_key == "confidence"
        await pilot.press("enter")
        await settle(pilot)
        assert {"Back", "Next item", "Previous item", "Help"} <= _titles(app)


async def test_workers_return_results_the_ui_thread_applies(db: Path) -> None:
    """Loaders run in threads and return a message; the screen applies it on the UI thread."""
    import threading

    from llmscope.tui.messages import DashData, ItemLoaded, RunsLoaded

    applied: list[tuple[str, bool]] = []
    app = LlmscopeApp(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        home = app.screen
        w = home.load_runs()
        await w.wait()
        assert isinstance(w.result, RunsLoaded) and [r["run_id"] for r in w.result.rows] == [
            "run-a",
            "run-b",
        ]
        await pilot.press("enter")
        await settle(pilot)
        dash = app.screen
        assert isinstance(dash, DashboardScreen)
        orig = dash.on_dash_data

        def spy(msg: DashData) -> None:
            applied.append(("dash", threading.current_thread() is threading.main_thread()))
            orig(msg)

        dash.on_dash_data = spy  # type: ignore[method-assign]
        w = dash.load(False)
        await w.wait()
        await settle(pilot)
        assert isinstance(w.result, DashData) and w.result.model is dash.model
        assert applied and all(on_ui for _, on_ui in applied)
        await pilot.press("enter")
        await settle(pilot)
        item = app.screen
        assert isinstance(item, ItemScreen)
        w = item.load()
        await w.wait()
        assert isinstance(w.result, ItemLoaded) and w.result.details[0]["run_id"] == "run-a"


def _declared(node: object) -> list[tuple[str, str, str]]:
    """(key, action, description) of every binding a class declares, read from its BINDINGS."""
    from textual.binding import Binding

    out = []
    for b in getattr(type(node), "BINDINGS", []):
        if isinstance(b, Binding):
            for key in b.key.split(","):
                out.append((key.strip(), b.action, b.description))
    return out


def _expected_titles(app: LlmscopeApp) -> set[str]:
    """Every described binding of the screen, of the llmscope widgets around the focus, and of
    the app, less the actions the screen disables for this run (e.g. Stop for a finished run)."""
    screen = app.screen
    nodes: list[object] = [screen, app]
    w = app.focused
    while w is not None and w is not screen:
        if type(w).__module__.startswith("llmscope"):
            nodes.append(w)
        w = w.parent  # type: ignore[assignment]
    out = set()
    for node in nodes:
        for _key, action, desc in _declared(node):
            if not desc:
                continue
            if (
                node is screen
                and "." not in action
                and screen.check_action(action.split("(")[0], ()) is False
            ):
                continue
            out.add(desc)
    return out


@pytest.mark.slow
async def test_every_screen_offers_every_binding_and_opens_help(db: Path) -> None:
    """On every screen: the command palette (ctrl+p) offers each binding the screen, its
    focused llmscope widgets and the app declare; F1 and ? open Help; Esc closes it again."""
    app = LlmscopeApp(db)
    seen: list[str] = []
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)

        async def check(name: str) -> None:
            screen = app.screen
            palette = {c.title for c in app.get_system_commands(screen)}
            missing = _expected_titles(app) - palette
            assert not missing, (name, missing)
            for key in ("f1", "question_mark"):
                await pilot.press(key)
                await pilot.pause()
                assert isinstance(app.screen, HelpScreen), (name, key)
                await pilot.press("escape")
                await pilot.pause()
                assert app.screen is screen, (name, key)
            seen.append(name)

        async def visit(key: str, name: str) -> None:
            below = app.screen
            await pilot.press(key)
            await settle(pilot)
            assert type(app.screen).__name__ == name, (key, app.screen)
            await check(name)
            await pilot.press("escape")
            await settle(pilot)
            assert app.screen is below, name
            if isinstance(below, DashboardScreen):  # back on the list it came from
                assert app.focused is below.query_one(ItemList), (name, app.focused)

        await check("HomeScreen")
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, DashboardScreen)
        app.screen.query_one(ItemList).focus()
        await check("DashboardScreen")
        for key, name in (
            ("d", "DefinitionsScreen"),
            ("m", "MethodsScreen"),
            ("h", "HumanScreen"),
            ("p", "PlotsScreen"),
        ):
            await visit(key, name)
        await visit("enter", "ItemScreen")
        await pilot.press("escape")
        await settle(pilot)
        await pilot.press("space", "down", "space")
        await visit("c", "CompareScreen")
    assert seen == [
        "HomeScreen",
        "DashboardScreen",
        "DefinitionsScreen",
        "MethodsScreen",
        "HumanScreen",
        "PlotsScreen",
        "ItemScreen",
        "CompareScreen",
    ]
