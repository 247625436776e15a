"""Messages the TUI's workers post back to the UI thread (one module, imported by every screen)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual.message import Message

from llmscope.tui.model import Snapshot

if TYPE_CHECKING:
    from llmscope.tui.app import TuiReporter


class RunsLoaded(Message):
    def __init__(self, rows: list[dict[str, Any]], notice: str) -> None:
        super().__init__()
        self.rows = rows
        self.notice = notice


class SuitesLoaded(Message):
    def __init__(self, rows: list[dict[str, Any]]) -> None:
        super().__init__()
        self.rows = rows



class DashData(Message):
    def __init__(
        self, run: dict[str, Any], progress: dict[str, Any] | None, snap: Snapshot, source: str
    ) -> None:
        super().__init__()
        self.run = run
        self.progress = progress
        self.snap = snap
        self.source = source



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


class RunEnded(Message):
    def __init__(self, run_id: str, status: str) -> None:
        super().__init__()
        self.run_id = run_id
        self.status = status


class RunFailed(Message):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text
