"""Messages the TUI's workers post back to the UI thread (one module, imported by every screen).

Each is a dataclass (Textual's Message initialises itself in ``__post_init__``); ``eq=False``
keeps a message's identity hash, as a plain Message has."""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING, Any

from textual.message import Message

from llmscope.tui.data.live import LiveFeed
from llmscope.tui.data.run_model import RunModel
from llmscope.tui.data.snapshot import Snapshot

if TYPE_CHECKING:
    from llmscope.tui.app import TuiReporter


@dataclass(eq=False)
class RunsLoaded(Message):
    """The runs list; `watch_reason` is set when the file turned out to be held by another
    process (the app shows it as blocked until a read succeeds; done on the UI thread)."""

    rows: list[dict[str, Any]]
    notice: str
    watch_reason: str | None = None


@dataclass(eq=False)
class SuitesLoaded(Message):
    rows: list[dict[str, Any]]


@dataclass(eq=False)
class DashData(Message):
    """What a dashboard load found: the run, its progress and metrics, and the state the screen
    keeps between loads (model, live feed, source), applied on the UI thread."""

    run: dict[str, Any]
    progress: dict[str, Any] | None
    snap: Snapshot
    source: str
    _: KW_ONLY
    model: RunModel | None = None
    feed: LiveFeed | None = None
    no_gold: list[str] | None = None


@dataclass(eq=False)
class ItemLoaded(Message):
    details: list[dict[str, Any]]


@dataclass(eq=False)
class CompareLoaded(Message):
    data: dict[str, Any]


@dataclass(eq=False)
class RunStarted(Message):
    run_id: str
    reporter: TuiReporter


@dataclass(eq=False)
class RunPhase(Message):
    """What a starting run is doing (`phase`: resolving, loading the model, warming up), or a
    line it said (`level` set), before its first result."""

    reporter: TuiReporter
    text: str
    level: str | None = None


@dataclass(eq=False)
class RunFailed(Message):
    """A run could not start or failed (`severity` "information": there was nothing to run)."""

    text: str
    _: KW_ONLY
    title: str = "run failed"
    severity: str = "error"
    # the run's, when it fails before it started (its starting screen closes)
    reporter: TuiReporter | None = None


@dataclass(eq=False)
class RunEnded(Message):
    run_id: str
    status: str
