"""The progress protocol between the run loop and whoever watches it.

The engine calls a `Reporter`; the TUI, the console progress bar and the live
channel for `llmscope view` each implement it. Nothing here imports Textual.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from llmscope.engine.types import Result


@dataclass
class Progress:
    """A snapshot of a run's progress (cheap to build; sent at most a few times a second)."""

    run_id: str
    total: int
    done: int = 0  # results scored, including those stored by earlier sessions of the run (during a
    # run the newest are stored at the next flush, within about a second; at the end: what is stored)
    skipped: int = 0  # already stored when this session started
    stored: int = 0  # results committed to the database (earlier sessions' too): what a kill keeps
    errors: int = 0
    scored: int = 0  # results with a gold answer
    correct: float = 0.0
    elapsed_s: float = 0.0
    items_per_s: float = 0.0
    tokens_per_s: float = 0.0
    eta_s: float | None = None
    status: str = "running"
    backend: dict[str, Any] = field(default_factory=dict)  # retries, rate limits, tokens...

    @property
    def accuracy(self) -> float | None:
        """The pipeline's `accuracy` (docs/METRICS.md: mean of `correct` over scored rows without
        an error), counted as results arrive. The engine does not import analysis/, so this is
        the one place it is kept as a running sum; tests/test_metrics_store_path.py checks that
        a finished run's value equals the report's."""
        return self.correct / self.scored if self.scored else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["accuracy"] = self.accuracy
        return d


class Reporter(Protocol):
    """Receives run events. Implementations must be quick: they run on the engine's loop."""

    def on_start(self, run: dict[str, Any], progress: Progress) -> None: ...

    def on_results(self, results: list[Result], progress: Progress) -> None: ...

    def on_progress(self, progress: Progress) -> None: ...

    def on_message(self, level: str, text: str) -> None: ...

    def on_end(self, progress: Progress) -> None: ...


class NullReporter:
    """Ignores everything (tests, library use)."""

    def on_start(self, run: dict[str, Any], progress: Progress) -> None:
        pass

    def on_results(self, results: list[Result], progress: Progress) -> None:
        pass

    def on_progress(self, progress: Progress) -> None:
        pass

    def on_message(self, level: str, text: str) -> None:
        pass

    def on_end(self, progress: Progress) -> None:
        pass


class MultiReporter:
    """Fans events out to several reporters."""

    def __init__(self, *reporters: Reporter) -> None:
        self.reporters = [r for r in reporters if r is not None]

    def on_start(self, run: dict[str, Any], progress: Progress) -> None:
        for r in self.reporters:
            r.on_start(run, progress)

    def on_results(self, results: list[Result], progress: Progress) -> None:
        for r in self.reporters:
            r.on_results(results, progress)

    def on_progress(self, progress: Progress) -> None:
        for r in self.reporters:
            r.on_progress(progress)

    def on_message(self, level: str, text: str) -> None:
        for r in self.reporters:
            r.on_message(level, text)

    def on_end(self, progress: Progress) -> None:
        for r in self.reporters:
            r.on_end(progress)
