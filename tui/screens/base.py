"""The screen every llmscope screen derives from, and small formatting helpers they share."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, cast

import pandas as pd
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Static
from textual.worker import Worker, WorkerState

from llmscope.tui.widgets import literal

if TYPE_CHECKING:
    from llmscope.tui.app import LlmscopeApp


def _fmt_time(v: Any) -> str:
    if v is None or v is pd.NaT:
        return "-"
    s = str(v)
    return s[:19].replace("T", " ")


def _duration(s: float | None) -> str:
    if s is None or not math.isfinite(s):
        return "-"
    s = int(s)
    return (
        f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
    )


def _set(widget: Static, renderable: Any, sig: str) -> None:
    """Update a Static only when what it shows changed (signature string)."""
    if getattr(widget, "_sig", None) != sig:
        widget._sig = sig  # type: ignore[attr-defined]
        widget.update(renderable)


class BaseScreen(Screen[None]):
    """Workers return a Message (RunsLoaded, DashData, ...) instead of touching the screen; the
    one Worker.StateChanged handler applies it here, on the UI thread, by calling the screen's
    handler for it (`on_dash_data` for DashData). Failures go to the app's handler."""

    @property
    def llm_app(self) -> LlmscopeApp:
        """`self.app`, typed as the llmscope app so its attributes are checked."""
        # Screens are only ever pushed by LlmscopeApp; the import stays lazy (app imports us).
        return cast("LlmscopeApp", self.app)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        result = event.worker.result if event.state == WorkerState.SUCCESS else None
        if isinstance(result, Message):
            self.apply(result)
        else:
            self.llm_app.on_worker_state_changed(event)

    def apply(self, result: Message) -> None:
        """Apply a worker's result: call this screen's handler for its message class."""
        handler = getattr(self, result.handler_name, None)
        if handler is not None:
            handler(result)

    def show_notice(self, selector: str, text: str, style: str = "") -> None:
        """Put ``text`` in the notice line ``selector``, hidden while there is none."""
        note = self.query_one(selector, Static)
        _set(note, literal(text, style), text)
        note.display = bool(text)

    def shown_metric_names(self) -> list[str]:
        """Registered metric names the screen shows (panels, titles, table headers)."""
        from textual.widgets import DataTable

        from llmscope.tui.definitions import metric_names_in, plain_text

        texts = [plain_text(w.content) for w in self.query(Static) if w.display]
        for t in self.query(DataTable):
            texts += [str(c.label) for c in t.columns.values()]
        return metric_names_in(texts)

    def action_definitions(self) -> None:
        """What the numbers on this screen mean."""
        from llmscope.tui.screens.help import DefinitionsScreen

        self.app.push_screen(DefinitionsScreen(self.shown_metric_names()))


class BackScreen(BaseScreen):
    """A screen opened over another: Esc goes back (its first key in the footer, as Textual
    puts a base class's bindings before the subclass's)."""

    BINDINGS = [Binding("escape", "app.pop_screen", "Back")]


def limited_note(r: dict[str, Any], narrow: bool = False) -> str:
    """ " (12 of 30 items)" for a run limited to fewer items than its suite has (`--limit`), so a
    limited run's 12/12 never reads as the whole suite (" (12/30 items)" where room is short);
    "" otherwise."""
    lim, n = r.get("item_limit"), r.get("n_suite_items")
    try:
        lim_i, n_i = int(lim), int(n)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return ""
    if not 0 < lim_i < n_i:
        return ""
    return f" ({lim_i}/{n_i} items)" if narrow else f" ({lim_i} of {n_i} items)"
