"""Driving the TUI in the tests: the app started and settled, a run's dashboard opened, a run
started from the home screen's form against the scripted OpenAI-compatible server.

Imported by the TUI tests (`from tests.helpers.tui_pilot import ...`); the DuckDB files they
open come from tests/helpers/tui.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from tests.helpers.tui import fill_form, settle, wait_until

SIZE = (120, 40)  # the terminal most tests draw in


@asynccontextmanager
async def started(app: Any, size: tuple[int, int] = SIZE) -> AsyncIterator[Any]:
    """The app under a test pilot at `size`, its first screen settled; yields the pilot."""
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        yield pilot


async def open_run(pilot: Any) -> Any:
    """Enter on the home screen's selected run: its dashboard, settled (returned)."""
    from llmscope.tui.screens import DashboardScreen

    await pilot.press("enter")
    await settle(pilot)
    dash = pilot.app.screen
    assert isinstance(dash, DashboardScreen), type(dash)
    return dash


@asynccontextmanager
async def on_dashboard(app: Any, size: tuple[int, int] = SIZE) -> AsyncIterator[Any]:
    """The app started at `size` with its first run's dashboard open; yields the pilot."""
    async with started(app, size) as pilot:
        await open_run(pilot)
        yield pilot


async def press_settled(pilot: Any, *keys: str) -> Any:
    """Press `keys`, let everything they started finish; returns the screen they lead to."""
    await pilot.press(*keys)
    await settle(pilot)
    return pilot.app.screen


def home_screen(app: Any) -> Any:
    """The app's screen, checked to be the home screen (runs list and run form)."""
    from llmscope.tui.screens import HomeScreen

    home = app.screen
    assert isinstance(home, HomeScreen), type(home)
    return home


async def start_api_run(pilot: Any, base_url: str, **values: str) -> None:
    """Fill the home form for commonsense-sample on the scripted server's `openai:test-model`
    (plus `values`, e.g. limit and concurrency) and press Start."""
    fill_form(
        home_screen(pilot.app),
        suite="commonsense-sample",
        model="openai:test-model",
        base_url=base_url,
        **values,
    )
    await pilot.click("#start")


async def dashboard_opened(pilot: Any) -> Any:
    """Wait for a started run to open its dashboard by itself; returns it."""
    from llmscope.tui.screens import DashboardScreen

    app = pilot.app
    assert await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen)), [
        n.message for n in app._notifications
    ]
    return app.screen


async def press_until(pilot: Any, key: str, kind: type, ready: Any) -> Any:
    """Press `key`, wait until the screen is a `kind` for which `ready(screen)` holds, settle;
    returns that screen."""
    app = pilot.app
    await pilot.press(key)
    assert await wait_until(pilot, lambda: isinstance(app.screen, kind) and ready(app.screen))
    await settle(pilot)
    return app.screen
