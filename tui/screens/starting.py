"""A run on its way to its first result: what it is doing now (resolving, loading the model,
warming up), how long that has taken, the phases before it with their times, and what it said;
replaced by the run's dashboard as soon as the run starts scoring. Esc leaves it running in the
background."""

from __future__ import annotations

import time
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import Footer, Header, Static

from llmscope.tui.widgets import literal


class RunStartingScreen(Screen[None]):
    """The phase of a starting run, ticking each second so it is never silent."""

    BINDINGS = [Binding("escape", "back", "Back (the run goes on)")]

    def __init__(self, title: str, reporter: Any) -> None:
        super().__init__(id="starting")
        self.title_text = title
        self.reporter = reporter
        self.phase_since = time.monotonic()
        self.started = time.monotonic()
        self.lines: list[tuple[str, str]] = []
        # each phase shown, in order, with how long it took once it gave way to the next: the
        # screen lists them, so a slow start says where its time went
        self.phases: list[str] = ["resolving the suite, its options and the stored run ..."]
        self.took: list[float] = []

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="starting-body"):
            yield Static(literal(self.title_text), id="starting-title")
            yield Static(id="starting-phase")
            yield Static(id="starting-log")
        yield Footer()

    def on_mount(self) -> None:
        self._draw()
        self.set_interval(1.0, self._draw)

    def set_phase(self, text: str) -> None:
        """A new phase (UI thread)."""
        if text != self.phases[-1]:
            now = time.monotonic()
            self.took.append(now - self.phase_since)
            self.phase_since = now
            self.phases.append(text)
        self._draw()

    def add_line(self, level: str, text: str) -> None:
        self.lines.append((level, text))
        self._draw()

    def _draw(self) -> None:
        if not self.query("#starting-log"):  # not composed yet: on_mount draws it
            return
        now = time.monotonic()
        t = Text()
        for done, secs in zip(self.phases[:-1], self.took, strict=True):
            t.append("✓ ", style="green")
            t.append(literal(_short(done), style="dim"))
            t.append(f"  {secs:.0f}s\n", style="dim")
        t.append("● ", style="bold yellow")
        t.append(literal(self.phases[-1]))
        t.append(
            f"  {now - self.phase_since:.0f}s (started {now - self.started:.0f}s ago)", style="dim"
        )
        self.query_one("#starting-phase", Static).update(t)
        log = Text()
        for level, line in self.lines[-12:]:
            log.append(literal(line, style={"warning": "yellow", "error": "red"}.get(level, "dim")))
            log.append("\n")
        self.query_one("#starting-log", Static).update(log)

    def action_back(self) -> None:
        self.app.pop_screen()


def _short(phase: str) -> str:
    """A finished phase without its trailing explanation ("loading model X (...) ..." ->
    "loading model X")."""
    head = phase.split(" (", 1)[0].split(": ", 1)[0]
    return head.removesuffix(" ...").rstrip(" .")
