"""The screen every llmscope screen derives from, and small formatting helpers they share."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, cast

import pandas as pd
from textual.screen import Screen
from textual.widgets import Static
from textual.worker import Worker

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
    """Worker state changes don't bubble: every screen hands them to the app's one handler."""

    @property
    def llm_app(self) -> LlmscopeApp:
        """`self.app`, typed as the llmscope app so its attributes are checked."""
        # Screens are only ever pushed by LlmscopeApp; the import stays lazy (app imports us).
        return cast("LlmscopeApp", self.app)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        self.llm_app.on_worker_state_changed(event)

