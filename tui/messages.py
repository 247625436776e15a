"""Messages the TUI's workers post back to the UI thread (one module, imported by every screen)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual.message import Message

from llmscope.tui.data.live import LiveFeed
from llmscope.tui.data.run_model import RunModel
from llmscope.tui.data.snapshot import Snapshot

if TYPE_CHECKING:
    from llmscope.tui.app import TuiReporter


class RunsLoaded(Message):
    """The runs list; `watch_reason` is set when the file turned out to be held by another
    process (the app shows it as blocked until a read succeeds; done on the UI thread)."""

    def __init__(
        self, rows: list[dict[str, Any]], notice: str, watch_reason: str | None = None
    ) -> None:
        super().__init__()
        self.rows = rows
        self.notice = notice
        self.watch_reason = watch_reason


class SuitesLoaded(Message):
    def __init__(self, rows: list[dict[str, Any]]) -> None:
        super().__init__()
        self.rows = rows


class DashData(Message):
    """What a dashboard load found: the run, its progress and metrics, and the state the screen
    keeps between loads (model, live feed, source), applied on the UI thread."""

    def __init__(
        self,
        run: dict[str, Any],
        progress: dict[str, Any] | None,
        snap: Snapshot,
        source: str,
        *,
        model: RunModel | None = None,
        feed: LiveFeed | None = None,
        no_gold: list[str] | None = None,
    ) -> None:
        super().__init__()
        self.run = run
        self.progress = progress
        self.snap = snap
        self.source = source
        self.model = model
        self.feed = feed
        self.no_gold = no_gold or []


class ItemLoaded(Message):
    def __init__(self, details: list[dict[str, Any]]) -> None:
        super().__init__()
        self.details = details


class CompareLoaded(Message):
    def __init__(self, data: dict[str, Any]) -> None:
        super().__init__()
        self.data = data


class RunStarted(Message):
    def __init__(self, run_id: str, reporter: TuiReporter) -> None:
        super().__init__()
        self.run_id = run_id
        self.reporter = reporter


class RunPhase(Message):
    """What a starting run is doing (`phase`: resolving, loading the model, warming up), or a
    line it said (`level` set), before its first result."""

    def __init__(self, reporter: TuiReporter, text: str, level: str | None = None) -> None:
        super().__init__()
        self.reporter = reporter
        self.text = text
        self.level = level


class RunEnded(Message):
    def __init__(self, run_id: str, status: str) -> None:
        super().__init__()
        self.run_id = run_id
        self.status = status


class RunFailed(Message):
    """A run could not start or failed (`severity` "information": there was nothing to run)."""

    def __init__(
        self,
        text: str,
        *,
        title: str = "run failed",
        severity: str = "error",
        reporter: TuiReporter | None = None,
    ) -> None:
        super().__init__()
        self.reporter = (
            reporter  # the run's, when it fails before it started (its starting screen closes)
        )
        self.text = text
        self.title = title
        self.severity = severity
